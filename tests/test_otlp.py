"""OTLP decoding and mapping (traceflow.otlp.decode): the hand-built fixtures, the real Claude Code captures.

Expected numbers come from tests/data/agent-examples/README.md (the files: traceflow/examples and
tests/data/agent-examples), from the fake API's formula in
tests/fake_anthropic.py ("Usage numbers": request k has input 11+100(k-1),
output 22+100(k-1), cache creation 333+100(k-1) = 5m 300+100(k-1) + 1h 33, cache read
4444+100(k-1)), and from the derivation rules of docs/schemas.md#the-four-token-kinds worked by hand.
"""

from __future__ import annotations

import json
import pickle
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.conftest import EXAMPLES
from traceflow.errors import DecodeError
from traceflow.otlp import decode as otlp
from traceflow.rows import iso_micros, stable_id

JSON = "application/json"
PB = "application/x-protobuf"
RUNS = [
    "grpc-full",
    "json-defaults",
    "json-extras",
    "json-full",
    "json-hi-default-traffic-proxylog",
    "json-options-cumulative",
    "json-rawbodies",
    "protobuf-full",
    "v2.1.197-json-full",
]
FIXTURES = [
    "claude-otlp-logs.json",
    "claude-otlp-metrics-delta.json",
    "codex-otlp-logs.json",
    "gemini-otlp-logs.json",
    "otlp-cumulative-reset.json",
]
KINDS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


# -- helpers ------------------------------------------------------------------------------------------
def fixture(testdata: Path, name: str) -> tuple[otlp.Signal, bytes]:
    """A hand-written OTLP/JSON file: a packaged example log (``traceflow/examples``) or one of the
    metric streams kept in ``tests/data/agent-examples``."""
    path = EXAMPLES / name
    body = (path if path.is_file() else testdata / "agent-examples" / name).read_bytes()
    signal = otlp.signal_of_json(orjson.loads(body))
    assert signal is not None
    return signal, body


def mapped(signal: otlp.Signal, body: bytes, ctype: str = JSON, **kw: Any) -> otlp.Mapped:
    state = kw.pop("state", None)
    if state is None:
        state = otlp.MetricState(0)
    return otlp.map_request(signal, otlp.parse_body(signal, body, ctype), state=state, **kw)


def captured(testdata: Path, run: str) -> Iterator[tuple[str, otlp.Signal, bytes, str]]:
    """(name, signal, body, content type) per captured request of a run, in arrival order."""
    folder = testdata / "claude-code-otlp" / run / "otlp"
    for meta_path in sorted(folder.glob("*.meta.json")):
        meta = json.loads(meta_path.read_text())
        stem = meta_path.name[: -len(".meta.json")]
        found = re.search(r"logs|metrics|traces", meta["path"])
        assert found
        signal: otlp.Signal = found.group(0)  # type: ignore[assignment]
        pb = folder / f"{stem}.pb"
        if pb.exists():  # protobuf and gRPC captures: the serialized request message
            yield stem, signal, pb.read_bytes(), PB
        else:
            (body,) = [
                p
                for p in folder.glob(f"{stem}*.json")
                if not p.name.endswith((".meta.json", ".decoded.json"))
            ]
            yield stem, signal, body.read_bytes(), meta["content_type"]


def map_run(testdata: Path, run: str, **kw: Any) -> list[otlp.Mapped]:
    state = otlp.MetricState(0)
    return [
        otlp.map_request(s, otlp.parse_body(s, b, ct), state=state, **kw)
        for _, s, b, ct in captured(testdata, run)
    ]


def fake_api(k: int) -> dict[str, int]:
    """The fake Anthropic API's usage for its k-th request (tests/fake_anthropic.py)."""
    step = 100 * (k - 1)
    return {
        "cold_input_tokens": 11 + step,
        "output_tokens": 22 + step,
        "cache_write_tokens": 333 + step,
        "cache_read_tokens": 4444 + step,
    }


def without(row: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in keys}


