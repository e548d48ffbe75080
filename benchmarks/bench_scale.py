"""DuckDB vs Spark local mode on one generated lake (mix, gaps, sessions, compaction); sealing with
1 and 2 collectors; 3 collectors into one S3 test lake with ``kill -9`` of one.

    python benchmarks/bench_scale.py --requests 1000000 [--master local[2]] [--compact] [--keep DIR]
    python benchmarks/bench_scale.py --no-engines --sealers 1,2 --collectors 3 [--collector-records N]

Generates a lake of ``--requests`` requests (sessions of about 40 requests, gaps from a mix of agent
loops and human pauses, 1% duplicates written later), then times each analysis on the embedded
DuckDB and on Spark (``traceflow.engines.spark``, the same queries through the rewrite table) and
checks that both give the same numbers. Reports wall seconds, CPU seconds (this process for DuckDB;
the JVM's for Spark) and peak resident memory. Spark's session start and view registration are
reported apart. Results: benchmarks/README.md ("Scale-out: DuckDB vs Spark").

``--sealers 1,2``: for each N, N ``traceflow serve`` processes (each its own WAL and sealer, one
local lake) take the same offered load (``--collector-records`` Claude Code records from
``--exporters`` OTLP/HTTP exporters spread over them, ``bench_collector.py``'s load generator);
reported are acknowledged records/s, records/s into the lake (until every WAL is sealed), and the
sealers' and servers' CPU µs per record; the lake must hold exactly the acknowledged records.

``--collectors 3``: a moto S3 server (``moto_server``, its own process), 3 collectors writing
``s3://<bucket>/lake`` under load (exporters retry a failed request as it was, like the SDKs); one
is killed with SIGKILL (its sealer dies with it) once ``--kill-at`` of the records are acknowledged,
and restarted on the same WAL and port; then every WAL is sealed, the collectors stop (SIGTERM) and
the lake is read with DuckDB: every acknowledged request id is stored, none twice in the
deduplicated view; raw rows against distinct ids shows what the views removed.
Results: benchmarks/README.md ("Scale-out: collectors and sealers").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_collector import Load, ServerProc, cpu_seconds, peak_rss_mib, request_ids, run_load, templates

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


# -- collectors: sealing with 1 and 2 sealers; 3 collectors on S3 with kill -9 -------------------------
BATCH = 512  # records per export request, as Claude Code sends them


def _wal_files(wal_dir: Path) -> list[Path]:
    return [p for p in (wal_dir / "wal").glob("*") if p.is_file()]


def _wait_sealed(wal_dirs: list[Path], timeout_s: float = 900) -> None:
    """Until no WAL holds a segment (the open one is closed after 1 s idle, then sealed)."""
    deadline = time.perf_counter() + timeout_s
    while any(_wal_files(w) for w in wal_dirs):
        if time.perf_counter() > deadline:
            raise SystemExit(f"the sealers did not drain {wal_dirs} within {timeout_s:.0f} s")
        time.sleep(0.1)


def _sealer_pid(server: ServerProc) -> int | None:
    return server.pids().get("sealer")


def _lake_check(data: str | Path, acked_keys: list[str]) -> dict[str, Any]:
    """Acknowledged = stored, duplicates: the deduplicated view against every stored row."""
    acked = pl.DataFrame({"request_id": [r for key in acked_keys for r in request_ids(key, BATCH)]})
    lake = Lake(data)
    con = lake.connect(["requests"])  # registers the s3 filesystem for an s3:// lake
    con.register("acked", acked.to_arrow())
    files = lake.file_names("requests")
    raw = f"read_parquet({files!r}, union_by_name = true)"
    row = con.execute(
        f"""SELECT (SELECT count(*) FROM acked),
                   (SELECT count(*) FROM acked ANTI JOIN requests USING (request_id)),
                   (SELECT count(*) FROM requests),
                   (SELECT count(DISTINCT event_id) FROM requests),
                   (SELECT count(DISTINCT request_id) FROM requests),
                   (SELECT count(*) FROM requests ANTI JOIN acked USING (request_id)),
                   (SELECT count(*) FROM {raw}),
                   (SELECT count(DISTINCT event_id) FROM {raw})"""
    ).fetchone()
    con.close()
    assert row is not None
    n_acked, missing, view_rows, view_events, view_requests, unacked, raw_rows, raw_events = row
    return {
        "acked_records": n_acked,
        "acked_missing_from_lake": missing,
        "view_rows": view_rows,
        "view_distinct_event_ids": view_events,
        "view_distinct_request_ids": view_requests,
        "stored_not_acked": unacked,
        "raw_rows": raw_rows,
        "raw_distinct_event_ids": raw_events,
        "duplicates_removed_by_views": raw_rows - view_rows,
        "lake_files": len(files),
        "acked_equals_stored": missing == 0 and unacked == 0,
        "no_duplicates_in_views": view_rows == view_events == view_requests,
    }


def bench_sealers(n: int, records: int, exporters: int, root: Path) -> dict[str, Any]:
    """``n`` collectors (``n`` sealers, one WAL each) into one local lake, same offered load."""
    data = root / f"sealers-{n}"
    wals = [root / f"sealers-{n}-wal{i}" for i in range(n)]
    servers = [
        ServerProc(data, ["--wal-dir", str(w), "--grpc-port", "-1"], log=root / f"sealers-{n}-{i}.log")
        for i, w in enumerate(wals)
    ]
    try:
        pids = [s.pids() for s in servers]
        cpu0 = [{k: cpu_seconds(p) for k, p in d.items()} for d in pids]
        load = Load(
            "http", exporters, BATCH, 0.0, budget=max(1, records // (BATCH * exporters)), acked_keys=[]
        )
        t0 = time.perf_counter()
        run_load("http", [s.http for s in servers], templates(BATCH, 32), BATCH, exporters, 900, load=load)
        _wait_sealed(wals)
        sealed_s = time.perf_counter() - t0
        cpu = {
            role: sum(cpu_seconds(d[role]) - c[role] for d, c in zip(pids, cpu0, strict=True))
            for role in ("server", "sealer")
        }
        rss = {role: round(max(peak_rss_mib(d[role]) for d in pids)) for role in ("server", "sealer")}
    finally:
        for s in servers:
            s.stop()
    acked = load.acked_records
    check = _lake_check(data, load.acked_keys or [])
    shutil.rmtree(data, ignore_errors=True)
    return {
        "sealers": n,
        "exporters": exporters,
        "acked_records": acked,
        "acked_records_per_s": round(acked / load.duration_s),
        "into_lake_records_per_s": round(acked / sealed_s),
        "seconds_to_lake": round(sealed_s, 1),
        "sealer_cpu_us_per_record": round(cpu["sealer"] / acked * 1e6, 1),
        "server_cpu_us_per_record": round(cpu["server"] / acked * 1e6, 2),
        "peak_rss_mib_server_sealer": [rss["server"], rss["sealer"]],
        "throttled_requests": load.throttled,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "lake": check,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """``moto_server`` (the S3 test server) in its own process, so it does not share our GIL."""

    def __init__(self, log: Path) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}"
        port = self.url.rsplit(":", 1)[1]
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", port],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        deadline = time.perf_counter() + 60
        while True:
            try:
                urllib.request.urlopen(self.url + "/moto-api/", timeout=2).close()
                return
            except OSError:
                if time.perf_counter() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise SystemExit(f"moto_server did not start (see {log})") from None
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def bench_kill(n: int, records: int, per_collector: int, kill_at: float, root: Path) -> dict[str, Any]:
    """``n`` collectors into one S3 test lake under load; the first is killed -9 and restarted."""
    moto = MotoServer(root / "moto.log")
    env = {
        "AWS_ENDPOINT_URL": moto.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "XDG_STATE_HOME": str(root / "state"),  # the s3 lake's local staging
        "TRACEFLOW_CACHE": "0",
    }
    os.environ.update(env)  # this process reads the lake too
    os.environ.pop("AWS_PROFILE", None)
    import boto3  # type: ignore[import-untyped]

    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/lake"
    wals = [root / f"kill-wal{i}" for i in range(n)]

    def start(i: int, *extra: str) -> ServerProc:
        args = ["--wal-dir", str(wals[i]), "--grpc-port", "-1", *extra]
        return ServerProc(url, args, env=env, log=root / f"kill-{i}.log")

    servers = [start(i) for i in range(n)]
    exporters = n * per_collector
    load = Load("http", exporters, BATCH, 0.0, retry=True, acked_keys=[])
    load.budget = max(1, records // (BATCH * exporters))
    total = load.budget * exporters * BATCH
    kill: dict[str, Any] = {}

    def killer() -> None:
        while load.live_acked_records < kill_at * total:
            time.sleep(0.02)
        victim = servers[0]
        sealer = _sealer_pid(victim)
        kill["acked_records_at_kill"] = load.live_acked_records
        kill["victim_wal_bytes_at_kill"] = sum(f.stat().st_size for f in _wal_files(wals[0]))
        t = time.perf_counter()
        victim.proc.kill()  # SIGKILL; the sealer gets SIGKILL from PR_SET_PDEATHSIG
        victim.proc.wait()
        while sealer is not None and Path(f"/proc/{sealer}").exists():
            time.sleep(0.01)
        kill["victim_wal_segments_after_kill"] = len(_wal_files(wals[0]))
        servers[0] = start(0, "--http-port", victim.http.rsplit(":", 1)[1])  # same WAL, same port
        kill["down_s"] = round(time.perf_counter() - t, 2)

    watcher = threading.Thread(target=killer)
    try:
        t0 = time.perf_counter()
        watcher.start()
        run_load("http", [s.http for s in servers], templates(BATCH, 32), BATCH, exporters, 900, load=load)
        watcher.join()
        _wait_sealed(wals)
        sealed_s = time.perf_counter() - t0
        for s in servers:
            s.stop()
        check = _lake_check(url, load.acked_keys or [])
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.proc.kill()
        moto.stop()
    return {
        "collectors": n,
        "exporters": exporters,
        "lake": "s3 (moto_server)",
        "acked_records": load.acked_records,
        "acked_records_per_s": round(load.acked_records / load.duration_s),
        "into_lake_records_per_s": round(load.acked_records / sealed_s),
        "seconds_to_lake": round(sealed_s, 1),
        "export_errors_retried": load.errors,
        "throttled_requests": load.throttled,
        "kill": kill,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "check": check,
    }


def bench_engines(args: argparse.Namespace) -> dict[str, Any]:
    """DuckDB vs Spark on one generated lake of ``--requests`` requests."""
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
        args.master,
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": args.driver_memory,
        },
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
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--compact", action="store_true", help="also time compaction on both engines")
    ap.add_argument(
        "--driver-memory",
        default="8g",
        help="Spark driver heap (local mode runs the tasks in it; 8g as in the recorded runs, which used "
        "Spark's percentile; the quantiles by rank ran the 10 M gap report in 1g)",
    )
    ap.add_argument("--keep", type=Path, help="generate into (or reuse) this directory")
    ap.add_argument("--no-engines", action="store_true", help="skip DuckDB vs Spark")
    ap.add_argument("--sealers", help="sealing throughput with these numbers of collectors, e.g. 1,2")
    ap.add_argument("--collectors", type=int, help="this many collectors into one S3 test lake, kill -9 one")
    ap.add_argument("--collector-records", type=int, default=200_000, help="offered records per mode")
    ap.add_argument("--exporters", type=int, default=4, help="--sealers: OTLP/HTTP exporters in all")
    ap.add_argument("--exporters-per-collector", type=int, default=2, help="--collectors: exporters each")
    ap.add_argument("--kill-at", type=float, default=0.4, help="--collectors: kill once this share is acked")
    args = ap.parse_args()
    out: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, loadavg at start {[round(x, 2) for x in os.getloadavg()]}"
    }
    if not args.no_engines:
        out.update(bench_engines(args))
    if args.sealers or args.collectors:
        root = Path(tempfile.mkdtemp(prefix="bench-scale-collectors-"))
        try:
            if args.sealers:
                out["sealing"] = []
                for n in (int(x) for x in args.sealers.split(",")):
                    out["sealing"].append(bench_sealers(n, args.collector_records, args.exporters, root))
                    print(json.dumps(out["sealing"][-1]), file=sys.stderr, flush=True)
            if args.collectors:
                out["kill_9"] = bench_kill(
                    args.collectors, args.collector_records, args.exporters_per_collector, args.kill_at, root
                )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
