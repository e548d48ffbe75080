"""Pure OTLP decoding (protobuf or OTLP/JSON) and the entry points of the mapping to lake rows.

No I/O happens here. The collectors call::

    msg = parse_body(signal, body, content_type)        # DecodeError / UnsupportedContentType
    mapped = map_request(signal, msg, state=state)      # Mapped(parsed, rejected, message, dropped)

``parse_body`` returns the ``Export*ServiceRequest`` message for both encodings. OTLP/JSON is read
leniently (AGENT_TELEMETRY_SCHEMAS §7.2): int64 as strings or numbers, ``traceId``/``spanId``/
``parentSpanId`` as hex (base64 is accepted too), lowerCamelCase or snake_case keys, enum names or
numbers, unknown fields ignored. ``json_format.ParseDict`` reads about 1.4k log records/s here, so
JSON goes through a descriptor-driven builder instead (``_JsonBuilder``, ~10x faster) that is as
strict about types as ParseDict and names the offending field in its errors.

The mapping rules live in :mod:`traceflow.otlp.mapping` (logs, traces) and :mod:`traceflow.otlp.metrics`
(metrics, cumulative -> delta); this module re-exports their public names.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Literal

import orjson
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError as _PbDecodeError
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from traceflow.errors import DecodeError
from traceflow.otlp.mapping import Mapped, map_logs, map_traces
from traceflow.otlp.metrics import MetricState, map_metrics

__all__ = [
    "DecodeError",
    "Mapped",
    "MetricState",
    "Signal",
    "UnsupportedContentType",
    "map_body",
    "map_logs",
    "map_metrics",
    "map_request",
    "map_traces",
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
        _BUILDER.fill(msg, obj)
    except _Shape as e:
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
    """Map one export request (a message, or a decoded OTLP/JSON object) to lake rows."""
    if isinstance(msg, dict):
        msg = parse_json(signal, msg)
    if signal == "logs":
        return map_logs(msg, keep_content=keep_content, source=source)
    if signal == "metrics":
        return map_metrics(msg, state=state, source=source)
    if signal == "traces":
        return map_traces(msg, keep_content=keep_content, source=source)
    _request_type(signal)  # raises the ValueError
    raise AssertionError("unreachable")


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


# -- OTLP/JSON -> message -----------------------------------------------------------------------------
class _Shape(Exception):
    """A JSON value of the wrong shape; ``path`` grows (outermost first) as it propagates up."""

    def __init__(self, message: str, *path: str) -> None:
        super().__init__(message)
        self.path = list(path)

    def at(self, *parts: str) -> _Shape:
        self.path[:0] = parts
        return self

    def __str__(self) -> str:
        where = "".join(
            p if p.startswith("[") or i == 0 else f" {p}" if p.startswith("(") else f".{p}"
            for i, p in enumerate(self.path)
        )
        return f"{where}: {self.args[0]}" if where else str(self.args[0])


_ID_FIELDS = frozenset({"trace_id", "span_id", "parent_span_id"})
_HEX = re.compile(r"\A[0-9a-fA-F]*\Z")

# field kinds
_K_MSG, _K_ATTRS, _K_ANY, _K_INT, _K_FLOAT, _K_BOOL, _K_STR, _K_ID, _K_BYTES, _K_ENUM = range(10)

_INT_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_SFIXED32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SINT32,
    }
)
_FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT})


def _json_int(x: Any) -> int:
    t = type(x)
    if t is int:
        return x  # type: ignore[no-any-return]
    if t is str:
        try:
            return int(x)
        except ValueError:
            pass
        try:
            f = float(x)
        except ValueError:
            raise _Shape(f"expected an integer, got {x!r}") from None
        if f.is_integer():
            return int(f)
        raise _Shape(f"expected an integer, got {x!r}")
    if t is float and x.is_integer():
        return int(x)
    raise _Shape(f"expected an integer (number or decimal string), got {x!r}")


def _json_float(x: Any) -> float:
    t = type(x)
    if t is float:
        return x  # type: ignore[no-any-return]
    if t is int:
        return float(x)
    if t is str:
        try:
            return float(x)  # also "NaN", "Infinity", "-Infinity"
        except ValueError:
            pass
    raise _Shape(f"expected a number, got {x!r}")


def _json_bytes(x: Any) -> bytes:
    if type(x) is not str:
        raise _Shape(f"expected a base64 string, got {x!r}")
    try:
        return base64.b64decode(x + "=" * (-len(x) % 4), altchars=b"-_" if ("-" in x or "_" in x) else None)
    except (binascii.Error, ValueError):
        raise _Shape(f"expected base64, got {x!r}") from None


def _json_id(x: Any) -> bytes:
    """A trace/span id: hex per OTLP/JSON; base64 (what MessageToDict writes) is accepted too."""
    if type(x) is not str:
        raise _Shape(f"expected a hex id string, got {x!r}")
    if len(x) in (32, 16) and _HEX.match(x):
        return bytes.fromhex(x)
    if not x:
        return b""
    if len(x) % 2 == 0 and _HEX.match(x):
        return bytes.fromhex(x)
    try:
        raw = base64.b64decode(x, validate=True)
    except (binascii.Error, ValueError):
        raise _Shape(
            f"expected a hex id (32 hex digits for a trace id, 16 for a span id), got {x!r}"
        ) from None
    if len(raw) in (16, 8):
        return raw
    raise _Shape(f"expected a hex id (32 hex digits for a trace id, 16 for a span id), got {x!r}")


def _set_any(av: Any, v: Any) -> None:
    """Fill an AnyValue message from its OTLP/JSON form."""
    if v is None:
        return
    if type(v) is not dict:
        raise _Shape(f"expected an AnyValue object, got {v!r}")
    for t, x in v.items():
        if x is None:
            continue
        if t == "stringValue" or t == "string_value":
            if type(x) is not str:
                raise _Shape(f"expected a string, got {x!r}", "stringValue")
            av.string_value = x
        elif t == "intValue" or t == "int_value":
            try:
                av.int_value = _json_int(x)
            except _Shape as e:
                raise e.at("intValue") from None
            except ValueError:
                raise _Shape(f"{x!r} is out of the int64 range", "intValue") from None
        elif t == "doubleValue" or t == "double_value":
            try:
                av.double_value = _json_float(x)
            except _Shape as e:
                raise e.at("doubleValue") from None
        elif t == "boolValue" or t == "bool_value":
            if type(x) is not bool:
                raise _Shape(f"expected true or false, got {x!r}", "boolValue")
            av.bool_value = x
        elif t == "arrayValue" or t == "array_value":
            arr = av.array_value
            arr.SetInParent()
            try:
                vals = _values(x)
                add = arr.values.add
                for i, item in enumerate(vals):
                    try:
                        _set_any(add(), item)
                    except _Shape as e:
                        raise e.at(f"[{i}]") from None
            except _Shape as e:
                raise e.at("arrayValue", "values") from None
        elif t == "kvlistValue" or t == "kvlist_value":
            kvl = av.kvlist_value
            kvl.SetInParent()
            try:
                _set_attrs(kvl.values, _values(x))
            except _Shape as e:
                raise e.at("kvlistValue", "values") from None
        elif t == "bytesValue" or t == "bytes_value":
            try:
                av.bytes_value = _json_bytes(x)
            except _Shape as e:
                raise e.at("bytesValue") from None
        else:
            continue  # unknown field
        return


def _values(x: Any) -> list[Any]:
    if type(x) is not dict:
        raise _Shape(f"expected an object with 'values', got {x!r}")
    vals = x.get("values") or []
    if type(vals) is not list:
        raise _Shape(f"expected a list, got {vals!r}")
    return vals


def _set_attrs(container: Any, kvs: Any) -> None:
    """Fill a repeated KeyValue field from its OTLP/JSON list (the hot path of JSON decoding)."""
    if kvs is None:
        return
    if type(kvs) is not list:
        raise _Shape(f"expected a list of key/value objects, got {kvs!r}")
    add = container.add
    for i, kv in enumerate(kvs):
        if type(kv) is not dict:
            raise _Shape(f"expected a key/value object, got {kv!r}", f"[{i}]")
        key = kv.get("key", "")
        v = kv.get("value")
        if type(v) is dict and len(v) == 1:  # the usual shape: one variant; common ones inline
            s = v.get("stringValue")
            if type(s) is str and type(key) is str:
                add(key=key).value.string_value = s
                continue
            n = v.get("intValue")
            if type(n) is str and len(n) < 19 and n.isascii() and n.isdigit():
                n = int(n)
            if type(n) is int and type(key) is str and -(2**63) <= n < 2**63:
                add(key=key).value.int_value = n
                continue
            b = v.get("boolValue")
            if type(b) is bool and type(key) is str:
                add(key=key).value.bool_value = b
                continue
        if type(key) is not str:
            raise _Shape(f"expected a string, got {key!r}", f"[{i}]", "key")
        item = add(key=key)
        if v is not None:
            av = item.value
            av.SetInParent()
            try:
                _set_any(av, v)
            except _Shape as e:
                raise e.at(f"[{i}]", f"({key})", "value") from None


class _JsonBuilder:
    """Fills protobuf messages from OTLP/JSON objects, driven by the message descriptors."""

    def __init__(self) -> None:
        self._specs: dict[str, dict[str, tuple[str, int, bool, Any]]] = {}

    def _spec(self, desc: Descriptor) -> dict[str, tuple[str, int, bool, Any]]:
        spec = self._specs.get(desc.full_name)
        if spec is not None:
            return spec
        spec = {}
        for fd in desc.fields:
            repeated = bool(fd.is_repeated)
            extra: Any = None
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                full = fd.message_type.full_name
                if full == "opentelemetry.proto.common.v1.KeyValue" and repeated:
                    kind = _K_ATTRS
                elif full == "opentelemetry.proto.common.v1.AnyValue" and not repeated:
                    kind = _K_ANY
                else:
                    kind = _K_MSG
            elif fd.type in _INT_TYPES:
                kind = _K_INT
            elif fd.type in _FLOAT_TYPES:
                kind = _K_FLOAT
            elif fd.type == FieldDescriptor.TYPE_BOOL:
                kind = _K_BOOL
            elif fd.type == FieldDescriptor.TYPE_STRING:
                kind = _K_STR
            elif fd.type == FieldDescriptor.TYPE_BYTES:
                kind = _K_ID if fd.name in _ID_FIELDS else _K_BYTES
            elif fd.type == FieldDescriptor.TYPE_ENUM:
                kind = _K_ENUM
                extra = fd.enum_type
            else:  # pragma: no cover - OTLP uses no other types
                continue
            entry = (fd.name, kind, repeated, extra)
            spec[fd.name] = entry
            spec[fd.json_name] = entry
        self._specs[desc.full_name] = spec
        return spec

    def fill(self, msg: Any, obj: Any) -> None:
        if type(obj) is not dict:
            raise _Shape(f"expected an object, got {obj!r}")
        spec = self._spec(msg.DESCRIPTOR)
        for key, value in obj.items():
            entry = spec.get(key)
            if entry is None or value is None:
                continue  # unknown fields are ignored; null means the default
            name, kind, repeated, extra = entry
            try:
                if kind == _K_ATTRS:
                    _set_attrs(getattr(msg, name), value)
                elif kind == _K_ANY:
                    av = getattr(msg, name)
                    av.SetInParent()
                    try:
                        _set_any(av, value)
                    except _Shape as e:
                        raise e.at() from None
                elif kind == _K_MSG:
                    if repeated:
                        if type(value) is not list:
                            raise _Shape(f"expected a list, got {value!r}")
                        add = getattr(msg, name).add
                        for i, item in enumerate(value):
                            try:
                                self.fill(add(), item)
                            except _Shape as e:
                                raise e.at(f"[{i}]") from None
                    else:
                        sub = getattr(msg, name)
                        sub.SetInParent()
                        try:
                            self.fill(sub, value)
                        except _Shape as e:
                            raise e.at() from None
                elif repeated:
                    if type(value) is not list:
                        raise _Shape(f"expected a list, got {value!r}")
                    getattr(msg, name).extend([self._scalar(kind, extra, v) for v in value])
                else:
                    setattr(msg, name, self._scalar(kind, extra, value))
            except _Shape as e:
                raise e.at(key) from None
            except (ValueError, TypeError) as e:  # out of range for the field's type
                raise _Shape(str(e), key) from None

    @staticmethod
    def _scalar(kind: int, extra: Any, v: Any) -> Any:
        if kind == _K_INT:
            return _json_int(v)
        if kind == _K_FLOAT:
            return _json_float(v)
        if kind == _K_STR:
            if type(v) is not str:
                raise _Shape(f"expected a string, got {v!r}")
            return v
        if kind == _K_BOOL:
            if type(v) is not bool:
                raise _Shape(f"expected true or false, got {v!r}")
            return v
        if kind == _K_ID:
            return _json_id(v)
        if kind == _K_BYTES:
            return _json_bytes(v)
        if kind == _K_ENUM:
            if type(v) is str:
                ev = extra.values_by_name.get(v)
                if ev is None:
                    raise _Shape(f"unknown enum value {v!r}")
                return ev.number
            return _json_int(v)
        raise AssertionError(kind)  # pragma: no cover


_BUILDER = _JsonBuilder()


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
                    out[k] = base64.b64encode(_json_id(v)).decode()
                else:
                    out[k] = fix(v)
            return out
        if isinstance(node, list):
            return [fix(x) for x in node]
        return node

    msg = _request_type(signal)()
    json_format.ParseDict(fix(obj), msg, ignore_unknown_fields=True)
    return msg