# -- the hand-built fixtures ----------------------------------------------------------------------------
def test_claude_logs_fixture(testdata: Path) -> None:
    m = mapped(*fixture(testdata, "claude-otlp-logs.json"))
    assert (m.rejected, m.message) == (0, "")
    typed, stringly = m.parsed.requests
    assert {
        k: typed[k] for k in (*KINDS, "cache_write_5m_tokens", "cache_write_1h_tokens", "reasoning_tokens")
    } == {
        "cold_input_tokens": 3,
        "cache_read_tokens": 89356,
        "cache_write_tokens": 161,
        "output_tokens": 97,
        "cache_write_5m_tokens": None,
        "cache_write_1h_tokens": None,
        "reasoning_tokens": None,
    }
    assert typed["model"] == "claude-sonnet-5"
    assert typed["request_id"] == "req_011CPkCWc21qrE6dGwSHMcw1"
    assert typed["event_id"] == stable_id("anthropic-request", "req_011CPkCWc21qrE6dGwSHMcw1")
    assert typed["duration_ms"] == 4211
    assert typed["ended_at"] == 1788000004211000  # timeUnixNano
    assert typed["started_at"] == 1788000004211000 - 4211_000
    assert typed["prompt_id"] == "550e8400-e29b-41d4-a716-446655440000"
    assert typed["session_id"] == "0a9a8045-53e9-44b1-83fb-aafc6e1f4f0b"
    assert typed["agent"] == "claude-code" and typed["agent_version"] == "2.1.239"
    assert typed["cost_usd"] == pytest.approx(0.0286)
    assert typed["source"] == "otlp"
    # Record 3: numbers as strings (before 2.1.122), no request id / prompt id / event.timestamp.
    assert [stringly[k] for k in KINDS] == [512, 0, 0, 12]
    assert stringly["duration_ms"] == 640 and stringly["request_id"] is None and stringly["prompt_id"] is None
    assert stringly["model"] == "claude-haiku-4-5"
    assert stringly["event_id"] == stable_id(
        "claude-otlp",
        "0a9a8045-53e9-44b1-83fb-aafc6e1f4f0b",
        1788000009000000000,
        "claude-haiku-4-5",
        (512, 0, 0, 12),
    )
    (prompt,) = m.parsed.events
    assert prompt["name"] == "user_prompt"
    # The record time is timeUnixNano (as for requests). The fixture's event.timestamp strings are
    # 80 minutes earlier than its timeUnixNano values (1788000000 s is 10:40:00Z), so they are not used.
    assert prompt["timestamp"] == 1788000000_000000 == iso_micros("2026-08-29T10:40:00Z")
    assert prompt["prompt_id"] == "550e8400-e29b-41d4-a716-446655440000"
    assert "prompt" not in prompt["attributes"]  # content is dropped by default
    assert prompt["attributes"]["prompt_length"] == 42
    assert prompt["attributes"]["resource"]["service.name"] == "claude-code"


def test_content_is_kept_only_when_asked(testdata: Path) -> None:
    signal, body = fixture(testdata, "claude-otlp-logs.json")
    kept = mapped(signal, body, keep_content=True)
    assert kept.parsed.events[0]["attributes"]["prompt"] == "<REDACTED>"


def test_claude_metrics_delta_fixture(testdata: Path) -> None:
    m = mapped(*fixture(testdata, "claude-otlp-metrics-delta.json"))
    points = m.parsed.metric_points
    assert {p["type"]: p["delta"] for p in points} == {
        "input": 3,
        "cacheRead": 89356,
        "cacheCreation": 161,
        "output": 97,
    }
    assert {p["temporality"] for p in points} == {"delta"}
    assert {p["name"] for p in points} == {"claude_code.token.usage"}
    assert all(p["session_id"] == "0a9a8045-53e9-44b1-83fb-aafc6e1f4f0b" for p in points)
    assert all(p["start_time"] == 1787999970000000 and p["time"] == 1788000030000000 for p in points)
    # the metric sums equal the api_request event of the logs fixture
    logs = mapped(*fixture(testdata, "claude-otlp-logs.json"))
    first = logs.parsed.requests[0]
    assert [first[k] for k in KINDS] == [
        {p["type"]: p["delta"] for p in points}[t] for t in ("input", "cacheRead", "cacheCreation", "output")
    ]


def test_codex_fixture(testdata: Path) -> None:
    m = mapped(*fixture(testdata, "codex-otlp-logs.json"))
    (req,) = m.parsed.requests  # the token-less second response.completed adds nothing
    assert req["cold_input_tokens"] == 15025 - 13952 == 1073
    assert req["cache_read_tokens"] == 13952
    assert req["output_tokens"] == 84 and req["reasoning_tokens"] == 22
    assert req["session_id"] == "019a9776-0a34-7842-8627-112b63d66e90"
    assert req["agent"] == "codex" and req["model"] == "gpt-5.5" and req["ttft_ms"] == 640
    (event,) = m.parsed.events
    assert event["name"] == "api_request" and event["agent"] == "codex"


def test_gemini_fixture(testdata: Path) -> None:
    m = mapped(*fixture(testdata, "gemini-otlp-logs.json"))
    (req,) = m.parsed.requests  # the operation.details record is not a second request
    assert req["cold_input_tokens"] == 48210 - 40960 == 7250
    assert req["cache_read_tokens"] == 40960
    assert req["cache_write_tokens"] is None
    assert req["output_tokens"] == 312 + 590 and req["reasoning_tokens"] == 590
    assert req["duration_ms"] == 2140
    assert req["prompt_id"] == "c1d2e3f4-0000-4000-8000-000000000003########3"
    assert req["agent"] == "gemini-cli"
    (details,) = m.parsed.events
    assert details["name"] == "gen_ai.client.inference.operation.details"


