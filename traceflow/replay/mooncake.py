"""The ``mooncake`` export: flat Mooncake JSONL, one request a line, in arrival order.

``{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]}``. ``timestamp`` is
integer milliseconds from the first request (divided by ``--speedup``), ``input_length`` the full
context, ``hash_ids`` prefix-block ids (:mod:`traceflow.replay.prefix`, ``len == ceil(N / block)``).
Replays with AIPerf (``--custom-dataset-type mooncake_trace --fixed-schedule``), vLLM
``timed_trace`` (``--timed-trace-chunk-hash-size 512 --timed-trace-sec-multiplier 0.001``),
SGLang's mooncake loader and the Dynamo/AIPerf analyzers.

The manifest's ``statistics.infinite_cache`` (the prefix hit ratio with an unbounded cache) is
counted here, on the first :data:`STATS_MAX_REQUESTS` requests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from traceflow.replay.writing import CHUNK_REQUESTS, atomic_file, times_ms

if TYPE_CHECKING:
    import polars as pl

    from traceflow.replay.arrays import I64
    from traceflow.replay.hash_ids import PrefixPlan

#: Hit-ratio statistics in the manifest cover at most this many requests (the first ones).
STATS_MAX_REQUESTS = 200_000


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

    ts = times_ms(frame, speedup)
    outp = np.asarray(frame["out"].to_numpy(), dtype=np.int64)
    n_ids = 0
    w = max(1, workers if workers is not None else min(4, os.cpu_count() or 1))
    bounds = [(a, min(a + CHUNK_REQUESTS, plan.n)) for a in range(0, plan.n, CHUNK_REQUESTS)]
    with atomic_file(out) as fh, ThreadPoolExecutor(max_workers=w) as pool:
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
    return {"rows": plan.n, "hash_ids": n_ids, "cache": infinite_cache(plan)}


def infinite_cache(plan: PrefixPlan) -> dict[str, Any]:
    """The prefix hit ratio of the plan's requests with an unbounded cache (arrival order, the first
    :data:`STATS_MAX_REQUESTS`): the manifest's ``statistics.infinite_cache`` for every format."""
    hits = _HitCounter(plan)
    for a in range(0, min(plan.n, hits.limit), CHUNK_REQUESTS):
        offsets, flat = plan.ids(a, min(a + CHUNK_REQUESTS, hits.limit, plan.n))
        hits.add(a, offsets, flat)
    return hits.result()


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
