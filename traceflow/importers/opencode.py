"""OpenCode (sst/opencode) message records (docs/collector.md#traceflow-import-source-path;
sources and versions in tests/data/SOURCES.md).

OpenCode keeps its data in ``$OPENCODE_DATA_DIR``, else ``$XDG_DATA_HOME/opencode``, else
``~/.local/share/opencode``, in two forms:

* **JSON storage** (through 1.1): one file per message, ``storage/message/<sessionID>/<messageID>.json``,
  rewritten in place while the message streams (so the importer is ``whole_file``), and one file per
  session, ``storage/session/<projectID>/<sessionID>.json``, whose ``parentID`` names the session that
  spawned it (a ``task`` tool's sub-agent).
* **SQLite** (1.2 on): ``opencode.db`` (or a channel's ``opencode-<channel>.db``), table ``message``
  (``id``, ``session_id``, ``data``: the same JSON without ``id``/``sessionID``) and table ``session``
  (``id``, ``parent_id``).

One request row per assistant message with tokens. OpenCode stores its tokens already split
(docs/schemas.md#the-four-token-kinds): ``tokens.input`` is the cold input (OpenCode subtracts the
cache from providers whose input includes it), ``tokens.cache.read`` / ``.write`` the cache read and
write (no 5m/1h split: NULL), ``tokens.output`` the output *without* reasoning and
``tokens.reasoning`` the reasoning, so ``output = output + reasoning``. A message without a
``tokens.cache`` object leaves read and write unknown (NULL), not zero. ``cost`` is OpenCode's own
figure (``cost_usd``). ``started_at`` is ``time.created``, ``ended_at`` ``time.completed`` (NULL while
it streams). The user message a reply answers (``parentID``) is its ``prompt_id``.

The request id is ``stable_id("opencode-message", messageID)``, the same from a JSON file and from
the database, so a message found in both counts once (as ccusage counts it). Messages without a
model or provider, or with no token at all, give no row (ccusage skips them too); a message whose
``error`` is set keeps its tokens (what the provider billed before it failed) and says so in
``attributes.error``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext
from traceflow.importers.counts import count
from traceflow.importers.files import data_folder, default_paths, files_under, is_opencode_database, with_logs
from traceflow.rows import LineError, Parsed, Row, Tokens, as_int, stable_id

SOURCE = "opencode-json"
AGENT = "opencode"


def data_dir() -> Path:
    """OpenCode's data folder: ``$OPENCODE_DATA_DIR``, else ``$XDG_DATA_HOME/opencode``, else
    ``~/.local/share/opencode`` (:func:`traceflow.importers.files.data_folder`)"""
    return data_folder("opencode")


class BadMessage(ValueError):
    """A message that cannot be imported (becomes a LineError)."""


def _count(tokens: dict[str, Any], key: str, where: str) -> int | None:
    return count(tokens, key, where, BadMessage)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def request_row(
    msg: dict[str, Any], message_id: str | None, session_id: str | None, *, kilo: bool = False
) -> Row | None:
    """The request row of one OpenCode message (None for a message that is no request). ``kilo``: a
    Kilo CLI message (an OpenCode fork, :mod:`traceflow.importers.kilo`): its role must be
    ``assistant``, its provider may be absent, and its rows are Kilo's."""
    if msg.get("role") not in (("assistant",) if kilo else (None, "assistant")):
        return None
    tokens = msg.get("tokens")
    if tokens is None:
        return None
    if not isinstance(tokens, dict):
        raise BadMessage("tokens is not an object")
    cold = _count(tokens, "input", "tokens") or 0
    output = _count(tokens, "output", "tokens") or 0
    reasoning = _count(tokens, "reasoning", "tokens")
    cache = tokens.get("cache")
    read = write = None
    if isinstance(cache, dict):
        read = _count(cache, "read", "tokens.cache")
        write = _count(cache, "write", "tokens.cache")
    if not (cold or output or reasoning or read or write):
        return None
    model, provider = _text(msg.get("modelID")), _text(msg.get("providerID"))
    if model is None or (provider is None and not kilo):
        return None
    mid = message_id or _text(msg.get("id"))
    if mid is None:
        raise BadMessage("message without an id")
    sid = session_id or _text(msg.get("sessionID")) or "unknown"
    times = msg.get("time")
    times = times if isinstance(times, dict) else {}
    created, completed = _millis(times.get("created")), _millis(times.get("completed"))
    if created is None and completed is None:
        raise BadMessage(f"message {mid!r} without time.created")
    attrs: dict[str, Any] = {"message_id": mid}
    if provider is not None:
        attrs["provider"] = provider
    for key in ("mode", "agent", "finish"):
        if isinstance(msg.get(key), str):
            attrs[key] = msg[key]
    path = msg.get("path")
    if isinstance(path, dict) and isinstance(path.get("cwd"), str):
        attrs["cwd"] = path["cwd"]
    if msg.get("error") is not None:
        error = msg["error"]
        attrs["error"] = error.get("name", "error") if isinstance(error, dict) else str(error)
    total = _count(tokens, "total", "tokens")
    if total is not None:
        attrs["total_tokens"] = total
    cost = msg.get("cost")
    return {
        "event_id": stable_id("kilo-message" if kilo else "opencode-message", mid),
        "source": "kilo-db" if kilo else SOURCE,
        "agent": "kilo" if kilo else AGENT,
        "agent_version": None,
        "session_id": sid,
        "parent_session_id": None,
        "prompt_id": _text(msg.get("parentID")),
        "started_at": created,
        "ended_at": completed,
        "model": model,
        **Tokens(cold, read, write, output + (reasoning or 0)).columns(),
        "reasoning_tokens": reasoning,
        "cost_usd": float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
        "attributes": attrs,
    }


