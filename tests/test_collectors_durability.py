"""``kill -9`` during sustained ingest: nothing acknowledged is lost, nothing is stored twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest
from collectors_support import Server, api_request_logs, query, stub, wait_for

BATCH = 64
WORKERS = 4  # two HTTP, two gRPC


def _sealer_processes(data: Path) -> list[int]:
    """Sealer processes (of any server) working on ``data``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"traceflow.collectors.sealer" in cmd and str(data).encode() in cmd:
            pids.append(int(proc.name))
    return pids


@pytest.mark.slow
def test_kill_9_during_sustained_ingest(tmp_path: Path) -> None:
    srv = Server(tmp_path, "--roll-interval", "0.3").start()
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def http_worker(k: int) -> None:
        with httpx.Client(base_url=srv.http_url, timeout=10) as client:
            while not stop.is_set():
                req, ids = api_request_logs(BATCH, tag=f"h{k}_")
                try:
                    r = client.post(
                        "/v1/logs",
                        content=req.SerializeToString(),
                        headers={"Content-Type": "application/x-protobuf"},
                    )
                except httpx.HTTPError:
                    time.sleep(0.05)
                    continue
                if r.status_code == 200 and r.content == b"":
                    with lock:
                        acked.extend(ids)

    def grpc_worker(k: int) -> None:
        with grpc.insecure_channel(srv.grpc_target) as channel:
            logs = stub("logs", channel)
            while not stop.is_set():
                req, ids = api_request_logs(BATCH, tag=f"g{k}_")
                try:
                    resp = logs.Export(req, timeout=10)
                except grpc.RpcError:
                    time.sleep(0.05)
                    continue
                if not resp.HasField("partial_success"):
                    with lock:
                        acked.extend(ids)

    threads = [threading.Thread(target=http_worker, args=(k,)) for k in range(WORKERS // 2)]
    threads += [threading.Thread(target=grpc_worker, args=(k,)) for k in range(WORKERS // 2)]
    for t in threads:
        t.start()
    time.sleep(4)  # sustained ingest: several segments written, some sealed, some not
    assert srv.proc is not None
    srv.proc.kill()  # SIGKILL: no chance to flush anything
    srv.proc.wait(10)
    stop.set()
    for t in threads:
        t.join(30)
    assert len(acked) >= 20 * BATCH, "the load was not sustained"
    assert wait_for(lambda: not _sealer_processes(tmp_path), 5), "the sealer outlived its server"

    with Server(tmp_path, "--roll-interval", "0.3") as again:

        def all_there() -> bool:
            n = query(again.data, "select count(*) from requests where list_contains(?, request_id)", [acked])
            return int(n[0][0]) == len(acked)

        assert wait_for(all_there, timeout_s=60), "acknowledged records were lost"
        rows = query(
            again.data,
            "select count(*), count(distinct event_id), count(distinct request_id) from requests",
        )[0]
        total, distinct_events, distinct_requests = (int(x) for x in rows)
        # zero duplicates: one row per event id and per request id
        assert total == distinct_events == distinct_requests
        # besides the acknowledged records, at most the batches in flight at the kill were stored
        assert len(acked) <= total <= len(acked) + WORKERS * BATCH
        assert len(set(acked)) == len(acked)
    assert not list((tmp_path / "v1/_state/collector/wal").glob("*"))
