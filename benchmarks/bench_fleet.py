#!/usr/bin/env python3
"""Fleet simulation (``simulate --instances N``): wall time serial vs processes, and the hit ratio by router.

The seeded agentic-coding workload (``traceflow.kv.synthetic.agentic_coding_trace``) through N instances
of MiniMax-M2 FP8 with ``--tier gpu=80GB --tier dram=512GB`` each, for N = 1, 2, 4, 8 and both routers:
``simulate_fleet`` with the instances run in this process one after another (serial) and in a process
pool (``--jobs``, default min(N, CPUs)); optionally (``--spark``) as Spark tasks in ``local[*]``. Each
time is the median of ``--runs`` runs after one warm-up (numba compiles or loads its kernels). Every
mode must give the serial report exactly; the script exits 1 otherwise.

Usage::

    python benchmarks/bench_fleet.py --out /tmp/tfbench/fleet.json
    python benchmarks/bench_fleet.py --hours 0.5 --runs 1          # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceflow.kv import fleet
from traceflow.kv.models import find_model
from traceflow.kv.simulate import SimConfig
from traceflow.kv.sizing import parse_tier
from traceflow.kv.synthetic import agentic_coding_trace


def timed(fn: Callable[[], dict[str, Any]], runs: int) -> tuple[float, dict[str, Any]]:
    out = fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--sessions-per-min", type=float, default=2.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--instances", type=int, nargs="*", default=[1, 2, 4, 8])
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--spark", action="store_true", help="also time Spark tasks (local[*])")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    trace = agentic_coding_trace(args.hours * 3600, args.seed, sessions_per_min=args.sessions_per_min)
    cfg = SimConfig((parse_tier("gpu=80GB"), parse_tier("dram=512GB")), find_model("MiniMax-M2").kv(None))
    print(
        f"trace: {trace.n_requests:,} requests, {trace.n_blocks:,} block accesses; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        file=sys.stderr,
    )
    mapper: fleet.Mapper | None = None
    if args.spark:
        from traceflow.engines.spark import map_tasks, session

        session(None).sparkContext.setLogLevel("ERROR")
        mapper = map_tasks
    rows: list[dict[str, Any]] = []
    ok = True
    for router in fleet.ROUTERS:
        for n in args.instances:
            t0 = time.perf_counter()
            fleet.route(trace, n, router)
            route_s = time.perf_counter() - t0
            serial_s, serial = timed(
                lambda n=n, r=router: fleet.simulate_fleet(trace, cfg, n, r).report, args.runs
            )
            proc_s, procs = timed(
                lambda n=n, r=router: (
                    fleet.simulate_fleet(trace, cfg, n, r, mapper=fleet.process_map(args.jobs)).report
                ),
                args.runs,
            )
            row = {
                "router": router,
                "instances": n,
                "requests": trace.n_requests,
                "block_accesses": trace.n_blocks,
                "route_s": round(route_s, 3),
                "serial_s": round(serial_s, 3),
                "processes_s": round(proc_s, 3),
                "jobs": args.jobs or min(n, os.cpu_count() or 1),
                "token_hit_ratio": round(serial["token_hit_ratio"], 4),
                "ttft_p50_s": round(serial["ttft_p50_s"], 4),
                "ttft_p99_s": round(serial["ttft_p99_s"], 4),
                "imbalance": round(serial["imbalance"], 3),
            }
            same = json.dumps(procs, sort_keys=True, default=str) == json.dumps(
                serial, sort_keys=True, default=str
            )
            if mapper is not None:
                spark_s, on_spark = timed(
                    lambda n=n, r=router: fleet.simulate_fleet(trace, cfg, n, r, mapper=mapper).report, 1
                )
                row["spark_s"] = round(spark_s, 3)
                same = same and json.dumps(on_spark, sort_keys=True, default=str) == json.dumps(
                    serial, sort_keys=True, default=str
                )
            row["same_as_serial"] = same
            ok = ok and same
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print(
            "| "
            + " | ".join(
                f"{r[c]:,}" if isinstance(r[c], int) and not isinstance(r[c], bool) else str(r[c])
                for c in cols
            )
            + " |"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
