"""Where the agents keep their files: the folder a setting names (else its default), each agent's
default paths (:func:`default_paths`), and the files below a folder that an importer reads
(docs/settings.md lists the settings). Standard library and ``config`` only at import: the usage
views' fast path asks :func:`default_paths` whether any agent but Claude Code has logs here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from traceflow import config
from traceflow.store import local_logs


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
    from traceflow.importers.compressed import with_compressed

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


def _opencode_home(home: Path) -> list[Path]:
    """OpenCode's (and Kilo's format's) folder when it holds message files or a database."""
    if (home / "storage" / "message").is_dir():
        return [home]
    try:
        return [home] if any(p.is_file() and is_opencode_database(p.name) for p in home.iterdir()) else []
    except OSError:
        return []


def is_opencode_database(name: str) -> bool:
    """``opencode.db``, or a channel's ``opencode-<channel>.db``."""
    if name == "opencode.db":
        return True
    middle = name[len("opencode-") : -len(".db")]
    return (
        name.startswith("opencode-")
        and name.endswith(".db")
        and bool(middle)
        and all(c.isalnum() or c in "_-" for c in middle)
    )


def _home(*parts: str) -> Path:
    return Path.home().joinpath(*parts)


#: The one data folder of the agents that keep everything under one (read through its setting).
_FOLDERS: dict[str, Callable[[], Path]] = {
    "opencode": lambda: xdg_setting("opencode_data_dir", "opencode"),
    "qwen": lambda: folder_setting("qwen_data_dir", ".qwen"),
    "amp": lambda: xdg_setting("amp_data_dir", "amp"),
}


def data_folder(agent: str) -> Path:
    """The data folder of ``agent`` (``opencode``, ``qwen``, ``amp``), whether it exists or not."""
    return _FOLDERS[agent]()


#: Each agent's default paths (its importer's ``default_paths``): the folders or files that exist
#: where the agent keeps its logs, read through its setting (docs/settings.md).
_DEFAULTS: dict[str, Callable[[], list[Path]]] = {
    "opencode": lambda: _opencode_home(data_folder("opencode")),
    "qwen": lambda: if_folder(data_folder("qwen") / "projects"),
    "amp": lambda: if_folder(data_folder("amp") / "threads"),
    "copilot": lambda: if_folder(folder_setting("copilot_home", ".copilot") / "session-state"),
    "kimi": lambda: if_folder(folder_setting("kimi_data_dir", ".kimi") / "sessions"),
    "codebuff": lambda: [
        d
        for d in folders_setting(
            "codebuff_data_dir", [_home(".config", "manicode"), _home(".config", "manicode-dev")]
        )
        if (d / "projects").is_dir()
    ],
    "kilo": lambda: if_file(xdg_setting("kilo_data_dir", "kilo") / "kilo.db"),
    "pi": lambda: [
        d
        for d in folders_setting("pi_agent_dir", [_home(n, "agent", "sessions") for n in (".pi", ".omp")])
        if d.is_dir()
    ],
    "openclaw": lambda: if_folder(folder_setting("openclaw_dir", ".openclaw") / "agents"),
    "goose": lambda: if_file(xdg_setting("goose_data_dir", "goose") / "sessions" / "sessions.db"),
    "droid": lambda: if_folder(folder_setting("droid_sessions_dir", ".factory", "sessions")),
    "grok": lambda: if_folder(folder_setting("grok_home", ".grok") / "sessions"),
    "hermes": lambda: if_file(folder_setting("hermes_home", ".hermes") / "state.db"),
    "zcode": lambda: if_file(folder_setting("zcode_home", ".zcode") / "cli" / "db" / "db.sqlite"),
    "antigravity": lambda: [
        r / "conversations"
        for r in folders_setting(
            "antigravity_data_dir",
            [_home(".gemini", n) for n in ("antigravity", "antigravity-cli", "antigravity-ide")],
        )
        if (r / "conversations").is_dir()
    ],
}


def default_paths(agent: str) -> list[Path]:
    """The default paths of ``agent`` (its importer's name: ``qwen``, ``opencode`` ...) that exist
    here: the table's, or for Claude Code, Codex and Gemini CLI
    :func:`traceflow.store.local_logs.default_folders`; nothing for an agent neither knows."""
    if agent in local_logs.OWN_FOLDERS:
        return [Path(p) for p in local_logs.default_folders(agent)]
    rule = _DEFAULTS.get(agent)
    return rule() if rule is not None else []
