"""Regenerate the hostile-payload corpus: ``python tests/payloads/make_corpus.py``.

The files are committed; ``manifest.json`` (hand-written) says where each one is sent and what the
collector must answer. Large cases (an oversized body, a huge attribute) are built by the test
itself so they do not bloat the repository.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

HERE = Path(__file__).resolve().parent
LOGS_PRE = b'{"resourceLogs":[{"scopeLogs":[{"logRecords":['
LOGS_POST = b"]}]}]}"


def _logs(n: int = 20) -> bytes:
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="claude-code")))
    sl = rl.scope_logs.add()
    sl.scope.name = "com.anthropic.claude_code.events"
    for i in range(n):
        sl.log_records.append(
            LogRecord(
                time_unix_nano=1_795_974_729_625_000_000 + i,
                body=AnyValue(string_value="claude_code.api_request"),
                attributes=[
                    KeyValue(key="event.name", value=AnyValue(string_value="api_request")),
                    KeyValue(key="session.id", value=AnyValue(string_value="hostile-session")),
                    KeyValue(key="request_id", value=AnyValue(string_value=f"req_hostile_{i}")),
                    KeyValue(key="input_tokens", value=AnyValue(int_value=1)),
                ],
            )
        )
    return bytes(req.SerializeToString())


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _deep_protobuf(depth: int) -> bytes:
    """A log record whose body is an AnyValue kvlist nested ``depth`` times (built by hand: the
    protobuf runtime itself refuses to build messages this deep)."""
    value = _ld(1, b"x")  # AnyValue.string_value
    for _ in range(depth):
        kv = _ld(1, b"k") + _ld(2, value)  # KeyValue{key, value}
        value = _ld(6, _ld(1, kv))  # AnyValue.kvlist_value = KeyValueList{values: [kv]}
    record = _ld(5, value)  # LogRecord.body
    return _ld(1, _ld(2, _ld(2, record)))  # resource_logs / scope_logs / log_records


def _deep_json(depth: int) -> bytes:
    s = '{"stringValue":"x"}'
    for _ in range(depth):
        s = '{"kvlistValue":{"values":[{"key":"k","value":' + s + "}]}}"
    return (
        '{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"1","body":' + s + "}]}]}]}"
    ).encode()


def main() -> None:
    good = _logs()
    files: dict[str, bytes] = {
        "truncated.pb": good[: len(good) // 2],
        "truncated-header.pb": good[:3],
        "random.bin": bytes(random.Random(0).getrandbits(8) for _ in range(4096)),
        "not-json.json": b'{"resourceLogs": [',
        "wrong-types.json": LOGS_PRE + b'{"timeUnixNano":{"a":1}}' + LOGS_POST,
        "wrong-top-level.json": b"[]",
        "null-record.json": LOGS_PRE + b"null" + LOGS_POST,
        "int64-overflow.json": LOGS_PRE + b'{"timeUnixNano":"99999999999999999999999"}' + LOGS_POST,
        "bad-hex-id.json": b'{"resourceSpans":[{"scopeSpans":[{"spans":['
        b'{"traceId":"zz","spanId":"0102030405060708"}]}]}]}',
        "spans-sent-as-logs.json": b'{"resourceSpans":[]}',
        "deep-nested-200.json": _deep_json(200),
        "deep-nested-100k.json": b'{"resourceLogs":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "deep-nested.pb": _deep_protobuf(200),
        "bad-utf8.pb": good.replace(b"claude_code.api_request", b"\xffclaude_code.api_reques", 1),
        "bad-utf8.json": LOGS_PRE + b'{"body":{"stringValue":"\xff\xfe"}}' + LOGS_POST,
        "gzip-bomb.pb.gz": gzip.compress(b"\0" * (64 << 20), 9, mtime=0),
        "truncated.pb.gz": gzip.compress(good, mtime=0)[:-30],
        "not-gzip.gz": b"this is not gzip at all",
        "empty.bin": b"",
        "point-without-value.json": b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":'
        b'{"dataPoints":[{"timeUnixNano":"1795974729625000000","asInt":"3"},'
        b'{"timeUnixNano":"1795974729625000001"}]}}]}]}]}',
        "short-span-id.pb": _short_span_id(),
        "token-count-not-a-number.json": b'{"resourceLogs":[{"resource":{"attributes":['
        b'{"key":"service.name","value":{"stringValue":"claude-code"}}]},"scopeLogs":[{"scope":{"name":"com.anthropic.claude_code.events"},'
        b'"logRecords":[{"timeUnixNano":"1795974729625000000","body":{"stringValue":"claude_code.api_request"},'
        b'"attributes":[{"key":"event.name","value":{"stringValue":"api_request"}},{"key":"request_id","value":'
        b'{"stringValue":"req_hostile_nan"}},{"key":"session.id","value":{"stringValue":"hostile-session"}},'
        b'{"key":"input_tokens","value":{"stringValue":"lots"}}]}]}]}]}',
        "duplicate-keys.json": b'{"resourceLogs":[],"resourceLogs":[]}',
        "nan-double.json": b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":'
        b'{"dataPoints":[{"asDouble":"NaN","timeUnixNano":"1795974729625000000"}]}}]}]}]}',
        "unknown-fields.pb": good + _ld(99, b"from the future") + _varint(100 << 3) + _varint(7),
    }
    for name, data in files.items():
        (HERE / name).write_bytes(data)


def _short_span_id() -> bytes:
    req = ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    ok = spans.add(name="ok", trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    ok.start_time_unix_nano, ok.end_time_unix_nano = 1_795_974_729_000_000_000, 1_795_974_729_625_000_000
    bad = spans.add(name="bad", trace_id=b"\x01" * 16, span_id=b"\x03" * 3)
    bad.start_time_unix_nano, bad.end_time_unix_nano = ok.start_time_unix_nano, ok.end_time_unix_nano
    return bytes(req.SerializeToString())


if __name__ == "__main__":
    main()