def _api_response_logs(service: str, prefix: str) -> ExportLogsServiceRequest:
    """One ``<prefix>api_response`` record (counts of docs/schemas.md#gemini-cli's example)."""
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.add(key="service.name").value.string_value = service
    r = rl.scope_logs.add().log_records.add(
        time_unix_nano=1788000002140000000, body={"string_value": "API response."}
    )
    counts = {"input_token_count": 48210, "cached_content_token_count": 40960, "output_token_count": 312}
    for key, n in (*counts.items(), ("thoughts_token_count", 590), ("duration_ms", 2140)):
        r.attributes.add(key=key).value.int_value = n
    for key, v in (("event.name", f"{prefix}api_response"), ("session.id", "s-q"), ("model", "qwen3-max")):
        r.attributes.add(key=key).value.string_value = v
    r.attributes.add(key="response_id").value.string_value = "chatcmpl-q"
    return req


@pytest.mark.parametrize("service", ["qwen-code", "some-wrapper"])  # by service, or by the prefix alone
@pytest.mark.parametrize("ctype", [JSON, PB])
def test_qwen_api_response_is_mapped_as_gemini_cli(service: str, ctype: str) -> None:
    def one(req: ExportLogsServiceRequest) -> dict[str, Any]:
        body = req.SerializeToString() if ctype == PB else json_format.MessageToJson(req).encode()
        (row,) = mapped("logs", body, ctype).parsed.requests
        return row

    qwen = one(_api_response_logs(service, "qwen-code."))
    gemini = one(_api_response_logs("gemini-cli", "gemini_cli."))
    kinds = (*KINDS, "reasoning_tokens", "duration_ms", "model", "session_id")
    assert [qwen[k] for k in kinds] == [48210 - 40960, 40960, None, 312 + 590, 590, 2140, "qwen3-max", "s-q"]
    assert [qwen[k] for k in kinds] == [gemini[k] for k in kinds]
    assert (qwen["agent"], gemini["agent"]) == ("qwen-code", "gemini-cli")
    assert qwen["request_id"] == "chatcmpl-q" and qwen["event_id"] != gemini["event_id"]


def test_cumulative_reset_fixture(testdata: Path) -> None:
    signal, body = fixture(testdata, "otlp-cumulative-reset.json")
    # the receiver started before t0 (the fixture's _comment): every series start is known and later
    m = mapped(signal, body, state=otlp.MetricState(created_at_ns=0))
    assert [p["delta"] for p in m.parsed.metric_points] == [1000, 1500, 300, 200]
    assert [p["value"] for p in m.parsed.metric_points] == [1000, 2500, 300, 500]
    assert m.dropped == 1 and m.rejected == 0
    assert {p["temporality"] for p in m.parsed.metric_points} == {"cumulative"}
    assert {p["type"] for p in m.parsed.metric_points} == {"input"}


def test_cumulative_series_older_than_the_receiver_start_as_baselines(testdata: Path) -> None:
    signal, body = fixture(testdata, "otlp-cumulative-reset.json")
    late = otlp.MetricState(created_at_ns=1788000026 * 10**9)  # after both series started
    m = mapped(signal, body, state=late)
    assert [p["delta"] for p in m.parsed.metric_points] == [None, 1500, None, 200]


def test_metric_state_survives_a_restart_between_requests(testdata: Path) -> None:
    signal, body = fixture(testdata, "otlp-cumulative-reset.json")
    doc = orjson.loads(body)
    points = doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"]
    deltas = []
    state = otlp.MetricState(0)
    for p in points:
        doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"] = [p]
        state = otlp.MetricState.from_dict(orjson.loads(orjson.dumps(state.to_dict())))
        state = pickle.loads(pickle.dumps(state))
        m = mapped(signal, orjson.dumps(doc), state=state)
        deltas += [r["delta"] for r in m.parsed.metric_points]
    assert deltas == [1000, 1500, 300, 200]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_json_and_protobuf_give_identical_rows(testdata: Path, name: str) -> None:
    signal, body = fixture(testdata, name)
    msg = otlp.parse_body(signal, body, JSON)
    assert msg == otlp.parse_json_slow(signal, orjson.loads(body))  # the ParseDict reference decoder
    pb = msg.SerializeToString()
    assert mapped(signal, body).parsed == mapped(signal, pb, PB).parsed


@pytest.mark.parametrize("name", FIXTURES)
def test_same_record_twice_gives_the_same_event_ids(testdata: Path, name: str) -> None:
    signal, body = fixture(testdata, name)
    a, b = mapped(signal, body), mapped(signal, body)
    for table in ("requests", "events", "spans"):
        assert [r["event_id"] for r in a.parsed.tables()[table]] == [
            r["event_id"] for r in b.parsed.tables()[table]
        ]
    ids = [r["event_id"] for rows in a.parsed.tables().values() for r in rows]
    assert len(ids) == len(set(ids))


