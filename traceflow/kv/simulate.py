"""Trace-driven simulation of a KV-cache tier hierarchy (GPU → DRAM → SSD → ...). Pure: no store, no DuckDB.

Input is a :class:`~traceflow.kv.trace.BlockTrace`: requests in arrival order, each an ordered list of
prefix-block ids. Tiers are given in bytes and hold ``capacity // (B × kv_bytes_per_token)`` blocks; the
policies and the exclusive / inclusive hierarchy are described in :mod:`traceflow.kv.engines`.

A request's usable hit is its longest resident prefix (every engine in
docs/sizing-formulas.md#the-tier-model needs a contiguous prefix); tokens after the first missing
block are recomputed. So, per request,
``Σ_tiers hit_tokens + recomputed_tokens = input_tokens``.

TTFT model (per request, documented in :func:`traceflow.kv.sizing.ttft_seconds`)::

    load    = Σ_tiers hit_tokens × b / read_bw(tier) + latency(tier)   (+ per-session state from the
              tier of the last prefix block, for sliding-window / hybrid models)
    compute = recomputed_tokens / prefill_rate
    TTFT    = load + compute            (or max(load, compute) with overlap=True)

No queueing and no decode are modelled. A *resumed* request is one whose deepest previously seen
prefix block was last used ``resume_after_s`` (15 min) or more earlier.

:func:`sweep` gives hit ratio versus LRU capacity from one exact stack-distance pass
(:func:`traceflow.kv.lru.stack_distances`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from traceflow.errors import UsageError
from traceflow.kv.engines import Accesses, EngineOutput, fast_lru, reference_engine, ttl_engine
from traceflow.kv.geometry import KVSize
from traceflow.kv.lru import stack_distances
from traceflow.kv.sizing import DEFAULT_PREFILL_RATE, Tier
from traceflow.kv.trace import F64, I64, BlockTrace

POLICIES = ("lru", "prefix-lru", "ttl")


@dataclass(frozen=True)
class SimConfig:
    """A tier hierarchy and the models that turn hits into time."""

    tiers: tuple[Tier, ...]
    kv: KVSize
    policy: str = "lru"
    inclusive: bool = False
    promote: bool = True
    prefill_rate: float = DEFAULT_PREFILL_RATE
    overlap: bool = False
    resume_after_s: float = 900.0
    bucket_s: float = 60.0
    admit_orphans: bool = True
    ttl_s: float | None = None  # for tiers without their own ttl under the ttl policy
    engine: str = "auto"  # auto | reference

    def __post_init__(self) -> None:
        if not (self.prefill_rate > 0 and math.isfinite(self.prefill_rate)):
            raise UsageError(f"--prefill-rate {self.prefill_rate:g} must be a positive number of tokens/s")

    def block_bytes(self, block_size: int) -> int:
        return block_size * self.kv.per_token_bytes


@dataclass(frozen=True, eq=False)
class SimResult:
    """Per-request outcome (arrays) and the report (:meth:`as_dict`)."""

    config: SimConfig
    trace: BlockTrace
    output: EngineOutput
    hit_tokens: npt.NDArray[np.int64]  # (requests, tiers) usable prefix tokens from each tier
    hit_blocks: npt.NDArray[np.int64]  # (requests, tiers)
    recomputed_tokens: I64  # per request
    ttft_s: F64
    idle_s: F64  # per request: time since its deepest previously seen prefix block was used
    report: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return self.report


def _quantile(x: F64, q: float) -> float | None:
    return float(np.quantile(x, q)) if len(x) else None


def _capacities(tiers: Sequence[Tier], block_bytes: float) -> list[int]:
    return [t.capacity_blocks(block_bytes) for t in tiers]


def simulate(trace: BlockTrace, config: SimConfig, *, with_report: bool = True) -> SimResult:
    """Run ``trace`` through the tier hierarchy of ``config``. ``with_report=False`` leaves the report
    empty, for callers that build their own from the per-request arrays (a fleet's instances)."""
    if config.policy not in POLICIES:
        raise UsageError(f"--policy {config.policy!r}: choose one of {', '.join(POLICIES)}")
    if not config.tiers:
        raise UsageError("give at least one --tier, e.g. --tier gpu=80GB")
    if trace.n_requests == 0:
        raise UsageError("the trace has no requests")
    if config.kv.per_token_bytes <= 0:
        raise UsageError("the model has no KV bytes per token")
    block_bytes = config.block_bytes(trace.block_size)
    caps = _capacities(config.tiers, block_bytes)
    acc = Accesses.of(trace)
    tok = acc.tok
    if config.policy == "ttl":
        ttls = []
        for t in config.tiers:
            ttl = t.ttl_s if t.ttl_s is not None else config.ttl_s
            if ttl is None:
                raise UsageError(
                    f"--policy ttl needs a TTL for tier {t.name!r}: --ttl 5m or --tier {t.name}=SIZE:ttl=5m"
                )
            ttls.append(ttl)
        out = ttl_engine(acc, ttls, config.inclusive, config.bucket_s)
    elif config.policy == "lru" and config.promote and config.engine != "reference":
        out = fast_lru(acc, caps, config.inclusive, config.bucket_s)
    else:
        out = reference_engine(
            trace,
            caps,
            config.policy,
            config.inclusive,
            config.promote,
            config.bucket_s,
            config.admit_orphans,
            tok,
        )
    return _summarise(trace, config, out, acc.prev, tok, caps, with_report)


def _first_in_request(trace: BlockTrace, mask: npt.NDArray[np.bool_], req: I64, local: I64) -> I64:
    """Per request, the local index of the first access where ``mask`` holds (else its block count)."""
    first = trace.counts().copy()
    idx = np.flatnonzero(mask)
    if len(idx):
        r = req[idx]
        uniq, at = np.unique(r, return_index=True)
        first[uniq] = local[idx[at]]
    return first


def prefix_hits(
    trace: BlockTrace, served: I64, tiers: int, tok: I64
) -> tuple[I64, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The usable prefix of each request given the 1-based tier serving each access (0 = none): its
    length in blocks, and the tokens and blocks it takes from each tier (requests × ``tiers``)."""
    req = trace.request_of_block()
    local = trace.local_index()
    n_req = trace.n_requests
    first_miss = _first_in_request(trace, served == 0, req, local)
    usable = local < first_miss[req]
    hit_tokens = np.zeros((n_req, tiers), dtype=np.int64)
    hit_blocks = np.zeros((n_req, tiers), dtype=np.int64)
    for k in range(tiers):
        sel = usable & (served == k + 1)
        hit_tokens[:, k] = np.bincount(req[sel], weights=tok[sel], minlength=n_req).astype(np.int64)
        hit_blocks[:, k] = np.bincount(req[sel], minlength=n_req)
    return first_miss, hit_tokens, hit_blocks


def request_ttft(
    trace: BlockTrace,
    config: SimConfig,
    tiers: Sequence[Tier],
    served: I64,
    first_miss: I64,
    hit_tokens: npt.NDArray[np.int64],
    recomputed: I64,
) -> F64:
    """Per request, the TTFT of the module's model: ``hit_tokens`` (requests × ``tiers``) loaded at each
    tier's bandwidth and latency (plus per-session state from the tier of the last usable block,
    ``served`` being 1-based tiers per access), ``recomputed`` at the prefill rate."""
    m = len(tiers)
    b = config.kv.per_token_bytes
    bw = np.array([t.read_bytes_per_s for t in tiers], dtype=np.float64)
    lat = np.array([t.latency_s for t in tiers], dtype=np.float64)
    per_byte = np.where(np.isfinite(bw), 1.0 / np.where(np.isfinite(bw), bw, 1.0), 0.0)
    load = (hit_tokens * b) @ per_byte + (hit_tokens > 0) @ lat
    state = config.kv.per_session_bytes
    hit_any = first_miss > 0
    if state and hit_any.any():
        last_idx = trace.offsets[:-1] + np.maximum(first_miss - 1, 0)
        tier_of_last = served[np.minimum(last_idx, max(trace.n_blocks - 1, 0))] - 1
        load = load + np.where(hit_any, state * per_byte[np.clip(tier_of_last, 0, m - 1)], 0.0)
    compute = recomputed / config.prefill_rate
    ttft: F64 = np.maximum(load, compute) if config.overlap else load + compute
    return ttft


def _summarise(
    trace: BlockTrace,
    config: SimConfig,
    out: EngineOutput,
    prev: I64,
    tok: I64,
    caps: list[int],
    with_report: bool = True,
) -> SimResult:
    req = trace.request_of_block()
    local = trace.local_index()
    served = out.served.astype(np.int64)
    first_miss, hit_tokens, hit_blocks = prefix_hits(trace, served, len(config.tiers), tok)
    recomputed = trace.input_tokens - hit_tokens.sum(axis=1)
    ttft = request_ttft(trace, config, config.tiers, served, first_miss, hit_tokens, recomputed)
    # resumes: deepest previously seen block of the prefix, and when it was last used
    t_acc = trace.time_s[req]
    first_cold = _first_in_request(trace, prev < 0, req, local)
    idle = np.full(trace.n_requests, np.nan)
    seen = first_cold > 0
    deepest = trace.offsets[:-1][seen] + first_cold[seen] - 1
    idle[seen] = trace.time_s[seen] - t_acc[prev[deepest]]
    resumed = seen & (idle >= config.resume_after_s)
    report = (
        build_report(
            trace, config, out, caps, hit_tokens, hit_blocks, recomputed, ttft, idle, resumed, served, tok
        )
        if with_report
        else {}
    )
    return SimResult(config, trace, out, hit_tokens, hit_blocks, recomputed, ttft, idle, report)


def build_report(
    trace: BlockTrace,
    config: SimConfig,
    out: EngineOutput,
    caps: list[int],
    hit_tokens: npt.NDArray[np.int64],
    hit_blocks: npt.NDArray[np.int64],
    recomputed: I64,
    ttft: F64,
    idle: F64,
    resumed: npt.NDArray[np.bool_],
    served: I64,
    tok: I64,
) -> dict[str, Any]:
    """The report of :func:`simulate` from its per-request arrays and the engine's output (also what
    :mod:`traceflow.kv.fleet` builds from a fleet's merged arrays)."""
    b = config.kv.per_token_bytes
    block_bytes = config.block_bytes(trace.block_size)
    n_blocks = trace.n_blocks
    input_tokens = int(trace.input_tokens.sum())
    total_hit_blocks = int(hit_blocks.sum())
    total_hit_tokens = int(hit_tokens.sum())
    duration = float(trace.time_s[-1] - trace.time_s[0]) if trace.n_requests > 1 else 0.0
    tiers = []
    for k, t in enumerate(config.tiers):
        hb = int(hit_blocks[:, k].sum())
        ht = int(hit_tokens[:, k].sum())
        written = int(out.written_tokens[k])
        tiers.append(
            {
                "name": t.name,
                "kind": t.kind,
                "capacity_bytes": t.capacity_bytes if math.isfinite(t.capacity_bytes) else None,
                "capacity_blocks": caps[k] if math.isfinite(t.capacity_bytes) else None,
                "ttl_s": t.ttl_s
                if t.ttl_s is not None
                else (config.ttl_s if config.policy == "ttl" else None),
                "read_bytes_per_s": t.read_bytes_per_s if math.isfinite(t.read_bytes_per_s) else None,
                "hit_blocks": hb,
                "hit_tokens": ht,
                "hit_ratio": hb / n_blocks if n_blocks else 0.0,
                "token_hit_ratio": ht / input_tokens if input_tokens else 0.0,
                "object_hit_blocks": int((served == k + 1).sum()),
                "read_bytes": ht * b,
                "written_bytes": written * b,
                "write_bytes_per_s": written * b / duration if duration else None,
                "peak_resident_bytes": float(out.resident_blocks[:, k].max()) * block_bytes
                if len(out.resident_blocks)
                else 0.0,
                "mean_resident_bytes": float(out.resident_blocks[:, k].mean()) * block_bytes
                if len(out.resident_blocks)
                else 0.0,
            }
        )
    worst: dict[str, Any] | None = None
    if resumed.any():
        idx = np.flatnonzero(resumed)
        w = int(idx[np.argmax(ttft[idx])])
        worst = {
            "request": w,
            "session": trace.session[w] if trace.session is not None else None,
            # an instant (the lake's clock: relative traces count from 1970-01-01, as stored), and the
            # seconds since the trace's first request; never an epoch printed as a duration
            "at": dt.datetime.fromtimestamp(float(trace.time_s[w]), dt.UTC),
            "after_start_s": float(trace.time_s[w] - trace.time_s[0]),
            "idle_s": float(idle[w]),
            "input_tokens": int(trace.input_tokens[w]),
            "hit_tokens": {t.name: int(hit_tokens[w, k]) for k, t in enumerate(config.tiers)},
            "recomputed_tokens": int(recomputed[w]),
            "ttft_s": float(ttft[w]),
        }
    return {
        "model_kv_bytes_per_token": b,
        "per_session_bytes": config.kv.per_session_bytes,
        "block_size": trace.block_size,
        "block_bytes": block_bytes,
        "policy": config.policy,
        "inclusive": config.inclusive,
        "promote": config.promote,
        "engine": out.engine,
        "requests": trace.n_requests,
        "blocks": n_blocks,
        "duration_s": duration,
        "input_tokens": input_tokens,
        "hit_blocks": total_hit_blocks,
        "misses": n_blocks - total_hit_blocks,
        "hit_ratio": total_hit_blocks / n_blocks if n_blocks else 0.0,
        "hit_tokens": total_hit_tokens,
        "token_hit_ratio": total_hit_tokens / input_tokens if input_tokens else 0.0,
        "object_hit_blocks": int((served > 0).sum()),
        "recomputed_tokens": int(recomputed.sum()),
        "read_bytes": total_hit_tokens * b,
        "written_bytes": int(out.written_tokens.sum()) * b,
        "prefill_rate_tok_s": config.prefill_rate,
        "ttft_mean_s": float(ttft.mean()),
        "ttft_p50_s": _quantile(ttft, 0.5),
        "ttft_p99_s": _quantile(ttft, 0.99),
        "resumed_requests": int(resumed.sum()),
        "resume_after_s": config.resume_after_s,
        "resumed_ttft_p50_s": _quantile(ttft[resumed], 0.5),
        "worst_resumed": worst,
        "tiers": tiers,
        "per_minute": _per_bucket(trace, config, out, hit_tokens, recomputed, ttft),
    }


def _per_bucket(
    trace: BlockTrace,
    config: SimConfig,
    out: EngineOutput,
    hit_tokens: npt.NDArray[np.int64],
    recomputed: I64,
    ttft: F64,
) -> list[dict[str, Any]]:
    t0 = float(trace.time_s[0])
    bucket = ((trace.time_s - t0) // config.bucket_s).astype(np.int64)
    nb = int(bucket[-1]) + 1
    block_bytes = config.block_bytes(trace.block_size)
    reqs = np.bincount(bucket, minlength=nb)
    inp = np.bincount(bucket, weights=trace.input_tokens, minlength=nb)
    rec = np.bincount(bucket, weights=recomputed, minlength=nb)
    busy = np.bincount(bucket, weights=ttft, minlength=nb)
    hits = [np.bincount(bucket, weights=hit_tokens[:, k], minlength=nb) for k in range(len(config.tiers))]
    order = np.lexsort((ttft, bucket))
    starts = np.concatenate(([0], np.cumsum(reqs)))
    rows = []
    for i in range(nb):
        row: dict[str, Any] = {
            "minute": i,
            "start_s": i * config.bucket_s,
            "requests": int(reqs[i]),
            "input_tokens": int(inp[i]),
            "token_hit_ratio": float(1 - rec[i] / inp[i]) if inp[i] else None,
            "recomputed_tokens": int(rec[i]),
        }
        for k, t in enumerate(config.tiers):
            row[f"{t.name}_hit_tokens"] = int(hits[k][i])
        for k, t in enumerate(config.tiers):
            row[f"{t.name}_resident_bytes"] = float(out.resident_blocks[i, k]) * block_bytes
        if reqs[i]:
            seg = ttft[order[starts[i] : starts[i + 1]]]
            row["ttft_p50_s"] = float(seg[(len(seg) - 1) // 2])
            row["ttft_p99_s"] = float(seg[min(len(seg) - 1, math.ceil(0.99 * len(seg)) - 1)])
        else:
            row["ttft_p50_s"] = row["ttft_p99_s"] = None
        row["prefill_throughput_tok_s"] = float(inp[i] / busy[i]) if busy[i] > 0 else None
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------- sweep


def default_capacities(distinct_blocks: int, points: int = 24) -> list[int]:
    """Log-spaced capacities from 1 block to every distinct block."""
    if distinct_blocks <= 1:
        return [1]
    grid = np.unique(np.round(np.geomspace(1, distinct_blocks, points)).astype(np.int64))
    return [int(x) for x in grid]


def capacity_for_share(trace: BlockTrace, share: float) -> tuple[int, float]:
    """The smallest LRU capacity (blocks) whose prefix hits reach ``share`` of an unbounded cache's,
    and that unbounded prefix hit ratio (blocks), from the stack distances as :func:`sweep` counts them.

    >>> from traceflow.kv.trace import BlockTrace
    >>> t = BlockTrace(np.zeros(4), np.array([2, 2, 1, 2]), np.array([0, 2, 4, 5, 7]),
    ...                np.array([1, 2, 1, 2, 3, 1, 2]), 1)
    >>> capacity_for_share(t, 1.0)
    (3, 0.5714285714285714)
    """
    n = trace.n_blocks
    if not n:
        return 0, 0.0
    d = np.minimum(stack_distances(trace.blocks), n + 1)
    req = trace.request_of_block()
    big = np.int64(n + 2)
    run = np.maximum.accumulate(d + req * big) - req * big
    usable = np.sort(run[run <= n])
    if not len(usable):
        return 0, 0.0
    k = max(1, math.ceil(share * len(usable) - 1e-9))
    return int(usable[k - 1]), len(usable) / n


def sweep(
    trace: BlockTrace, capacities: Sequence[int] | None = None, block_bytes: int = 0
) -> list[dict[str, Any]]:
    """Hit ratio versus LRU capacity (blocks) from one exact stack-distance pass.

    ``hit_ratio`` counts every block found (libCacheSim's object hits); ``prefix_hit_ratio`` and
    ``token_hit_ratio`` count only each request's leading run of hits, as a prefix cache can use.
    Exclusive LRU tiers of capacities ``C1, C2, ...`` hit what one LRU of ``C1 + C2 + ...`` hits.
    """
    n = trace.n_blocks
    d = np.minimum(stack_distances(trace.blocks), n + 1)  # n + 1: a first access
    tok = trace.block_tokens()
    req = trace.request_of_block()
    # running maximum of the distance inside each request: a block is usable iff all before it hit
    big = np.int64(trace.n_blocks + 2)
    run = np.maximum.accumulate(d + req * big) - req * big
    distinct = int((d == n + 1).sum())
    caps = list(capacities) if capacities else default_capacities(distinct)
    d_sorted = np.sort(d)
    order = np.argsort(run, kind="stable")
    run_sorted = run[order]
    tok_cum = np.concatenate(([0], np.cumsum(tok[order])))
    total_tokens = int(trace.input_tokens.sum())
    rows = []
    for c in caps:
        hits = int(np.searchsorted(d_sorted, min(c, n), side="right"))
        usable = int(np.searchsorted(run_sorted, min(c, n), side="right"))
        rows.append(
            {
                "capacity_blocks": int(c),
                "capacity_bytes": int(c) * block_bytes if block_bytes else None,
                "hit_blocks": hits,
                "hit_ratio": hits / n if n else 0.0,
                "prefix_hit_blocks": usable,
                "prefix_hit_ratio": usable / n if n else 0.0,
                "token_hit_ratio": int(tok_cum[usable]) / total_tokens if total_tokens else 0.0,
            }
        )
    return rows
