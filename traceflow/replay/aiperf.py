"""The ``aiperf`` export: AIPerf ``mooncake_trace`` with sessions.

A session is one stream (session and model) between resets; the first turn carries ``timestamp``
(ms from the trace start) and the whole context (``input_length``, full ``hash_ids``, shared with
other sessions where the prefix really is); later turns carry ``delay`` (ms from the previous
response's end: the think/tool time) and only the *new* tokens, because AIPerf appends the history
and its live replies itself. The new tokens are ``context − (what AIPerf will have sent: earlier
turns plus replies of output_length)``, at least 1 (a shortfall is recovered on later turns), with
ids of their own. A context drop (compaction) or a prefix break starts a new session ``<id>~k`` at
its absolute time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from traceflow.replay.arrays import I64, group_first, local_index, previous
from traceflow.replay.hash_ids import KIND_BREAK, KIND_DROP
from traceflow.replay.writing import CHUNK_REQUESTS, atomic_file, times_ms

if TYPE_CHECKING:
    import polars as pl

    from traceflow.replay.hash_ids import PrefixPlan


def _stream_codes(frame: pl.DataFrame) -> I64:
    """One code per (session, model); a request without a session is a stream of its own."""
    import polars as pl

    return np.asarray(
        frame.select(
            pl.struct(
                pl.col("session_id"),
                pl.col("model").fill_null(""),
                pl.when(pl.col("session_id").is_null()).then(pl.int_range(pl.len())).otherwise(None),
            ).rank("dense")
        )
        .to_series()
        .to_numpy(),
        dtype=np.int64,
    )


def _segments(frame: pl.DataFrame, plan: PrefixPlan) -> tuple[I64, I64, I64]:
    """(order, segment id per position, stream code per position): requests in (stream, time)
    order; a new segment at each stream start, context drop or prefix break."""
    stream = _stream_codes(frame)
    order = np.argsort(stream, kind="stable")
    s = stream[order]
    ctx = plan.ctx[order]
    new = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        new[1:] = (s[1:] != s[:-1]) | (ctx[1:] < ctx[:-1]) | (plan.kind[order][1:] == KIND_BREAK)
        new[1:] |= plan.kind[order][1:] == KIND_DROP
    seg = np.cumsum(new) - 1
    return order, seg, s


def _session_names(frame: pl.DataFrame, order: I64, seg: I64, stream: I64) -> list[str]:
    """AIPerf session ids per segment: the session id, ``@model`` for a session's later streams,
    ``~k`` for a stream's later segments, ``r<row>`` for requests without a session."""
    sessions = frame["session_id"].to_list()
    models = frame["model"].to_list()
    n_seg = int(seg[-1]) + 1 if len(seg) else 0
    names: list[str] = [""] * n_seg
    seen_stream: dict[int, int] = {}
    streams_of_session: dict[str, list[int]] = {}
    seg_starts = np.flatnonzero(np.diff(seg, prepend=-1))
    for k in seg_starts.tolist():
        row = int(order[k])
        st = int(stream[k])
        sid = sessions[row]
        if st not in seen_stream:
            seen_stream[st] = 0
            if sid is not None:
                streams_of_session.setdefault(sid, []).append(st)
        else:
            seen_stream[st] += 1
        base = f"r{row}" if sid is None else sid
        if sid is not None and streams_of_session[sid][0] != st:
            base = f"{sid}@{models[row] or 'model'}"
        names[int(seg[k])] = base if seen_stream[st] == 0 else f"{base}~{seen_stream[st]}"
    return names