def test_a_record_with_unreadable_tokens_is_rejected_not_raised() -> None:
    doc = orjson.loads((EXAMPLES / "claude-otlp-logs.json").read_bytes())
    attrs = doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"][2]["attributes"]
    for kv in attrs:
        if kv["key"] == "input_tokens":
            kv["value"] = {"stringValue": "a lot"}
    m = mapped("logs", orjson.dumps(doc))
    assert m.rejected == 1
    assert "api_request" in m.message and "a lot" in m.message
    assert [r["request_id"] for r in m.parsed.requests] == ["req_011CPkCWc21qrE6dGwSHMcw1"]
    assert len(m.parsed.events) == 1


# -- the real Claude Code captures ------------------------------------------------------------------------
@pytest.mark.parametrize("run", RUNS)
def test_captured_payloads_decode_and_match_the_fake_api(testdata: Path, run: str) -> None:
    results = map_run(testdata, run)
    assert all(m.rejected == 0 and m.message == "" for m in results)
    requests = [r for m in results for r in m.parsed.requests]
    from_logs = [r for r in requests if r["attributes"].get("derived_from") != "span"]
    assert from_logs, run
    for r in requests:  # every row, log or span: the digits of the fake API's markers
        assert (r["cold_input_tokens"] % 100, r["output_tokens"] % 100) == (11, 22), r
        assert (r["cache_write_tokens"] % 100, r["cache_read_tokens"] % 100) == (33, 44), r
    for r in from_logs:
        k = int(r["request_id"].removeprefix("req_fake"))
        want = fake_api(k)
        if run == "json-extras" and r["cache_read_tokens"] > 2_000_000:  # HUGE_USAGE: +2,000,000 read
            want["cache_read_tokens"] += 2_000_000
        assert {c: r[c] for c in KINDS} == want, r
        if run.startswith("v2.1.197"):  # no 5m/1h split before 2.1.332
            assert r["cache_write_5m_tokens"] is None and r["cache_write_1h_tokens"] is None
        else:
            assert (r["cache_write_5m_tokens"], r["cache_write_1h_tokens"]) == (300 + 100 * (k - 1), 33)
        assert r["event_id"] == stable_id("anthropic-request", r["request_id"])
        assert r["session_id"] and r["prompt_id"] and r["model"].startswith("claude-opus-")
        assert r["ended_at"] - r["started_at"] == round(r["duration_ms"] * 1000)


@pytest.mark.parametrize("run", RUNS)
def test_captured_token_metrics_add_up_to_the_requests(testdata: Path, run: str) -> None:
    """The metric deltas (delta or cumulative runs) sum to the per-request events' tokens."""
    results = map_run(testdata, run)
    per_request: Counter[str] = Counter()
    seen = set()
    for r in (r for m in results for r in m.parsed.requests):
        if r["event_id"] not in seen:
            seen.add(r["event_id"])
            for kind, col in zip(("input", "cacheRead", "cacheCreation", "output"), KINDS, strict=True):
                per_request[kind] += r[col]
    metric: Counter[str] = Counter()
    for p in (p for m in results for p in m.parsed.metric_points):
        if p["name"] == "claude_code.token.usage":
            assert p["delta"] is not None
            metric[p["type"]] += int(p["delta"])
    assert metric == per_request


def test_captured_cumulative_run_is_cumulative(testdata: Path) -> None:
    points = [p for m in map_run(testdata, "json-options-cumulative") for p in m.parsed.metric_points]
    inputs = [p for p in points if p["name"] == "claude_code.token.usage" and p["type"] == "input"]
    assert {p["temporality"] for p in inputs} == {"cumulative"}
    assert [p["value"] for p in inputs] == [11, 122, 333, 644]  # 11, +111, +211, +311
    assert [p["delta"] for p in inputs] == [11, 111, 211, 311]


def test_json_protobuf_and_grpc_runs_give_the_same_rows(testdata: Path) -> None:
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        a = r["attributes"]
        return (
            r["request_id"],
            *(r[c] for c in KINDS),
            r["cache_write_5m_tokens"],
            r["cache_write_1h_tokens"],
            r["model"],
            a.get("query_source"),
            a.get("derived_from"),
            r["parent_session_id"] is not None,
            r["prompt_id"] is not None,
        )

    runs = {
        run: sorted((key(r) for m in map_run(testdata, run) for r in m.parsed.requests), key=repr)
        for run in ("json-full", "protobuf-full", "grpc-full")
    }
    assert runs["json-full"] == runs["protobuf-full"] == runs["grpc-full"]
    assert len(runs["json-full"]) == 40  # 20 requests, each as an api_request event and an llm_request span


@pytest.mark.parametrize("run", ["json-full", "json-options-cumulative", "v2.1.197-json-full"])
def test_captured_json_and_its_protobuf_encoding_give_identical_rows(testdata: Path, run: str) -> None:
    state_json, state_pb = otlp.MetricState(0), otlp.MetricState(0)
    for _, signal, body, ctype in captured(testdata, run):
        msg = otlp.parse_body(signal, body, ctype)
        assert msg == otlp.parse_json_slow(signal, orjson.loads(body))
        from_json = otlp.map_request(signal, msg, state=state_json)
        pb = msg.SerializeToString()
        from_pb = otlp.map_request(signal, otlp.parse_body(signal, pb, PB), state=state_pb)
        assert from_json.parsed == from_pb.parsed


