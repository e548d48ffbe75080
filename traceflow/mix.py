"""The token mix: the four kinds' totals, their shares, and the reuse ratio (DESIGN §3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import duckdb

from .errors import UsageError
from .output import Rows
from .selection import REQUEST_TIME, Selection

if TYPE_CHECKING:
    import polars as pl

#: ``--by`` names and the SQL expression each groups on.
GROUPS: dict[str, str] = {
    "agent": "agent",
    "model": "model",
    "session": "coalesce(parent_session_id, session_id)",
    "day": f"strftime({REQUEST_TIME} AT TIME ZONE 'UTC', '%Y-%m-%d')",
    "user": "user_id",
    "source": "source",
}

#: Output columns, in order (JSON keys are a contract).
COLUMNS = (
    "requests",
    "cold_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "total_tokens",
    "share_cold_input",
    "share_cache_read",
    "share_cache_write",
    "share_output",
    "reuse_ratio",
)


def mix_sql(by: Sequence[str], where: str) -> str:
    unknown = [b for b in by if b not in GROUPS]
    if unknown:
        raise UsageError(f"cannot group by {', '.join(unknown)}; choose from: {', '.join(GROUPS)}")
    keys = ", ".join(f"{GROUPS[b]} AS {b}" for b in by)
    group = f"GROUP BY {', '.join(by)} ORDER BY {', '.join(by)}" if by else ""
    # DuckDB returns sum() of integers as a DECIMAL: cast back to BIGINT.
    return f"""
WITH sums AS (
    SELECT {keys + "," if by else ""}
           count(*)::BIGINT AS requests,
           coalesce(sum(cold_input_tokens), 0)::BIGINT AS cold_input_tokens,
           coalesce(sum(cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
           coalesce(sum(cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
           coalesce(sum(output_tokens), 0)::BIGINT AS output_tokens
    FROM requests
    WHERE {where}
    {group}
)
SELECT *,
       (cold_input_tokens + cache_read_tokens + cache_write_tokens + output_tokens)::BIGINT AS total_tokens,
       cold_input_tokens / nullif(total_tokens, 0)::DOUBLE AS share_cold_input,
       cache_read_tokens / nullif(total_tokens, 0)::DOUBLE AS share_cache_read,
       cache_write_tokens / nullif(total_tokens, 0)::DOUBLE AS share_cache_write,
       output_tokens / nullif(total_tokens, 0)::DOUBLE AS share_output,
       cache_read_tokens
         / nullif(cold_input_tokens + cache_read_tokens + cache_write_tokens, 0)::DOUBLE AS reuse_ratio
FROM sums
"""


def token_mix_rows(
    con: duckdb.DuckDBPyConnection, selection: Selection | None = None, by: Sequence[str] = ()
) -> Rows:
    """Like :func:`token_mix`, as plain rows (no polars needed)."""
    where, params = (selection or Selection()).where()
    cursor = con.execute(mix_sql(by, where), params)
    return Rows([*by, *COLUMNS], cursor.fetchall())


def token_mix(
    con: duckdb.DuckDBPyConnection, selection: Selection | None = None, by: Sequence[str] = ()
) -> pl.DataFrame:
    """One row (no ``by``) or one row per group: the ``by`` columns, then :data:`COLUMNS`."""
    import polars as pl

    result = token_mix_rows(con, selection, by)
    return pl.DataFrame(result.rows, schema=result.columns, orient="row")
