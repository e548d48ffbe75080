"""A seeded fuzz of the collector (issue 13): 10,000 mutated OTLP payloads over HTTP and gRPC.

No answer is a 5xx but overload's 503 (no gRPC ``INTERNAL``/``UNKNOWN``); for every payload whose
record ids survive the mutation, the records stored plus those refused in ``partial_success`` are
exactly the records sent; nothing is quarantined; a baseline batch stored first is unchanged.
"""

from __future__ import annotations

import os
import random
import struct
import threading
from collections.abc import Iterator

import grpc
import httpx
import orjson
import pytest
from collectors_support import Server, api_request_logs, query, stub, wait_for
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from traceflow.collectors import spool

pytestmark = pytest.mark.slow

SEED = 13
N_HTTP = int(os.environ.get("FUZZ_HTTP", 6000))
N_GRPC = int(os.environ.get("FUZZ_GRPC", 4000))
PER = 3  # records per payload
KEYS = [
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
    "cache_creation_5m_tokens",
    "duration_ms",
    "ttft_ms",
    "cost_usd",
    "event.sequence",
]
SNAPSHOT = (
    "select event_id, cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, "
    "started_at, attributes from requests where list_contains(?, request_id) order by event_id"
)


def _extreme(rng: random.Random) -> AnyValue:
    kind = rng.randrange(9)
    if kind == 0:
        return AnyValue(double_value=rng.choice([1e300, -1e300, 9.3e18, 2.0**63, 1e12, 5e11, 0.5, -3.0]))
    if kind == 1:
        return AnyValue(double_value=struct.unpack("<d", rng.randbytes(8))[0])  # nan, inf, anything
    if kind == 2:
        return AnyValue(int_value=rng.choice([2**63 - 1, -(2**63), 2**62, 10**12, 10**12 + 1, -1, 0]))
    if kind == 3:
        return AnyValue(int_value=rng.randrange(-(2**63), 2**63))
    if kind == 4:
        return AnyValue(
            string_value=rng.choice(["1e30", "9.3e18", "inf", "nan", "-0", "12", "abc", "", " 7"])
        )
    if kind == 5:
        return AnyValue(string_value=str(rng.randrange(10**20)))
    if kind == 6:
        return AnyValue(bool_value=True)
    if kind == 7:
        v = AnyValue(string_value="x")
        for _ in range(rng.randrange(1, 40)):
            v = AnyValue(array_value={"values": [v]})
        return v
    return AnyValue(bytes_value=rng.randbytes(rng.randrange(20)))


def _mutate(rng: random.Random, i: int) -> tuple[ExportLogsServiceRequest, list[str]]:
    req, ids = api_request_logs(PER, tag=f"fz{i}-")
    records = req.resource_logs[0].scope_logs[0].log_records
    for _ in range(rng.randrange(1, 4)):
        rec = records[rng.randrange(PER)]
        what = rng.randrange(4)
        if what == 0:
            rec.time_unix_nano = rng.choice([0, 1, 2**64 - 1, rng.randrange(2**64)])
        elif what == 1:
            rec.observed_time_unix_nano = rng.randrange(2**64)
            rec.time_unix_nano = 0
        else:
            key = rng.choice(KEYS)
            for kv in rec.attributes:
                if kv.key == key:
                    kv.value.CopyFrom(_extreme(rng))
    return req, ids


def _deep_json(rng: random.Random, req: ExportLogsServiceRequest) -> bytes:
    d = json_format.MessageToDict(req)
    rec = d["resourceLogs"][0]["scopeLogs"][0]["logRecords"][rng.randrange(PER)]
    rec["attributes"].append({"key": "deep", "value": "DEEP"})
    v = '{"stringValue":"x"}'
    for _ in range(rng.choice([10, 49, 50, 51, 64, 100, 254, 300])):
        v = rng.choice(['{"arrayValue":{"values":[', '{"kvlistValue":{"values":[{"key":"k","value":']) + v
        v += "]}}" if v.startswith('{"arrayValue"') else "}]}}"
    return orjson.dumps(d).replace(b'"DEEP"', v.encode())