def test_span_and_api_request_of_one_request_share_the_event_id(testdata: Path) -> None:
    requests = [r for m in map_run(testdata, "json-full") for r in m.parsed.requests]
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in requests:
        by_id.setdefault(r["event_id"], []).append(r)
    assert len(by_id) == 20
    for copies in by_id.values():
        assert sorted(r["attributes"].get("derived_from", "log") for r in copies) == ["log", "span"]
        log, span = sorted(copies, key=lambda r: r["attributes"].get("derived_from", "log"))
        assert [log[c] for c in KINDS] == [span[c] for c in KINDS]
        assert log["request_id"] == span["request_id"]
        assert (log["session_id"], log["parent_session_id"]) == (
            span["session_id"],
            span["parent_session_id"],
        )
        # the span copy is older, so the lake keeps the richer api_request copy (prompt id, cost, 5m/1h)
        assert span["ingested_at"] == span["ended_at"] and span["prompt_id"] is None
        assert span["ttft_ms"] == log["ttft_ms"]


def test_subagent_requests_get_their_own_session_under_the_parent(testdata: Path) -> None:
    requests = [r for m in map_run(testdata, "json-full") for r in m.parsed.requests]
    sub = [r for r in requests if r["attributes"].get("agent_id")]
    assert {r["request_id"] for r in sub} == {"req_fake0020", "req_fake0021"}
    for r in sub:
        assert r["session_id"] == f"agent-{r['attributes']['agent_id']}"
        assert r["parent_session_id"] == r["attributes"]["session.id"]
    main = [r for r in requests if r["request_id"] in ("req_fake0019", "req_fake0022")]
    assert {r["session_id"] for r in main} == {sub[0]["parent_session_id"]}
    assert all(r["parent_session_id"] is None for r in main)


def test_captured_events_names_and_content(testdata: Path) -> None:
    results = map_run(testdata, "json-full")
    events = [e for m in results for e in m.parsed.events]
    names = Counter(e["name"] for e in events)
    assert names["user_prompt"] > 0 and names["tool_result"] > 0 and names["api_error"] == 1
    assert "api_request" not in names  # those are requests
    for e in events:
        assert (
            not {"prompt", "prompt_text", "response", "tool_input", "tool_parameters"}
            & e["attributes"].keys()
        )
    kept = [e for m in map_run(testdata, "json-full", keep_content=True) for e in m.parsed.events]
    assert any("tool_input" in e["attributes"] for e in kept if e["name"] == "tool_result")
    (error,) = [e for e in events if e["name"] == "api_error"]
    assert error["request_id"] and error["attributes"]["status_code"] == 400
    spans = [s for m in results for s in m.parsed.spans]
    assert len(spans) == 56 and all(s["trace_id"] and s["span_id"] for s in spans)
    for s in spans:
        assert "user_prompt" not in s["attributes"] and "full_command" not in s["attributes"]
        for ev in s["attributes"].get("events", []):
            assert "output" not in ev["attributes"]


# -- spans from other instrumentations ------------------------------------------------------------------
def span_request(attrs: dict[str, Any], service: str = "my-app", name: str = "chat m") -> Any:
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": name,
                                "kind": 3,
                                "startTimeUnixNano": "1788000000000000000",
                                "endTimeUnixNano": "1788000002500000000",
                                "attributes": [{"key": k, "value": v} for k, v in attrs.items()],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    return otlp.map_request("traces", doc, state=otlp.MetricState())


def iv(n: int) -> dict[str, str]:
    return {"intValue": str(n)}


def test_genai_span_inclusive_input() -> None:
    m = span_request(
        {
            "gen_ai.operation.name": {"stringValue": "chat"},
            "gen_ai.usage.input_tokens": iv(1000),
            "gen_ai.usage.cache_read.input_tokens": iv(600),
            "gen_ai.usage.cache_write.input_tokens": iv(100),
            "gen_ai.usage.output_tokens": iv(50),
            "gen_ai.usage.reasoning.output_tokens": iv(20),
            "gen_ai.response.model": {"stringValue": "gpt-x"},
            "gen_ai.response.id": {"stringValue": "chatcmpl-1"},
            "gen_ai.conversation.id": {"stringValue": "conv-1"},
            "gen_ai.input.messages": {"stringValue": "[secret]"},
        }
    )
    (r,) = m.parsed.requests
    assert [r[c] for c in KINDS] == [300, 600, 100, 50] and r["reasoning_tokens"] == 20
    assert (r["model"], r["session_id"], r["request_id"]) == ("gpt-x", "conv-1", "chatcmpl-1")
    assert r["duration_ms"] == 2500 and r["agent"] == "my-app"
    assert r["event_id"] == stable_id("genai-response", "chatcmpl-1")
    assert "gen_ai.input.messages" not in r["attributes"]
    assert len(m.parsed.spans) == 1


