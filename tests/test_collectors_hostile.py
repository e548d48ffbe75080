"""Hostile payloads (tests/payloads/manifest.json): each gets the right status, the server keeps
serving every other client, and rows already stored do not change."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from collectors_support import PAYLOADS, Server, api_request_logs, count_requests, query, wait_for
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

LIMIT = 4 << 20
CASES: list[dict[str, Any]] = json.loads((PAYLOADS / "manifest.json").read_text())["cases"]
RESPONSES: dict[str, Any] = {
    "/v1/logs": ExportLogsServiceResponse,
    "/v1/metrics": ExportMetricsServiceResponse,
    "/v1/traces": ExportTraceServiceResponse,
}
SNAPSHOT = (
    "select event_id, cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, attributes "
    "from requests where list_contains(?, request_id) order by event_id"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(
        tmp_path_factory.mktemp("hostile"), "--max-body-bytes", str(LIMIT), "--roll-interval", "0.2"
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def baseline(server: Server) -> tuple[list[str], list[tuple[Any, ...]]]:
    req, ids = api_request_logs(30, tag="baseline")
    r = httpx.post(
        server.http_url + "/v1/logs",
        content=req.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert r.status_code == 200
    assert wait_for(lambda: count_requests(server.data, "list_contains(?, request_id)", [ids]) == 30)
    return ids, query(server.data, SNAPSHOT, [ids])


def _body(case: dict[str, Any]) -> bytes:
    if "file" in case:
        return (PAYLOADS / str(case["file"])).read_bytes()
    if case["generate"] == "oversized":
        return b"\x0a" + b"\xff" * (LIMIT + 10)
    if case["generate"] == "huge-attribute":
        req, _ = api_request_logs(1, tag="huge")
        rec = req.resource_logs[0].scope_logs[0].log_records[0]
        attr = rec.attributes.add()
        attr.key = "huge"
        attr.value.string_value = "x" * (3 << 20)
        return bytes(req.SerializeToString())
    raise AssertionError(case)


def _name(case: dict[str, Any]) -> str:
    return f"{case.get('file') or case['generate']}->{case['path']}:{case['type']}:{case.get('encoding', '')}"


@pytest.mark.parametrize("case", CASES, ids=_name)
def test_hostile_payload(
    server: Server, baseline: tuple[list[str], list[tuple[Any, ...]]], case: dict[str, Any]
) -> None:
    headers = {"Content-Type": case["type"]}
    if "encoding" in case:
        headers["Content-Encoding"] = case["encoding"]
    # another client keeps exporting while the hostile payload is handled
    good_status: list[int] = []

    def other_client() -> None:
        req, _ = api_request_logs(5, tag="bystander")
        good_status.append(
            httpx.post(
                server.http_url + "/v1/logs",
                content=req.SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=30,
            ).status_code
        )

    bystander = threading.Thread(target=other_client)
    bystander.start()
    r = httpx.post(server.http_url + case["path"], content=_body(case), headers=headers, timeout=60)
    bystander.join()
    assert r.status_code == case["status"], r.content[:500]
    assert good_status == [200]
    if r.status_code == 200 and case.get("rejected"):
        if case["type"] == "application/json":
            partial = r.json()["partialSuccess"]
            assert int(next(v for k, v in partial.items() if k.startswith("rejected"))) == case["rejected"]
        else:
            resp = RESPONSES[case["path"]].FromString(r.content)
            assert resp.partial_success.error_message
    elif r.status_code == 200:
        assert r.content in (b"", b"{}")  # full success, no partialSuccess
    assert server.proc is not None and server.proc.poll() is None
    ids, rows = baseline
    assert query(server.data, SNAPSHOT, [ids]) == rows


def test_after_the_corpus(server: Server, baseline: tuple[list[str], list[tuple[Any, ...]]]) -> None:
    """Everything acknowledged got sealed; the record the mapper refused was not stored."""
    assert wait_for(lambda: not list((server.data / "v1/_state/collector/wal").glob("*.wal")), 15)
    assert count_requests(server.data, "request_id = 'req_hostile_nan'") == 0
    assert wait_for(lambda: count_requests(server.data, "request_id like 'req_huge%'") == 1)
    ids, rows = baseline
    assert query(server.data, SNAPSHOT, [ids]) == rows
    assert not list((server.data / "v1/_state/collector/quarantine").glob("*"))