def _millis(value: Any) -> int | None:
    """Microseconds of an epoch-milliseconds value (OpenCode's times)."""
    try:
        ms = as_int(value)
    except (TypeError, ValueError):
        return None
    return None if ms is None or ms <= 0 else ms * 1000


class OpenCodeImporter:
    """Rows from OpenCode's message files and database (whole file each time: both are rewritten)."""

    name: ClassVar[str] = "opencode"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    @staticmethod
    def _databases(root: Path) -> list[Path]:
        try:
            return sorted(p for p in root.iterdir() if p.is_file() and is_opencode_database(p.name))
        except OSError:
            return []

    def discover(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        if not root.is_dir():
            return []
        messages = files_under(root, "*.json*", (".json",), lambda p: p.parent.parent.name == "message")
        return with_logs(self._databases(root)) + messages

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        if ctx.plain.name.endswith(".db-wal"):
            database_of_log(ctx, out)
            return out
        if is_opencode_database(ctx.plain.name):
            database_rows(data, ctx, out)
            return out
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            out.errors.append(LineError(str(ctx.path), ctx.first_line, f"invalid JSON: {exc}"))
            return out
        if not isinstance(msg, dict):
            out.errors.append(LineError(str(ctx.path), ctx.first_line, "not an OpenCode message object"))
            return out
        try:
            row = request_row(msg, None, _text(msg.get("sessionID")) or ctx.plain.parent.name)
        except BadMessage as exc:
            out.errors.append(LineError(str(ctx.path), ctx.first_line, str(exc)))
            return out
        if row is not None:
            row["parent_session_id"] = _json_parent(ctx.path, row["session_id"])
            row["seq"] = 1
            out.requests.append(row)
        return out


def database_of_log(ctx: FileContext, out: Parsed, *, kilo: bool = False) -> None:
    """The rows of the database whose write-ahead log ``ctx.path`` is (read with the log): the lake's
    ``event_id`` dedup absorbs the rows read before."""
    db = Path(str(ctx.path).removesuffix("-wal"))
    try:
        data = db.read_bytes()
    except FileNotFoundError:
        return
    database_rows(data, FileContext(path=db, state=ctx.state), out, kilo=kilo)


def database_rows(data: bytes, ctx: FileContext, out: Parsed, *, kilo: bool = False) -> None:
    """The request rows of an OpenCode (or, with ``kilo``, a Kilo CLI) database's ``message`` table,
    with ``parent_session_id`` from its ``session`` table. The agents keep their database in WAL mode:
    rows not yet checkpointed are in ``<db>-wal``, so when that file exists the two are copied
    together and opened as SQLite would (the bytes in ``data`` alone would miss them)."""
    with database(data, ctx.path) as (con, load):
        _read_database(con, data, load, ctx, out, kilo=kilo)


@contextmanager
def database(data: bytes, path: Path) -> Iterator[tuple[sqlite3.Connection, bool]]:
    """A connection to the SQLite database whose bytes are ``data`` (read from ``path``) and whether
    the caller still has to load them (``con.deserialize(data)``): with a write-ahead log beside it
    (``<path>-wal``: rows not yet checkpointed) the two are copied together and opened as SQLite
    would, else the bytes are loaded into memory. The caller closes the connection."""
    wal = Path(f"{path}-wal")
    with tempfile.TemporaryDirectory(prefix="traceflow-db-") as tmp:
        if wal.is_file():
            copy = Path(tmp) / "db"
            copy.write_bytes(data)
            shutil.copyfile(wal, Path(tmp) / "db-wal")
            yield sqlite3.connect(copy), False
        else:
            yield sqlite3.connect(":memory:"), True


def _read_database(
    con: sqlite3.Connection, data: bytes, load: bool, ctx: FileContext, out: Parsed, *, kilo: bool
) -> None:
    try:
        if load:
            con.deserialize(data)
        parents = _db_parents(con)
        cursor = con.execute("SELECT id, session_id, data FROM message ORDER BY rowid")
        for seq, (mid, sid, raw) in enumerate(cursor, start=1):
            try:
                msg = orjson.loads(raw)
                if not isinstance(msg, dict):
                    raise BadMessage("data is not a JSON object")
                row = request_row(msg, str(mid), str(sid), kilo=kilo)
            except (orjson.JSONDecodeError, BadMessage) as exc:
                out.errors.append(LineError(str(ctx.path), seq, f"message {mid}: {exc}"))
                continue
            if row is not None:
                row["parent_session_id"] = parents.get(str(sid))
                row["seq"] = seq
                out.requests.append(row)
    except sqlite3.DatabaseError as exc:
        out.errors.append(
            LineError(str(ctx.path), 1, f"not an {'Kilo' if kilo else 'OpenCode'} database ({exc})")
        )
    finally:
        con.close()


def _db_parents(con: sqlite3.Connection) -> dict[str, str]:
    try:
        rows = con.execute("SELECT id, parent_id FROM session WHERE parent_id IS NOT NULL").fetchall()
    except sqlite3.DatabaseError:
        return {}
    return {str(sid): str(parent) for sid, parent in rows if parent}


def _json_parent(path: Path, session_id: str) -> str | None:
    """The ``parentID`` of ``storage/session/<projectID>/<session_id>.json`` beside the message's
    ``storage/message/<session>/<message>.json``; None when there is none."""
    storage = path.parent.parent.parent
    sessions = storage / "session"
    try:
        projects = [e.path for e in os.scandir(sessions) if e.is_dir()]
    except OSError:
        return None
    for project in projects:
        info = Path(project) / f"{session_id}.json"
        try:
            doc = orjson.loads(info.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        return _text(doc.get("parentID")) if isinstance(doc, dict) else None
    return None


IMPORTER = OpenCodeImporter()