def test_genai_span_older_cache_creation_name() -> None:
    m = span_request(
        {
            "gen_ai.usage.input_tokens": iv(1000),
            "gen_ai.usage.cache_read.input_tokens": iv(600),
            "gen_ai.usage.cache_creation.input_tokens": iv(150),
            "gen_ai.usage.output_tokens": iv(5),
        }
    )
    assert [m.parsed.requests[0][c] for c in KINDS] == [250, 600, 150, 5]


def test_genai_span_cache_write_is_clamped_to_what_the_read_leaves() -> None:
    # 1000 in, 800 read, 300 written: only 200 are left for the write, so nothing is cold and the
    # kinds still add up to the input (the write used to stay 300, counting 1100 tokens of context).
    m = span_request(
        {
            "gen_ai.usage.input_tokens": iv(1000),
            "gen_ai.usage.cache_read.input_tokens": iv(800),
            "gen_ai.usage.cache_write.input_tokens": iv(300),
            "gen_ai.usage.output_tokens": iv(7),
        }
    )
    (r,) = m.parsed.requests
    assert [r[c] for c in KINDS] == [0, 800, 200, 7]


def test_genai_span_without_cache_attributes_keeps_them_null() -> None:
    m = span_request({"gen_ai.usage.input_tokens": iv(1000), "gen_ai.usage.output_tokens": iv(7)})
    assert [m.parsed.requests[0][c] for c in KINDS] == [1000, None, None, 7]


def test_legacy_underscore_keys_of_an_anthropic_span_are_exclusive() -> None:
    m = span_request(
        {
            "gen_ai.system": {"stringValue": "anthropic"},
            "gen_ai.usage.input_tokens": iv(3),
            "gen_ai.usage.cache_read_input_tokens": iv(9000),
            "gen_ai.usage.cache_creation_input_tokens": iv(200),
            "gen_ai.usage.output_tokens": iv(40),
        }
    )
    assert [m.parsed.requests[0][c] for c in KINDS] == [3, 9000, 200, 40]


def test_openinference_llm_span() -> None:
    m = span_request(
        {
            "openinference.span.kind": {"stringValue": "LLM"},
            "llm.token_count.prompt": iv(500),
            "llm.token_count.prompt_details.cache_read": iv(200),
            "llm.token_count.completion": iv(30),
            "llm.model_name": {"stringValue": "claude-x"},
            "session.id": {"stringValue": "s-1"},
            "llm.input_messages.0.message.content": {"stringValue": "secret"},
        }
    )
    (r,) = m.parsed.requests
    assert [r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"]] == [300, 200, 30]
    assert (r["model"], r["session_id"]) == ("claude-x", "s-1")
    assert not any(k.startswith("llm.input_messages") for k in r["attributes"])


@pytest.mark.parametrize(
    ("attrs", "service"),
    [
        (
            {"gen_ai.operation.name": {"stringValue": "invoke_agent"}, "gen_ai.usage.input_tokens": iv(9)},
            "app",
        ),
        ({"openinference.span.kind": {"stringValue": "CHAIN"}, "llm.token_count.prompt": iv(9)}, "app"),
        ({"gen_ai.usage.input_tokens": iv(9)}, "codex_exec"),  # its log events are the requests
        ({"gen_ai.usage.input_tokens": iv(9)}, "gemini-cli"),
        ({"gen_ai.usage.input_tokens": iv(9)}, "qwen-code"),  # its api_response events are the requests
        ({"gen_ai.usage.input_tokens": iv(9)}, "claude-code"),  # only claude_code.llm_request counts
        ({"http.method": {"stringValue": "GET"}}, "app"),
    ],
)
def test_spans_that_are_not_model_calls_add_no_request(attrs: dict[str, Any], service: str) -> None:
    m = span_request(attrs, service)
    assert m.parsed.requests == [] and len(m.parsed.spans) == 1


def test_failed_claude_llm_request_span_adds_no_request() -> None:
    doc = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "claude-code"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "claude_code.llm_request",
                                "status": {"code": 2, "message": "fake 400"},
                                "attributes": [{"key": "request_id", "value": {"stringValue": "req_x"}}],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    m = otlp.map_request("traces", doc, state=otlp.MetricState())
    assert m.parsed.requests == []
    assert m.parsed.spans[0]["status_code"] == 2
    assert m.parsed.spans[0]["attributes"]["status.message"] == "fake 400"


# -- decoding -------------------------------------------------------------------------------------------
LOG_DOC = {
    "resourceLogs": [
        {
            "scopeLogs": [
                {
                    "logRecords": [
                        {
                            "timeUnixNano": "1788000000000000000",
                            "traceId": "5B8EFFF798038103D269B633813FC60C",
                            "spanId": "eee19b7ec3c1b174",
                            "body": {"stringValue": "claude_code.user_prompt"},
                            "attributes": [{"key": "session.id", "value": {"stringValue": "s"}}],
                        }
                    ]
                }
            ]
        }
    ]
}


def bad(path: str, value: Any) -> bytes:
    doc = json.loads(json.dumps(LOG_DOC))
    record = doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    if path.startswith("attr:"):
        record["attributes"][0]["value"] = {path[5:]: value}
    else:
        record[path] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"resourceLogs": [', ["not valid JSON", "application/json"]),
        (b"[1, 2]", ["JSON object"]),
        (bad("timeUnixNano", "yesterday"), ["timeUnixNano", "integer", "yesterday"]),
        (bad("timeUnixNano", 1.5), ["timeUnixNano", "integer"]),
        (bad("traceId", "not-hex!"), ["traceId", "hex"]),
        (bad("attr:intValue", "seven"), ["intValue", "seven"]),
        (bad("attr:boolValue", "yes"), ["boolValue", "true or false"]),
        (bad("attr:stringValue", 5), ["stringValue", "string"]),
        (bad("attributes", {"key": "x"}), ["attributes", "list"]),
        (b'{"resourceLogs": {"scopeLogs": []}}', ["resourceLogs", "list"]),
        (b'{"resourceMetrics": []}', ["resourceMetrics", "/v1/metrics"]),
    ],
)
def test_malformed_json_raises_a_decode_error_that_says_what_is_wrong(body: bytes, words: list[str]) -> None:
    with pytest.raises(DecodeError) as info:
        otlp.parse_body("logs", body, JSON)
    for w in words:
        assert w in str(info.value)


