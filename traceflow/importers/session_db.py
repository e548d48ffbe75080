"""The SQLite session tables of the agents that keep one row of running totals per session (Goose,
Hermes): read whole each time, with the database's write-ahead log
(:func:`traceflow.importers.opencode.database`), each table row through the agent's own function."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from traceflow.importers.base import FileContext
from traceflow.importers.opencode import database
from traceflow.rows import LineError, Parsed, Row

#: one table row (column -> value) and its position -> the request row, or None; ValueError: bad row
RowOf = Callable[[dict[str, Any], int], Row | None]


def table_rows(
    data: bytes, ctx: FileContext, out: Parsed, table: str, columns: Sequence[str], row_of: RowOf, what: str
) -> None:
    """The rows of ``table`` in the database ``data`` (or, for its ``-wal`` log, the database beside
    it), ``columns`` selected (a column the table lacks reads as NULL: older schemas)."""

    def select(con: sqlite3.Connection) -> Iterable[Sequence[Any]]:
        present = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
        if not present:
            raise sqlite3.DatabaseError(f"no {table} table")
        cols = [c if c in present else f"NULL AS {c}" for c in columns]
        return con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY rowid")

    query_rows(
        data, ctx, out, what, select, lambda values, seq: row_of(dict(zip(columns, values, strict=True)), seq)
    )


def query_rows(
    data: bytes,
    ctx: FileContext,
    out: Parsed,
    what: str,
    select: Callable[[sqlite3.Connection], Iterable[Sequence[Any]]],
    row_of: Callable[[Sequence[Any], int], Row | None],
) -> None:
    """The rows that ``select`` queries from the database ``data`` (or, for its ``-wal`` log, the
    database beside it), each through ``row_of`` with its position; a row it refuses (ValueError) is
    an error of that line, a file that is no such database (``what``) an error of line 1."""
    if ctx.plain.name.endswith("-wal"):
        db = Path(str(ctx.path).removesuffix("-wal"))
        if not db.is_file():
            return
        data, ctx = db.read_bytes(), FileContext(path=db, state=ctx.state)
    with database(data, ctx.path) as (con, load):
        try:
            if load:
                con.deserialize(data)
            for seq, values in enumerate(select(con), start=1):
                try:
                    row = row_of(values, seq)
                except ValueError as exc:
                    out.errors.append(LineError(str(ctx.path), seq, str(exc)))
                    continue
                if row is not None:
                    out.requests.append(row)
        except sqlite3.DatabaseError as exc:
            article = "an" if what[:1] in "AEIOU" else "a"
            out.errors.append(LineError(str(ctx.path), 1, f"not {article} {what} database ({exc})"))
        finally:
            con.close()
