"""Fleet simulation: a :class:`~traceflow.kv.trace.BlockTrace` routed over ``N`` serving instances, each
with its own tier hierarchy (:mod:`traceflow.kv.simulate`), and an optional object tier they share.
Pure: no store, no DuckDB; where the instances run is the caller's ``mapper`` (serial, processes,
Spark tasks through :func:`traceflow.engines.spark.map_tasks`), and every mapper gives the same numbers.

Routing (:func:`route`, one serial pass in time order)
  ``session-hash``  instance = BLAKE2b-64 of the session id, mod ``N`` (stable across runs and
                    machines); a request without a session hashes its root block id instead
                    (``"block:<id>"``; ``""`` when it has no blocks).
  ``prefix``        prefix affinity (KV-aware routing as in llm-d, NVIDIA Dynamo, the SGLang router):
                    each block remembers the instance it was last routed to; a request goes to the
                    instance of the deepest block of its longest remembered prefix (blocks 0..k-1 all
                    remembered, instance of block k-1). When no block of its prefix is remembered
                    (k = 0) it goes to the least-loaded instance: fewest input tokens routed so far,
                    ties to the lowest index. Then all its blocks remember its instance. There is no
                    load cap: a prefix every session shares (a common system prompt) sends everything
                    to one instance, which ``imbalance`` shows. Compiled by numba where it is
                    installed (:func:`traceflow.kv.lru_jit.route_prefix`; ``TRACEFLOW_NATIVE=0``
                    runs the same rule in Python).

Instances
  Instance ``i`` replays its requests (global order kept) through the full ``--tier`` list of the
  config: the tiers are per instance. Its trace is padded with an empty request at the fleet's first
  and last times, so every instance runs over the fleet's time span and buckets (residency per
  minute adds up across instances); an empty request touches nothing and is dropped afterwards.

Shared tier (optional; LMCache-style remote store below every instance's own tiers)
  One LRU store of ``shared.capacity_bytes`` over the fleet. Each block an instance's own tiers do
  not hold when its request arrives (private ``served == 0``) is looked up there, in global time
  order: a hit refreshes it, a miss writes it (the KV an instance computes is stored, write-on-compute;
  private evictions are not written again). A request's usable prefix is then the longest prefix of
  blocks that some tier holds (its own tiers first, else the shared one), as in :mod:`simulate`;
  the shared tier's hits load at its bandwidth and latency in the TTFT model. With a shared tier of
  size 0 nothing changes. TTL policies are not modelled for the shared store.

Report (:func:`simulate_fleet`)
  The keys of :func:`traceflow.kv.simulate.simulate`'s report computed over all requests from the
  per-request arrays merged by global index (ratios are never averaged); tier rows are fleet totals
  (``capacity_bytes`` = ``N`` × the per-instance size, ``scope`` per-instance; the shared tier last,
  ``scope`` shared); plus ``instances``, ``router``, ``shared_tier``, ``imbalance`` (max / mean input
  tokens routed per instance) and ``per_instance`` rows.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from traceflow import native
from traceflow.errors import UsageError
from traceflow.kv.engines import Accesses, EngineOutput, fast_lru
from traceflow.kv.simulate import SimConfig, build_report, prefix_hits, request_ttft, simulate
from traceflow.kv.sizing import Tier
from traceflow.kv.trace import F64, I64, BlockTrace

ROUTERS = ("session-hash", "prefix")

#: One instance's input: its padded trace and the config.
Task = tuple[BlockTrace, SimConfig]


@dataclass(frozen=True, eq=False)
class InstanceResult:
    """What one instance's simulation sends back (per request and per access of its own trace)."""

    served: npt.NDArray[np.int8]  # per access: 1-based private tier, 0 = none
    written_tokens: I64  # per tier
    resident_blocks: F64  # (buckets, tiers)
    engine: str
    hit_tokens: npt.NDArray[np.int64]  # (requests, tiers)
    hit_blocks: npt.NDArray[np.int64]
    recomputed: I64
    ttft: F64
    idle: F64


