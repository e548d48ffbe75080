"""Real Claude Code request bodies (captured from the CLI, tests/data/claude-code-otlp) sent raw.

Every captured body is replayed with its original Content-Type over HTTP (and the gRPC captures over
gRPC); each must be accepted without rejections, and the lake must then hold exactly the rows that
mapping the same bodies directly gives (the transport, WAL and sealer lose and add nothing).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from collectors_support import CAPTURES, Server, query, wait_for
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from traceflow.otlp import decode as otlp

pytestmark = pytest.mark.realdata

RESPONSES: dict[str, Any] = {
    "logs": logs_service_pb2.ExportLogsServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
    "traces": trace_service_pb2.ExportTraceServiceResponse,
}
SERVICES = {
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
}


def captured_bodies() -> list[tuple[Path, dict[str, object]]]:
    """(body file, its .meta.json) for every captured request."""
    out = []
    for meta_path in sorted(CAPTURES.glob("*/otlp/*.meta.json")):
        stem = meta_path.name.removesuffix(".meta.json")
        bodies = [
            p
            for p in meta_path.parent.glob(stem + ".*")
            if not p.name.endswith((".meta.json", ".decoded.json"))
        ]
        if len(bodies) == 1:
            out.append((bodies[0], json.loads(meta_path.read_text())))
    return out


BODIES = captured_bodies()


def _signal(path: Path) -> otlp.Signal:
    name = path.name.split("-", 1)[1].split(".", 1)[0]
    assert name in ("logs", "metrics", "traces")
    return name  # type: ignore[return-value]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not BODIES:
        pytest.fail(f"no captured Claude Code bodies in {CAPTURES}")
    with Server(tmp_path_factory.mktemp("captured"), "--roll-interval", "0.2") as srv:
        yield srv


def test_every_captured_body_is_accepted_and_stored_exactly(server: Server) -> None:
    assert len(BODIES) > 100
    expected: dict[str, set[str]] = {"requests": set(), "events": set(), "spans": set()}
    state = otlp.MetricState()
    with (
        httpx.Client(base_url=server.http_url, timeout=30) as client,
        grpc.insecure_channel(server.grpc_target) as channel,
    ):
        for body_path, meta in BODIES:
            signal = _signal(body_path)
            body = body_path.read_bytes()
            if meta["transport"] == "grpc":
                raw = channel.unary_unary(SERVICES[signal])(body, timeout=10)
                resp = RESPONSES[signal].FromString(raw)
                ctype = "application/x-protobuf"
            else:
                ctype = str(meta["content_type"])
                r = client.post(str(meta["path"]), content=body, headers={"Content-Type": ctype})
                assert r.status_code == 200, (body_path, r.content[:300])
                if ctype == "application/json":
                    assert r.json() == {}, body_path  # no partialSuccess: nothing rejected
                    resp = RESPONSES[signal]()
                else:
                    resp = RESPONSES[signal].FromString(r.content)
            assert not resp.HasField("partial_success"), (body_path, resp)
            mapped = otlp.map_request(signal, otlp.parse_body(signal, body, ctype), state=state)
            for table in expected:
                expected[table] |= {row["event_id"] for row in getattr(mapped.parsed, table)}
    assert expected["requests"] and expected["events"] and expected["spans"]

    def stored(table: str) -> set[str]:
        return {r[0] for r in query(server.data, f"select event_id from {table}")}

    for table, ids in expected.items():
        assert wait_for(lambda t=table, i=ids: stored(t) == i, timeout_s=15), table  # type: ignore[misc]
    points = query(server.data, "select count(*) from metric_points where name = 'claude_code.token.usage'")[
        0
    ][0]
    assert points > 0
