#!/usr/bin/env python3
"""Side-by-side benchmark: traceflow's LRU cache simulation vs libCacheSim's LRU on the same block trace.

Two block-access traces, each replayed by both simulators in one run:

a. the public Mooncake conversation trace expanded to its 512-token blocks (288,500 accesses);
b. a seeded synthetic agentic-coding trace (``traceflow.kv.synthetic.agentic_coding_trace``,
docs/replay.md#the-reference-agentic-coding-workload,
   more sessions per minute and a longer run) of at least 100 million block accesses.

For each capacity: libCacheSim 0.3.5 ``LRU(cache_size=C, hashpower=H).process_trace(TraceReader(file))``
on the trace written as an ``oracleGeneral`` binary file (object id = block id, size 1), and traceflow's
``lru_hits(blocks, C)`` on the same ids as an int64 array (its numba kernel, compiled or loaded from
numba's cache by one warm-up call timed apart, like libCacheSim's import; with ``TRACEFLOW_NATIVE=0``
the numpy path, its one sort included). Throughput is block
accesses per second of the replay; libCacheSim's time to write its trace file is reported apart. ``H`` is
the smallest power of two above the number of distinct blocks (libCacheSim's default, 2^24, costs ~1 s
of start-up on a small trace). The hit counts must be identical; the script exits 1 otherwise.

Then the other modes' throughput: exclusive three-tier LRU (one reuse pass, three eviction pointers),
the full ``simulate()`` report (per-request prefixes, TTFT, per-minute), ``prefix-lru`` (tail-first
eviction, OrderedDict engine), the explicit per-block LRU engine, and the ``--sweep`` stack-distance pass.

Usage::

    python benchmarks/bench_simulate.py --work /tmp/tfbench/sim --out /tmp/tfbench/sim/results.json
    python benchmarks/bench_simulate.py --hours 1 --quick      # a small synthetic trace, a smoke run
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libcachesim
import numpy as np

from traceflow import native
from traceflow.kv import simulate as sim
from traceflow.kv.engines import Accesses, fast_lru
from traceflow.kv.geometry import KVSize
from traceflow.kv.lru import lru_hits, prev_next
from traceflow.kv.sizing import Tier
from traceflow.kv.synthetic import agentic_coding_trace
from traceflow.kv.trace import BlockTrace, read_mooncake

REPO = Path(__file__).resolve().parents[1]
#: Stored gzip-compressed with the tests (tests/data/SOURCES.md); --mooncake also takes plain JSONL.
MOONCAKE = REPO / "tests" / "data" / "mooncake_conversation_trace.jsonl.gz"
ORACLE = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


def write_oracle(blocks: np.ndarray, path: Path) -> float:
    """Write the block trace as libCacheSim's oracleGeneral binary; return the seconds it took."""
    start = time.perf_counter()
    step = 10_000_000
    with path.open("wb") as f:
        for lo in range(0, len(blocks), step):
            chunk = blocks[lo : lo + step]
            rec = np.zeros(len(chunk), dtype=ORACLE)
            rec["t"] = (np.arange(lo, lo + len(chunk)) // 1000).astype(np.uint32)
            rec["id"] = chunk
            rec["size"] = 1
            rec["next"] = -1
            rec.tofile(f)
    return time.perf_counter() - start


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """Median wall seconds over ``runs`` calls, and the last result."""
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def lcs_hits(path: Path, n: int, capacity: int, hashpower: int) -> int:
    reader = libcachesim.TraceReader(str(path), libcachesim.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = libcachesim.LRU(cache_size=capacity, hashpower=hashpower).process_trace(reader)
    return round((1 - float(miss_ratio)) * n)


def compare(
    name: str, blocks: np.ndarray, capacities: list[int], work: Path, runs: int
) -> list[dict[str, Any]]:
    path = work / f"{name}.oracleGeneral"
    write_s = write_oracle(blocks, path)
    n = len(blocks)
    distinct = len(np.unique(blocks))
    hashpower = max(16, math.ceil(math.log2(distinct + 1)) + 1)
    rows = []
    for cap in capacities:
        lcs_s, theirs = timed(functools.partial(lcs_hits, path, n, cap, hashpower), runs)
        ours_s, ours = timed(functools.partial(lru_hits, blocks, cap), runs)
        row = {
            "trace": name,
            "accesses": n,
            "distinct_blocks": distinct,
            "capacity_blocks": cap,
            "hits_traceflow": ours,
            "hits_libcachesim": theirs,
            "identical": ours == theirs,
            "hit_ratio": ours / n,
            "traceflow_s": ours_s,
            "libcachesim_s": lcs_s,
            "libcachesim_trace_write_s": write_s,
            "libcachesim_hashpower": hashpower,
            "traceflow_accesses_per_s": n / ours_s,
            "libcachesim_accesses_per_s": n / lcs_s,
            "speedup": lcs_s / ours_s,
        }
        rows.append(row)
        print(
            f"{name:>10} C={cap:>9,}  hits {ours:>12,} vs {theirs:>12,}  "
            f"traceflow {n / ours_s / 1e6:6.2f} M/s  "
            f"libCacheSim {n / lcs_s / 1e6:6.2f} M/s  x{lcs_s / ours_s:.2f}",
            flush=True,
        )
    path.unlink()
    return rows


def modes(name: str, trace: BlockTrace, caps: list[int], runs: int, slow_blocks: int) -> list[dict[str, Any]]:
    """Throughput of the other simulation modes on one trace (slow engines on a prefix of it)."""
    kv = KVSize(per_token_bytes=1)
    tiers = tuple(Tier(f"t{i}", c * trace.block_size, "dram", 20e9) for i, c in enumerate(caps))
    out = []

    def add(mode: str, t: BlockTrace, seconds: float, hits: int | None) -> None:
        out.append(
            {
                "trace": name,
                "mode": mode,
                "accesses": t.n_blocks,
                "seconds": seconds,
                "accesses_per_s": t.n_blocks / seconds,
                "hit_blocks": hits,
            }
        )
        print(
            f"{name:>10} {mode:<42} {t.n_blocks:>12,} accesses  {t.n_blocks / seconds / 1e6:6.2f} M/s",
            flush=True,
        )

    def core() -> int:
        links = prev_next(trace.blocks)
        served = fast_lru(Accesses.of(trace, links), caps, False, 60.0).served
        return int((served > 0).sum())

    s, hits = timed(core, runs)
    add(f"lru, {len(caps)} exclusive tiers (hits per tier)", trace, s, hits)
    s, rep = timed(lambda: sim.simulate(trace, sim.SimConfig(tiers, kv)).as_dict(), 1)
    add(f"lru, {len(caps)} tiers, full simulate() report", trace, s, rep["hit_blocks"])
    del rep
    r = int(np.searchsorted(trace.offsets, slow_blocks)) if trace.n_blocks > slow_blocks else trace.n_requests
    part = trace.head(r)
    tag = "" if part.n_blocks == trace.n_blocks else f" (first {part.n_blocks:,} accesses)"
    s, rep = timed(lambda: sim.simulate(part, sim.SimConfig(tiers, kv, policy="prefix-lru")).as_dict(), 1)
    add(f"prefix-lru, {len(caps)} tiers{tag}", part, s, rep["hit_blocks"])
    s, rep = timed(lambda: sim.simulate(part, sim.SimConfig(tiers, kv, engine="reference")).as_dict(), 1)
    add(f"lru reference engine (OrderedDict){tag}", part, s, rep["hit_blocks"])
    s, rows = timed(lambda: sim.sweep(part, None, 0), 1)
    add(f"--sweep: stack distances, {len(rows)} points{tag}", part, s, None)
    return out


def markdown(rows: list[dict[str, Any]], mode_rows: list[dict[str, Any]]) -> str:
    lines = [
        "| trace | accesses | capacity (blocks) | hit ratio | hits identical | traceflow M acc/s "
        "| libCacheSim M acc/s | traceflow / libCacheSim |",
        "|---|---:|---:|---:|:---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['trace']} | {r['accesses']:,} | {r['capacity_blocks']:,} | {r['hit_ratio']:.4f} "
            f"| {'yes' if r['identical'] else '**NO**'} | {r['traceflow_accesses_per_s'] / 1e6:.2f} "
            f"| {r['libcachesim_accesses_per_s'] / 1e6:.2f} | {r['speedup']:.2f}x |"
        )
    lines += ["", "| trace | mode | accesses | M accesses/s |", "|---|---|---:|---:|"]
    for r in mode_rows:
        lines.append(f"| {r['trace']} | {r['mode']} | {r['accesses']:,} | {r['accesses_per_s'] / 1e6:.2f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mooncake", type=Path, default=MOONCAKE)
    ap.add_argument("--hours", type=float, default=8.5, help="synthetic trace length")
    ap.add_argument("--sessions-per-min", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3, help="repeats on the Mooncake trace (median)")
    ap.add_argument("--quick", action="store_true", help="allow a synthetic trace under 100M accesses")
    ap.add_argument("--no-modes", action="store_true", help="only the side-by-side LRU comparison")
    ap.add_argument("--work", type=Path, default=Path("/tmp/tfbench/sim"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    engine = "numba" if native.jit_enabled() else "numpy"
    start = time.perf_counter()
    lru_hits([1, 2, 1], 1)  # numba: import it and compile the kernel, or load it from numba's cache
    warmup_s = time.perf_counter() - start
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, libcachesim "
        f"{getattr(libcachesim, '__version__', '?')}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; traceflow LRU engine: {engine} (warm-up {warmup_s:.2f} s)",
        flush=True,
    )

    if args.mooncake.suffix == ".gz":
        mooncake = read_mooncake(gzip.decompress(args.mooncake.read_bytes()).splitlines())
    else:
        mooncake = read_mooncake(args.mooncake)
    rows = compare("mooncake", mooncake.blocks, [1_000, 5_000, 20_000, 60_000], args.work, args.runs)
    mode_rows = [] if args.no_modes else modes("mooncake", mooncake, [2_000, 8_000, 20_000], args.runs, 10**9)

    start = time.perf_counter()
    synthetic = agentic_coding_trace(args.hours * 3_600, args.seed, sessions_per_min=args.sessions_per_min)
    gen_s = time.perf_counter() - start
    print(
        f"synthetic: {synthetic.n_requests:,} requests, {synthetic.n_blocks:,} block accesses "
        f"({gen_s:.1f} s to generate)",
        flush=True,
    )
    if synthetic.n_blocks < 100_000_000 and not args.quick:
        print("the synthetic trace is under 100M accesses: raise --hours", file=sys.stderr)
        return 2
    rows += compare("synthetic", synthetic.blocks, [20_000, 200_000, 2_000_000], args.work, 1)
    if not args.no_modes:
        mode_rows += modes("synthetic", synthetic, [20_000, 200_000, 2_000_000], 1, 5_000_000)

    table = markdown(rows, mode_rows)
    print("\n" + table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "engine": engine,
                    "warmup_s": warmup_s,
                    "load_average": os.getloadavg(),
                    "compare": rows,
                    "modes": mode_rows,
                    "synthetic_generation_s": gen_s,
                    "synthetic_requests": synthetic.n_requests,
                    "markdown": table,
                },
                indent=2,
            )
        )
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
