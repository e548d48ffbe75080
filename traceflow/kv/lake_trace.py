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

    from traceflow.kv.synthetic import SessionTurns
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


#: ASSUMPTION of the lake replay: an answer streams at this rate (tok/s), so a session's think time is the
#: gap to its next request less its answer's streaming (``traceflow.kv.synthetic``'s ``decode_tok_s``).
DECODE_TOK_S = 50.0
#: ASSUMPTION: a gap of this many seconds or more before a request makes it a resumed turn (report keys
#: ``resumed_*``).
RESUME_GAP_S = 600.0
#: ASSUMPTION of ``--rate-scale``: each extra copy of a session starts up to this many seconds later
#: (uniform, seeded), so the copies do not arrive in lockstep.
SCALE_JITTER_S = 300.0


def lake_turns(
    con: duckdb.DuckDBPyConnection,
    selection: Selection,
    block_size: int,
    rate_scale: float = 1.0,
    seed: int = 0,
) -> SessionTurns:
    """The selection's sessions as a closed-loop workload for ``simulate --serving``: each request's
    context and answer, each session's gaps as think times (less the answer's streaming).

    ``rate_scale`` k offers about k times the sessions: ``floor(k)`` copies of every session plus a
    seeded share ``k − floor(k)`` of one more, each copy a distinct session (no prefix shared between
    copies) starting up to :data:`SCALE_JITTER_S` later.
    """
    import numpy as np

    from traceflow.kv.synthetic import SessionTurns
    from traceflow.kv.trace import chains_from_counts

    if not (rate_scale > 0 and rate_scale < 1e4):
        raise UsageError(f"--rate-scale {rate_scale:g} must be above 0 (and below 10,000)")
    where, params = selection.where()
    sql = f"""
        SELECT epoch({REQUEST_TIME})::DOUBLE AS t,
               greatest(coalesce(context_tokens, 0), 1)::BIGINT AS ctx,
               greatest(coalesce(output_tokens, 0), 1)::BIGINT AS out,
               coalesce(session_id, '') || '/' || coalesce(parent_session_id, '') AS stream
        FROM requests WHERE {where} AND {REQUEST_TIME} IS NOT NULL
        ORDER BY t, seq NULLS LAST, event_id"""
    rows = con.execute(sql, params).fetchall()
    if not rows:
        raise UsageError(
            "the lake's selection has no requests; import traffic or give --workload agentic-coding"
        )
    rng = np.random.default_rng(seed)
    streams = list(dict.fromkeys(r[3] for r in rows))
    whole = int(rate_scale)
    copies: dict[str, list[float]] = {}
    for s in streams:
        n = whole + (1 if rng.random() < rate_scale - whole else 0)
        copies[s] = [0.0] + [float(x) for x in rng.uniform(0, SCALE_JITTER_S, max(n - 1, 0))] if n else []
    t0 = rows[0][0]
    expanded = [
        (r[0] - t0 + shift, int(r[1]), int(r[2]), f"{r[3]}#{c}")
        for r in rows
        for c, shift in enumerate(copies[r[3]])
    ]
    if not expanded:
        raise UsageError(f"--rate-scale {rate_scale:g} keeps no session of the selection; raise it")
    expanded.sort(key=lambda x: x[0])
    times = [e[0] for e in expanded]
    keys = [e[3] for e in expanded]
    trace = chains_from_counts(times, keys, [e[1] for e in expanded], block_size)
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    session = np.array([index[k] for k in keys], dtype=np.int64)
    out = np.array([e[2] for e in expanded], dtype=np.int64)
    think = np.zeros(len(expanded))
    resumed = np.zeros(len(expanded), dtype=bool)
    last: dict[str, int] = {}
    for i, k in enumerate(keys):
        j = last.get(k)
        if j is not None:
            gap = times[i] - times[j]
            think[j] = max(gap - out[j] / DECODE_TOK_S, 0.0)
            resumed[i] = gap >= RESUME_GAP_S
        last[k] = i
    return SessionTurns(trace, out, think, resumed, session)
