"""The lake's requests as input to sizing and simulation: token rates, and a block trace.

Both read the ``requests`` view of a connection (:meth:`traceflow.store.lake.Lake.connect`)
restricted to a :class:`~traceflow.store.selection.Selection`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceflow.errors import UsageError
from traceflow.store.selection import REQUEST_TIME

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import duckdb

    from traceflow.kv.trace import BlockTrace
    from traceflow.store.selection import Selection


def measured_rates(con: duckdb.DuckDBPyConnection, selection: Selection) -> tuple[float, float, float]:
    """New-KV and input token rates (tok/s) of the selection, and the span in seconds.

    New KV = cold input + cache writes + output (what must be stored); input = cold + read + write.
    """
    where, params = selection.where()
    sql = f"""
        SELECT coalesce(sum(coalesce(cold_input_tokens, 0) + coalesce(cache_write_tokens, 0)
                            + coalesce(output_tokens, 0)), 0)::BIGINT,
               coalesce(sum(context_tokens), 0)::BIGINT,
               (epoch(max({REQUEST_TIME})) - epoch(min({REQUEST_TIME})))::DOUBLE,
               count(*)::BIGINT
        FROM requests WHERE {where}"""
    new_kv, inp, span, n = con.execute(sql, params).fetchone() or (0, 0, 0.0, 0)
    if not n or not span or span <= 0:
        raise UsageError(
            "cannot measure a token rate: the selection has fewer than two requests at different times; "
            "give --rate TOKENS_PER_S or import traffic first"
        )
    return float(new_kv) / span, float(inp) / span, float(span)


def lake_trace(con: duckdb.DuckDBPyConnection, selection: Selection, block_size: int) -> BlockTrace:
    """The selection's requests as a block trace: their ``hash_ids``, else chains built from token counts."""
    from traceflow.kv.trace import BlockTrace, chains_from_counts

    where, params = selection.where()
    sql = f"""
        SELECT epoch({REQUEST_TIME})::DOUBLE AS t,
               context_tokens::BIGINT AS ctx,
               hash_ids, block_size,
               coalesce(session_id, '') || '/' || coalesce(parent_session_id, '') AS stream,
               json_extract_string(attributes, '$.hash_scope') AS scope
        FROM requests WHERE {where} AND {REQUEST_TIME} IS NOT NULL
        ORDER BY t, seq NULLS LAST, event_id"""
    rows = con.execute(sql, params).fetchall()
    if not rows:
        raise UsageError("the lake's selection has no requests; import a trace or give --trace FILE")
    hashed = [r for r in rows if r[2] is not None]
    if not hashed:
        return chains_from_counts(
            [r[0] for r in rows], [r[4] for r in rows], [r[1] for r in rows], block_size
        )
    sizes = {r[3] for r in hashed if r[3]}
    if len(sizes) > 1:
        raise UsageError(f"the selection mixes block sizes {sorted(sizes)}; select one source (--source)")
    bs = sizes.pop() if sizes else block_size
    offsets: dict[str | None, int] = {}
    top = 0
    for scope in dict.fromkeys(r[5] for r in hashed):  # ids are only comparable within one scope
        offsets[scope] = top
        top += max((max(r[2], default=0) for r in hashed if r[5] == scope), default=0) + 1
    return BlockTrace.from_requests(
        [r[0] for r in hashed],
        [max(int(r[1]), 0) for r in hashed],
        [[h + offsets[r[5]] for h in r[2]] for r in hashed],
        int(bs),
        [r[4] for r in hashed],
    )


def choose_trace(
    *,
    workload: str | None,
    trace: Path | None,
    connect: Callable[[], duckdb.DuckDBPyConnection],
    selection: Selection,
    duration_s: float,
    seed: int,
    block_size: int,
) -> BlockTrace:
    """What ``simulate`` replays: the built-in ``workload`` (agentic-coding), a Mooncake ``trace``
    file, else the lake's selection (``connect`` opens it only then)."""
    from traceflow.kv.synthetic import agentic_coding_trace
    from traceflow.kv.trace import read_mooncake

    if trace is not None and workload is not None:
        raise UsageError("give --trace FILE or --workload NAME, not both")
    if workload is not None:
        if workload != "agentic-coding":
            raise UsageError(f"--workload {workload!r}: the built-in workload is agentic-coding")
        return agentic_coding_trace(duration_s, seed, block_size=block_size)
    if trace is not None:
        return read_mooncake(trace, block_size)
    return lake_trace(connect(), selection, block_size)
