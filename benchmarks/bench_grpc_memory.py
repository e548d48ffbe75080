"""Collector memory under large valid gRPC messages: peak RSS of the server and the sealer.

Usage::

    python benchmarks/bench_grpc_memory.py                      # 16 clients x 60 MiB, default budget
    python benchmarks/bench_grpc_memory.py --clients 16 --mib 60 --rounds 3 --json out.json

``--clients`` threads each send one valid ``ExportLogsServiceRequest`` of about ``--mib`` MiB of Claude
Code ``api_request`` records (``bench_collector.claude_code_batch``, distinct request ids per client)
to one ``traceflow serve`` (defaults: ``--max-body-bytes 64MiB``, ``--max-inflight-bytes 256MiB``); a
call refused with ``UNAVAILABLE`` is sent again after its RetryInfo delay, as the SDKs do, until every
message is acknowledged. Then the sealer drains the WAL; reported are the peak RSS (``VmHWM``) of the
server and the sealer, their sum against the bound documented in docs/collector.md (``traceflow
serve``), and whether every acknowledged record is in the lake exactly once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from bench_collector import ServerProc, claude_code_batch, peak_rss_mib

from traceflow.collectors.settings import memory_bound_bytes

LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
MiB = 1 << 20
TAG = "TTTTTTTT"


def bound_mib(inflight_mib: int, body_mib: int) -> float:
    """docs/collector.md (traceflow serve): server + sealer peak RSS."""
    return memory_bound_bytes(inflight_mib * MiB, body_mib * MiB) / MiB


def messages(clients: int, mib: float) -> tuple[list[bytes], int]:
    sample, _ = claude_code_batch(256, TAG)
    template, ids = claude_code_batch(int(mib * MiB / (len(sample) / 256)), TAG)
    return [template.replace(TAG.encode(), b"%08d" % k) for k in range(clients)], len(ids)


def send(target: str, body: bytes, out: dict[str, Any]) -> None:
    with grpc.insecure_channel(
        target, options=[("grpc.max_send_message_length", 128 * MiB), ("grpc.enable_retries", 0)]
    ) as ch:
        call = ch.unary_unary(LOGS_EXPORT, request_serializer=None, response_deserializer=None)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 900:
            try:
                call(body, timeout=600)
                out["ok"] = True
                return
            except grpc.RpcError as e:
                out.setdefault("refused", 0)
                out["refused"] += 1
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    out["error"] = f"{e.code()}: {e.details()}"
                    return
                time.sleep(1)


def one_round(args: argparse.Namespace, root: Path, bodies: list[bytes], per: int) -> dict[str, Any]:
    data = root / "data"
    server = ServerProc(
        data,
        [
            "--http-port",
            "-1",
            "--max-body-bytes",
            f"{args.body_mib}MiB",
            "--max-inflight-bytes",
            f"{args.inflight_mib}MiB",
        ],
    )
    try:
        pids = server.pids()
        outs: list[dict[str, Any]] = [{} for _ in bodies]
        threads = [
            threading.Thread(target=send, args=(server.grpc, b, o)) for b, o in zip(bodies, outs, strict=True)
        ]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sent_s = time.perf_counter() - t0
        wal = data / "v1/_state/collector/wal"
        while any(wal.glob("*")) and time.perf_counter() - t0 < 1800:
            time.sleep(0.5)
        drained_s = time.perf_counter() - t0
        rss = {name: round(peak_rss_mib(pid)) for name, pid in pids.items()}
    finally:
        server.stop()
    from traceflow.store.lake import Lake

    con = Lake(data).connect(["requests"])
    row = con.execute("select count(*), count(distinct request_id) from requests").fetchone()
    con.close()
    shutil.rmtree(data, ignore_errors=True)
    acked = sum(1 for o in outs if o.get("ok"))
    return {
        "acked_messages": acked,
        "refused_then_retried": sum(o.get("refused", 0) for o in outs),
        "errors": [o["error"] for o in outs if "error" in o],
        "acked_records": acked * per,
        "rows_in_lake": int(row[0]) if row else 0,
        "distinct_in_lake": int(row[1]) if row else 0,
        "sent_s": round(sent_s, 1),
        "drained_s": round(drained_s, 1),
        "peak_rss_mib": rss,
        "together_mib": rss.get("server", 0) + rss.get("sealer", 0),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--mib", type=float, default=60.0, help="size of each message")
    p.add_argument("--body-mib", type=int, default=64, help="--max-body-bytes, MiB")
    p.add_argument("--inflight-mib", type=int, default=256, help="--max-inflight-bytes, MiB")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    bodies, per = messages(args.clients, args.mib)
    bound = bound_mib(args.inflight_mib, args.body_mib)
    print(f"{args.clients} messages of {len(bodies[0]) / MiB:.1f} MiB, {per:,} records each", flush=True)
    root = Path(tempfile.mkdtemp(prefix="bench-grpc-memory-"))
    runs = []
    try:
        for _ in range(args.rounds):
            r = one_round(args, root, bodies, per)
            r["bound_mib"] = bound
            runs.append(r)
            print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        "| round | server MiB | sealer MiB | together MiB | bound MiB | acked records "
        "| rows in lake (distinct) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(runs, 1):
        rss = r["peak_rss_mib"]
        print(
            f"| {i} | {rss.get('server')} | {rss.get('sealer')} | {r['together_mib']} | {bound:.0f} | "
            f"{r['acked_records']:,} | {r['rows_in_lake']:,} ({r['distinct_in_lake']:,}) |"
        )
    if len(runs) > 1:
        print(f"median together: {statistics.median(r['together_mib'] for r in runs)} MiB")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    ok = all(
        r["acked_messages"] == args.clients
        and r["together_mib"] < bound
        and r["rows_in_lake"] == r["distinct_in_lake"] == r["acked_records"]
        for r in runs
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
