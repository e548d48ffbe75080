"""Replay exports: the selected requests as traces that serving benchmarks replay (DESIGN §4).

Formats (``REPLAY_FORMATS_AND_TRACES.md`` §1, §2, §4):

``mooncake``
    Flat JSONL, one request a line, in arrival order:
    ``{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]}``. ``timestamp`` is
    integer milliseconds from the first request (divided by ``--speedup``), ``input_length`` the full
    context, ``hash_ids`` prefix-block ids (:mod:`traceflow.replay.prefix`, ``len == ceil(N / block)``).
    Replays with AIPerf (``--custom-dataset-type mooncake_trace --fixed-schedule``), vLLM
    ``timed_trace`` (``--timed-trace-chunk-hash-size 512 --timed-trace-sec-multiplier 0.001``),
    SGLang's mooncake loader and the Dynamo/AIPerf analyzers.
``aiperf``
    AIPerf ``mooncake_trace`` with sessions. A session is one stream (session and model) between
    resets; the first turn carries ``timestamp`` (ms from the trace start) and the whole context
    (``input_length``, full ``hash_ids``, shared with other sessions where the prefix really is);
    later turns carry ``delay`` (ms from the previous response's end: the think/tool time) and only
    the *new* tokens, because AIPerf appends the history and its live replies itself. The new tokens
    are ``context − (what AIPerf will have sent: earlier turns plus replies of output_length)``, at
    least 1 (a shortfall is recovered on later turns), with ids of their own. A context drop
    (compaction) or a prefix break starts a new session ``<id>~k`` at its absolute time.
``kvcache-tester``
    One JSON per root session (a directory), the kv-cache-tester / WEKA format that AIPerf's
    ``weka_trace`` loader also reads: 64-token blocks by default, ``len(hash_ids) == floor(in / 64)``
    (the partial tail is not hashed), ids renumbered from 1 per file, ``t`` in seconds from the
    session start, ``think_time`` and ``api_time``, sub-agents as ``{"type": "subagent", ...}``
    entries holding their own requests (``t`` relative to the entry).

Every export writes ``<name>.manifest.json`` beside the output (``trace.jsonl`` ->
``trace.manifest.json``; a directory ``traces/`` -> ``traces.manifest.json``): the selection,
counts, block size, speedup, statistics and the command lines that replay it.

``--speedup k`` divides arrival times, delays and think times by ``k`` (server times are kept);
``--limit N`` keeps the first ``N`` requests in arrival order (sessions cut at the end).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import orjson

from traceflow import __version__
from traceflow.errors import UsageError
from traceflow.replay.prefix import KIND_BREAK, KIND_DROP, PrefixOptions, PrefixPlan, derive, load_requests

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.replay.prefix import I64
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection

FORMATS: tuple[str, ...] = ("mooncake", "aiperf", "kvcache-tester")
DEFAULT_BLOCK_SIZE: dict[str, int] = {"mooncake": 512, "aiperf": 512, "kvcache-tester": 64}
#: Requests written per batch (bounds memory: ids are materialised per batch).
CHUNK_REQUESTS = 200_000
#: DuckDB's memory while an export reads a lake (it spills beyond that): keeps a 10-million-request
#: export within a few GB.
DUCKDB_MEMORY = "2GB"
#: Hit-ratio statistics in the manifest cover at most this many requests (the first ones).
STATS_MAX_REQUESTS = 200_000


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"export format {fmt!r} is not one of: {', '.join(FORMATS)}")
    return fmt


def manifest_path(out: Path) -> Path:
    """``trace.jsonl`` -> ``trace.manifest.json``; ``traces/`` -> ``traces.manifest.json``."""
    name = out.name.rstrip("/") or "export"
    stem = name.split(".", 1)[0] if "." in name and not out.is_dir() else name
    return out.with_name(f"{stem}.manifest.json")


def export(
    source: Lake | duckdb.DuckDBPyConnection,
    selection: Selection | None,
    fmt: str,
    out: Path,
    *,
    block_size: int | None = None,
    speedup: float = 1.0,
    limit: int | None = None,
    options: PrefixOptions | None = None,
    duckdb_memory: str | None = DUCKDB_MEMORY,
) -> dict[str, Any]:
    """Export the selected requests of a lake to ``out`` in ``fmt``; returns the manifest.

    ``source`` is a lake (its own connection is opened, with DuckDB held to ``duckdb_memory`` and
    spilling to a temporary directory) or an open connection with a ``requests`` view.
    """
    import tempfile

    from traceflow.store.lake import Lake

    check_format(fmt)
    with tempfile.TemporaryDirectory(prefix="traceflow-export-") as spill:
        if isinstance(source, Lake):
            con = source.connect(["requests"])
            if duckdb_memory:
                con.execute(f"SET memory_limit = '{duckdb_memory}'")
                con.execute(f"SET temp_directory = '{spill}'")
            con.execute("SET preserve_insertion_order = false")
            con.execute("SET enable_progress_bar = false")
        else:
            con = source
        frame = load_requests(
            con, selection, extras=fmt == "kvcache-tester", limit=limit, keys=fmt == "mooncake"
        )
        if isinstance(source, Lake):
            con.close()
    if frame.is_empty():
        raise UsageError(
            "no requests with tokens match the selection; check --since/--until and the filters "
            "(`traceflow mix --by source` lists what the lake holds)"
        )
    return export_frame(
        frame,
        fmt,
        out,
        block_size=block_size,
        speedup=speedup,
        options=options,
        source={"selection": _selection_dict(selection), "limit": limit},
    )


def export_frame(
    frame: pl.DataFrame,
    fmt: str,
    out: Path,
    *,
    block_size: int | None = None,
    speedup: float = 1.0,
    options: PrefixOptions | None = None,
    source: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``frame`` (shaped as :func:`traceflow.replay.prefix.load_requests` returns it) to ``out``."""
    check_format(fmt)
    if not (speedup > 0 and math.isfinite(speedup)):
        raise UsageError(f"--speedup {speedup} must be a positive number")
    bs = block_size or DEFAULT_BLOCK_SIZE[fmt]
    base = options or PrefixOptions()
    opts = PrefixOptions(bs, base.use_measured, base.break_ttl_s, base.keep_source_ids)
    plan = derive(frame, opts)
    if fmt == "mooncake":
        out.parent.mkdir(parents=True, exist_ok=True)
        written = write_mooncake(frame, plan, out, speedup)
    elif fmt == "aiperf":
        out.parent.mkdir(parents=True, exist_ok=True)
        written = write_aiperf(frame, plan, out, speedup)
    else:
        written = write_kvcache_tester(frame, plan, out, speedup)
    manifest = _manifest(frame, plan, fmt, out, bs, speedup, source or {}, written)
    mpath = manifest_path(out)
    _atomic_write(mpath, orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
    manifest["manifest"] = str(mpath)
    return manifest


# ------------------------------------------------------------------------------------ helpers


def _selection_dict(selection: Selection | None) -> dict[str, Any]:
    if selection is None:
        return {}
    out: dict[str, Any] = {}
    for key in ("since", "until"):
        v = getattr(selection, key)
        if v is not None:
            out[key] = v.isoformat()
    for key in ("agents", "models", "sessions", "users", "sources"):
        v = getattr(selection, key)
        if v:
            out[key] = list(v)
    return out


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _times_ms(frame: pl.DataFrame, speedup: float) -> I64:
    t = np.asarray(frame["t_us"].to_numpy(), dtype=np.int64)
    rel = (t - int(t.min())) / 1000.0 / speedup
    out: I64 = np.rint(rel).astype(np.int64)
    return out


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


class _HitCounter:
    """Infinite-cache prefix hit tokens of requests fed in arrival order (first ``limit`` only)."""

    def __init__(self, plan: PrefixPlan, limit: int = STATS_MAX_REQUESTS) -> None:
        self.plan = plan
        self.limit = limit
        self.first_use = np.full(max(plan.next_id, 1), np.iinfo(np.int64).max, dtype=np.int64)
        self.requests = 0
        self.hit_tokens = 0
        self.tokens = 0
        self.request_ratio_sum = 0.0

    def add(self, start: int, offsets: I64, flat: I64) -> None:
        """Count requests ``start, start + 1, ...`` (call in arrival order)."""
        if start >= self.limit:
            return
        stop = min(start + len(offsets) - 1, self.limit)
        m = stop - start
        offsets = offsets[: m + 1]
        flat = flat[: int(offsets[-1])]
        counts = np.diff(offsets)
        pos = np.repeat(np.arange(start, stop, dtype=np.int64), counts)
        np.minimum.at(self.first_use, flat, pos)
        hit = self.first_use[flat] < pos
        big = np.iinfo(np.int64).max
        local = np.arange(len(flat), dtype=np.int64) - np.repeat(offsets[:-1], counts)
        miss_local = np.where(hit, big, local)
        first_miss = counts.copy()
        nz = counts > 0
        if nz.any():
            first_miss[nz] = np.minimum(np.minimum.reduceat(miss_local, offsets[:-1][nz]), counts[nz])
        ctx = self.plan.ctx[start:stop]
        hits = np.minimum(first_miss * self.plan.block_size, ctx)
        self.requests += m
        self.hit_tokens += int(hits.sum())
        self.tokens += int(ctx.sum())
        self.request_ratio_sum += float((hits / np.maximum(ctx, 1)).sum())

    def result(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "prefix_hit_ratio": self.hit_tokens / self.tokens if self.tokens else None,
            "request_mean_prefix_hit_ratio": self.request_ratio_sum / self.requests
            if self.requests
            else None,
        }


def _list_series(name: str, offsets: I64, flat: npt.NDArray[np.signedinteger[Any]]) -> pl.Series:
    import polars as pl
    import pyarrow as pa

    arr = pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), pa.array(flat))
    series = pl.from_arrow(arr)
    assert isinstance(series, pl.Series)
    return series.alias(name)


