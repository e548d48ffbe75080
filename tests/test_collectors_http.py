"""OTLP/HTTP conformance of ``traceflow serve`` (real sockets, a server subprocess on free ports)."""

from __future__ import annotations

import gzip
import uuid
import zlib
from collections.abc import Iterator

import httpx
import orjson
import pytest
from collectors_support import Server, api_request_logs, count_requests, query, wait_for
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}
LIMIT = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("http-data")
    with Server(data, "--max-body-bytes", str(LIMIT), "--roll-interval", "0.2") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as c:
        yield c


def _stored(server: Server, ids: list[str]) -> bool:
    return count_requests(server.data, "list_contains(?, request_id)", [ids]) == len(ids)


def test_protobuf_logs_are_acknowledged_empty_and_stored_within_5s(
    server: Server, client: httpx.Client
) -> None:
    req, ids = api_request_logs(5)
    r = client.post("/v1/logs", content=req.SerializeToString(), headers=PB)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/x-protobuf"
    assert r.content == b""  # full success: an empty ExportLogsServiceResponse
    assert wait_for(lambda: _stored(server, ids), timeout_s=5)


def test_json_logs_get_a_json_response(server: Server, client: httpx.Client) -> None:
    req, ids = api_request_logs(3)
    from google.protobuf import json_format

    body = json_format.MessageToJson(req).encode()
    r = client.post("/v1/logs", content=body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {}
    assert wait_for(lambda: _stored(server, ids))


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some clients send it
        ("gzip", lambda b: gzip.compress(b[:100]) + gzip.compress(b[100:])),  # two gzip members
    ],
)
def test_compressed_bodies(server: Server, client: httpx.Client, encoding: str, compress: object) -> None:
    req, ids = api_request_logs(4)
    body = compress(req.SerializeToString())  # type: ignore[operator]
    r = client.post("/v1/logs", content=body, headers={**PB, "Content-Encoding": encoding})
    assert r.status_code == 200, r.content
    assert wait_for(lambda: _stored(server, ids))


def test_chunked_body_without_content_length(server: Server, client: httpx.Client) -> None:
    req, ids = api_request_logs(50)
    body = req.SerializeToString()

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    r = client.post("/v1/logs", content=chunks(), headers=PB)
    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert r.status_code == 200
    assert wait_for(lambda: _stored(server, ids))


@pytest.mark.parametrize("json_body", [False, True])
def test_root_path_sniffs_the_signal(server: Server, client: httpx.Client, json_body: bool) -> None:
    req, ids = api_request_logs(2)
    if json_body:
        from google.protobuf import json_format

        r = client.post("/", content=json_format.MessageToJson(req), headers=JS)
    else:
        r = client.post("/", content=req.SerializeToString(), headers=PB)
    assert r.status_code == 200, r.content
    assert wait_for(lambda: _stored(server, ids))


def test_root_path_with_an_unknown_payload_is_400(client: httpx.Client) -> None:
    r = client.post("/", content=b'{"hello": 1}', headers=JS)
    assert r.status_code == 400
    assert "/v1/logs" in r.json()["message"]


def test_undecodable_protobuf_is_400_with_a_protobuf_status(client: httpx.Client) -> None:
    r = client.post("/v1/logs", content=b"\x0a\xff\xff\xff\xff\x0f garbage", headers=PB)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/x-protobuf"
    status = status_pb2.Status.FromString(r.content)
    assert status.code == 3  # INVALID_ARGUMENT
    assert "decode" in status.message


def test_undecodable_json_is_400_with_a_json_status(client: httpx.Client) -> None:
    r = client.post("/v1/logs", content=b'{"resourceLogs": [', headers=JS)
    assert r.status_code == 400
    body = r.json()
    assert body["code"] == 3 and body["message"]


def test_wrong_json_types_are_400(client: httpx.Client) -> None:
    r = client.post("/v1/logs", content=b'{"resourceLogs": {"not": "a list"}}', headers=JS)
    assert r.status_code == 400


def test_oversized_body_is_413(client: httpx.Client) -> None:
    r = client.post("/v1/logs", content=b"\0" * (LIMIT + 1), headers=PB)
    assert r.status_code == 413
    assert status_pb2.Status.FromString(r.content).code == 8


