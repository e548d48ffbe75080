"""Where the agents keep their files: the folder a setting names (else its default), and the files
below a folder that an importer reads (docs/settings.md lists the settings)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from traceflow import config
from traceflow.importers.compressed import with_compressed


def folder_setting(setting: str, *default: str) -> Path:
    """The folder the setting ``setting`` names, else ``~/<default...>``, ``~`` expanded."""
    return Path(config.get(setting) or Path.home().joinpath(*default)).expanduser()


def xdg_setting(setting: str, name: str) -> Path:
    """The folder the setting ``setting`` names, else ``$XDG_DATA_HOME/<name>``, else
    ``~/.local/share/<name>``."""
    explicit = config.get(setting)
    if explicit:
        return Path(explicit).expanduser()
    return config.xdg_data_home() / name


def if_folder(path: Path) -> list[Path]:
    """``[path]`` when it is a folder, else nothing (an importer's default paths)."""
    return [path] if path.is_dir() else []


def if_file(path: Path) -> list[Path]:
    """``[path]`` when it is a file, else nothing (an importer's default paths)."""
    return [path] if path.is_file() else []


def files_under(
    root: Path, glob: str, suffixes: tuple[str, ...] = (), keep: Callable[[Path], bool] | None = None
) -> list[Path]:
    """``root`` itself when it is a file, else the files below it matching ``glob`` whose names end
    with one of ``suffixes`` (each also compressed: :func:`with_compressed`) and that ``keep``
    accepts, sorted; nothing when ``root`` is neither."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    names = with_compressed(suffixes)
    return sorted(
        p
        for p in root.rglob(glob)
        if (not names or p.name.endswith(names)) and (keep is None or keep(p)) and p.is_file()
    )


def with_logs(databases: list[Path]) -> list[Path]:
    """``databases`` with each one's write-ahead log (``<db>-wal``) where there is one: a refresh
    watches the log too, since new rows land there first and the database file may not change."""
    out: list[Path] = []
    for db in databases:
        out.append(db)
        wal = Path(f"{db}-wal")
        if wal.is_file():
            out.append(wal)
    return out


def databases_under(root: Path, glob: str) -> list[Path]:
    """The SQLite databases below ``root`` matching ``glob`` (or ``root`` itself), each with its
    write-ahead log where there is one (:func:`with_logs`)."""
    return with_logs(files_under(root, glob))


def folders_setting(setting: str, defaults: list[Path]) -> list[Path]:
    """The folder the setting ``setting`` names, else the ``defaults`` (an agent with several)."""
    explicit = config.get(setting)
    if explicit:
        return [Path(explicit).expanduser()]
    return defaults