# ----------------------------------------------------------------------------------- mooncake


def _mooncake_chunk(plan: PrefixPlan, ts: I64, outp: I64, a: int, b: int) -> tuple[memoryview, int]:
    import io

    import polars as pl

    offsets, flat = plan.ids(a, b, np.int32 if plan.next_id < 2**31 else np.int64)
    chunk = pl.DataFrame(
        {"timestamp": ts[a:b], "input_length": plan.ctx[a:b], "output_length": outp[a:b]}
    ).with_columns(_list_series("hash_ids", offsets, flat))
    buf = io.BytesIO()
    chunk.write_ndjson(buf)
    return buf.getbuffer(), len(flat)


def write_mooncake(
    frame: pl.DataFrame, plan: PrefixPlan, out: Path, speedup: float, workers: int | None = None
) -> dict[str, Any]:
    """Flat Mooncake JSONL (arrival order); returns what the manifest reports about the file.

    Batches of requests are materialised and serialised by ``workers`` threads (numpy and polars
    release the GIL) and written in order; at most ``workers + 1`` batches are held at once.
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    ts = _times_ms(frame, speedup)
    outp = np.asarray(frame["out"].to_numpy(), dtype=np.int64)
    hits = _HitCounter(plan)
    n_ids = 0
    w = max(1, workers if workers is not None else min(4, os.cpu_count() or 1))
    bounds = [(a, min(a + CHUNK_REQUESTS, plan.n)) for a in range(0, plan.n, CHUNK_REQUESTS)]
    for a in range(0, min(plan.n, hits.limit), CHUNK_REQUESTS):  # statistics, in arrival order
        offsets, flat = plan.ids(a, min(a + CHUNK_REQUESTS, hits.limit, plan.n))
        hits.add(a, offsets, flat)
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "wb") as fh, ThreadPoolExecutor(max_workers=w) as pool:
        pending: list[Future[tuple[memoryview, int]]] = []
        for a, b in bounds:
            pending.append(pool.submit(_mooncake_chunk, plan, ts, outp, a, b))
            if len(pending) > w:
                data, k = pending.pop(0).result()
                fh.write(data)
                n_ids += k
        for fut in pending:
            data, k = fut.result()
            fh.write(data)
            n_ids += k
    os.replace(tmp, out)
    return {"rows": plan.n, "hash_ids": n_ids, "cache": hits.result()}


# -------------------------------------------------------------------------------------- aiperf


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
    ts = _times_ms(frame, 1.0)
    t_us = np.asarray(frame["t_us"].to_numpy(), dtype=np.int64)
    end_known = np.asarray(frame["end_us"].is_not_null().to_numpy(), dtype=bool)
    end_us = np.where(end_known, np.asarray(frame["end_us"].fill_null(0).to_numpy(), dtype=np.int64), t_us)
    outp = np.maximum(np.asarray(frame["out"].to_numpy(), dtype=np.int64), 1)
    ctx = plan.ctx
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = seg[1:] != seg[:-1]
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
    v_prev = np.empty_like(v)
    if n:
        v_prev[0] = 0
        v_prev[1:] = v[:-1]
    delta = np.where(first, c_o, v - v_prev + 1)
    replay_error = (v + p_i - c_o)[~first]
    names = _session_names(frame, order, seg, stream)
    next_id = plan.next_id
    rows_written = 0
    sessions = 0
    prev_end = np.empty(n, dtype=np.int64)
    prev_end[0] = 0
    prev_end[1:] = end_us[order][:-1]
    delay_ms = np.maximum((t_us[order] - prev_end) / 1000.0 / speedup, 0.0)
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
    tmp = out.with_name(f".{out.name}.tmp")
    dumps = orjson.dumps
    with open(tmp, "wb") as fh:
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
    os.replace(tmp, out)
    return {
        "rows": rows_written,
        "aiperf_sessions": sessions,
        "replayed_context_max_excess_tokens": int(replay_error.max()) if len(replay_error) else 0,
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
        src = np.repeat(off[:-1][local], c) + _seq(c)
        dst_rows = srt[a : a + CHUNK_REQUESTS]
        dst = np.repeat(offsets[:-1][dst_rows], c) + _seq(c)
        flat[dst] = fl[src]
    return offsets, flat


def _seq(counts: I64) -> I64:
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    out: I64 = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
    return out


# ------------------------------------------------------------------------------ kvcache-tester

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _json_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return [str(value)]
    return [str(v) for v in parsed] if isinstance(parsed, list) else [str(parsed)]


def _renumber(
    members: list[int],
    parent: list[Any],
    session: list[Any],
    t_us: list[Any],
    off: list[int],
    keep: list[int],
    flat: I64,
) -> dict[int, list[int]]:
    """Ids of one file's requests renumbered 1, 2, ... in order of first appearance in the file
    (parent requests in time order, each sub-agent's requests at its first request)."""
    main = [i for i in members if parent[i] is None]
    subs: dict[Any, list[int]] = {}
    for i in members:
        if parent[i] is not None:
            subs.setdefault(session[i], []).append(i)
    entries: list[tuple[int, int, list[int]]] = [(t_us[i], i, [i]) for i in main]
    entries += [(t_us[rows[0]], rows[0], rows) for rows in subs.values()]
    entries.sort(key=lambda e: (e[0], e[1]))
    rows = [i for _, _, rs in entries for i in rs]
    counts = np.array([keep[i] for i in rows], dtype=np.int64)
    starts = np.array([off[i] for i in rows], dtype=np.int64)
    ids = flat[np.repeat(starts, counts) + _seq(counts)]
    if len(ids):
        _, first_idx, inv = np.unique(ids, return_index=True, return_inverse=True)
        rank = np.empty(len(first_idx), dtype=np.int64)
        rank[np.argsort(first_idx, kind="stable")] = np.arange(1, len(first_idx) + 1)
        ids = rank[inv.ravel()]
    values = ids.tolist()
    out: dict[int, list[int]] = {}
    pos = 0
    for i, c in zip(rows, counts.tolist(), strict=True):
        out[i] = values[pos : pos + c]
        pos += c
    return out


def write_kvcache_tester(frame: pl.DataFrame, plan: PrefixPlan, out: Path, speedup: float) -> dict[str, Any]:
    """One kv-cache-tester JSON per root session in the directory ``out``."""
    import polars as pl

    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: the kvcache-tester export writes a directory, and this is a file")
    out.mkdir(parents=True, exist_ok=True)
    B = plan.block_size
    n = frame.height
    cols = set(frame.columns)
    offsets, flat = plan.ids(0, n)
    ctx = plan.ctx
    # floor rule: drop the partial tail block
    keep = np.minimum(np.diff(offsets), ctx // B)
    off = offsets.tolist()
    keep_l = keep.tolist()

    def col(name: str) -> list[Any]:
        return frame[name].to_list() if name in cols else [None] * n

    session = col("session_id")
    parent = col("parent_session_id")
    model = col("model")
    t_us = col("t_us")
    end_us = col("end_us")
    dur = col("duration_ms")
    ttft = col("ttft_ms")
    outp = col("out")
    think_attr = col("think_time_s")
    stop = col("stop")
    in_types = col("input_types")
    out_types = col("output_types")
    sub_type = col("subagent_type")
    req_type = col("request_type")
    agent_id = col("agent_id")
    roots: dict[str, list[int]] = {}
    skipped = 0
    for i in range(n):
        sid = session[i]
        if sid is None:
            skipped += 1
            continue
        roots.setdefault(parent[i] or sid, []).append(i)
    if not roots:
        raise UsageError(
            "the kvcache-tester format is one file per session, and none of the selected requests has "
            "a session id (flat traces such as Mooncake or Azure have none); use mooncake or aiperf"
        )
    used_names: set[str] = set()
    files = 0
    requests_written = 0
    subagents_written = 0

    def request(i: int, t0_us: int, prev_end: dict[str, int], ids: list[int]) -> dict[str, Any]:
        key = f"{session[i]}\x1f{model[i]}"
        think = think_attr[i]
        if think is not None:
            think_s: float | None = float(think) / speedup
        elif key in prev_end:
            think_s = max((t_us[i] - prev_end[key]) / 1e6, 0.0) / speedup
        else:
            think_s = 0.0
        prev_end[key] = end_us[i] if end_us[i] is not None else t_us[i]
        streamed = req_type[i] == "s" or (req_type[i] is None and ttft[i] is not None)
        rec: dict[str, Any] = {
            "t": round((t_us[i] - t0_us) / 1e6 / speedup, 3),
            "type": "s" if streamed else "n",
            "model": model[i] or "unknown",
            "in": int(ctx[i]),
            "out": int(outp[i]),
            "hash_ids": ids,
            "input_types": _json_list(in_types[i]),
            "output_types": _json_list(out_types[i]),
            "stop": stop[i] or "",
            "api_time": round(dur[i] / 1000.0, 3) if dur[i] is not None else None,
            "think_time": round(think_s, 3) if think_s is not None else None,
        }
        if streamed:
            rec["ttft"] = round(ttft[i] / 1000.0, 3) if ttft[i] is not None else None
        return rec

    for root, members in roots.items():
        file_ids = _renumber(members, parent, session, t_us, off, keep_l, flat)

        def renumber(i: int, file_ids: dict[int, list[int]] = file_ids) -> list[int]:
            return file_ids[i]

        t0 = min(t_us[i] for i in members)
        main = [i for i in members if parent[i] is None]
        subs: dict[str, list[int]] = {}
        for i in members:
            if parent[i] is not None:
                subs.setdefault(session[i], []).append(i)
        # entries in time order: parent requests and sub-agent blocks (at their first request)
        entries: list[tuple[int, int, str, Any]] = [(t_us[i], i, "n", i) for i in main]
        for sid, rows in subs.items():
            entries.append((t_us[rows[0]], rows[0], "subagent", sid))
        entries.sort(key=lambda e: (e[0], e[1]))
        prev_end: dict[str, int] = {}
        reqs: list[dict[str, Any]] = []
        models_main: list[str] = []
        tot = {"parent": [0, 0], "sub": [0, 0]}
        for _, _, what, ref in entries:
            if what == "n":
                i = int(ref)
                reqs.append(request(i, t0, prev_end, renumber(i)))
                tot["parent"][0] += int(ctx[i])
                tot["parent"][1] += int(outp[i])
                if (model[i] or "unknown") not in models_main:
                    models_main.append(model[i] or "unknown")
                continue
            rows = subs[str(ref)]
            st = t_us[rows[0]]
            sub_prev: dict[str, int] = {}
            inner = []
            for i in rows:
                rec = request(i, st, sub_prev, renumber(i))
                inner.append(rec)
                tot["sub"][0] += int(ctx[i])
                tot["sub"][1] += int(outp[i])
            last = rows[-1]
            end_last = end_us[last] if end_us[last] is not None else t_us[last]
            aid = agent_id[rows[0]] or str(ref)
            if aid.startswith(f"{root}/"):
                aid = aid[len(root) + 1 :]
            sub_models: list[str] = []
            for i in rows:
                if (model[i] or "unknown") not in sub_models:
                    sub_models.append(model[i] or "unknown")
            reqs.append(
                {
                    "t": round((st - t0) / 1e6 / speedup, 3),
                    "type": "subagent",
                    "agent_id": aid,
                    "subagent_type": sub_type[rows[0]] or "unknown",
                    "duration_ms": round((end_last - st) / 1000 / speedup),
                    "total_tokens": int(ctx[last]) + int(outp[last]),
                    "tool_use_count": sum(1 for i in rows if stop[i] == "tool_use"),
                    "status": "completed",
                    "requests": inner,
                    "models": sub_models,
                    "tool_tokens": 0,
                    "system_tokens": 0,
                }
            )
            subagents_written += 1
        doc = {
            "id": root,
            "models": models_main or ["unknown"],
            "block_size": B,
            "hash_id_scope": "local",
            "tool_tokens": 0,
            "system_tokens": 0,
            "totals": {
                "parent_tokens": {"input": tot["parent"][0], "output": tot["parent"][1]},
                "subagent_tokens": {"input": tot["sub"][0], "output": tot["sub"][1]},
                "combined_tokens": {
                    "input": tot["parent"][0] + tot["sub"][0],
                    "output": tot["parent"][1] + tot["sub"][1],
                },
                "subagent_count": len(subs),
            },
            "requests": reqs,
        }
        name = _UNSAFE.sub("_", root).strip("._") or "session"
        candidate = name
        k = 1
        while candidate in used_names:
            k += 1
            candidate = f"{name}-{k}"
        used_names.add(candidate)
        _atomic_write(out / f"{candidate}.json", orjson.dumps(doc))
        files += 1
        requests_written += len(members)
    del pl
    return {
        "files": files,
        "rows": requests_written,
        "subagents": subagents_written,
        "skipped_without_session": skipped,
    }


# ------------------------------------------------------------------------------------ manifest


def _dist(values: Any) -> dict[str, Any]:
    arr = np.asarray(values, dtype=np.float64)
    if not len(arr):
        return {}
    return {
        "mean": round(float(arr.mean()), 2),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
    }


def _manifest(
    frame: pl.DataFrame,
    plan: PrefixPlan,
    fmt: str,
    out: Path,
    block_size: int,
    speedup: float,
    source: Mapping[str, Any],
    written: Mapping[str, Any],
) -> dict[str, Any]:
    t = np.asarray(frame["t_us"].to_numpy(), dtype=np.int64)
    span_s = float(t.max() - t.min()) / 1e6 if len(t) else 0.0
    if "session_id" in frame.columns:
        sessions: int | None = frame["session_id"].drop_nulls().n_unique()
        roots: int | None = frame["parent_session_id"].fill_null(frame["session_id"]).drop_nulls().n_unique()
    else:  # a keys-only frame (flat export): streams are (session, model) pairs
        sessions = roots = None
    stats: dict[str, Any] = {
        "span_s": round(span_s, 3),
        "replay_span_s": round(span_s / speedup, 3),
        "requests_per_s": round(len(t) / span_s, 4) if span_s > 0 else None,
        "input_tokens": _dist(plan.ctx),
        "output_tokens": _dist(frame["out"].to_numpy()),
    }
    if "cache" in written:
        stats["infinite_cache"] = written["cache"]
    sources = frame["source"].value_counts(sort=True).rows() if "source" in frame.columns else []
    rel = out.name
    commands: dict[str, str] = {}
    if fmt in ("mooncake", "aiperf"):
        commands["aiperf"] = (
            f"aiperf profile --model MODEL --url URL --endpoint-type chat --streaming "
            f"--input-file {rel} --custom-dataset-type mooncake_trace --fixed-schedule "
            f"--isl-block-size {block_size} --tokenizer TOKENIZER"
        )
    if fmt == "mooncake":
        commands["vllm"] = (
            f"vllm bench serve --dataset-name timed_trace --dataset-path {rel} "
            f"--timed-trace-chunk-hash-size {block_size} --timed-trace-sec-multiplier 0.001"
        )
    if fmt == "kvcache-tester":
        commands["aiperf"] = (
            f"aiperf profile --model MODEL --url URL --endpoint-type chat --streaming "
            f"--input-file {rel} --custom-dataset-type weka_trace --tokenizer TOKENIZER"
        )
    return {
        "format": fmt,
        "output": rel,
        "traceflow_version": __version__,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "source": dict(source),
        "sources": {str(k): int(v) for k, v in sources},
        "block_size": block_size,
        "speedup": speedup,
        "counts": {
            "requests": plan.n,
            "sessions": sessions,
            "root_sessions": roots,
            **{k: v for k, v in written.items() if k != "cache"},
            **plan.stats,
            "unique_hash_ids_allocated": plan.next_id,
        },
        "statistics": stats,
        "hash_ids": {
            "rule": "floor(input/block) (partial tail not hashed)"
            if fmt == "kvcache-tester"
            else "ceil(input/block); a partial last block has its own id",
            "derivation": "source ids kept (re-blocked when the block size differs); other requests "
            "derived from token counts (traceflow.replay.prefix)",
        },
        "replay": commands,
    }
