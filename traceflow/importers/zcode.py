"""ZCode (Z.ai's coding agent) usage database: ``$ZCODE_HOME/cli/db/db.sqlite``, else under
``~/.zcode`` (sources and versions in tests/data/SOURCES.md).

No public source documents the database: what is known is what ccusage 20.0.24 reads, its query
(``SELECT m.id, m.session_id, m.started_at, m.model_id, m.input_tokens, m.output_tokens,
m.cache_creation_input_tokens, m.cache_read_input_tokens, m.computed_total_tokens, m.provider_id,
s.directory FROM model_usage m LEFT JOIN session s ON s.id = m.session_id WHERE m.status =
'completed'``) and how it splits the counts. Table ``model_usage`` holds one row per model call, so
each completed row is a request: ``started_at`` in epoch milliseconds, ``input_tokens`` including the
cache read and write (``cold = input − read − write``, clamped as :func:`traceflow.rows.split_inclusive`
does, as ccusage does), ``output = output_tokens``; no reasoning split (NULL). ``computed_total_tokens``
goes to ``attributes`` (ccusage's total is it where present; what it counts beyond input and output is
not documented). The session is ``session_id``, its folder ``session.directory``. The request id is
``stable_id("zcode-usage", id)``. Read whole each time with the database's write-ahead log
(:func:`traceflow.importers.opencode.database`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.files import databases_under, default_paths
from traceflow.importers.session_db import query_rows
from traceflow.rows import Parsed, Row, split_inclusive, stable_id

SOURCE = "zcode-db"
AGENT = "zcode"
_USAGE = (
    "id",
    "session_id",
    "started_at",
    "model_id",
    "provider_id",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "computed_total_tokens",
)


def _n(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and value > 0 else 0


def usage_row(values: dict[str, Any], directory: Any, seq: int) -> Row | None:
    """The row of one completed ``model_usage`` row (None: no tokens); ValueError: no time."""
    inp, out = _n(values.get("input_tokens")), _n(values.get("output_tokens"))
    write, read = _n(values.get("cache_creation_input_tokens")), _n(values.get("cache_read_input_tokens"))
    if not (inp or out or read or write):
        return None
    started = values.get("started_at")
    if not isinstance(started, (int, float)) or isinstance(started, bool) or started <= 0:
        raise ValueError(f"model_usage {values.get('id')!r}: started_at is not epoch milliseconds")
    attrs: dict[str, Any] = {"usage_id": str(values.get("id"))}
    for key, name in (("provider_id", "provider"), ("computed_total_tokens", "computed_total_tokens")):
        if values.get(key) is not None:
            attrs[name] = values[key]
    if isinstance(directory, str):
        attrs["cwd"] = directory
    model = values.get("model_id")
    return {
        "event_id": stable_id("zcode-usage", values.get("id")),
        "source": SOURCE,
        "agent": AGENT,
        "session_id": str(values["session_id"]) if values.get("session_id") is not None else None,
        "parent_session_id": None,
        "started_at": int(started) * 1000,
        "model": model if isinstance(model, str) and model else None,
        **split_inclusive(inp, read, write, out).columns(),
        "reasoning_tokens": None,
        "seq": seq,
        "attributes": attrs,
    }


def database_rows(data: bytes, ctx: FileContext, out: Parsed) -> None:
    def select(con: sqlite3.Connection) -> Iterable[Sequence[Any]]:
        present = {r[1] for r in con.execute("PRAGMA table_info(model_usage)")}
        if not present:
            raise sqlite3.DatabaseError("no model_usage table")
        sessions = {r[1] for r in con.execute("PRAGMA table_info(session)")}
        cols = [f"m.{c}" if c in present else f"NULL AS {c}" for c in _USAGE]
        folder = "s.directory" if "directory" in sessions else "NULL"
        join = "LEFT JOIN session s ON s.id = m.session_id" if sessions else ""
        status = "WHERE m.status = 'completed'" if "status" in present else ""
        return con.execute(
            f"SELECT {', '.join(cols)}, {folder} FROM model_usage m {join} {status} ORDER BY m.rowid"
        )

    def row_of(values: Sequence[Any], seq: int) -> Row | None:
        return usage_row(dict(zip(_USAGE, values[:-1], strict=True)), values[-1], seq)

    query_rows(data, ctx, out, "ZCode", select, row_of)


class ZCodeImporter:
    """Rows from ZCode's usage database (whole file each time)."""

    name: ClassVar[str] = "zcode"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return databases_under(root, "db.sqlite")

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        database_rows(data, ctx, out)
        return out


IMPORTER = ZCodeImporter()