def write_aiperf(frame: pl.DataFrame, plan: PrefixPlan, out: Path, speedup: float) -> dict[str, Any]:
    """AIPerf ``mooncake_trace`` with sessions (see the module docstring)."""
    B = plan.block_size
    order, seg, stream = _segments(frame, plan)
    n = len(order)
    ts = times_ms(frame, 1.0)
    t_us = np.asarray(frame["t_us"].to_numpy(), dtype=np.int64)
    end_known = np.asarray(frame["end_us"].is_not_null().to_numpy(), dtype=bool)
    end_us = np.where(end_known, np.asarray(frame["end_us"].fill_null(0).to_numpy(), dtype=np.int64), t_us)
    outp = np.maximum(np.asarray(frame["out"].to_numpy(), dtype=np.int64), 1)
    ctx = plan.ctx
    first = group_first(seg)
    # AIPerf sends R_i = max(ctx_i, R_{i-1} + out_{i-1} + 1) at turn i (its history plus at least one
    # new token). With P_i = sum over earlier turns of the segment of (out + 1) and V_i = R_i - P_i:
    # V_i = running max of (ctx_j - P_j), and the new tokens of turn i are V_i - V_{i-1} + 1.
    c_o = ctx[order]
    o_o = outp[order]
    seg_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    before = np.cumsum(o_o + 1) - (o_o + 1)
    p_i = before - before[seg_start]
    x = c_o - p_i
    lo = int(x.min()) if n else 0
    span = int(x.max()) - lo + 1 if n else 1
    v = np.maximum.accumulate((x - lo) + seg * span) - seg * span + lo
    delta = np.where(first, c_o, v - previous(v) + 1)
    replay_error = (v + p_i - c_o)[~first]
    names = _session_names(frame, order, seg, stream)
    next_id = plan.next_id
    rows_written = 0
    sessions = 0
    delay_ms = np.maximum((t_us[order] - previous(end_us[order])) / 1000.0 / speedup, 0.0)
    ts_first = np.rint(ts[order] / speedup).astype(np.int64)
    # write segments in order of their first timestamp
    seg_first_pos = np.flatnonzero(first)
    seg_order = seg_first_pos[np.argsort(ts_first[seg_first_pos], kind="stable")]
    seg_len = np.diff(np.append(seg_first_pos, n))
    len_of = dict(zip(seg_first_pos.tolist(), seg_len.tolist(), strict=True))
    firsts_rows = order[seg_first_pos]
    offsets_f, flat_f = _ids_of_rows(plan, firsts_rows)
    ids_at = {int(p): (int(offsets_f[i]), int(offsets_f[i + 1])) for i, p in enumerate(seg_first_pos)}
    flat_list = flat_f.tolist()
    dumps = orjson.dumps
    with atomic_file(out) as fh:
        buf: list[bytes] = []
        for p0 in seg_order.tolist():
            sessions += 1
            name = names[int(seg[p0])]
            a, b = ids_at[p0]
            buf.append(
                dumps(
                    {
                        "session_id": name,
                        "timestamp": int(ts_first[p0]),
                        "input_length": int(c_o[p0]),
                        "output_length": int(o_o[p0]),
                        "hash_ids": flat_list[a:b],
                    }
                )
            )
            for p in range(p0 + 1, p0 + len_of[p0]):
                d = int(delta[p])
                k = -(-d // B)
                buf.append(
                    dumps(
                        {
                            "session_id": name,
                            "delay": round(float(delay_ms[p]), 3),
                            "input_length": d,
                            "output_length": int(o_o[p]),
                            "hash_ids": list(range(next_id, next_id + k)),
                        }
                    )
                )
                next_id += k
            rows_written += len_of[p0]
            if len(buf) >= 10_000:
                fh.write(b"\n".join(buf) + b"\n")
                buf.clear()
        if buf:
            fh.write(b"\n".join(buf) + b"\n")
    return {
        "rows": rows_written,
        "aiperf_sessions": sessions,
        "replayed_context_max_excess_tokens": int(replay_error.max()) if len(replay_error) else 0,
        "replayed_context_max_tokens": int((v + p_i).max()) if n else 0,
    }


def _ids_of_rows(plan: PrefixPlan, rows: I64) -> tuple[I64, I64]:
    """Ids of arbitrary rows, materialised range by range."""
    if not len(rows):
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    counts = plan.counts()[rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = np.empty(int(offsets[-1]), dtype=np.int64)
    srt = np.argsort(rows, kind="stable")
    sorted_rows = rows[srt]
    # runs of consecutive rows are materialised together
    for a in range(0, len(sorted_rows), CHUNK_REQUESTS):
        chunk = sorted_rows[a : a + CHUNK_REQUESTS]
        lo, hi = int(chunk[0]), int(chunk[-1]) + 1
        off, fl = plan.ids(lo, hi)
        local = chunk - lo
        c = np.diff(off)[local]
        src = np.repeat(off[:-1][local], c) + local_index(c)
        dst_rows = srt[a : a + CHUNK_REQUESTS]
        dst = np.repeat(offsets[:-1][dst_rows], c) + local_index(c)
        flat[dst] = fl[src]
    return offsets, flat
