"""Which local agent logs a lake imports, and whether they changed since it last read them.

A lake **imports local agent logs** when either

* ``traceflow import AGENT`` (one of :data:`AGENTS`) has run on it: the import records the folders
  or files it read (its *roots*) in ``<state>/imports/local.json``; or
* it is the **default lake** (neither ``--data`` nor ``TRACEFLOW_DATA`` names one) and an agent's
  default log folder exists (``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``,
  ``$CODEX_HOME/sessions``, ``$GEMINI_DIR/tmp``, ``$OPENCODE_DATA_DIR`` or
  ``~/.local/share/opencode``, ``$QWEN_DATA_DIR/projects`` or ``~/.qwen/projects``,
  ``$AMP_DATA_DIR/threads`` or ``~/.local/share/amp/threads``, ``$COPILOT_HOME/session-state`` or
  ``~/.copilot/session-state``, ``$KIMI_DATA_DIR/sessions`` or ``~/.kimi/sessions``,
  ``$CODEBUFF_DATA_DIR`` or ``~/.config/manicode``, ``$KILO_DATA_DIR/kilo.db`` or
  ``~/.local/share/kilo/kilo.db``, ``$PI_AGENT_DIR`` or ``~/.pi/agent/sessions``,
  ``$OPENCLAW_DIR/agents`` or ``~/.openclaw/agents``).

Every read command on such a lake first brings it up to date
(:func:`traceflow.importers.refresh.refresh`), unless ``--no-refresh`` or ``TRACEFLOW_REFRESH=0``
turns that off. Whether anything changed is decided here, with the standard library and orjson
only (the result cache's fast path asks before anything heavy is imported): one ``stat`` per directory under
the roots (a file added or removed changes its folder's mtime) and one per file the importer has read
(its size and mtime against the importer's bookkeeping, ``<state>/imports/<importer>.json``, the
same test the importer uses to skip an unchanged file). Documented in ``docs/freshness.md``.
"""

from __future__ import annotations

import os

from traceflow import config

TYPE_CHECKING = False  # typing is not imported at run time (the result cache's fast path)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: The importers of agents' local logs: the sources a lake refreshes.
AGENTS = (
    "claude-code",
    "codex",
    "gemini",
    "opencode",
    "qwen",
    "amp",
    "copilot",
    "kimi",
    "codebuff",
    "kilo",
    "pi",
    "openclaw",
    "grok",
    "droid",
    "goose",
    "hermes",
    "zcode",
    "antigravity",
)
#: The agents whose default folders :func:`default_folders` knows.
OWN_FOLDERS = ("claude-code", "codex", "gemini")
MARKER = "local.json"
_VERSION = 1


def default_folders(agent: str) -> list[str]:
    """The folders where ``agent`` (one of :data:`AGENTS`) keeps its logs by default and that exist
    here: Claude Code's ``projects`` under ``$CLAUDE_CONFIG_DIR`` (comma-separated folders), else
    under ``~/.config/claude`` and ``~/.claude``; Codex's ``sessions`` and ``archived_sessions``
    under ``$CODEX_HOME`` (``~/.codex``); Gemini's ``tmp`` under ``$GEMINI_DIR`` (``~/.gemini``).
    Each of those three importers' ``default_paths()`` is this (standard library only: the usage
    views ask first); any other agent's folders are its importer's ``default_paths()``
    (:data:`OWN_FOLDERS` says which agents this function answers for)."""
    home = os.path.expanduser("~")
    if agent == "claude-code":
        env = config.get("claude_config_dir")
        if env:
            roots = [os.path.expanduser(p) for p in env.split(",") if p.strip()]
        else:
            roots = [os.path.join(home, ".config", "claude"), os.path.join(home, ".claude")]
        candidates = [os.path.join(r, "projects") for r in roots]
    elif agent == "codex":
        base = os.path.expanduser(config.get("codex_home") or os.path.join(home, ".codex"))
        candidates = [os.path.join(base, "sessions"), os.path.join(base, "archived_sessions")]
    elif agent == "gemini":
        base = os.path.expanduser(config.get("gemini_dir") or os.path.join(home, ".gemini"))
        candidates = [os.path.join(base, "tmp")]
    else:
        raise ValueError(f"not an agent's logs: {agent}")
    return [c for c in candidates if os.path.isdir(c)]


def marker_path(state_dir: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(state_dir), "imports", MARKER)