def test_malformed_json_paths_name_the_record() -> None:
    with pytest.raises(
        DecodeError, match=r"resourceLogs\[0\]\.scopeLogs\[0\]\.logRecords\[0\]\.timeUnixNano"
    ):
        otlp.parse_body("logs", bad("timeUnixNano", "x"), JSON)


def test_garbage_protobuf_raises_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="OTLP/protobuf ExportLogsServiceRequest"):
        otlp.parse_body("logs", b"\xff\xff\xff\xff not protobuf", PB)


@pytest.mark.parametrize("ctype", ["text/plain", "application/xml", "", "application/grpc"])
def test_unknown_content_type(ctype: str) -> None:
    with pytest.raises(otlp.UnsupportedContentType, match="application/x-protobuf"):
        otlp.parse_body("logs", b"{}", ctype)
    assert issubclass(otlp.UnsupportedContentType, DecodeError)


def test_json_leniency_matches_the_spec_quirks() -> None:
    strict = otlp.parse_body("logs", json.dumps(LOG_DOC).encode(), "application/json; charset=utf-8")
    record = strict.resource_logs[0].scope_logs[0].log_records[0]
    assert record.trace_id.hex() == "5b8efff798038103d269b633813fc60c"  # hex, case-insensitive
    assert record.time_unix_nano == 1788000000000000000
    snake = {
        "resource_logs": [
            {
                "scope_logs": [
                    {
                        "log_records": [
                            {
                                "time_unix_nano": 1788000000000000000,  # a number, not a string
                                "trace_id": "5b8efff798038103d269b633813fc60c",
                                "span_id": "7uGbfsPBsXQ=",  # base64 (MessageToDict style) is accepted too
                                "body": {"string_value": "claude_code.user_prompt"},
                                "attributes": [{"key": "session.id", "value": {"string_value": "s"}}],
                                "severity_number": "SEVERITY_NUMBER_INFO",  # enum by name
                                "some_future_field": {"x": 1},  # unknown: ignored
                            }
                        ]
                    }
                ]
            }
        ]
    }
    loose = otlp.parse_body("logs", json.dumps(snake).encode(), JSON)
    lr = loose.resource_logs[0].scope_logs[0].log_records[0]
    assert lr.span_id == record.span_id and lr.severity_number == 9
    lr.severity_number = 0
    assert loose == strict


def test_all_zero_ids_are_absent() -> None:
    doc = json.loads(json.dumps(LOG_DOC))
    doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["traceId"] = "0" * 32
    (event,) = otlp.map_request("logs", doc, state=otlp.MetricState()).parsed.events
    assert "trace_id" not in event["attributes"] and event["attributes"]["span_id"] == "eee19b7ec3c1b174"


