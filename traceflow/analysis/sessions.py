"""Sessions (docs/everyday.md#traceflow-sessions): turns, requests, duration, context growth, compactions,
sub-agents, idle returns.

A session folds its sub-agents in (``coalesce(parent_session_id, session_id)``); the context figures,
turns, growth, context drops and idle returns come from its main stream. Definitions are in the header of
``queries/sessions.sql``: turns are changes of ``prompt_id``; ``growth_per_turn`` is the sum of the
context increases between consecutive requests over the turns; a *compaction* is a context drop of
more than ``compaction_drop`` (default half) of the previous request's context, or a ``compaction``
event; an *idle return* is a request after at least ``idle_after_s`` (default 15 min) idle, and its cached
prefix (the previous context plus output) is the context that had to be reloaded.

A request without a session id is not a session: the summary counts such requests apart
(``sessionless_requests``) and, for a selection or group that has them and no session at all (a
sessionless trace such as Mooncake), gives ``sessions`` as null ("not applicable") with a ``note``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from traceflow.store import groups, sql
from traceflow.store.quantiles import Column, Quantile, grouped_sql
from traceflow.store.selection import zone_of

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

DEFAULT_IDLE_AFTER_S = 900.0
#: The columns of ``sessions --list`` a table keeps to fit a narrow terminal, the first named longest.
LIST_ESSENTIAL: tuple[str, ...] = ("root_session_id", "started_at", "requests", "duration_s", "reuse_ratio")
#: The columns of ``sessions --by`` a table keeps (besides the groups), the first named longest.
SUMMARY_ESSENTIAL: tuple[str, ...] = ("sessions", "requests", "duration_p50_s", "reuse_ratio", "idle_returns")
DEFAULT_COMPACTION_DROP = 0.5

#: Aggregate columns of :func:`session_summary` after the ``by`` columns (JSON keys are a contract);
#: the quantiles are DuckDB's ``quantile_cont``, on another engine computed by rank
#: (:mod:`traceflow.store.quantiles`). Counts and sums are 0 over no sessions (they add up over
#: windows); quantiles, means and ratios are null there (no data).
SUMMARY: tuple[Column, ...] = (
    ("sessions", "count(*)::BIGINT"),
    ("requests", "total(requests)"),
    ("turns", "total(turns)"),
    ("subagents", "total(subagents)"),
    ("sessions_with_subagents", "count(*) FILTER (WHERE subagents > 0)::BIGINT"),
    ("requests_p50", Quantile("requests", 0.5)),
    ("requests_mean", "avg(requests)"),
    ("turns_p50", Quantile("turns", 0.5)),
    ("turns_mean", "avg(turns)"),
    ("duration_p50_s", Quantile("duration_s", 0.5)),
    ("duration_p90_s", Quantile("duration_s", 0.9)),
    ("duration_mean_s", "avg(duration_s)"),
    ("context_start_p50", Quantile("context_start", 0.5)),
    ("context_end_p50", Quantile("context_end", 0.5)),
    ("context_end_p90", Quantile("context_end", 0.9)),
    ("context_max", "max(context_max)"),
    ("growth_per_turn_p50", Quantile("growth_per_turn", 0.5)),
    ("growth_per_turn_mean", "sum(growth_tokens) / nullif(sum(turns), 0)::DOUBLE"),
    ("compactions", "total(compactions)"),
    ("sessions_with_compaction", "count(*) FILTER (WHERE compactions > 0)::BIGINT"),
    ("idle_returns", "total(idle_returns)"),
    ("sessions_with_idle_return", "count(*) FILTER (WHERE idle_returns > 0)::BIGINT"),
    ("idle_return_reload_tokens", "total(idle_return_reload_tokens)"),
    ("idle_return_cache_write_tokens", "total(idle_return_cache_write_tokens)"),
    (
        "reuse_ratio",
        "reuse_ratio(sum(cache_read_tokens),"
        " sum(cold_input_tokens + cache_read_tokens + cache_write_tokens))",
    ),
    # cache writes / cache reads (null when nothing was read): over all sessions, and per session
    ("write_amplification", "sum(cache_write_tokens) / nullif(sum(cache_read_tokens), 0)::DOUBLE"),
    ("write_amplification_p50", Quantile("write_amplification", 0.5)),
    ("write_amplification_max", "max(write_amplification)"),
)


#: The columns of :data:`SUMMARY` that count or sum (0, not null, for a group without sessions).
SUMS = tuple(
    name for name, expr in SUMMARY if isinstance(expr, str) and expr.startswith(("count(", "total("))
)

#: Columns of :func:`session_summary` after :data:`SUMMARY`.
SUMMARY_EXTRA = ("sessionless_requests", "note")
#: The ``note`` of a summary row whose requests have no session id, and of one with some.
NOT_APPLICABLE = "not applicable: no request has a session id (a sessionless trace)"
SESSIONLESS_NOTE = "requests without a session id are not counted as sessions"


def _params(
    selection: Selection | None, idle_after_s: float, compaction_drop: float
) -> tuple[dict[str, str], dict[str, Any]]:
    if not 0 < compaction_drop < 1:
        from traceflow.errors import UsageError

        raise UsageError(
            f"--compaction-drop {compaction_drop} must be between 0 and 1 (a share of the context)"
        )
    block, params = sql.selection_block(selection)
    return {"selection": block}, {
        **params,
        "idle_after_s": float(idle_after_s),
        "compaction_drop": float(compaction_drop),
    }


def sessions(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    idle_after_s: float = DEFAULT_IDLE_AFTER_S,
    compaction_drop: float = DEFAULT_COMPACTION_DROP,
    limit: int | None = None,
) -> pl.DataFrame:
    """One row per session (the columns of ``queries/sessions.sql``), by start time."""
    if limit is not None and limit < 1:
        from traceflow.errors import UsageError

        raise UsageError(f"--limit {limit} must be at least 1 (or leave it out for every session)")
    blocks, params = _params(selection, idle_after_s, compaction_drop)
    blocks["order"] = ""
    wrap = "SELECT * FROM {q} AS s ORDER BY started_at, root_session_id" + (
        f" LIMIT {int(limit)}" if limit is not None else ""
    )
    return sql.run(con, "sessions", params, blocks=blocks, wrap=wrap)


def session_summary(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    by: Sequence[str] = (),
    idle_after_s: float = DEFAULT_IDLE_AFTER_S,
    compaction_drop: float = DEFAULT_COMPACTION_DROP,
) -> pl.DataFrame:
    """The sessions in aggregate, one row or one per ``by`` group: ``by`` columns, then :data:`SUMMARY`,
    then :data:`SUMMARY_EXTRA`."""
    keys = groups.row_keys(by, zone=zone_of(selection), sessions=True)
    blocks, params = _params(selection, idle_after_s, compaction_drop)
    blocks["order"] = ""
    # --by project|host|attr:NAME: a session is in the group of each value its requests carry
    blocks.update(groups.session_blocks(by, sql.load("steps").returns))
    wrap = grouped_sql(keys, SUMMARY, by_rank=isinstance(con, sql.Engine))
    frame = sql.run(con, "sessions", params, blocks=blocks, wrap=wrap)
    return _with_sessionless(con, frame, selection, list(by))


def _with_sessionless(
    con: duckdb.DuckDBPyConnection,
    frame: pl.DataFrame,
    selection: Selection | None,
    by: list[str],
) -> pl.DataFrame:
    """``frame`` with ``sessionless_requests`` and ``note``; ``sessions`` null where a group has
    sessionless requests and no session."""
    import polars as pl

    from traceflow.store.selection import Selection

    sel = selection or Selection()
    keys = groups.request_keys(by, zone=sel.zone)
    where, params = sel.where()
    counts = sql.query_frame(
        con,
        f"SELECT {keys.select}count(*)::BIGINT AS sessionless_requests FROM {keys.relation} r {keys.join}"
        " WHERE total_tokens > 0 AND request_time IS NOT NULL"
        f" AND coalesce(parent_session_id, session_id) IS NULL AND ({where}) {keys.group}",
        params,
    )
    if by:
        frame = frame.join(counts, on=by, how="full", coalesce=True, nulls_equal=True).sort(
            by, nulls_last=True
        )
    else:
        frame = frame.with_columns(
            pl.lit(int(counts["sessionless_requests"][0])).alias("sessionless_requests")
        )
    frame = frame.with_columns(pl.col(c).fill_null(0) for c in SUMS)  # groups with no session
    n = pl.col("sessionless_requests").fill_null(0)
    none = n.gt(0) & pl.col("sessions").eq(0)
    return frame.with_columns(
        n.cast(pl.Int64).alias("sessionless_requests"),
        pl.when(none).then(None).otherwise(pl.col("sessions")).alias("sessions"),
        pl.when(none)
        .then(pl.lit(NOT_APPLICABLE))
        .when(n.gt(0))
        .then(pl.lit(SESSIONLESS_NOTE))
        .otherwise(None)
        .cast(pl.String)
        .alias("note"),
    )