#: Runs ``fn`` over ``items`` and returns the results in order (serial, processes, Spark tasks).
Mapper = Callable[[Callable[[Task], InstanceResult], Sequence[Task]], list[InstanceResult]]


def serial_map(fn: Callable[[Task], InstanceResult], items: Sequence[Task]) -> list[InstanceResult]:
    return [fn(x) for x in items]


def process_map(jobs: int | None = None) -> Mapper:
    """A mapper over a process pool of ``jobs`` workers (default: one per instance, at most the CPUs)."""

    def run(fn: Callable[[Task], InstanceResult], items: Sequence[Task]) -> list[InstanceResult]:
        workers = jobs or min(len(items), os.cpu_count() or 1)
        if workers <= 1 or len(items) <= 1:
            return serial_map(fn, items)
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(fn, items))

    return run


def stable_hash(key: str) -> int:
    """A 64-bit hash of ``key`` that is the same in every process and on every machine.

    >>> stable_hash("s1") % 4  # session s1's instance in a fleet of 4, on any machine
    1
    """
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def check_fleet(instances: int, router: str) -> None:
    """A usage error unless ``instances`` ≥ 1 and ``router`` is one of :data:`ROUTERS`."""
    if instances < 1:
        raise UsageError(f"--instances {instances}: give at least 1 instance (1 = no fleet)")
    if router not in ROUTERS:
        raise UsageError(f"--router {router!r}: choose one of {', '.join(ROUTERS)}")


def route(trace: BlockTrace, instances: int, router: str = "session-hash") -> I64:
    """The instance (0..``instances``-1) of each request; the rules are in the module docstring."""
    check_fleet(instances, router)
    n = trace.n_requests
    out = np.zeros(n, dtype=np.int64)
    if instances == 1:
        return out
    if router == "prefix" and native.jit_enabled():
        from traceflow.kv import lru_jit

        dense, n_ids = _dense_ids(trace.blocks)
        routed: I64 = lru_jit.route_prefix(
            trace.offsets.astype(np.int64), dense, trace.input_tokens.astype(np.int64), instances, n_ids
        )
        return routed
    offs = trace.offsets.tolist()
    blocks = trace.blocks.tolist()
    if router == "session-hash":
        cache: dict[str, int] = {}
        for r in range(n):
            s = trace.session[r] if trace.session is not None else ""
            key = s or (f"block:{blocks[offs[r]]}" if offs[r + 1] > offs[r] else "")
            if key not in cache:
                cache[key] = stable_hash(key) % instances
            out[r] = cache[key]
        return out
    owner: dict[int, int] = {}
    load = [0] * instances
    tokens = trace.input_tokens.tolist()
    for r in range(n):
        bl = blocks[offs[r] : offs[r + 1]]
        k = 0
        while k < len(bl) and bl[k] in owner:
            k += 1
        i = owner[bl[k - 1]] if k else min(range(instances), key=lambda j: (load[j], j))
        for b in bl:
            owner[b] = i
        load[i] += tokens[r]
        out[r] = i
    return out


def _dense_ids(blocks: I64) -> tuple[I64, int]:
    """Block ids as indices ``0..n-1`` of an array: as they are where they already are small
    non-negative numbers (the synthetic and lake traces), else relabelled in sorted order."""
    if len(blocks) == 0:
        return blocks.astype(np.int64), 0
    lo, hi = int(blocks.min()), int(blocks.max())
    if lo >= 0 and hi < 4 * len(blocks) + 1024:
        return blocks.astype(np.int64), hi + 1
    ids, dense = np.unique(blocks, return_inverse=True)
    return dense.astype(np.int64), len(ids)