def test_any_value_variants_map_to_python_values() -> None:
    doc = json.loads(json.dumps(LOG_DOC))
    doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["attributes"] += [
        {"key": "arr", "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "b"}, {}]}}},
        {"key": "kv", "value": {"kvlistValue": {"values": [{"key": "x", "value": {"doubleValue": "NaN"}}]}}},
        {"key": "raw", "value": {"bytesValue": "AAEC"}},
        {"key": "empty", "value": {}},
        {"key": "inf", "value": {"doubleValue": "-Infinity"}},
    ]
    msg = otlp.parse_body("logs", json.dumps(doc).encode(), JSON)
    assert msg == otlp.parse_json_slow("logs", doc)
    (event,) = otlp.map_request("logs", msg, state=otlp.MetricState()).parsed.events
    a = event["attributes"]
    assert a["arr"] == [1, "b", None] and a["raw"] == "AAEC" and a["empty"] is None
    assert a["kv"]["x"] != a["kv"]["x"] and a["inf"] == float("-inf")  # NaN


# -- sniffing -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FIXTURES)
def test_sniff_json_fixtures(testdata: Path, name: str) -> None:
    signal, body = fixture(testdata, name)
    assert otlp.sniff_signal(body, JSON) == signal
    assert otlp.sniff_signal(otlp.parse_body(signal, body, JSON).SerializeToString(), PB) == signal


def test_sniff_captured_protobuf(testdata: Path) -> None:
    seen = set()
    for _, signal, body, ctype in captured(testdata, "protobuf-full"):
        assert otlp.sniff_signal(body, ctype) == signal
        seen.add(signal)
    assert seen == {"logs", "metrics", "traces"}


def test_sniff_json_with_the_signal_key_not_first() -> None:
    assert otlp.sniff_signal(b'{"x": 1, "resourceSpans": []}', JSON) == "traces"


@pytest.mark.parametrize(
    ("body", "ctype"),
    [(b"", PB), (b"{}", JSON), (b"not json", JSON), (b"\x08\x01", PB), (b"{}", "text/plain")],
)
def test_sniff_gives_up(body: bytes, ctype: str) -> None:
    assert otlp.sniff_signal(body, ctype) is None


# -- properties -----------------------------------------------------------------------------------------
any_values = st.recursive(
    st.one_of(
        st.builds(lambda s: AnyValue(string_value=s), st.text(max_size=8)),
        st.builds(lambda n: AnyValue(int_value=n), st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda f: AnyValue(double_value=f), st.floats(allow_nan=False)),
        st.builds(lambda b: AnyValue(bool_value=b), st.booleans()),
        st.builds(lambda b: AnyValue(bytes_value=b), st.binary(max_size=6)),
        st.just(AnyValue()),
    ),
    lambda inner: st.one_of(
        st.builds(lambda vs: _array(vs), st.lists(inner, max_size=3)),
        st.builds(lambda kv: _kvlist(kv), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    ),
    max_leaves=8,
)


def _array(values: list[AnyValue]) -> AnyValue:
    v = AnyValue()
    v.array_value.SetInParent()
    v.array_value.values.extend(values)
    return v


def _kvlist(items: dict[str, AnyValue]) -> AnyValue:
    v = AnyValue()
    v.kvlist_value.SetInParent()
    for k, x in items.items():
        v.kvlist_value.values.add(key=k).value.CopyFrom(x)
    return v


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=10), any_values), max_size=6), st.integers(0, 2**64 - 1))
def test_json_builder_round_trips_any_log_record(attrs: list[tuple[str, AnyValue]], t: int) -> None:
    req = ExportLogsServiceRequest()
    rec = req.resource_logs.add().scope_logs.add().log_records.add(time_unix_nano=t, trace_id=b"\x01" * 16)
    for k, v in attrs:
        rec.attributes.add(key=k).value.CopyFrom(v)
    doc = json_format.MessageToDict(req)
    assert otlp.parse_json("logs", doc) == req
    assert otlp.parse_json("logs", json.loads(json.dumps(doc))) == req


@pytest.mark.parametrize("cls", [ExportMetricsServiceRequest, ExportTraceServiceRequest])
def test_json_builder_matches_parse_dict_on_captured_shapes(testdata: Path, cls: type) -> None:
    signal: otlp.Signal = "metrics" if cls is ExportMetricsServiceRequest else "traces"
    for _, s, body, ctype in captured(testdata, "protobuf-full"):
        if s == signal:
            msg = otlp.parse_body(s, body, ctype)
            doc = json_format.MessageToDict(msg)  # int64 as strings, ids as base64
            assert otlp.parse_json(s, doc) == msg


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=6), min_size=1, max_size=4),
    st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_cumulative_deltas_add_up_to_the_true_total(increments: list[list[int]], dupes: list[bool]) -> None:
    """A counter restarted several times, with re-sent points: the deltas sum to what was counted."""
    state = otlp.MetricState(created_at_ns=0)
    t = 1_000
    total = 0
    sent = 0
    for seq in increments:
        start = t
        value = 0
        for inc in seq:
            t += 10
            value += inc
            total += inc
            for _ in range(2 if dupes[sent % len(dupes)] else 1):
                keep, delta = state.cumulative("k", start, t, float(value), None, True)
                if keep:
                    assert delta is not None
                    total -= int(delta)
            sent += 1
        t += 5
    assert total == 0