def _flip(rng: random.Random, body: bytes) -> bytes:
    b = bytearray(body)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(3)
        pos = rng.randrange(len(b))
        if op == 0:
            b[pos] = rng.randrange(256)
        elif op == 1:
            del b[pos : pos + rng.randrange(1, 16)]
        else:
            b[pos:pos] = rng.randbytes(rng.randrange(1, 8))
    return bytes(b)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("fuzz"), "--roll-interval", "0.5") as srv:
        # every refused payload is logged: drain stderr, or the server blocks on a full pipe
        assert srv.proc is not None and srv.proc.stderr is not None
        log = srv.data / "serve.log"
        pipe = srv.proc.stderr
        threading.Thread(target=lambda: log.write_bytes(pipe.read()), daemon=True).start()
        yield srv


def test_fuzz(server: Server) -> None:
    rng = random.Random(SEED)
    base, base_ids = api_request_logs(20, tag="baseline")
    assert (
        httpx.post(
            server.http_url + "/v1/logs",
            content=base.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        ).status_code
        == 200
    )
    assert wait_for(lambda: len(query(server.data, SNAPSHOT, [base_ids])) == 20)
    snapshot = query(server.data, SNAPSHOT, [base_ids])

    expected: dict[str, int] = {}  # payload tag -> records that must be stored
    counts: dict[str, int] = {"payloads": 0, "acked": 0, "rejected": 0, "byte-mutated": 0, "refused": 0}
    bad: list[str] = []
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        for i in range(N_HTTP):
            req, _ = _mutate(rng, i)
            kind = rng.randrange(10)
            if kind < 6:
                body, ctype = req.SerializeToString(), "application/x-protobuf"
            elif kind < 8:
                body, ctype = _deep_json(rng, req), "application/json"
            else:
                body, ctype = _flip(rng, req.SerializeToString()), "application/x-protobuf"
            r = client.post("/v1/logs", content=body, headers={"Content-Type": ctype})
            counts["payloads"] += 1
            if r.status_code >= 500 and r.status_code != 503:
                bad.append(f"HTTP payload {i}: {r.status_code} {r.content[:200]!r}")
            if r.status_code != 200:
                counts["refused"] += 1
                continue
            if kind >= 8:
                counts["byte-mutated"] += 1
                continue  # ids may be mangled: status only
            if ctype == "application/json":
                rejected = int(orjson.loads(r.content).get("partialSuccess", {}).get("rejectedLogRecords", 0))
            else:
                rejected = ExportLogsServiceResponse.FromString(
                    r.content
                ).partial_success.rejected_log_records
            counts["acked"] += PER
            counts["rejected"] += rejected
            expected[f"fz{i}-"] = PER - rejected
    with grpc.insecure_channel(server.grpc_target) as ch:
        export = stub("logs", ch).Export
        raw = ch.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
        for i in range(N_HTTP, N_HTTP + N_GRPC):
            req, _ = _mutate(rng, i)
            flip = rng.randrange(10) >= 8
            counts["payloads"] += 1
            try:
                if flip:
                    raw(_flip(rng, req.SerializeToString()), timeout=30)
                    counts["byte-mutated"] += 1
                    continue
                resp = export(req, timeout=30)
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAVAILABLE):
                    bad.append(f"gRPC payload {i}: {e.code()} {e.details()}")
                counts["refused"] += 1
                continue
            rejected = resp.partial_success.rejected_log_records
            counts["acked"] += PER
            counts["rejected"] += rejected
            expected[f"fz{i}-"] = PER - rejected
    assert not bad, bad[:10]

    want = sum(expected.values())

    def stored() -> dict[str, int]:
        rows = query(
            server.data,
            "select regexp_extract(request_id, '^req_(fz[0-9]+-)', 1) as tag, count(distinct request_id) "
            "from requests where request_id like 'req_fz%' group by tag",
        )
        return {str(t): int(n) for t, n in rows}

    wait_for(lambda: sum(v for k, v in stored().items() if k in expected) >= want, timeout_s=120)
    got = stored()
    wrong = {k: (got.get(k, 0), v) for k, v in expected.items() if got.get(k, 0) != v}
    counts["stored"] = sum(got.get(k, 0) for k in expected)
    quarantine = spool.collector_dir(server.data) / "quarantine"
    counts["quarantined"] = len(list(quarantine.glob("*.wal"))) if quarantine.exists() else 0
    print("fuzz counts:", counts)
    assert not wrong, (len(wrong), list(wrong.items())[:10])
    assert counts["quarantined"] == 0
    assert query(server.data, SNAPSHOT, [base_ids]) == snapshot
    assert counts["payloads"] == N_HTTP + N_GRPC
