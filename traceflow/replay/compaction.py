"""Replays that fit a smaller window: ``export --max-context N``
(docs/replay.md#fitting-a-smaller-window-max-context).

A replay target whose window is smaller than the one the agent had fails on every turn above it.
An agent at its own cap does not fail: it compacts (Claude Code's auto-compaction summarises the
conversation and continues from the summary). :func:`compact_to_window` applies that rule to the
requests of a frame, stream by stream (``(session, model)``, as :mod:`traceflow.replay.prefix`
keys them) in time order, with ``c`` the recorded context and ``r`` the replayed one:

* ``r_i = c_i − d``, ``d`` being the tokens the stream's last compaction removed (0 at first);
* when ``r_i`` would exceed ``N`` the stream compacts: ``r_i = min(S + a_i, N)``, ``S`` the summary
  (``summary_tokens``, an assumption; :data:`DEFAULT_SUMMARY_TOKENS`) and ``a_i`` what the turn
  added (``c_i − c_{i−1}``; 0 for a stream's first request, whose earlier turns are not in the
  selection); then ``d = c_i − r_i``. A turn whose own tokens do not fit beside the summary is cut
  to ``N`` (counted as ``requests_truncated``);
* a recorded drop (``c_i < c_{i−1}``: the agent compacted or cleared by itself) resets ``d`` to 0.

With ``replies`` (the ``aiperf`` export: AIPerf appends its live replies of ``output_length``, so the
context it sends at turn ``i`` is ``max(r_i, R_{i−1} + out_{i−1} + 1)``, see
:mod:`traceflow.replay.aiperf`) the cap is checked against that sent context ``R``.

A compacted request starts a new chain of the prefix derivation (column ``compacted``: it shares the
stream's base prefix, the system prompt and tools, not the summarised history) and, in the ``aiperf``
export, a new session ``<id>~k``. Its measured cache read and any source hash ids no longer describe
it and are dropped; later requests of the stream have their reads moved down by ``d``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from traceflow.errors import UsageError
from traceflow.replay.arrays import I64, BoolA, group_first

if TYPE_CHECKING:
    import polars as pl

#: ASSUMPTION: the context a compacted session restarts from, in tokens. Claude Code keeps its system
#: prompt and tools (≈ 16–18k tokens in its ``/context`` view) and adds the summary (its output is
#: capped at 20,000 tokens); docs/replay.md gives the sources. Replace with ``--summary-tokens``.
DEFAULT_SUMMARY_TOKENS = 20_000


def compact_to_window(
    frame: pl.DataFrame, stream: I64, max_context: int, summary_tokens: int, *, replies: bool = False
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``frame`` (replay order) with every context within ``max_context``, and the counts.

    ``stream`` is the stream key of every row (:func:`traceflow.replay.prefix.stream_keys`)."""
    import polars as pl

    if max_context < 1:
        raise UsageError(f"--max-context {max_context} must be a positive number of tokens")
    if not 0 < summary_tokens < max_context:
        raise UsageError(
            f"--summary-tokens {summary_tokens} must be positive and below --max-context {max_context}"
        )
    n = frame.height
    ctx = np.asarray(frame["ctx"].fill_null(0).to_numpy(), dtype=np.int64)
    outp = np.maximum(np.asarray(frame["out"].fill_null(0).to_numpy(), dtype=np.int64), 1)
    order = np.argsort(stream, kind="stable")
    s = stream[order]
    first = group_first(s)
    c = ctx[order]
    sent = _sent_without_compaction(c, outp[order], first) if replies else c
    over = sent > max_context
    stats = {"max_context": max_context, "summary_tokens": summary_tokens}
    if not over.any():
        return frame.with_columns(pl.lit(False).alias("compacted")), {
            **stats,
            "sessions_compacted": 0,
            "compactions": 0,
            "requests_truncated": 0,
        }
    new_ctx = c.copy()
    shift = np.zeros(n, dtype=np.int64)
    compacted = np.zeros(n, dtype=bool)
    truncated = np.zeros(n, dtype=bool)
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], n)
    stream_id = np.cumsum(first) - 1
    for k in np.unique(stream_id[over]).tolist():
        a, b = int(starts[k]), int(ends[k])
        _walk(c[a:b], outp[order][a:b], max_context, summary_tokens, replies, new_ctx[a:b], shift[a:b],
              compacted[a:b], truncated[a:b])  # fmt: skip
    out_ctx = np.empty(n, dtype=np.int64)
    out_ctx[order] = new_ctx
    out_shift = np.empty(n, dtype=np.int64)
    out_shift[order] = shift
    out_comp = np.empty(n, dtype=bool)
    out_comp[order] = compacted
    changed = (out_shift > 0) | out_comp
    exprs: list[Any] = [pl.Series("ctx", out_ctx), pl.Series("compacted", out_comp)]
    if "read" in frame.columns:
        read = np.asarray(frame["read"].fill_null(0).to_numpy(), dtype=np.int64)
        moved = pl.Series(np.where(changed, np.maximum(read - out_shift, 0), read))
        exprs.append(
            pl.when(pl.col("read").is_null())
            .then(None)
            .otherwise(moved)
            .cast(frame["read"].dtype)
            .alias("read")
        )
    if "measured" in frame.columns:  # a compacted request's read described the summarised history
        exprs.append(pl.col("measured") & pl.Series(~out_comp))
    if "hash_ids" in frame.columns:  # source ids describe the recorded context, not the replayed one
        exprs.append(pl.when(pl.Series(changed)).then(None).otherwise(pl.col("hash_ids")).alias("hash_ids"))
    result = frame.with_columns(exprs)
    return result, {
        **stats,
        "sessions_compacted": len(np.unique(s[compacted])),
        "compactions": int(compacted.sum()),
        "requests_truncated": int(truncated.sum()),
    }


def _sent_without_compaction(c: I64, outp: I64, first: BoolA) -> I64:
    """The context AIPerf sends per position (stream order), no compaction: within a run between
    stream starts and drops, ``R_i = max(c_i, R_{i−1} + out_{i−1} + 1)``."""
    n = len(c)
    new = first.copy()
    if n > 1:
        new[1:] |= c[1:] < c[:-1]
    seg = np.cumsum(new) - 1
    seg_start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    before = np.cumsum(outp + 1) - (outp + 1)
    p = before - before[seg_start]
    x = c - p
    lo = int(x.min())
    span = int(x.max()) - lo + 1
    v = np.maximum.accumulate((x - lo) + seg * span) - seg * span + lo
    out: I64 = v + p
    return out


def _walk(
    c: I64,
    outp: I64,
    cap: int,
    summary: int,
    replies: bool,
    new_ctx: I64,
    shift: I64,
    compacted: BoolA,
    truncated: BoolA,
) -> None:
    """One stream (time order): fill the replayed contexts, shifts and compaction marks in place."""
    d = 0
    sent = 0  # what AIPerf sends (replies) at the previous position
    prev = -1
    for i, ci in enumerate(c.tolist()):
        if prev >= 0 and ci < prev:  # the agent's own drop: the recorded context is replayed as it is
            d = 0
            sent = 0
        r = ci - d
        now = max(r, sent + int(outp[i - 1]) + 1) if replies and prev >= 0 and sent else r
        if now > cap:
            added = max(ci - prev, 0) if prev >= 0 else 0
            r = min(summary + added, cap)
            truncated[i] = summary + added > cap
            compacted[i] = True
            d = ci - r
            now = r
        new_ctx[i] = r
        shift[i] = d
        sent = now
        prev = ci
