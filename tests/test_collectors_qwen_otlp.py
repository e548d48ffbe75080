"""Qwen Code's OTLP log events, sent by the OpenTelemetry Python SDK's exporters to a real server.

Qwen Code (QwenLM/qwen-code, a Gemini CLI fork; tests/data/SOURCES.md) emits ``qwen-code.api_response``
log records under ``service.name = qwen-code`` with Gemini CLI's token attributes
(``input_token_count`` = ``promptTokenCount``, ``output_token_count`` = ``candidatesTokenCount``,
``cached_content_token_count``, ``thoughts_token_count``), ``session.id``, ``model``, ``duration_ms`` and
``response_id``. The records sent here carry the usage of the assistant records of a Qwen chat
fixture; the lake's rows must hold the counts sent (worked out here from the fixture's JSON) and the
same tokens as the Qwen chat importer gives for that fixture.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from collectors_support import Server, query, wait_for
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.resources import Resource

from traceflow.importers.base import FileContext
from traceflow.importers.qwen import IMPORTER

QWEN = Path(__file__).resolve().parent / "data" / "agent-logs" / "qwen"
CHAT = next(QWEN.rglob("e2f3a4b5-c6d7-48e9-a0b1-c2d3e4f5a6b3.jsonl"))
RESOURCE = Resource.create({"service.name": "qwen-code", "service.version": "0.11.1"})
KINDS = "cold_input_tokens, cache_read_tokens, output_tokens, reasoning_tokens"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with Server(tmp_path_factory.mktemp("qwen-otlp"), "--roll-interval", "0.2") as srv:
        yield srv


def _exporter(server: Server, transport: str) -> LogRecordExporter:
    if transport == "grpc":
        return GrpcLogExporter(endpoint=server.grpc_target, insecure=True)
    return HttpLogExporter(endpoint=f"{server.http_url}/v1/logs")


def _usages() -> list[tuple[str, dict[str, int]]]:
    """(model, usageMetadata) of each assistant record of the fixture that has usage (the fixture
    ends with a torn line, as a chat being written does)."""
    out = []
    for line in CHAT.read_bytes().splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if rec.get("type") == "assistant" and rec.get("usageMetadata"):
            out.append((rec["model"], rec["usageMetadata"]))
    return out


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_qwen_api_responses_land_in_the_lake(server: Server, transport: str) -> None:
    usages = _usages()
    assert len(usages) >= 3 and any(u.get("thoughtsTokenCount") for _, u in usages)
    session = str(uuid.uuid4())
    logs = LoggerProvider(resource=RESOURCE)
    logs.add_log_record_processor(BatchLogRecordProcessor(_exporter(server, transport)))
    logger = logs.get_logger("qwen-code", "0.11.1")
    t0 = time.time_ns()
    for i, (model, u) in enumerate(usages):
        attrs: dict[str, Any] = {
            "session.id": session,
            "event.name": "qwen-code.api_response",
            "event.timestamp": "2026-03-12T09:00:06.412Z",
            "response_id": f"chatcmpl-{i}",
            "model": model,
            "status_code": 200,
            "duration_ms": 1500 + i,
            "input_token_count": u.get("promptTokenCount", 0),
            "output_token_count": u.get("candidatesTokenCount", 0),
            "cached_content_token_count": u.get("cachedContentTokenCount", 0),
            "thoughts_token_count": u.get("thoughtsTokenCount", 0),
            "total_token_count": u.get("totalTokenCount", 0),
            "prompt_id": f"{session}########{i}",
        }
        logger.emit(LogRecord(timestamp=t0 + i * 1_000_000, body="API response.", attributes=attrs))
    # a user prompt and an error response: events, not requests
    logger.emit(
        LogRecord(
            timestamp=t0,
            body="User prompt. Length: 5.",
            attributes={"session.id": session, "event.name": "qwen-code.user_prompt", "prompt_length": 5},
        )
    )
    logger.emit(
        LogRecord(
            timestamp=t0,
            body="API error.",
            attributes={"session.id": session, "event.name": "qwen-code.api_error", "model": "qwen3-max"},
        )
    )
    assert logs.force_flush(10_000)
    logs.shutdown()

    sums = ", ".join(f"sum({k})::BIGINT" for k in KINDS.split(", "))
    sql = f"select count(*), {sums} from requests where session_id = ?"
    assert wait_for(lambda: query(server.data, sql, [session])[0][0] == len(usages), timeout_s=15)
    got = query(server.data, sql, [session])[0]
    p = sum(u.get("promptTokenCount", 0) for _, u in usages)
    c = sum(u.get("cachedContentTokenCount", 0) for _, u in usages)
    o = sum(u.get("candidatesTokenCount", 0) for _, u in usages)
    th = sum(u.get("thoughtsTokenCount", 0) for _, u in usages)
    assert tuple(got) == (len(usages), p - c, c, o + th, th)
    rows = query(
        server.data,
        "select agent, model, duration_ms, request_id, cache_write_tokens from requests where session_id = ? "
        "order by duration_ms",
        [session],
    )
    assert [r[0] for r in rows] == ["qwen-code"] * len(usages)
    assert [r[1] for r in rows] == [m for m, _ in usages]
    assert [r[2] for r in rows] == [1500 + i for i in range(len(usages))]
    assert [r[3] for r in rows] == [f"chatcmpl-{i}" for i in range(len(usages))]
    assert all(r[4] is None for r in rows)  # Qwen records no cache write: unknown, not zero
    assert wait_for(
        lambda: (
            sorted(
                r[0] for r in query(server.data, "select name from events where session_id = ?", [session])
            )
            == ["api_error", "user_prompt"]
        ),
        timeout_s=15,
    )

    # the Qwen chat importer on the same records gives the same tokens; one difference, named: an
    # all-zero usage is a request here (an api_response event was sent, mapped as Gemini CLI's is)
    # and no row in the importer (tests/test_import_qwen.py), which adds nothing to the sums
    imported = IMPORTER.parse(CHAT.read_bytes(), FileContext(path=CHAT, state={})).requests
    zero = [u for _, u in usages if not u.get("promptTokenCount") and not u.get("candidatesTokenCount")]
    assert len(zero) == 1 and len(imported) == len(usages) - 1
    assert tuple(got[1:]) == tuple(sum(r[k] or 0 for r in imported) for k in KINDS.split(", "))
