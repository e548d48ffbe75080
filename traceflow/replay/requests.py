"""The requests a replay reads: the selected requests of a lake, in replay order (docs/replay.md).

:func:`load_requests` is what every replay stage starts from (the prefix derivation, the exports and
the workload fit); the frame it returns is the shape they all accept, so a generated trace
(:meth:`traceflow.replay.synth_trace.SynthTrace.replay_frame`) or a test can hand them one directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection
    from traceflow.store.sql import Engine

#: Attributes extracted for the kv-cache-tester export (JSON path -> column).
EXTRA_ATTRIBUTES = {
    "think_time_s": "$.think_time_s",
    "stop": "$.stop",
    "input_types": "$.input_types",
    "output_types": "$.output_types",
    "subagent_type": "$.subagent_type",
    "agent_id": "$.agent_id",
    "request_type": "$.type",
}


def requests_sql(
    selection: Selection | None, *, extras: bool = False, limit: int | None = None, keys: bool = False
) -> tuple[str, list[Any]]:
    """The query :func:`load_requests` runs: one row per request with tokens, in replay order."""
    from traceflow.store.selection import REQUEST_TIME, Selection

    where, params = (selection or Selection()).where()
    ident = "session_id, parent_session_id, prompt_id, model, user_id, agent, source, request_id,"
    if keys:  # 64-bit keys instead of strings (a flat export needs no names)
        ident = """
          hash(session_id, coalesce(model, '')) AS stream_h,
          session_id IS NOT NULL AS has_session,
          CASE WHEN parent_session_id IS NOT NULL
               THEN hash(parent_session_id, coalesce(model, ''), 'sub') END AS sub_h,
          CASE WHEN user_id IS NOT NULL THEN hash(user_id, coalesce(model, ''), 'user') END AS user_h,"""
    extra_cols = ""
    if extras:
        extra_cols = "".join(
            f", json_extract_string(attributes, '{path}') AS {name}"
            for name, path in EXTRA_ATTRIBUTES.items()
        )
    sql = f"""
        SELECT {ident}
          epoch_us({REQUEST_TIME}) AS t_us,
          coalesce(epoch_us(ended_at),
                   epoch_us(started_at) + CAST(round(duration_ms * 1000) AS BIGINT)) AS end_us,
          CAST(context_tokens AS BIGINT) AS ctx,
          CAST(coalesce(output_tokens, 0) AS BIGINT) AS out,
          CAST(cache_read_tokens AS BIGINT) AS read,
          CASE WHEN cache_read_tokens IS NOT NULL
                    AND coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0) > 0
               THEN attributes IS NULL OR NOT contains(attributes, '"cache_derived"')
               ELSE false END AS measured,
          hash_ids,
          block_size AS src_block,
          CASE WHEN hash_ids IS NOT NULL THEN json_extract_string(attributes, '$.hash_scope') END AS scope
          {"" if keys else ","} {"" if keys else "duration_ms, ttft_ms, seq, event_id"}{extra_cols}
        FROM requests
        WHERE ({where}) AND context_tokens > 0 AND {REQUEST_TIME} IS NOT NULL
        ORDER BY t_us, seq NULLS LAST, event_id
    """
    if limit is not None:
        if limit < 1:
            raise UsageError(f"--limit {limit} must be at least 1")
        sql += f" LIMIT {int(limit)}"
    return sql, params


def load_requests(
    con: duckdb.DuckDBPyConnection | Engine,
    selection: Selection | None = None,
    *,
    extras: bool = False,
    limit: int | None = None,
    keys: bool = False,
) -> pl.DataFrame:
    """The selected requests (context > 0) in replay order: time, then source order.

    Columns: ``session_id, parent_session_id, prompt_id, model, user_id, agent, source, request_id,
    t_us, end_us, ctx, out, read, measured, hash_ids, src_block, scope, duration_ms, ttft_ms, seq,
    event_id`` (+ :data:`EXTRA_ATTRIBUTES` with ``extras``). With ``keys`` the names give way to
    64-bit keys (``stream_h, has_session, sub_h, user_h``; no ``source``, ``duration_ms``,
    ``ttft_ms``, ``seq``, ``event_id``): enough for a flat export, and much less to move for
    millions of requests.
    """
    from traceflow.store.sql import query_frame

    sql, params = requests_sql(selection, extras=extras, limit=limit, keys=keys)
    return query_frame(con, sql, params)
