"""Google Antigravity conversation databases: ``$ANTIGRAVITY_DATA_DIR/conversations/<id>.db``, else
under ``~/.gemini/antigravity`` (and ``antigravity-cli``, ``antigravity-ide``) (sources and versions in
tests/data/SOURCES.md).

Each conversation is a SQLite database whose table ``gen_metadata`` (``idx``, ``data``) holds one
protobuf ``GeneratorMetadata`` blob per model call. No ``.proto`` is published; the field numbers are
those ccusage's Antigravity adapter documents as hand-verified
(``rust/crates/ccusage/src/adapter/antigravity/parser.rs``): field 1 (the chat model) holds field 19
(the raw model id), field 9 → field 4 (the call's time ``{1: seconds, 2: nanos}``) and field 4 (the
usage: 1 system-prompt input, 2 fresh input, 5 cache read, 9 output, 10 thinking, 11 the response id).
Table ``trajectory_metadata_blob`` holds the conversation's creation time (field 2) and workspace URI
(field 1 → 1), the time of a call that has none (else the file's modification time).

Each call with tokens is a request: ``cold = system + fresh input``, ``read = cache read``, ``write``
unknown (NULL), ``output = output + thinking`` (billed as output), ``reasoning = thinking``. The
session is the database's file name; the model the raw id as recorded (Antigravity's placeholder ids
such as ``MODEL_PLACEHOLDER_M26`` stay as they are). The request id hashes the response id (so the
same call in two databases counts once, as in ccusage), else the database and the row's ``idx``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.files import databases_under, default_paths
from traceflow.importers.session_db import query_rows
from traceflow.rows import Parsed, Row, Tokens, stable_id

SOURCE = "antigravity-db"
AGENT = "antigravity"

Field = tuple[int, int, Any]  # (number, wire type, value: int or bytes)


def _varint(data: bytes, i: int) -> tuple[int, int] | None:
    value = shift = 0
    while i < len(data) and shift < 64:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7
    return None


def fields(data: bytes) -> list[Field]:
    """The top-level fields of a protobuf message; a truncated or unsupported field ends the read."""
    out: list[Field] = []
    i = 0
    while i < len(data):
        key = _varint(data, i)
        if key is None:
            break
        number, wire, i = key[0] >> 3, key[0] & 7, key[1]
        if wire == 0:
            got = _varint(data, i)
            if got is None:
                break
            out.append((number, wire, got[0]))
            i = got[1]
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if i + size > len(data):
                break
            out.append((number, wire, int.from_bytes(data[i : i + size], "little")))
            i += size
        elif wire == 2:
            got = _varint(data, i)
            if got is None or got[1] + got[0] > len(data):
                break
            out.append((number, wire, data[got[1] : got[1] + got[0]]))
            i = got[1] + got[0]
        else:
            break
    return out


def _message(data: bytes, number: int) -> bytes | None:
    return next((v for n, w, v in fields(data) if n == number and w == 2), None)


def _micros(stamp: bytes | None) -> int | None:
    """``{1: seconds, 2: nanos}`` as epoch microseconds (ccusage keeps milliseconds: so does this)."""
    if stamp is None:
        return None
    values: dict[int, int] = {n: int(v) for n, w, v in fields(stamp) if w == 0}
    if 1 not in values or values.get(2, 0) > 999_999_999:
        return None
    return (values[1] * 1000 + values.get(2, 0) // 1_000_000) * 1000


def generation(blob: bytes) -> dict[str, Any]:
    """The model, time and counts of one ``GeneratorMetadata`` blob."""
    out: dict[str, Any] = {"model": None, "time": None, "response_id": None}
    counts = dict.fromkeys((1, 2, 5, 9, 10), 0)
    chat = _message(blob, 1) or b""
    for number, wire, value in fields(chat):
        if number == 19 and wire == 2:
            out["model"] = value.decode("utf-8", "replace") or None
        elif number == 9 and wire == 2:
            out["time"] = _micros(_message(value, 4))
        elif number == 4 and wire == 2:
            for n, w, v in fields(value):
                if w == 0 and n in counts:
                    counts[n] = v
                elif n == 11 and w == 2:
                    out["response_id"] = v.decode("utf-8", "replace") or None
    out["input"], out["read"] = counts[1] + counts[2], counts[5]
    out["output"], out["thinking"] = counts[9], counts[10]
    return out


def _trajectory(con: sqlite3.Connection) -> tuple[int | None, str | None]:
    try:
        row = con.execute("SELECT data FROM trajectory_metadata_blob LIMIT 1").fetchone()
    except sqlite3.DatabaseError:
        return None, None
    if not row or not isinstance(row[0], bytes):
        return None, None
    created = _micros(_message(row[0], 2))
    inner = _message(row[0], 1)
    uri = _message(inner, 1) if inner else None
    return created, uri.decode("utf-8", "replace") if uri else None


def database_rows(data: bytes, ctx: FileContext, out: Parsed) -> None:
    db = Path(str(ctx.path).removesuffix("-wal"))
    session = db.name.removesuffix(".db")

    def select(con: sqlite3.Connection) -> Iterable[Sequence[Any]]:
        try:
            cursor = con.execute("SELECT idx, data FROM gen_metadata ORDER BY idx")
        except sqlite3.OperationalError:
            return []  # not a conversation database (ccusage skips it too)
        created, workspace = _trajectory(con)
        fallback = created if created is not None else os.stat(db).st_mtime_ns // 1000
        return ((idx, blob, fallback, workspace) for idx, blob in cursor)

    def row_of(values: Sequence[Any], seq: int) -> Row | None:
        idx, blob, fallback, workspace = values
        return _row(generation(bytes(blob or b"")), session, idx, seq, fallback, workspace)

    query_rows(data, ctx, out, "Antigravity", select, row_of)


def _row(
    g: dict[str, Any], session: str, idx: Any, seq: int, fallback: int, workspace: str | None
) -> Row | None:
    if not (g["input"] or g["read"] or g["output"] or g["thinking"]):
        return None
    key = (
        ("antigravity-response", g["response_id"]) if g["response_id"] else ("antigravity-row", session, idx)
    )
    attrs: dict[str, Any] = {"idx": idx}
    if workspace:
        attrs["workspace"] = workspace
    return {
        "event_id": stable_id(*key),
        "source": SOURCE,
        "agent": AGENT,
        "session_id": session,
        "parent_session_id": None,
        "request_id": g["response_id"],
        "ended_at": g["time"] if g["time"] is not None else fallback,
        "model": g["model"],
        **Tokens(g["input"], g["read"], None, g["output"] + g["thinking"]).columns(),
        "reasoning_tokens": g["thinking"],
        "seq": seq,
        "attributes": attrs,
    }


class AntigravityImporter:
    """Rows from Antigravity's conversation databases (whole file each time)."""

    name: ClassVar[str] = "antigravity"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return databases_under(root, "*.db")

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        database_rows(data, ctx, out)
        return out


IMPORTER = AntigravityImporter()
