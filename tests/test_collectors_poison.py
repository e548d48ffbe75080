"""Poison payloads (issue 13): a payload the sealer cannot map never costs another payload's records.

Each poison shape is refused at acknowledgement (``partial_success``) while the other records of
its payload and of its WAL segment reach the lake; one that gets past (simulated by a mapping that
raises) is isolated to its record and quarantined alone, content stripped; ``traceflow quarantine``
lists, shows and re-seals it. gRPC refuses unauthenticated calls before buffering their message.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from collectors_support import Server, api_request_logs, count_requests, stub, wait_for
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from traceflow.collectors import sealer as sealer_mod
from traceflow.collectors import spool
from traceflow.collectors.quarantine import Quarantine
from traceflow.collectors.sealer import Sealer

PB = "application/x-protobuf"

#: (attribute, AnyValue fields) of the poison shapes; the first three are the issue's
POISONS: list[tuple[str, dict[str, Any]]] = [
    ("input_tokens", {"double_value": 1e300}),
    ("duration_ms", {"int_value": 2**63 - 1}),
    ("input_tokens", {"string_value": "1e30"}),
    ("input_tokens", {"double_value": 9.3e18}),
    ("output_tokens", {"int_value": 2**62}),
    ("cache_read_tokens", {"string_value": "lots"}),
]


def poisoned(
    n: int, tag: str, key: str, value: dict[str, Any], at: int = 2
) -> tuple[ExportLogsServiceRequest, list[str]]:
    req, ids = api_request_logs(n, tag=tag)
    rec = req.resource_logs[0].scope_logs[0].log_records[at]
    for kv in rec.attributes:
        if kv.key == key:
            kv.value.CopyFrom(AnyValue(**value))
    return req, ids


def deep_json(n: int, tag: str, depth: int = 254, at: int = 1) -> tuple[bytes, list[str]]:
    """An OTLP/JSON request whose record ``at`` has an attribute nested ``depth`` arrayValues deep."""
    req, ids = api_request_logs(n, tag=tag)
    d = json_format.MessageToDict(req)
    d["resourceLogs"][0]["scopeLogs"][0]["logRecords"][at]["attributes"].append(
        {"key": "deep", "value": "DEEP"}
    )
    v = '{"stringValue":"x"}'
    for _ in range(depth):
        v = '{"arrayValue":{"values":[' + v + "]}}"
    return orjson.dumps(d).replace(b'"DEEP"', v.encode()), ids


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # a long roll interval: every payload of a test lands in the same WAL segment
    with Server(tmp_path_factory.mktemp("poison"), "--roll-interval", "1.5") as srv:
        yield srv


def _post(srv: Server, body: bytes, ctype: str = PB) -> httpx.Response:
    return httpx.post(srv.http_url + "/v1/logs", content=body, headers={"Content-Type": ctype})


def _rejected(r: httpx.Response) -> int:
    resp = ExportLogsServiceResponse.FromString(r.content)
    return resp.partial_success.rejected_log_records


def _quarantined(data: Path) -> list[Any]:
    return Quarantine.of(data).entries()


@pytest.mark.parametrize("key,value", POISONS, ids=[f"{k}={next(iter(v.values()))!r}" for k, v in POISONS])
def test_a_poison_record_is_refused_at_ack_and_its_segment_is_stored(
    server: Server, key: str, value: dict[str, Any]
) -> None:
    before, ids_before = api_request_logs(10, tag="before")
    poison, ids = poisoned(5, "poison", key, value)
    after, ids_after = api_request_logs(10, tag="after")
    assert _post(server, before.SerializeToString()).status_code == 200
    r = _post(server, poison.SerializeToString())
    assert r.status_code == 200 and _rejected(r) == 1, r.content
    assert key in ExportLogsServiceResponse.FromString(r.content).partial_success.error_message
    assert _post(server, after.SerializeToString()).status_code == 200
    good = ids_before + ids[:2] + ids[3:] + ids_after
    assert wait_for(lambda: count_requests(server.data, "list_contains(?, request_id)", [good]) == len(good))
    assert count_requests(server.data, "request_id = ?", [ids[2]]) == 0
    assert not _quarantined(server.data)


def test_an_attribute_nested_254_levels_is_refused_at_ack(server: Server) -> None:
    body, ids = deep_json(5, "deep")
    other, other_ids = api_request_logs(10, tag="deep-other")
    r = _post(server, body, "application/json")
    assert r.status_code == 200, r.content
    partial = orjson.loads(r.content)["partialSuccess"]
    assert partial["rejectedLogRecords"] == "1" and "nested too deeply" in partial["errorMessage"]
    assert _post(server, other.SerializeToString()).status_code == 200
    good = ids[:1] + ids[2:] + other_ids
    assert wait_for(lambda: count_requests(server.data, "list_contains(?, request_id)", [good]) == len(good))
    assert not _quarantined(server.data)


def _write_wal(data: Path, records: list[spool.WalRecord]) -> None:
    wal = spool.Wal(spool.collector_dir(data) / "wal", roll_interval_s=3600)
    wal.start()
    for rec in records:
        wal.append_blocking(rec)
    wal.close()


def test_a_record_that_still_breaks_the_sealer_is_quarantined_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mapping is total, so a failure is simulated: rows that polars cannot frame."""
    monkeypatch.setenv("TRACEFLOW_NATIVE", "0")  # the dict path (its mapping is what is patched)
    a, ids_a = api_request_logs(5, tag="a")
    b, ids_b = api_request_logs(5, tag="b")
    rec = b.resource_logs[0].scope_logs[0].log_records[3]
    rec.attributes.add(key="prompt").value.string_value = "SECRET PROMPT TEXT"
    rec.attributes.add(key="explode").value.bool_value = True
    c, ids_c = api_request_logs(5, tag="c")
    _write_wal(tmp_path, [spool.WalRecord("logs", PB, x.SerializeToString()) for x in (a, b, c)])

    real = sealer_mod.otlp.map_request_chunks

    def map_request_chunks(signal: Any, msg: Any, **kw: Any) -> Any:
        for mapped in real(signal, msg, **kw):
            for row in mapped.parsed.requests:
                if row["attributes"].get("explode"):
                    row["cold_input_tokens"] = 2**70  # what polars cannot hold
            yield mapped

    def map_request(signal: Any, msg: Any, **kw: Any) -> Any:
        return next(map_request_chunks(signal, msg, **kw))

    monkeypatch.setattr(sealer_mod.otlp, "map_request_chunks", map_request_chunks)
    monkeypatch.setattr(sealer_mod.otlp, "map_request", map_request)
    stats = Sealer(tmp_path).seal_all()
    good = ids_a + ids_b[:3] + ids_b[4:] + ids_c
    assert count_requests(tmp_path, "list_contains(?, request_id)", [good]) == len(good)
    assert count_requests(tmp_path, "request_id = ?", [ids_b[3]]) == 0
    assert stats.quarantined == 1
    [entry] = _quarantined(tmp_path)
    assert entry.payloads == 1 and entry.content == "stripped" and "record 3" in entry.reason
    quarantined = Quarantine.of(tmp_path).dir / f"{entry.id}.wal"
    assert (
        b"SECRET PROMPT TEXT" not in quarantined.read_bytes()
        and ids_b[3].encode() in quarantined.read_bytes()
    )
    assert not spool.closed_segments(spool.collector_dir(tmp_path) / "wal")

    monkeypatch.undo()  # "the bug is fixed": reseal stores it
    cli = [sys.executable, "-m", "traceflow", "quarantine"]
    listed = subprocess.run(
        [*cli, "list", "--data", str(tmp_path), "-f", "json"], capture_output=True, check=True
    )
    assert entry.id in listed.stdout.decode()
    shown = subprocess.run(
        [*cli, "show", entry.id, "--data", str(tmp_path), "-f", "json"], capture_output=True
    )
    assert shown.returncode == 0 and ids_b[3] in shown.stdout.decode()
    out = subprocess.run(
        [*cli, "reseal", "--all", "--data", str(tmp_path), "-f", "json"], capture_output=True
    )
    assert out.returncode == 0, out.stderr
    assert count_requests(tmp_path, "request_id = ?", [ids_b[3]]) == 1
    assert not _quarantined(tmp_path)


