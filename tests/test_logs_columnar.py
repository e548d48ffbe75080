"""The sealer's columnar path (traceflow.otlp.logs_columnar) against the dict path it replaces for
Claude Code ``api_request`` records: the same rows, value for value (the ``attributes`` JSON byte for
byte), on the captured Claude Code payloads, on generated records of every value kind, and through
the sealer into the lake; and the dict path wherever the columns cannot give the same rows."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from collectors_support import CAPTURES, api_request_logs, kv, query
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from traceflow import native
from traceflow.collectors import spool
from traceflow.collectors.sealer import Sealer
from traceflow.otlp import decode as otlp
from traceflow.otlp.logs_columnar import map_logs_columnar
from traceflow.schema import TABLES
from traceflow.store.lake import frame_from_rows

pytestmark = pytest.mark.skipif(not native.jit_enabled(), reason="numba is not installed")

PB = "application/x-protobuf"


def _dict_path(msg: Any, keep_content: bool) -> tuple[pl.DataFrame | None, list[dict[str, Any]], int]:
    mapped = otlp.map_request("logs", msg, state=otlp.MetricState(), keep_content=keep_content)
    rows = mapped.parsed.requests
    frame = frame_from_rows(TABLES["requests"], rows) if rows else None
    return frame, mapped.parsed.events, mapped.rejected


def _same(body: bytes, keep_content: bool) -> bool:
    """Map ``body`` both ways; assert the same rows; whether the columnar path took it."""
    msg = ExportLogsServiceRequest.FromString(body)
    fast = map_logs_columnar(msg, body, keep_content=keep_content, source="otlp")
    ref_frame, ref_events, ref_rejected = _dict_path(ExportLogsServiceRequest.FromString(body), keep_content)
    if fast is None:
        return False
    frame, chunks = fast
    events = [row for mapped in chunks for row in mapped.parsed.events]
    assert ref_frame is not None
    assert frame.schema == ref_frame.schema
    a, b = frame.drop("ingested_at"), ref_frame.drop("ingested_at")
    for col in a.columns:
        assert a[col].to_list() == b[col].to_list(), col
    assert frame["ingested_at"].null_count() == 0
    assert events == ref_events and ref_rejected == 0
    return True


def _captured_logs() -> list[bytes]:
    """Every captured logs request as protobuf (JSON captures re-encoded)."""
    out = []
    for path in sorted(CAPTURES.glob("*/otlp/*-logs.*")):
        if path.name.endswith((".meta.json", ".decoded.json")):
            continue
        ctype = PB if path.suffix == ".pb" else "application/json"
        msg = otlp.parse_body("logs", path.read_bytes(), ctype)
        out.append(msg.SerializeToString())
    return out


def test_captured_claude_code_logs_map_to_the_same_rows() -> None:
    bodies = _captured_logs()
    assert len(bodies) >= 5
    taken = 0
    for body in bodies:
        msg = ExportLogsServiceRequest.FromString(body)
        has_api = any(
            r.body.string_value == "claude_code.api_request"
            for rl in msg.resource_logs
            for sl in rl.scope_logs
            for r in sl.log_records
        )
        for keep in (False, True):
            took = _same(body, keep)
            taken += took
            # the captures are what Claude Code sends: every api_request goes the columnar way
            assert took == has_api, body[:80]
    assert taken >= 4


def _request(records: list[dict[str, Any]], resource: list[tuple[str, Any]] | None = None) -> bytes:
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    for k, v in resource if resource is not None else [("service.name", "claude-code")]:
        rl.resource.attributes.append(kv(k, v))
    sl = rl.scope_logs.add()
    sl.scope.name = "com.anthropic.claude_code.events"
    for r in records:
        rec = sl.log_records.add(time_unix_nano=r.get("t", 1_764_000_000_000_000_000))
        rec.observed_time_unix_nano = r.get("observed", 0)
        rec.body.string_value = r.get("body", "claude_code.api_request")
        rec.trace_id = r.get("trace_id", b"")
        rec.span_id = r.get("span_id", b"")
        for k, v in r["attrs"]:
            rec.attributes.append(kv(k, v))
    return req.SerializeToString()


_VALUES: dict[str, list[Any]] = {
    "input_tokens": [None, 0, 7, 10**12],
    "cache_read_tokens": [None, 0, 123_456],
    "cache_creation_tokens": [None, 0, 55],
    "cache_creation_5m_tokens": [None, 0, 40],
    "cache_creation_1h_tokens": [None, 0, 15],
    "output_tokens": [None, 3],
    "duration_ms": [None, 0, 812, 812.5, 0.0005, 1.5e-9, math.nan, math.inf, 3e11],
    "ttft_ms": [None, 180, 99.25, -5, 1e300, math.nan],
    "cost_usd": [None, 0.0031368, 1e16, 1e-7, -0.0, 2, math.nan, 123456789.123456789],
    "cost_usd_micros": [None, 3137, 0.5],
    "event.sequence": [None, 4, 2**62, -3, True, "5"],
    "session.id": [None, "", "6f1c-é-日本"],
    "agent_id": [None, "", "a1b2"],
    "user.id": [None, "", "u1"],
    "prompt.id": [None, "p-1"],
    "model": [None, "claude-opus-5-5"],
    "app.version": [None, "2.1.400"],
    "speed": [None, "fast", True, False, 1.0, -(2**63)],
    "prompt": [None, "what the user typed"],  # content: dropped unless kept
    "resource": [None, "mine"],
    "trace_id": [None, "t-attr"],
}


def test_generated_records_map_to_the_same_rows() -> None:
    rnd = random.Random(33)
    taken = 0
    for _ in range(60):
        records = []
        for i in range(rnd.randint(1, 12)):
            attrs = [("request_id", f"req_{rnd.random()}")]
            for key, values in _VALUES.items():
                v = rnd.choice(values)
                if v is not None or rnd.random() < 0.3:
                    attrs.append((key, v))
            rnd.shuffle(attrs)
            records.append(
                {
                    "attrs": attrs,
                    "t": rnd.choice([0, 1_764_000_000_123_456_789 + i]),
                    "observed": 1_764_000_000_999_000_000,
                    "trace_id": rnd.choice([b"", b"\0" * 16, bytes(range(16))]),
                    "span_id": rnd.choice([b"", bytes(range(8, 16))]),
                }
            )
        resource = rnd.choice(
            [[], [("service.name", "claude-code"), ("service.version", "2.1.332"), ("n", 1.5)]]
        )
        for keep in (False, True):
            taken += _same(_request(records, resource), keep)
    assert taken >= 40  # the rest: a value the columns leave to the dict path


@pytest.mark.parametrize(
    "attrs",
    [
        [("request_id", "r1"), ("input_tokens", "12")],  # a count as text (before 2.1.122)
        [("request_id", "r1"), ("input_tokens", -1)],  # clamped to 0 by the dict path
        [("request_id", "r1"), ("input_tokens", 10**12 + 1)],  # refused
        [("input_tokens", 5)],  # no request id: the id hashes session, time, model, tokens
        [("request_id", "r1"), ("request_id", "r2")],  # a repeated key
        [("request_id", 'r"1')],  # text JSON escapes
        [("request_id", "r1"), ("duration_ms", -4)],  # refused
        [("request_id", "r1"), ("session.id", 5)],  # text() of a number
    ],
)
def test_what_the_columns_do_not_take_goes_the_dict_way(attrs: list[tuple[str, Any]]) -> None:
    body = _request([{"attrs": attrs}])
    msg = ExportLogsServiceRequest.FromString(body)
    assert map_logs_columnar(msg, body, keep_content=False, source="otlp") is None


def test_a_nested_attribute_goes_the_dict_way() -> None:
    req = ExportLogsServiceRequest.FromString(_request([{"attrs": [("request_id", "r1")]}]))
    kv = req.resource_logs[0].scope_logs[0].log_records[0].attributes.add(key="list")
    kv.value.array_value.values.add(int_value=1)
    body = req.SerializeToString()
    assert map_logs_columnar(req, body, keep_content=False, source="otlp") is None


def test_other_records_beside_api_requests_keep_the_dict_rows() -> None:
    records = [
        {"attrs": [("request_id", "r1"), ("input_tokens", 3)]},
        {"body": "claude_code.user_prompt", "attrs": [("prompt.id", "p1"), ("prompt", "hi")]},
        {"body": "claude_code.tool_result", "attrs": [("tool_name", "Bash"), ("n", [1][0])]},
        {"attrs": [("request_id", "r2"), ("output_tokens", 9)]},
    ]
    assert _same(_request(records), False)
    assert _same(_request(records), True)


def test_text_json_escapes_goes_the_dict_way_only_where_it_is_stored() -> None:
    # a prompt with a quote is dropped unless content is kept; a key with one is written by orjson
    records = [{"attrs": [("request_id", "r1"), ("prompt", 'say "hi"\n'), ('a"key\\', 1)]}]
    assert _same(_request(records), False)
    body = _request(records)
    assert (
        map_logs_columnar(ExportLogsServiceRequest.FromString(body), body, keep_content=True, source="otlp")
        is None
    )


def test_long_request_ids_hash_as_hashlib_does() -> None:
    # event_id is blake2b over 19 framing bytes + the id, in 128-byte blocks: ids across the block
    # edges (109 and 237 bytes end a block); the dict path hashes with hashlib
    lengths = [1, 2, 108, 109, 110, 236, 237, 238, 400]
    records = [{"attrs": [("request_id", "é" + "r" * (k - 2) if k > 1 else "r")]} for k in lengths]
    assert _same(_request(records), False)


def test_requests_larger_than_the_first_guess_grow_the_columns() -> None:
    many_attrs = [
        {"attrs": [("request_id", f"r{i}"), *((chr(97 + k), True) for k in range(20))]} for i in range(50)
    ]
    many_records = [{"attrs": [("request_id", f"r{i}")]} for i in range(300)]
    for records in (many_attrs, many_records):
        assert _same(_request(records, []), False)


def _lake_rows(data: Path, table: str) -> list[tuple[Any, ...]]:
    cols = [c for c in TABLES[table].columns if c != "ingested_at"]
    return query(data, f"select {', '.join(cols)} from {table} order by event_id")


def test_the_sealer_stores_the_same_rows_either_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fine, _ = api_request_logs(40)
    odd, _ = api_request_logs(5)  # a count as text: the whole request goes the dict way
    odd.resource_logs[0].scope_logs[0].log_records[2].attributes.append(kv("input_tokens", "12"))
    bodies = [fine.SerializeToString(), odd.SerializeToString(), *_captured_logs()]
    stored = {}
    for native_on in ("1", "0"):
        monkeypatch.setenv("TRACEFLOW_NATIVE", native_on)
        data = tmp_path / native_on
        wal = spool.Wal(spool.collector_dir(data) / "wal", roll_interval_s=3600)
        wal.start()
        for body in bodies:
            wal.append_blocking(spool.WalRecord("logs", PB, body))
        wal.close()
        stats = Sealer(data).seal_all()
        assert stats.quarantined == 0
        stored[native_on] = (_lake_rows(data, "requests"), _lake_rows(data, "events"))
    assert len(stored["1"][0]) >= 45
    assert stored["1"] == stored["0"]


def test_a_failing_columnar_path_falls_back_to_dicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from traceflow.collectors import sealer as sealer_module

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the columns")

    monkeypatch.setattr(sealer_module, "map_logs_columnar", broken)
    req, ids = api_request_logs(7)
    wal = spool.Wal(spool.collector_dir(tmp_path) / "wal", roll_interval_s=3600)
    wal.start()
    wal.append_blocking(spool.WalRecord("logs", PB, req.SerializeToString()))
    wal.close()
    stats = Sealer(tmp_path).seal_all()
    assert stats.quarantined == 0 and stats.rows["requests"] == 7
    assert sorted(r for (r,) in query(tmp_path, "select request_id from requests")) == sorted(ids)
