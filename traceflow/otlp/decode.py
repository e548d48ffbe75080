"""Pure OTLP decoding (protobuf or OTLP/JSON) and the entry points of the mapping to lake rows.

No I/O happens here. The collectors call::

    msg = parse_body(signal, body, content_type)        # DecodeError / UnsupportedContentType
    mapped = map_request(signal, msg, state=state)      # Mapped(parsed, rejected, message, dropped)

``parse_body`` returns the ``Export*ServiceRequest`` message for both encodings. OTLP/JSON is read
leniently by :mod:`traceflow.otlp.json_builder` (int64 as strings or numbers, ids as hex or base64,
either key case, enum names or numbers, unknown fields ignored), which names the offending field in
its errors.

The mapping rules live in :mod:`traceflow.otlp.logs`, :mod:`traceflow.otlp.spans` (and the
per-agent modules they call) and :mod:`traceflow.otlp.metrics` (metrics, cumulative -> delta).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any, Literal

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError as _PbDecodeError
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from traceflow.errors import DecodeError
from traceflow.otlp.json_builder import ShapeError, fill, json_id
from traceflow.otlp.limits import fit_rows
from traceflow.otlp.logs import map_logs_chunks
from traceflow.otlp.mapper import Mapped
from traceflow.otlp.metrics import MetricState, map_metrics
from traceflow.otlp.spans import map_traces

__all__ = [
    "DecodeError",
    "Mapped",
    "MetricState",
    "Signal",
    "UnsupportedContentType",
    "fit_mapped",
    "is_protobuf",
    "map_body",
    "map_request",
    "map_request_chunks",
    "one_record_requests",
    "parse_body",
    "parse_json",
    "signal_of_json",
    "sniff_signal",
]

Signal = Literal["logs", "metrics", "traces"]

SIGNALS: tuple[Signal, ...] = ("logs", "metrics", "traces")

_REQUEST_TYPES: dict[str, type[Message]] = {
    "logs": ExportLogsServiceRequest,
    "metrics": ExportMetricsServiceRequest,
    "traces": ExportTraceServiceRequest,
}

#: top-level key of an export request, per signal (lowerCamelCase, snake_case)
_TOP_KEYS: dict[str, tuple[str, str]] = {
    "logs": ("resourceLogs", "resource_logs"),
    "metrics": ("resourceMetrics", "resource_metrics"),
    "traces": ("resourceSpans", "resource_spans"),
}
_SIGNAL_OF_KEY: dict[str, Signal] = {
    "resourceLogs": "logs",
    "resource_logs": "logs",
    "resourceMetrics": "metrics",
    "resource_metrics": "metrics",
    "resourceSpans": "traces",
    "resource_spans": "traces",
}
_PATHS = {"logs": "/v1/logs", "metrics": "/v1/metrics", "traces": "/v1/traces"}

_PROTOBUF_TYPES = frozenset(
    {"application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf"}
)
_JSON_TYPES = frozenset({"application/json"})


class UnsupportedContentType(DecodeError):
    """The Content-Type is neither OTLP/protobuf nor OTLP/JSON (HTTP 415)."""


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def is_protobuf(content_type: str) -> bool:
    """Whether ``content_type`` names OTLP/protobuf."""
    return _media_type(content_type or "") in _PROTOBUF_TYPES


def _request_type(signal: str) -> type[Message]:
    try:
        return _REQUEST_TYPES[signal]
    except KeyError:
        raise ValueError(f"unknown OTLP signal {signal!r}; expected one of {', '.join(SIGNALS)}") from None


# -- public API ---------------------------------------------------------------------------------------
def parse_body(signal: Signal, body: bytes, content_type: str) -> Message:
    """Decode one OTLP/HTTP export request body into its ``Export*ServiceRequest`` message.

    Raises :class:`UnsupportedContentType` for a media type other than protobuf or JSON and
    :class:`~traceflow.errors.DecodeError` (with what is wrong and what the sender should do) for a
    body that is not a valid request of ``signal``.
    """
    cls = _request_type(signal)
    media = _media_type(content_type or "")
    if media in _PROTOBUF_TYPES:
        msg = cls()
        try:
            msg.ParseFromString(body)
        except _PbDecodeError as e:
            raise DecodeError(
                f"the body is not a valid OTLP/protobuf {cls.__name__} ({e}); send the serialized "
                f"request with Content-Type application/x-protobuf to {_PATHS[signal]}, or OTLP/JSON "
                "with Content-Type application/json"
            ) from None
        return msg
    if media in _JSON_TYPES:
        return parse_json(signal, _loads(body))
    raise UnsupportedContentType(
        f"unsupported Content-Type {content_type!r}; OTLP/HTTP bodies must be application/x-protobuf "
        "or application/json"
    )


def parse_json(signal: Signal, obj: Any) -> Message:
    """Build the ``Export*ServiceRequest`` of ``signal`` from a decoded OTLP/JSON object."""
    cls = _request_type(signal)
    if not isinstance(obj, dict):
        raise DecodeError(
            f"an OTLP/JSON {signal} request must be a JSON object, got {type(obj).__name__}; send "
            f'{{"{_TOP_KEYS[signal][0]}": [...]}}'
        )
    found = signal_of_json(obj)
    if found is not None and found != signal:
        raise DecodeError(
            f"the payload holds {_TOP_KEYS[found][0]} but was sent as {signal}; send it to {_PATHS[found]}"
        )
    msg = cls()
    try:
        fill(msg, obj)
    except ShapeError as e:
        raise DecodeError(
            f"invalid OTLP/JSON {signal} request: {e}; see the OTLP/JSON encoding rules "
            "(int64 as decimal strings or numbers, ids as hex, enums as integers)"
        ) from None
    except RecursionError:
        raise DecodeError(f"invalid OTLP/JSON {signal} request: values nested too deeply") from None
    return msg


def signal_of_json(obj: Any) -> Signal | None:
    """The signal an OTLP/JSON object holds, from its top-level key (None if it has none)."""
    if isinstance(obj, dict):
        for key in obj:
            sig = _SIGNAL_OF_KEY.get(key)
            if sig is not None:
                return sig
    return None


_SNIFF_JSON = re.compile(rb'\A\s*\{\s*"(resource(?:Logs|Metrics|Spans|_logs|_metrics|_spans))"')


def sniff_signal(body: bytes, content_type: str) -> Signal | None:
    """Guess the signal of a body POSTed to ``/`` (per-signal endpoints are used verbatim).

    JSON: the top-level ``resourceLogs``/``resourceMetrics``/``resourceSpans`` key. Protobuf: the
    request type whose records look plausible when the body is parsed as it (metrics need a name
    and data, spans 16/8-byte ids, logs come last). None when it cannot tell (or the body is empty).
    """
    media = _media_type(content_type or "")
    if media in _JSON_TYPES:
        m = _SNIFF_JSON.match(body[:4096])
        if m:
            return _SIGNAL_OF_KEY[m.group(1).decode()]
        try:
            return signal_of_json(orjson.loads(body))
        except orjson.JSONDecodeError:
            return None
    if media in _PROTOBUF_TYPES:
        return _sniff_protobuf(body)
    return None


def _sniff_protobuf(body: bytes) -> Signal | None:
    if not body:
        return None
    try:
        metrics = ExportMetricsServiceRequest.FromString(body)
        ms = [m for rm in metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
        if ms and all(m.name and m.WhichOneof("data") for m in ms):
            return "metrics"
    except _PbDecodeError:
        pass
    try:
        traces = ExportTraceServiceRequest.FromString(body)
        spans = [s for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans]
        if spans and all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans):
            return "traces"
    except _PbDecodeError:
        pass
    try:
        logs = ExportLogsServiceRequest.FromString(body)
        if any(sl.log_records for rl in logs.resource_logs for sl in rl.scope_logs):
            return "logs"
    except _PbDecodeError:
        pass
    return None


def map_request(
    signal: Signal,
    msg: Message | dict[str, Any],
    *,
    state: MetricState,
    keep_content: bool = False,
    source: str = "otlp",
) -> Mapped:
    """Map one export request (a message, or a decoded OTLP/JSON object) to lake rows.

    Rows the lake cannot store (:func:`traceflow.otlp.limits.fit_rows`) are counted as rejected.
    """
    return next(map_request_chunks(signal, msg, state=state, keep_content=keep_content, source=source))


def map_request_chunks(
    signal: Signal,
    msg: Message | dict[str, Any],
    *,
    state: MetricState,
    keep_content: bool = False,
    source: str = "otlp",
    records: int = 0,
) -> Iterator[Mapped]:
    """:func:`map_request`, a log request ``records`` log records at a time (0: all at once; metrics
    and spans are mapped whole), so that the rows of a large request never exist all at once."""
    if isinstance(msg, dict):
        msg = parse_json(signal, msg)
    if signal == "logs":
        chunks: Iterator[Mapped] = map_logs_chunks(
            msg, keep_content=keep_content, source=source, records=records
        )
    elif signal == "metrics":
        chunks = iter([map_metrics(msg, state=state, source=source)])
    elif signal == "traces":
        chunks = iter([map_traces(msg, keep_content=keep_content, source=source)])
    else:
        _request_type(signal)  # raises the ValueError
        raise AssertionError("unreachable")
    for mapped in chunks:
        yield fit_mapped(mapped)


def fit_mapped(mapped: Mapped) -> Mapped:
    """``mapped`` without the rows the lake cannot store (:func:`~traceflow.otlp.limits.fit_rows`),
    each counted as rejected with its reason."""
    dropped, reasons = fit_rows(mapped.parsed.tables())
    if dropped:
        mapped.rejected += dropped
        more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
        why = f"{dropped} rows the lake cannot store: " + "; ".join(reasons[:3]) + more
        mapped.message = f"{mapped.message}; {why}" if mapped.message else why
    return mapped


def one_record_requests(signal: Signal, msg: Message) -> Iterator[tuple[Any, int, Message | None]]:
    """For each log record or span of ``msg``: (the list holding it, its index, a request of only that
    record with its resource and scope); None instead of the request for a record too deeply nested
    for protobuf to copy. Metrics have no records of their own to split into (nothing is yielded)."""
    m: Any = msg
    cls = type(msg)
    if signal == "logs":
        groups = [(rl, sl, sl.log_records) for rl in m.resource_logs for sl in rl.scope_logs]
    elif signal == "traces":
        groups = [(rs, ss, ss.spans) for rs in m.resource_spans for ss in rs.scope_spans]
    else:
        return
    for outer, inner, items in groups:
        for i, item in enumerate(items):
            one: Any = cls()
            try:
                if signal == "logs":
                    o = one.resource_logs.add(resource=outer.resource, schema_url=outer.schema_url)
                    o.scope_logs.add(scope=inner.scope, schema_url=inner.schema_url).log_records.append(item)
                else:
                    o = one.resource_spans.add(resource=outer.resource, schema_url=outer.schema_url)
                    o.scope_spans.add(scope=inner.scope, schema_url=inner.schema_url).spans.append(item)
            except _PbDecodeError:  # copying re-reads the record, with protobuf's depth limit
                one = None
            yield items, i, one


def map_body(
    signal: Signal,
    body: bytes,
    content_type: str,
    *,
    state: MetricState,
    keep_content: bool = False,
    source: str = "otlp",
) -> Mapped:
    """``parse_body`` then ``map_request``: one call for a stored request body."""
    return map_request(
        signal, parse_body(signal, body, content_type), state=state, keep_content=keep_content, source=source
    )


def _loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise DecodeError(
            f"the body is not valid JSON ({e}); send an OTLP/JSON export request with Content-Type "
            "application/json, or protobuf with Content-Type application/x-protobuf"
        ) from None


def parse_json_slow(signal: Signal, obj: dict[str, Any]) -> Message:
    """Reference decoder: ids fixed to base64, then ``json_format.ParseDict`` (tests compare with it)."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k in (
                    "traceId",
                    "spanId",
                    "parentSpanId",
                    "trace_id",
                    "span_id",
                    "parent_span_id",
                ) and isinstance(v, str):
                    out[k] = base64.b64encode(json_id(v)).decode()
                else:
                    out[k] = fix(v)
            return out
        if isinstance(node, list):
            return [fix(x) for x in node]
        return node

    msg = _request_type(signal)()
    json_format.ParseDict(fix(obj), msg, ignore_unknown_fields=True)
    return msg