def _part(trace: BlockTrace, idx: I64, pos: I64) -> BlockTrace:
    """Requests ``idx`` of ``trace`` (their accesses at ``pos``, :func:`_positions`) between two empty
    requests at the trace's first and last times."""
    counts = trace.counts()[idx]
    offsets = np.concatenate(([0, 0], np.cumsum(counts), [int(counts.sum())])).astype(np.int64)
    t = trace.time_s
    session = ("", *(trace.session[i] for i in idx.tolist()), "") if trace.session is not None else None
    return BlockTrace(
        np.concatenate(([t[0]], t[idx], [t[-1]])),
        np.concatenate(([0], trace.input_tokens[idx], [0])).astype(np.int64),
        offsets,
        trace.blocks[pos],
        trace.block_size,
        session,
    )


def _positions(trace: BlockTrace, idx: I64) -> I64:
    """The global access positions of requests ``idx``, in order."""
    counts = trace.counts()[idx]
    starts = trace.offsets[:-1][idx]
    local0 = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    out: I64 = np.repeat(starts - local0, counts) + np.arange(int(counts.sum()), dtype=np.int64)
    return out


def run_instance(task: Task) -> InstanceResult:
    """Simulate one instance (module level, so processes and Spark tasks can pickle it)."""
    part, config = task
    res = simulate(part, config, with_report=False)  # the fleet reports once, over all requests
    inner = slice(1, part.n_requests - 1)
    return InstanceResult(
        res.output.served,
        res.output.written_tokens,
        res.output.resident_blocks,
        res.output.engine,
        res.hit_tokens[inner],
        res.hit_blocks[inner],
        res.recomputed_tokens[inner],
        res.ttft_s[inner],
        res.idle_s[inner],
    )


@dataclass(frozen=True, eq=False)
class FleetResult:
    """Per-request outcome over the whole trace (global order) and the report (:meth:`as_dict`)."""

    assignment: I64  # per request: its instance
    hit_tokens: npt.NDArray[np.int64]  # (requests, tiers [+ shared])
    recomputed_tokens: I64
    ttft_s: F64
    report: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return self.report