def test_oversized_chunked_body_is_413(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(LIMIT // 65536 + 2):
            yield b"\0" * 65536

    r = client.post("/v1/logs", content=chunks(), headers=PB)
    assert r.status_code == 413


def test_gzip_bomb_is_413_after_decompression(client: httpx.Client) -> None:
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < LIMIT
    r = client.post("/v1/logs", content=bomb, headers={**PB, "Content-Encoding": "gzip"})
    assert r.status_code == 413


def test_truncated_gzip_is_400(client: httpx.Client) -> None:
    req, _ = api_request_logs(3)
    r = client.post(
        "/v1/logs",
        content=gzip.compress(req.SerializeToString())[:-20],
        headers={**PB, "Content-Encoding": "gzip"},
    )
    assert r.status_code == 400


@pytest.mark.parametrize("ctype", ["text/plain", "application/xml", None])
def test_unknown_content_type_is_415(client: httpx.Client, ctype: str | None) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    r = client.post("/v1/logs", content=b"x", headers=headers)
    assert r.status_code == 415


def test_unknown_content_encoding_is_415(client: httpx.Client) -> None:
    r = client.post("/v1/logs", content=b"x", headers={**PB, "Content-Encoding": "br"})
    assert r.status_code == 415


def test_empty_protobuf_body_is_an_empty_success(client: httpx.Client) -> None:
    r = client.post("/v1/metrics", content=b"", headers=PB)
    assert r.status_code == 200 and r.content == b""


def test_empty_json_body_is_400(client: httpx.Client) -> None:
    r = client.post("/v1/traces", content=b"", headers=JS)
    assert r.status_code == 400


def test_partial_success_counts_rejected_records(server: Server, client: httpx.Client) -> None:
    req = ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    trace = uuid.uuid4().bytes
    for i in range(4):
        spans.add(
            name=f"s{i}",
            trace_id=trace,
            span_id=bytes([i + 1]) * 8,
            start_time_unix_nano=1_795_974_729_000_000_000,
            end_time_unix_nano=1_795_974_729_500_000_000,
        )
    spans[1].span_id = b"\x01" * 5  # a span id must be 8 bytes
    r = client.post("/v1/traces", content=req.SerializeToString(), headers=PB)
    assert r.status_code == 200
    resp = ExportTraceServiceResponse.FromString(r.content)
    assert resp.partial_success.rejected_spans == 1
    assert "span_id must be 8 bytes" in resp.partial_success.error_message
    hexid = trace.hex()
    assert wait_for(
        lambda: query(server.data, "select count(*) from spans where trace_id = ?", [hexid])[0][0] == 3
    )
    assert (
        query(server.data, "select count(*) from spans where name = 's1' and trace_id = ?", [hexid])[0][0]
        == 0
    )


def test_partial_success_in_json(client: httpx.Client) -> None:
    span = {
        "traceId": "00" * 16,
        "spanId": "0102",
        "name": "x",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
    }
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    r = client.post("/v1/traces", content=orjson.dumps(body), headers=JS)
    assert r.status_code == 200
    partial = r.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1"  # int64 as a string, as proto JSON writes it
    assert "span_id must be 8 bytes" in partial["errorMessage"]


def test_unknown_path_is_404_and_get_is_405(client: httpx.Client) -> None:
    assert client.post("/v1/profiles", content=b"", headers=PB).status_code == 404
    assert client.get("/v1/logs").status_code == 405
    assert client.get("/healthz").status_code == 200


def test_retry_of_the_same_payload_does_not_double_count(server: Server, client: httpx.Client) -> None:
    req, ids = api_request_logs(10)
    body = req.SerializeToString()
    for _ in range(3):
        assert client.post("/v1/logs", content=body, headers=PB).status_code == 200
    assert wait_for(lambda: _stored(server, ids))
    assert count_requests(server.data, "list_contains(?, request_id)", [ids]) == 10


def test_server_still_serves_after_all_of_the_above(server: Server, client: httpx.Client) -> None:
    req, _ = api_request_logs(1)
    assert client.post("/v1/logs", content=req.SerializeToString(), headers=PB).status_code == 200
    assert server.proc is not None and server.proc.poll() is None


def test_log_request_type_is_what_the_sdk_sends() -> None:
    req, _ = api_request_logs(1)
    assert ExportLogsServiceRequest.FromString(req.SerializeToString()) == req