def test_quarantine_keeps_to_its_size_and_age_limits(tmp_path: Path) -> None:
    q = Quarantine(tmp_path / "q", max_bytes=3000, max_age_s=3600)
    req, _ = api_request_logs(1)
    body = req.SerializeToString()
    for i in range(5):
        q.put([spool.WalRecord("logs", PB, body)], f"test {i}", name=f"e{i}")
    assert 0 < sum(e.bytes for e in q.entries()) <= 3000
    assert q.entries()[-1].id == "e4"  # the oldest went first
    assert q.prune(now=time.time() + 7200) and not q.entries()


def _rss_peak_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_grpc_refuses_unauthenticated_calls_before_buffering_them(tmp_path: Path) -> None:
    n, size = 12, 16 << 20
    with Server(tmp_path, "--token", "s3cret-s3cret-s3cret", "--max-body-bytes", str(32 << 20)) as srv:
        assert srv.proc is not None
        time.sleep(0.5)
        base = _rss_peak_kb(srv.proc.pid)
        big = b"\x0a" + b"\xff" * size  # never parsed: refused on its metadata
        opts = [("grpc.max_send_message_length", 64 << 20)]
        with grpc.insecure_channel(srv.grpc_target, options=opts) as ch:
            export = ch.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")

            def call(_: int) -> grpc.StatusCode:
                try:
                    export(big, metadata=(("authorization", "Bearer wrong"),), timeout=30)
                except grpc.RpcError as e:
                    return e.code()  # type: ignore[no-any-return]
                return grpc.StatusCode.OK

            with concurrent.futures.ThreadPoolExecutor(n) as pool:
                codes = list(pool.map(call, range(n)))
            assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}
            grown_mb = (_rss_peak_kb(srv.proc.pid) - base) / 1024
            # 12 x 16 MiB were sent; only flow-control windows may have been buffered
            assert grown_mb < 48, f"server RSS peak grew by {grown_mb:.0f} MB"
            req, ids = api_request_logs(3, tag="grpc-auth")
            stub("logs", ch).Export(
                req, metadata=(("authorization", "Bearer s3cret-s3cret-s3cret"),), timeout=10
            )
        assert wait_for(lambda: count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == 3)