def simulate_fleet(
    trace: BlockTrace,
    config: SimConfig,
    instances: int = 1,
    router: str = "session-hash",
    shared: Tier | None = None,
    mapper: Mapper | None = None,
) -> FleetResult:
    """Route ``trace`` over ``instances`` copies of ``config``'s hierarchy, simulate each (through
    ``mapper``, default in-process), add the ``shared`` tier, and merge (module docstring)."""
    if trace.n_requests == 0:
        raise UsageError("the trace has no requests")
    if shared is not None:
        if shared.ttl_s is not None:
            raise UsageError("--shared-tier is an LRU store: drop its :ttl= option")
        if shared.name in {t.name for t in config.tiers}:
            raise UsageError(f"--shared-tier {shared.name!r}: give it a name no --tier uses")
    assign = route(trace, instances, router)
    groups = [np.flatnonzero(assign == i) for i in range(instances)]
    positions = [_positions(trace, g) for g in groups]
    tasks = [(_part(trace, g, pos), config) for g, pos in zip(groups, positions, strict=True)]
    results = (mapper or serial_map)(run_instance, tasks)
    m = len(config.tiers)
    n = trace.n_requests
    served = np.zeros(trace.n_blocks, dtype=np.int64)
    hit_tokens = np.zeros((n, m), dtype=np.int64)
    hit_blocks = np.zeros((n, m), dtype=np.int64)
    recomputed = np.zeros(n, dtype=np.int64)
    ttft = np.zeros(n, dtype=np.float64)
    idle = np.full(n, np.nan)
    for g, pos, res in zip(groups, positions, results, strict=True):
        served[pos] = res.served
        hit_tokens[g], hit_blocks[g], recomputed[g] = res.hit_tokens, res.hit_blocks, res.recomputed
        ttft[g], idle[g] = res.ttft, res.idle
    written = np.sum([r.written_tokens for r in results], axis=0).astype(np.int64)
    resident = np.sum([r.resident_blocks for r in results], axis=0)
    block_bytes = config.block_bytes(trace.block_size)
    caps = [t.capacity_blocks(block_bytes) for t in config.tiers]
    tok = trace.block_tokens()
    tiers: tuple[Tier, ...] = config.tiers
    if shared is not None:
        cap = shared.capacity_blocks(block_bytes)
        miss = np.flatnonzero(served == 0)
        counts = np.bincount(trace.request_of_block()[miss], minlength=n)
        stream = BlockTrace(
            trace.time_s,
            np.zeros(n, dtype=np.int64),
            np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            trace.blocks[miss],
            trace.block_size,
        )
        out_s = fast_lru(Accesses.of(stream, tokens=tok[miss]), [cap], False, config.bucket_s)
        served[miss[out_s.served == 1]] = m + 1
        first_miss, hit_tokens, hit_blocks = prefix_hits(trace, served, m + 1, tok)
        tiers = (*config.tiers, shared)
        # a shared hit only lengthens usable prefixes: a request changed iff it recomputes less
        new_recomputed = trace.input_tokens - hit_tokens.sum(axis=1)
        changed = new_recomputed != recomputed
        recomputed = new_recomputed
        new_ttft = request_ttft(trace, config, tiers, served, first_miss, hit_tokens, recomputed)
        ttft = np.where(changed, new_ttft, ttft)
        written = np.append(written, out_s.written_tokens)
        resident = np.concatenate([resident, out_s.resident_blocks], axis=1)
        caps.append(cap)
    rconfig = replace(config, tiers=tiers)
    out = EngineOutput(served.astype(np.int8), written, resident, results[0].engine)
    resumed = ~np.isnan(idle) & (np.nan_to_num(idle, nan=-1.0) >= config.resume_after_s)
    report = build_report(
        trace, rconfig, out, caps, hit_tokens, hit_blocks, recomputed, ttft, idle, resumed, served, tok
    )
    for k, row in enumerate(report["tiers"]):
        own = k < m
        row["scope"] = "per-instance" if own else "shared"
        if own and row["capacity_bytes"] is not None:
            row["capacity_bytes"] *= instances
            row["capacity_blocks"] *= instances
    per_instance = _per_instance(trace, groups, results, hit_tokens, recomputed, ttft, block_bytes, m)
    routed = np.array([r["input_tokens"] for r in per_instance], dtype=np.float64)
    report = {
        **report,
        "instances": instances,
        "router": router,
        "shared_tier": shared.name if shared is not None else None,
        "imbalance": float(routed.max() / routed.mean()) if routed.mean() > 0 else None,
        "per_instance": per_instance,
    }
    return FleetResult(assign, hit_tokens, recomputed, ttft, report)


def _per_instance(
    trace: BlockTrace,
    groups: list[I64],
    results: list[InstanceResult],
    hit_tokens: npt.NDArray[np.int64],
    recomputed: I64,
    ttft: F64,
    block_bytes: int,
    m: int,
) -> list[dict[str, Any]]:
    rows = []
    for i, (g, res) in enumerate(zip(groups, results, strict=True)):
        inp = int(trace.input_tokens[g].sum())
        hits = int(hit_tokens[g].sum())
        resident = res.resident_blocks.sum(axis=1) if len(res.resident_blocks) else np.zeros(1)
        row: dict[str, Any] = {
            "instance": i,
            "requests": len(g),
            "sessions": len({trace.session[r] for r in g.tolist()}) if trace.session is not None else None,
            "input_tokens": inp,
            "hit_tokens": hits,
            "token_hit_ratio": hits / inp if inp else 0.0,
            "recomputed_tokens": int(recomputed[g].sum()),
            "ttft_p50_s": float(np.quantile(ttft[g], 0.5)) if len(g) else None,
            "ttft_p99_s": float(np.quantile(ttft[g], 0.99)) if len(g) else None,
            "peak_resident_bytes": float(resident.max()) * block_bytes,
            "written_bytes": int(res.written_tokens.sum()) * (block_bytes // trace.block_size),
        }
        if hit_tokens.shape[1] > m:
            row["shared_hit_tokens"] = int(hit_tokens[g, m].sum())
        rows.append(row)
    return rows