def enabled(argv: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> bool:
    """Whether a command refreshes: not with ``--no-refresh`` in ``argv``, nor with the ``refresh``
    setting off (``TRACEFLOW_REFRESH=0``/``false``/``no``/``off``)."""
    return "--no-refresh" not in argv and setting_on(environ)


def setting_on(environ: Mapping[str, str] | None = None) -> bool:
    return (config.get("refresh", environ) or "").strip().lower() not in ("0", "false", "no", "off")


def read_marker(state_dir: str | os.PathLike[str]) -> dict[str, object]:
    """The recorded sources (``{"sources": {importer: [root, ...]}, "dirs": {dir: mtime_ns}}``);
    empty when the lake has none or the file is unreadable."""
    import orjson

    try:
        with open(marker_path(state_dir), "rb") as fh:
            value = orjson.loads(fh.read())
    except (OSError, ValueError):
        return {}
    if not isinstance(value, dict) or value.get("version") != _VERSION:
        return {}
    return value


def write_marker(
    state_dir: str | os.PathLike[str], sources: dict[str, list[str]], dirs: dict[str, int]
) -> None:
    """Record ``sources`` (importer -> roots) and the mtimes of the directories under them, atomically."""
    import orjson

    path = marker_path(state_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps({"version": _VERSION, "sources": sources, "dirs": dirs}))
    os.replace(tmp, path)


def sources_of(marker: Mapping[str, object]) -> dict[str, list[str]]:
    raw = marker.get("sources")
    if not isinstance(raw, dict):
        return {}
    return {k: [str(r) for r in v] for k, v in raw.items() if k in AGENTS and isinstance(v, list)}


def directories(roots: Iterable[str]) -> dict[str, int]:
    """Every directory under ``roots`` (the roots included) with its mtime, each taken *before* the
    directory is listed: a file added after the listing moves the recorded mtime on."""
    out: dict[str, int] = {}
    todo = [r for r in roots]
    while todo:
        folder = todo.pop()
        try:
            st = os.stat(folder)
            if not os.path.isdir(folder):
                continue
            out[folder] = st.st_mtime_ns
            with os.scandir(folder) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return out


def current(state_dir: str | os.PathLike[str]) -> bool:
    """True when none of the logs the lake imports changed since its last refresh: no directory
    under its roots changed (no file added or removed) and every file read is the size and mtime the
    importer recorded. One ``stat`` per directory and per file; nothing is opened but JSON files."""
    found = changes(state_dir)
    return found is None or (not found[0] and not any(found[1].values()))


def changes(state_dir: str | os.PathLike[str]) -> tuple[bool, dict[str, list[str]]] | None:
    """What changed in the logs the lake imports since its last refresh: ``(moved, files)``, where
    ``moved`` says a folder under the roots changed (a file was added or removed: the roots must be
    listed again) and ``files`` names, per importer, the files it has read whose size or mtime
    changed since (only those need reading). None when the lake imports no local agent logs."""
    marker = read_marker(state_dir)
    sources = sources_of(marker)
    if not sources:
        return None
    dirs = marker.get("dirs")
    moved = not isinstance(dirs, dict)
    for folder, mtime in (dirs if isinstance(dirs, dict) else {}).items():
        try:
            if os.stat(folder).st_mtime_ns != mtime:
                moved = True
                break
        except OSError:
            moved = True  # a folder went away: the next refresh records what is left
            break
    import orjson

    changed: dict[str, list[str]] = {}
    for name, roots in sources.items():
        try:
            with open(os.path.join(os.fspath(state_dir), "imports", f"{name}.json"), "rb") as fh:
                state = orjson.loads(fh.read())
        except (OSError, ValueError):
            return True, {}  # never imported (or unreadable bookkeeping): read it all
        prefixes = tuple(r.rstrip(os.sep) + os.sep for r in roots)
        grown = changed.setdefault(name, [])
        for path, rec in state.items():
            if not (path in roots or path.startswith(prefixes)):
                continue  # imported from elsewhere by hand: not refreshed
            try:
                st = os.stat(path)
            except OSError:
                continue  # removed: its folder's mtime says so
            if st.st_size != rec.get("size") or st.st_mtime_ns != rec.get("mtime_ns"):
                grown.append(path)
        # a root that is a file (``import claude-code one.jsonl``) and is not read yet
        moved = moved or any(root not in state and os.path.isfile(root) for root in roots)
    return moved, changed
