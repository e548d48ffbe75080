"""The OpenTelemetry Python SDK's OTLP exporters (HTTP/protobuf and gRPC) as a real client.

Claude-Code-shaped telemetry (``api_request`` events, ``claude_code.token.usage`` delta counters,
beta ``claude_code.llm_request`` spans) goes through the SDK's batching processors and exporters into
a server on free ports, and the rows must appear in the lake.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from collectors_support import Server, query, wait_for
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

RESOURCE = Resource.create({"service.name": "claude-code", "service.version": "2.1.332", "os.type": "linux"})
DELTA: dict[type, AggregationTemporality] = {Counter: AggregationTemporality.DELTA}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("sdk-data"), "--roll-interval", "0.2") as srv:
        yield srv


def _exporters(server: Server, transport: str) -> tuple[LogRecordExporter, MetricExporter, SpanExporter]:
    if transport == "grpc":
        target = server.grpc_target
        return (
            GrpcLogExporter(endpoint=target, insecure=True),
            GrpcMetricExporter(endpoint=target, insecure=True, preferred_temporality=DELTA),
            GrpcSpanExporter(endpoint=target, insecure=True),
        )
    base = server.http_url
    gz = Compression.Gzip if transport == "http-gzip" else None
    return (
        HttpLogExporter(endpoint=f"{base}/v1/logs", compression=gz),
        HttpMetricExporter(endpoint=f"{base}/v1/metrics", preferred_temporality=DELTA, compression=gz),
        HttpSpanExporter(endpoint=f"{base}/v1/traces", compression=gz),
    )


def _api_request(session: str, prompt: str, rid: str, i: int) -> dict[str, Any]:
    return {
        "user.id": "0958b0c8144faf33",
        "session.id": session,
        "terminal.type": "dumb",
        "event.name": "api_request",
        "event.timestamp": "2026-11-29T17:52:09.625Z",
        "event.sequence": i,
        "prompt.id": prompt,
        "model": "claude-opus-5-5",
        "input_tokens": 10 + i,
        "output_tokens": 100 + i,
        "cache_read_tokens": 1000 * (i + 1),
        "cache_creation_tokens": 50 + i,
        "cost_usd": 0.01,
        "duration_ms": 1200,
        "ttft_ms": 300,
        "request_id": rid,
    }


@pytest.mark.parametrize("transport", ["http", "http-gzip", "grpc"])
def test_sdk_exporters_land_in_the_lake(server: Server, transport: str) -> None:
    log_exp, metric_exp, span_exp = _exporters(server, transport)
    session, prompt = str(uuid.uuid4()), str(uuid.uuid4())
    n = 300  # several batches of the SDK's batch processor (max 512 per export)
    rids = [f"req_{uuid.uuid4().hex}" for _ in range(n)]

    logs = LoggerProvider(resource=RESOURCE)
    logs.add_log_record_processor(BatchLogRecordProcessor(log_exp, max_export_batch_size=128))
    logger = logs.get_logger("com.anthropic.claude_code.events", "2.1.332")
    t0 = time.time_ns()
    for i, rid in enumerate(rids):
        logger.emit(
            LogRecord(
                timestamp=t0 + i * 1_000_000,
                observed_timestamp=t0 + i * 1_000_000,
                body="claude_code.api_request",
                attributes=_api_request(session, prompt, rid, i),
                event_name="claude_code.api_request",
            )
        )
    assert logs.force_flush(10_000)

    reader = PeriodicExportingMetricReader(metric_exp, export_interval_millis=3_600_000)
    meters = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    usage = meters.get_meter("com.anthropic.claude_code", "2.1.332").create_counter(
        "claude_code.token.usage", unit="tokens"
    )
    for kind, value in (("input", 7), ("output", 70), ("cacheRead", 700), ("cacheCreation", 17)):
        usage.add(value, {"session.id": session, "type": kind, "model": "claude-opus-5-5"})
    assert meters.force_flush(10_000)

    tracer_provider = TracerProvider(resource=RESOURCE)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exp))
    tracer = tracer_provider.get_tracer("com.anthropic.claude_code.tracing", "2.1.332")
    llm: dict[str, str | int] = {
        "session.id": session,
        "model": "claude-opus-5-5",
        "request_id": rids[0],
        "input_tokens": 10,
        "output_tokens": 100,
        "cache_read_tokens": 1000,
        "cache_creation_tokens": 50,
    }
    with (
        tracer.start_as_current_span("claude_code.interaction", attributes={"session.id": session}),
        tracer.start_as_current_span("claude_code.llm_request", attributes=llm),
    ):
        pass
    assert tracer_provider.force_flush(10_000)
    for p in (logs, meters, tracer_provider):
        p.shutdown()

    def stored() -> bool:
        rows = query(
            server.data,
            "select count(*), sum(cache_read_tokens)::BIGINT, sum(output_tokens)::BIGINT from requests "
            "where session_id = ?",
            [session],
        )
        return bool(rows[0][0] == n)

    assert wait_for(stored, timeout_s=15)
    count, read, out = query(
        server.data,
        "select count(*), sum(cache_read_tokens)::BIGINT, sum(output_tokens)::BIGINT from requests "
        "where session_id = ?",
        [session],
    )[0]
    assert (count, read, out) == (n, sum(1000 * (i + 1) for i in range(n)), sum(100 + i for i in range(n)))
    assert wait_for(
        lambda: (
            query(
                server.data,
                "select sum(delta)::BIGINT from metric_points "
                "where session_id = ? and name = 'claude_code.token.usage'",
                [session],
            )[0][0]
            == 7 + 70 + 700 + 17
        )
    )
    assert wait_for(
        lambda: query(server.data, "select count(*) from spans where session_id = ?", [session])[0][0] == 2
    )
