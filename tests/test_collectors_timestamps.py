"""Derived timestamps and durations are checked at acknowledgement, with the rest of the record.

What the sealer's mapping would drop (a ``started_at`` before year 1, a span that ends before it
starts) is refused in ``partial_success`` when the payload is acknowledged, never acknowledged and
then dropped. The property: whatever the acknowledgement keeps, the mapping stores whole.
"""

from __future__ import annotations

import datetime as dt

from collectors_support import api_request_logs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from traceflow.collectors.ingest import PROTOBUF, Outcome, _check
from traceflow.otlp import decode as otlp


def _attr(rec: object, key: str) -> object:
    for kv in rec.attributes:  # type: ignore[attr-defined]
        if kv.key == key:
            return kv.value
    raise KeyError(key)


def _acknowledge(signal: str, body: bytes) -> tuple[int, str, bytes]:
    """(rejected, message, the body logged to the WAL) as the collector acknowledges ``body``."""
    checked = _check(signal, PROTOBUF, body)  # type: ignore[arg-type]
    assert not isinstance(checked, Outcome), checked
    logged, encoding, rejected, message = checked.body, checked.encoding, checked.rejected, checked.message
    assert encoding == PROTOBUF
    return rejected, message, logged


def _sealed(signal: str, body: bytes) -> otlp.Mapped:
    msg = otlp.parse_body(signal, body, PROTOBUF)  # type: ignore[arg-type]
    return otlp.map_request(signal, msg, state=otlp.MetricState())  # type: ignore[arg-type]


def _year_one_record() -> tuple[ExportLogsServiceRequest, list[str]]:
    req, ids = api_request_logs(3)
    rec = req.resource_logs[0].scope_logs[0].log_records[1]
    rec.time_unix_nano = 0
    rec.observed_time_unix_nano = 0
    _attr(rec, "event.timestamp").string_value = "0001-01-01T00:00:00Z"  # type: ignore[attr-defined]
    _attr(rec, "duration_ms").int_value = 5000  # type: ignore[attr-defined]
    return req, ids


def test_a_request_that_would_start_before_year_one_is_refused_at_ack() -> None:
    req, ids = _year_one_record()
    rejected, message, logged = _acknowledge("logs", req.SerializeToString())
    assert rejected == 1
    assert "out of range" in message
    sealed = _sealed("logs", logged)
    assert sealed.rejected == 0  # nothing acknowledged is dropped later
    assert sorted(r["request_id"] for r in sealed.parsed.requests) == sorted([ids[0], ids[2]])


def _spans(*bounds: tuple[int, int]) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    for i, (start, end) in enumerate(bounds):
        sp = ss.spans.add(
            trace_id=bytes([1] * 16),
            span_id=bytes([i + 1] * 8),
            name="chat",
            start_time_unix_nano=start,
            end_time_unix_nano=end,
        )
        sp.attributes.add(key="gen_ai.usage.input_tokens").value.int_value = 10
        sp.attributes.add(key="gen_ai.usage.output_tokens").value.int_value = 3
    return req


def test_a_span_that_ends_before_it_starts_is_refused() -> None:
    t = 1_795_974_729_000_000_000
    req = _spans((t, t + 10**9), (t + 10**12, t), (t, t))  # the second one ends 999.999 s early
    rejected, message, logged = _acknowledge("traces", req.SerializeToString())
    assert rejected == 1
    assert "ends before it starts" in message
    sealed = _sealed("traces", logged)
    assert sealed.rejected == 0
    assert len(sealed.parsed.spans) == 2
    assert all(r["duration_ms"] is None or r["duration_ms"] >= 0 for r in sealed.parsed.requests)
    # and the mapping refuses it too, for what reaches the sealer another way (a reseal)
    direct = _sealed("traces", req.SerializeToString())
    assert direct.rejected == 1 and len(direct.parsed.spans) == 2


_STAMPS = st.one_of(
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59)).map(
        lambda d: d.isoformat() + st_suffix(d)
    ),
    st.sampled_from(
        [
            "0001-01-01T00:00:00Z",
            "0001-01-01T00:00:00+05:00",
            "9999-12-31T23:59:59.999999-12:00",
            "9999-12-31T23:59:59Z",
            "1970-01-01T00:00:00Z",
            "not a time",
            "",
        ]
    ),
)


def st_suffix(d: dt.datetime) -> str:
    return ["Z", "+14:00", "-12:00", ""][d.microsecond % 4]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stamp=_STAMPS,
    duration=st.one_of(st.integers(0, 10 * 365 * 86_400_000), st.floats(0, 3.2e11)),
    t=st.sampled_from([0, 1, 2**64 - 1, 1_795_974_729_000_000_000]),
)
def test_whatever_is_acknowledged_is_stored_whole(stamp: str, duration: float, t: int) -> None:
    req, _ = api_request_logs(2)
    rec = req.resource_logs[0].scope_logs[0].log_records[0]
    rec.time_unix_nano = t
    rec.observed_time_unix_nano = 0
    _attr(rec, "event.timestamp").string_value = stamp  # type: ignore[attr-defined]
    value = _attr(rec, "duration_ms")
    if isinstance(duration, int):
        value.int_value = duration  # type: ignore[attr-defined]
    else:
        value.double_value = duration  # type: ignore[attr-defined]
    rejected, _, logged = _acknowledge("logs", req.SerializeToString())
    sealed = _sealed("logs", logged)
    assert sealed.rejected == 0
    assert len(sealed.parsed.requests) == 2 - rejected
