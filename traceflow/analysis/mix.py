"""The token mix: the four kinds' totals, their shares, and the reuse ratio (DESIGN §3)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import duckdb

from traceflow.errors import UsageError
from traceflow.output import Rows
from traceflow.store.lake import ROLLUP_VIEW
from traceflow.store.selection import REQUEST_TIME, Selection
from traceflow.store.sql import Engine, materialised

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


#: ``--by`` names over the ``request_rollup`` view (``queries/rollup.sql``), which ``mix`` sums
#: instead of the requests when compaction stored it and the selection allows (see :func:`_rollup_where`).
ROLLUP_GROUPS: dict[str, str] = {
    "agent": "agent",
    "model": "model",
    "session": "session_id",
    "day": "day",
    "user": "user_id",
    "source": "source",
}


def mix_sql(by: Sequence[str], where: str, *, rollup: bool = False) -> str:
    """The mix over ``requests`` (or, with ``rollup``, over the stored ``request_rollup`` sums)."""
    groups = ROLLUP_GROUPS if rollup else GROUPS
    unknown = [b for b in by if b not in groups]
    if unknown:
        raise UsageError(f"cannot group by {', '.join(unknown)}; choose from: {', '.join(groups)}")
    keys = ", ".join(f"{groups[b]} AS {b}" for b in by)
    group = f"GROUP BY {', '.join(by)} ORDER BY {', '.join(by)}" if by else ""
    count = "coalesce(sum(requests), 0)" if rollup else "count(*)"
    # DuckDB returns sum() of integers as a DECIMAL: cast back to BIGINT.
    return f"""
WITH sums AS (
    SELECT {keys + "," if by else ""}
           {count}::BIGINT AS requests,
           coalesce(sum(cold_input_tokens), 0)::BIGINT AS cold_input_tokens,
           coalesce(sum(cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
           coalesce(sum(cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
           coalesce(sum(output_tokens), 0)::BIGINT AS output_tokens
    FROM {"request_rollup" if rollup else "requests"}
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
    con: duckdb.DuckDBPyConnection | Engine, selection: Selection | None = None, by: Sequence[str] = ()
) -> Rows:
    """Like :func:`token_mix`, as plain rows (no polars needed)."""
    sel = selection or Selection()
    answer = _rollup_where(sel) if materialised(con, ROLLUP_VIEW) else None
    if answer is not None:
        where, params = answer
        text = mix_sql(by, where, rollup=True)
    else:
        where, params = sel.where()
        text = mix_sql(by, where)
    if isinstance(con, Engine):
        return Rows([*by, *COLUMNS], con.frame(text, params).rows())
    return Rows([*by, *COLUMNS], con.execute(text, params).fetchall())


def _midnight(value: dt.datetime) -> str | None:
    """``YYYY-MM-DD`` when ``value`` is a UTC midnight (a whole-day bound), else None."""
    utc = value.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%d") if utc.time() == dt.time(0) else None


def _rollup_where(sel: Selection) -> tuple[str, list[Any]] | None:
    """The selection as a predicate over the rollup's columns, or None when the rollup cannot
    answer it exactly (a bound inside a day, or a filter on something the rollup does not keep)."""
    if sel.extra:
        return None
    clauses: list[str] = []
    params: list[Any] = []
    for bound, op in ((sel.since, ">="), (sel.until, "<")):
        if bound is not None:
            day = _midnight(bound)
            if day is None:
                return None
            clauses.append(f"day {op} ?")  # ISO days compare as strings; a NULL day never matches
            params.append(day)
    more, more_params = sel.filter_clauses(session="session_id")
    return (" AND ".join(clauses + more) or "true"), params + more_params


def token_mix(
    con: duckdb.DuckDBPyConnection | Engine, selection: Selection | None = None, by: Sequence[str] = ()
) -> pl.DataFrame:
    """One row (no ``by``) or one row per group: the ``by`` columns, then :data:`COLUMNS`."""
    import polars as pl

    result = token_mix_rows(con, selection, by)
    return pl.DataFrame(result.rows, schema=result.columns, orient="row")
