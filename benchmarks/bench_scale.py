"""DuckDB vs Spark local mode on one generated lake: mix, gaps and sessions (and compaction).

    python benchmarks/bench_scale.py --requests 1000000 [--master local[2]] [--compact] [--keep DIR]

Generates a lake of ``--requests`` requests (sessions of about 40 requests, gaps from a mix of agent
loops and human pauses, 1% duplicates written later), then times each analysis on the embedded
DuckDB and on Spark (``traceflow.engines.spark``, the same queries through the rewrite table) and
checks that both give the same numbers. Reports wall seconds, CPU seconds (this process for DuckDB;
the JVM's for Spark) and peak resident memory. Spark's session start and view registration are
reported apart. Results: benchmarks/README.md ("Scale-out: DuckDB vs Spark").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from traceflow.analysis import gaps, mix, sessions
from traceflow.schema import REQUESTS
from traceflow.store.lake import Lake

T0 = int(dt.datetime(2026, 3, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)


def generate(lake: Lake, requests: int, seed: int = 1, chunk: int = 250_000) -> None:
    """``requests`` rows in files of ``chunk`` rows (and 1% duplicates in files of their own)."""
    rng = np.random.default_rng(seed)
    per_session = 40
    done = 0
    while done < requests:
        n = min(chunk, requests - done)
        idx = np.arange(done, done + n)
        session = idx // per_session
        pos = idx % per_session
        human = rng.random(n) < 0.2
        gap_us = np.where(human, rng.exponential(600e6, n), rng.exponential(3e6, n)).astype(np.int64)
        dur_us = rng.integers(500_000, 30_000_000, n)
        step = gap_us + dur_us
        step[pos == 0] = 0
        start = T0 + (session * 86_400_000_000 * 7) // max(1, requests // per_session) + _cumsum_by(step, pos)
        context = 2_000 + pos * rng.integers(500, 3_000, n)
        read = (context * rng.uniform(0.0, 0.95, n)).astype(np.int64)
        write = context - read - rng.integers(0, 200, n).clip(max=context - read)
        prompt = np.cumsum(human | (pos == 0))
        frame = pl.DataFrame(
            {
                "event_id": [f"e{i}" for i in idx],
                "source": "bench",
                "agent": np.where(session % 2 == 0, "claude-code", "codex"),
                "session_id": [f"s{s}" for s in session],
                "prompt_id": [f"p{p}" for p in prompt],
                "started_at": start,
                "ended_at": start + dur_us,
                "model": np.where(session % 3 == 0, "claude-haiku-4-5", "claude-sonnet-4-5"),
                "cold_input_tokens": context - read - write,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "output_tokens": rng.integers(1, 2_000, n),
                "seq": idx,
                "ingested_at": np.full(n, T0 + 30 * 86_400_000_000),
            }
        )
        frame = frame.with_columns(
            pl.col(c).cast(pl.Datetime("us", "UTC")) for c in ("started_at", "ended_at", "ingested_at")
        )
        full = frame.select(
            [
                (pl.col(c).cast(t) if c in frame.columns else pl.lit(None, t).alias(c))
                for c, t in REQUESTS.schema.items()
            ]
        )
        lake.append("requests", full)
        dups = full.sample(fraction=0.01, seed=seed + done).with_columns(
            (pl.col("ingested_at") + pl.duration(days=1)).alias("ingested_at")
        )
        lake.append("requests", dups)
        done += n


def _cumsum_by(step: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Cumulative sum of ``step`` restarting where ``pos`` is 0."""
    total = np.cumsum(step)
    starts = np.maximum.accumulate(np.where(pos == 0, np.arange(len(pos)), 0))
    return total - total[starts] + step[starts]


class _Jvm:
    """The Spark driver JVM (a child of this process): its CPU seconds and peak memory, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    @staticmethod
    def find() -> _Jvm | None:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                name = stat.read_text().split("(", 1)[1].split(")", 1)[0]
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and "java" in name:
                return _Jvm(int(stat.parent.name))
        return None

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0


def _measure(fn: Any, jvm: _Jvm | None = None) -> dict[str, Any]:
    import resource

    jvm_cpu0 = jvm.cpu_s() if jvm else 0.0
    p0 = time.process_time()
    t0 = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - p0 + ((jvm.cpu_s() - jvm_cpu0) if jvm else 0.0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if jvm is not None:
        rss = max(rss, jvm.peak_mb())
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 2), "peak_rss_mb": round(rss), "_result": result}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--compact", action="store_true", help="also time compaction on both engines")
    ap.add_argument("--keep", type=Path, help="generate into (or reuse) this directory")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    lake = Lake(root)
    t0 = time.perf_counter()
    if not lake.files("requests"):
        generate(lake, args.requests)
    gen_s = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in lake.files("requests"))
    out: dict[str, Any] = {
        "requests": args.requests,
        "files": len(lake.files("requests")),
        "lake_mb": round(size / 2**20, 1),
        "generate_s": round(gen_s, 1),
        "cores": os.cpu_count(),
    }
    analyses = {
        "mix": lambda c: mix.token_mix(c),
        "gaps": lambda c: gaps.gap_report(c),
        "sessions": lambda c: sessions.session_summary(c),
    }
    duck: dict[str, Any] = {}
    con = lake.connect(["requests", "events"])
    for name, fn in analyses.items():
        duck[name] = _measure(lambda fn=fn: fn(con))
    from traceflow.engines.spark import SparkEngine, session

    spark_out: dict[str, Any] = {}
    t = time.perf_counter()
    spark = session(
        args.master, conf={"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_out["session_start_s"] = round(time.perf_counter() - t, 2)
    jvm = _Jvm.find()
    t = time.perf_counter()
    engine = SparkEngine(spark, lake, ["requests", "events"])
    spark_out["register_s"] = round(time.perf_counter() - t, 2)
    for name, fn in analyses.items():
        spark_out[name] = _measure(lambda fn=fn: fn(engine), jvm)
    from tests.conformance_support import same_object

    agree = {n: not same_object(duck[n]["_result"], spark_out[n]["_result"]) for n in analyses}
    if args.compact:
        from traceflow.engines.spark import compact

        copy = Path(str(root) + "-spark")
        shutil.copytree(root, copy, dirs_exist_ok=True)
        duck["compact"] = _measure(lambda: lake.compact("requests"))
        spark_out["compact"] = _measure(lambda: compact(spark, Lake(copy), "requests"), jvm)
    for d in (duck, spark_out):
        for v in d.values():
            if isinstance(v, dict):
                v.pop("_result", None)
    out.update(duckdb=duck, spark=spark_out, identical=agree)
    out["ratio_spark_over_duckdb"] = {
        n: round(spark_out[n]["wall_s"] / max(duck[n]["wall_s"], 1e-9), 1) for n in duck
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
