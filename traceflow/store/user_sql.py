"""Users' own SQL over the views, read-only, and standalone DuckDB snapshots of the lake."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

if TYPE_CHECKING:
    import polars as pl

from traceflow.errors import QueryError, UsageError
from traceflow.paths import output_file
from traceflow.schema import STORED, TABLES
from traceflow.store.lake import Lake
from traceflow.store.measures import macros_sql
from traceflow.store.sql import query_frame, sql_string

_READ_ONLY = {"SELECT", "EXPLAIN"}


def describe_views() -> str:
    """One line per view with its columns, for error messages and ``--help``."""
    lines = []
    for name, table in STORED.items():  # the audit table too (docs/lake.md#the-audit-table)
        cols = list(table.columns)
        if name == "requests":
            cols += ["context_tokens", "total_tokens"]
        lines.append(f"  {name}({', '.join(cols)})")
    return "\n".join(lines)


def run_sql(lake: Lake, text: str, params: dict[str, object] | None = None) -> pl.DataFrame:
    """Run one read-only statement (SELECT, WITH ... SELECT, EXPLAIN) over the views."""
    con = lake.connect()
    try:
        statements = con.extract_statements(text)
    except duckdb.Error as e:
        raise QueryError(f"{e}\nThe views and their columns are:\n{describe_views()}") from None
    if len(statements) != 1:
        raise UsageError(f"give exactly one SQL statement, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in _READ_ONLY:
        raise UsageError(
            f"traceflow sql is read-only: {kind} statements are refused. Use SELECT over the views, "
            "or `traceflow snapshot FILE.duckdb` for a database you can change."
        )
    try:
        return query_frame(con, text, params or None)
    except duckdb.Error as e:
        raise QueryError(f"{e}\nThe views and their columns are:\n{describe_views()}") from None
    finally:
        con.close()


def snapshot(lake: Lake, out: Path) -> dict[str, int]:
    """Materialise every view as a table in a new DuckDB file at ``out``; returns row counts."""
    out = output_file(out, "snapshot")
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    con = lake.connect()
    counts: dict[str, int] = {}
    try:
        con.execute(f"ATTACH {sql_string(tmp)} AS snap")
        for name in TABLES:
            con.execute(f"CREATE TABLE snap.{name} AS SELECT * FROM {name}")
            row = con.execute(f"SELECT count(*) FROM snap.{name}").fetchone()
            counts[name] = int(row[0]) if row else 0
        for macro in macros_sql("snap"):  # reuse_ratio, token_share: the packaged queries use them
            con.execute(macro)
        con.execute("DETACH snap")
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed snapshot leaves no partial file behind
        raise
    finally:
        con.close()
    tmp.replace(out)
    return counts


__all__ = ["describe_views", "run_sql", "snapshot"]
