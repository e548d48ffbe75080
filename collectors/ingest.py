"""Shared by both transports: authenticate, admit, decode, log to the WAL, answer.

The acknowledgement path is deliberately short (docs/collector.md#traceflow-serve; benchmarks/README.md):
decode the payload to prove it is
well formed (protobuf or OTLP/JSON, via ``traceflow.otlp.decode.parse_body``), drop records that are
structurally invalid (reported as ``partial_success``), append the payload to the write-ahead log
(``spool.Wal``, group-committed) and answer. Mapping records to lake rows happens later, in the
sealer process (``collectors/sealer.py``), so it never slows the exporters down.

Outcomes carry both an HTTP status and a gRPC code, so ``http.py`` and ``grpc.py`` only translate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError as PbDecodeError
from google.protobuf.message import Message
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from traceflow.collectors.prometheus import CollectorMetrics, Origins
from traceflow.collectors.spool import SIGNALS, Signal, Wal, WalRecord
from traceflow.collectors.tokens import Caller, Tokens
from traceflow.errors import DecodeError
from traceflow.otlp import decode as otlp
from traceflow.otlp.attributes import family
from traceflow.otlp.limits import span_times_problem, suspicious

_logger = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_MEDIA_TYPES = {
    "application/x-protobuf": PROTOBUF,
    "application/protobuf": PROTOBUF,
    "application/vnd.google.protobuf": PROTOBUF,
    "application/json": JSON,
}

# google.rpc.Code values used here
OK = 0
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNAVAILABLE = 14
UNAUTHENTICATED = 16

#: bodies above this are decoded in a worker thread instead of on the event loop
INLINE_DECODE_BYTES = 1 << 20

#: what OTLP calls the records of each signal (partial_success field names)
RECORD_NOUN = {"logs": "log records", "metrics": "data points", "traces": "spans"}
_REJECTED_FIELD = {
    "logs": "rejected_log_records",
    "metrics": "rejected_data_points",
    "traces": "rejected_spans",
}


def media_type(content_type: str | None) -> str | None:
    """The OTLP encoding named by a Content-Type header (``PROTOBUF``/``JSON``), None if unsupported."""
    if not content_type:
        return None
    return _MEDIA_TYPES.get(content_type.split(";", 1)[0].strip().lower())


# -- google.rpc.Status and Export*ServiceResponse ---------------------------------------------------
_RESPONSES: dict[str, type[Message]] = {
    "logs": ExportLogsServiceResponse,
    "metrics": ExportMetricsServiceResponse,
    "traces": ExportTraceServiceResponse,
}


def _status(code: int, message: str, retry_after_s: int | None) -> status_pb2.Status:
    status = status_pb2.Status(code=code, message=message)
    if retry_after_s is not None:
        status.details.add().Pack(RetryInfo(retry_delay=Duration(seconds=retry_after_s)))
    return status


def rpc_status(code: int, message: str, retry_after_s: int | None = None) -> bytes:
    """A serialized ``google.rpc.Status`` (with a ``RetryInfo`` detail when throttling)."""
    return bytes(_status(code, message, retry_after_s).SerializeToString())


def rpc_status_json(code: int, message: str, retry_after_s: int | None = None) -> bytes:
    """The same ``google.rpc.Status`` in proto JSON (``details`` always present, maybe empty)."""
    body = json_format.MessageToDict(_status(code, message, retry_after_s))
    body.setdefault("details", [])
    body["code"] = code  # MessageToDict leaves out a zero code
    return orjson.dumps(body)


def export_response(signal: Signal, encoding: str, rejected: int = 0, message: str = "") -> bytes:
    """An ``Export*ServiceResponse``: empty on full success, else with ``partial_success``."""
    if not rejected and not message:
        return b"{}" if encoding == JSON else b""
    response: Any = _RESPONSES[signal]()
    partial = response.partial_success
    setattr(partial, _REJECTED_FIELD[signal], rejected)
    partial.error_message = message
    if encoding == JSON:  # int64 travels as a string in proto JSON
        return orjson.dumps(json_format.MessageToDict(response))
    return bytes(response.SerializeToString())


# -- outcomes ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """The answer to one export request, for either transport."""

    http_status: int
    code: int  # google.rpc.Code
    message: str = ""
    rejected: int = 0
    retry_after_s: int | None = None

    @property
    def ok(self) -> bool:
        return self.code == OK


def accepted(rejected: int = 0, message: str = "") -> Outcome:
    return Outcome(200, OK, message, rejected)


def bad_request(message: str) -> Outcome:
    return Outcome(400, INVALID_ARGUMENT, message)


def too_large(limit: int) -> Outcome:
    return Outcome(413, RESOURCE_EXHAUSTED, f"request body exceeds the limit of {limit} bytes")


def unsupported(message: str) -> Outcome:
    return Outcome(415, INVALID_ARGUMENT, message)


def unauthenticated() -> Outcome:
    return Outcome(401, UNAUTHENTICATED, "missing or wrong bearer token")


def overloaded(message: str, retry_after_s: int) -> Outcome:
    return Outcome(503, UNAVAILABLE, message, retry_after_s=retry_after_s)


# -- record counting and structural checks -----------------------------------------------------------
def count_records(signal: Signal, msg: Message) -> int:
    """Log records, metric data points or spans in a decoded request."""
    m: Any = msg
    if signal == "logs":
        return sum(len(sl.log_records) for rl in m.resource_logs for sl in rl.scope_logs)
    if signal == "traces":
        return sum(len(ss.spans) for rs in m.resource_spans for ss in rs.scope_spans)
    n = 0
    for rm in m.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind is not None:
                    n += len(getattr(metric, kind).data_points)
    return n


#: the resource attribute that names a record's team (the ``team`` label of ``/metrics``)
TEAM_ATTRIBUTE = "team.id"
_GROUPS = {"logs": ("resource_logs", "scope_logs"), "traces": ("resource_spans", "scope_spans")}
_RESOURCE_GROUPS = {"logs": "resource_logs", "traces": "resource_spans", "metrics": "resource_metrics"}


def _resource_text(resource: Any, key: str) -> str | None:
    for kv in resource.attributes:
        if kv.key == key and kv.value.WhichOneof("value") == "string_value":
            return str(kv.value.string_value)
    return None


#: where the ``team.id`` a client claimed is kept when its token's team replaces it
CLAIMED_TEAM_ATTRIBUTE = "team.id.claimed"


def force_team(signal: Signal, msg: Message, team: str) -> bool:
    """Give every resource of ``msg`` the ``team.id`` ``team`` (in place); a different claim is kept
    as ``team.id.claimed`` (one the client sent itself is dropped). True when something changed."""
    changed = False
    for rg in getattr(msg, _RESOURCE_GROUPS[signal]):
        attrs = rg.resource.attributes
        claims = [kv for kv in attrs if kv.key == TEAM_ATTRIBUTE]
        if (
            len(claims) == 1
            and claims[0].value.WhichOneof("value") == "string_value"
            and claims[0].value.string_value == team
            and not any(kv.key == CLAIMED_TEAM_ATTRIBUTE for kv in attrs)
        ):
            continue
        kept = [_copy(kv) for kv in attrs if kv.key not in (TEAM_ATTRIBUTE, CLAIMED_TEAM_ATTRIBUTE)]
        claim = _copy(claims[0]) if claims else None
        del attrs[:]
        attrs.extend(kept)
        if claim is not None and claim.value != _string_value(team):
            claim.key = CLAIMED_TEAM_ATTRIBUTE
            attrs.append(claim)
        own = attrs.add()
        own.key = TEAM_ATTRIBUTE
        own.value.string_value = team
        changed = True
    return changed


def _copy(kv: Any) -> Any:
    out = type(kv)()
    out.CopyFrom(kv)
    return out


def _string_value(text: str) -> Any:
    return AnyValue(string_value=text)


def record_origins(signal: Signal, msg: Message) -> Origins:
    """The records of a decoded request by (agent family, ``team.id`` of their resource)."""
    m: Any = msg
    out: Origins = Origins()
    if signal == "metrics":
        for rm in m.resource_metrics:
            service, team = (
                _resource_text(rm.resource, "service.name"),
                _resource_text(rm.resource, TEAM_ATTRIBUTE),
            )
            for sm in rm.scope_metrics:
                n = 0
                for metric in sm.metrics:
                    kind = metric.WhichOneof("data")
                    if kind is not None:
                        n += len(getattr(metric, kind).data_points)
                if n:
                    out[family(service, sm.scope.name), team] += n
        return out
    groups, scopes = _GROUPS[signal]
    field_name = "log_records" if signal == "logs" else "spans"
    for rg in getattr(m, groups):
        service, team = (
            _resource_text(rg.resource, "service.name"),
            _resource_text(rg.resource, TEAM_ATTRIBUTE),
        )
        for sg in getattr(rg, scopes):
            n = len(getattr(sg, field_name))
            if n:
                out[family(service, sg.scope.name), team] += n
    return out


def _bad_span(span: Any) -> str | None:
    if len(span.trace_id) != 16:
        return f"trace_id must be 16 bytes, got {len(span.trace_id)}"
    if len(span.span_id) != 8:
        return f"span_id must be 8 bytes, got {len(span.span_id)}"
    if len(span.parent_span_id) not in (0, 8):
        return f"parent_span_id must be 0 or 8 bytes, got {len(span.parent_span_id)}"
    return span_times_problem(span.start_time_unix_nano, span.end_time_unix_nano)


def _drop_where(items: Any, bad: list[int]) -> None:
    for i in reversed(bad):
        del items[i]


def check_records(signal: Signal, msg: Message) -> tuple[int, str]:
    """Remove structurally invalid records from ``msg`` in place; returns (rejected, message).

    Invalid means the record cannot be stored faithfully: a span without a proper trace or span id
    (its identity) or that ends before it starts, a number data point without a value. The
    mapping's own refusals (a token count that is not a number, a time out of range, ...) are found
    by :func:`screen_records`, when :func:`traceflow.otlp.limits.suspicious` flags the payload.
    Log records have no required fields, so they are not walked here (it keeps the hot path short).
    """
    m: Any = msg
    reasons: list[str] = []
    rejected = 0
    if signal == "traces":
        for ri, rs in enumerate(m.resource_spans):
            for si, ss in enumerate(rs.scope_spans):
                bad = []
                for i, span in enumerate(ss.spans):
                    why = _bad_span(span)
                    if why:
                        bad.append(i)
                        reasons.append(f"resource {ri} scope {si} span {i}: {why}")
                _drop_where(ss.spans, bad)
                rejected += len(bad)
    elif signal == "metrics":
        for ri, rm in enumerate(m.resource_metrics):
            for si, sm in enumerate(rm.scope_metrics):
                for metric in sm.metrics:
                    kind = metric.WhichOneof("data")
                    if kind not in ("gauge", "sum"):
                        continue
                    bad = []
                    for i, point in enumerate(getattr(metric, kind).data_points):
                        if point.WhichOneof("value") is None and not point.flags & 1:  # 1: NO_RECORDED_VALUE
                            bad.append(i)
                            reasons.append(
                                f"resource {ri} scope {si} metric {metric.name!r} point {i}: no value"
                            )
                    _drop_where(getattr(metric, kind).data_points, bad)
                    rejected += len(bad)
    if not rejected:
        return 0, ""
    more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
    return rejected, f"{rejected} {RECORD_NOUN[signal]} rejected: " + "; ".join(reasons[:3]) + more


def _refusal(signal: Signal, msg: Message) -> str | None:
    """Why the sealer could not store ``msg`` (None when it can): too deep to re-read, or refused
    by the mapping (:func:`traceflow.otlp.decode.map_request`)."""
    try:
        msg = type(msg).FromString(msg.SerializeToString())
    except PbDecodeError:
        return "nested too deeply to store"
    try:
        mapped = otlp.map_request(signal, msg, state=otlp.MetricState())
    except Exception as e:  # the mapping is total; this is a last line of defence
        return f"the mapping failed: {type(e).__name__}: {e}"
    return (mapped.message or "refused by the mapping") if mapped.rejected else None


def screen_records(signal: Signal, msg: Message) -> tuple[int, list[str]]:
    """Remove, in place, the log records and spans the sealer could not store; (removed, reasons).

    Maps the whole request once; only when that refuses something is each record mapped alone.
    Metrics are not screened: their mapping reads no value the lake cannot hold.
    """
    if signal == "metrics" or _refusal(signal, msg) is None:
        return 0, []
    bad: dict[int, tuple[Any, list[int]]] = {}
    reasons: list[str] = []
    for items, i, one in otlp.one_record_requests(signal, msg):
        why = _refusal(signal, one) if one is not None else "nested too deeply to store"
        if why is not None:
            bad.setdefault(id(items), (items, []))[1].append(i)
            reasons.append(f"{'log record' if signal == 'logs' else 'span'} {i}: {why}")
    for items, indexes in bad.values():
        _drop_where(items, indexes)
    return len(reasons), reasons


class Checked(NamedTuple):
    """A payload decoded and checked by :func:`_check`, ready for the write-ahead log."""

    body: bytes
    encoding: str
    records: int
    rejected: int  # records removed (OTLP partial_success), ``unstorable`` included
    message: str
    unstorable: int  # of ``rejected``: records the lake could not store (the mapping refused them)
    origins: Origins  # the records kept, by agent family and team


def _check(signal: Signal, encoding: str, body: bytes, team: str | None = None) -> Outcome | Checked:
    """Decode and check one payload: an error outcome, or what to log (with ``team`` as every
    resource's ``team.id``: :func:`force_team`)."""
    try:
        msg = otlp.parse_body(signal, body, encoding)
        records = count_records(signal, msg)
        rejected, message = check_records(signal, msg) if records and signal != "logs" else (0, "")
        unstorable = 0
        if records > rejected and signal != "metrics":
            # what the sealer could not store is refused now, in partial_success
            # (docs/collector.md#traceflow-serve): a
            # cheap look at the bytes first, the mapping record by record only when it flags
            pb = body if encoding == PROTOBUF and not rejected else msg.SerializeToString()
            deep = False
            if encoding != PROTOBUF:
                try:
                    type(msg).FromString(pb)  # JSON can nest deeper than protobuf's parse limit
                except PbDecodeError:
                    deep = True
            if deep or suspicious(pb):
                n, reasons = screen_records(signal, msg)
                if n:
                    rejected += n
                    unstorable = n
                    more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
                    why = f"{n} {RECORD_NOUN[signal]} the lake cannot store: " + "; ".join(reasons[:3])
                    message = f"{message}; {why}{more}" if message else why + more
    except otlp.UnsupportedContentType as e:
        return unsupported(str(e))
    except DecodeError as e:
        return bad_request(f"cannot decode the {signal} payload: {e}")
    except (RecursionError, ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
        # A hostile payload must never reach past this point, whatever the decoder throws.
        return bad_request(f"cannot decode the {signal} payload: {type(e).__name__}: {e}")
    # log only what was accepted (re-encoded without the bad records), with the token's team, and
    # OTLP/JSON as protobuf: the sealer then decodes each message at a third of JSON's memory
    # (settings.DECODED_BYTES_PER_BYTE, settings.JSON_DECODED_BYTES_PER_BYTE)
    reencode = (bool(rejected) or encoding != PROTOBUF) and records > rejected
    if team is not None and records > rejected and force_team(signal, msg, team):
        reencode = True
    if reencode:
        was_protobuf = encoding == PROTOBUF  # then it re-parses: no record or attribute got deeper
        body, encoding = msg.SerializeToString(), PROTOBUF
        try:
            if not was_protobuf:
                type(msg).FromString(body)  # JSON can nest deeper than protobuf's parse limit
        except PbDecodeError:
            return bad_request(f"the {signal} payload is nested too deeply to store")
    return Checked(body, encoding, records, rejected, message, unstorable, record_origins(signal, msg))


# -- admission control -------------------------------------------------------------------------------
class Reservation:
    """Bytes one request holds against the in-flight budget."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = 0


class Admission:
    """Bounds the bytes held by requests being received and the WAL backlog the sealer has not sealed.

    A request may always proceed when it is alone, so a body under ``max_body_bytes`` is never
    refused forever, whatever the in-flight budget.
    """

    def __init__(self, max_inflight_bytes: int, max_backlog_bytes: int) -> None:
        self.max_inflight_bytes = max_inflight_bytes
        self.max_backlog_bytes = max_backlog_bytes
        self.inflight = 0
        self.backlog = 0  # updated by the server's monitor task
        self._released: asyncio.Event | None = None  # set when bytes are given back (see acquire)

    def backlog_full(self) -> bool:
        return self.backlog > self.max_backlog_bytes

    def grow(self, res: Reservation, n: int) -> bool:
        others = self.inflight - res.held
        if others > 0 and self.inflight + n > self.max_inflight_bytes:
            return False
        self.inflight += n
        res.held += n
        return True

    def release(self, res: Reservation) -> None:
        self.shrink(res, 0)

    def shrink(self, res: Reservation, n: int) -> None:
        """Keep only ``n`` of the bytes ``res`` holds (no more than it holds)."""
        freed = max(res.held - n, 0)
        if freed:
            self.inflight -= freed
            res.held -= freed
            if self._released is not None:
                self._released.set()

    async def acquire(self, res: Reservation, n: int, wait_s: float) -> bool:
        """:meth:`grow` ``res`` by ``n``, waiting up to ``wait_s`` for others to release bytes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while not self.grow(res, n):
            left = deadline - loop.time()
            if left <= 0:
                return False
            if self._released is None or self._released.is_set():
                self._released = asyncio.Event()
            event = self._released
            try:
                await asyncio.wait_for(event.wait(), left)
            except TimeoutError:
                return False
        return True


def overload_outcome(admission: Admission) -> Outcome:
    return (
        overloaded("the collector is overloaded (sealing backlog full); retry later", retry_after_s=5)
        if admission.backlog_full()
        else overloaded("too many bytes in flight; retry later", retry_after_s=1)
    )


# -- counters ------------------------------------------------------------------------------------------
@dataclass
class SignalCounts:
    requests: int = 0
    records: int = 0  # acknowledged records
    rejected: int = 0  # records refused with partial_success
    refused: int = 0  # whole requests answered with an error (400/401/413/415)
    throttled: int = 0  # requests answered 503 / UNAVAILABLE


@dataclass
class Counters:
    by_signal: dict[str, SignalCounts] = field(default_factory=lambda: {s: SignalCounts() for s in SIGNALS})
    unknown: SignalCounts = field(default_factory=SignalCounts)  # before the signal was known
    #: the same counts for ``GET /metrics``, in this collector's own registry
    metrics: CollectorMetrics = field(default_factory=CollectorMetrics)

    def of(self, signal: str | None) -> SignalCounts:
        return self.by_signal.get(signal or "", self.unknown)

    def note(
        self,
        signal: str | None,
        outcome: Outcome,
        records: int = 0,
        *,
        protocol: str = "http",
        checked: Checked | None = None,
    ) -> None:
        """Count one answered export request (``checked``: its payload, once decoded)."""
        self.metrics.note(
            signal,
            protocol,
            outcome.http_status,
            outcome.code,
            origins=checked.origins if checked is not None and outcome.ok else None,
            rejected=outcome.rejected if outcome.ok else 0,
            unstorable=checked.unstorable if checked is not None and outcome.ok else 0,
            unlogged=checked.records - checked.rejected if checked is not None and not outcome.ok else 0,
        )
        c = self.of(signal)
        c.requests += 1
        if outcome.ok:
            c.records += records
            c.rejected += outcome.rejected
        elif outcome.code == UNAVAILABLE:
            c.throttled += 1
        else:
            c.refused += 1


@dataclass
class LakeHealth:
    """Whether the sealer can write the lake, as it last reported (``collectors/sealer.py``)."""

    error: str | None = None  # why the last seal failed on the storage; None while it works
    since: float | None = None  # seconds since the epoch
    segments: int = 0  # WAL segments waiting then

    def line(self) -> str:
        if self.error is None:
            return ""
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since or 0))
        return (
            f"LAKE WRITES FAILING since {at} ({self.segments} WAL segments wait, nothing lost): {self.error}"
        )

    def to_dict(self) -> dict[str, Any]:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since)) if self.since else None
        return {"error": self.error, "since": since, "segments_waiting": self.segments}


# -- the shared core ---------------------------------------------------------------------------------
class Ingest:
    """Everything both transports share: auth, admission, decode + check, WAL append, counters."""

    def __init__(
        self,
        wal: Wal,
        admission: Admission,
        *,
        keep_content: bool,
        token: str | None,
        tokens: Tokens | None = None,
    ) -> None:
        self.wal = wal
        self.admission = admission
        self.keep_content = keep_content
        self.tokens = tokens if tokens is not None else Tokens(token)
        self.counters = Counters(metrics=CollectorMetrics(lambda: float(admission.backlog)))
        self.metrics = self.counters.metrics
        self.lake = LakeHealth()
        self._decoding = asyncio.Semaphore(1)  # large bodies are decoded one at a time

    def caller(self, authorization: str | bytes | None) -> Caller | None:
        """Who an ``Authorization`` header / metadata value names (None: nobody we know)."""
        return self.tokens.caller(authorization)

    def authorized(self, authorization: str | bytes | None) -> bool:
        """Whether an ``Authorization`` header / metadata value may write."""
        return self.caller(authorization) is not None

    def may_read(self, authorization: str | bytes | None) -> bool:
        """Whether it may read ``/status`` and ``/metrics``: the shared token or an administrator."""
        caller = self.caller(authorization)
        return caller is not None and caller.admin

    async def export(
        self,
        signal: Signal | None,
        encoding: str,
        body: bytes,
        *,
        protocol: str = "http",
        team: str | None = None,
    ) -> tuple[Signal | None, Outcome]:
        """Decode, check and durably log one export request; ``signal`` None means sniff it.
        ``team``: the ``team.id`` every record gets (its token's team), the claim kept beside it."""
        if signal is None:
            if not body:
                return None, accepted()  # an empty envelope of an unknown signal: nothing to store
            try:
                signal = otlp.sniff_signal(body, encoding)
            except Exception:  # a hostile body must not get past this point
                signal = None
            if signal is None:
                outcome = bad_request(
                    "cannot tell which signal this payload holds; "
                    "POST it to /v1/logs, /v1/metrics or /v1/traces"
                )
                self.counters.note(None, outcome, protocol=protocol)
                return None, outcome
        outcome, records, checked = await self._export(signal, encoding, body, team)
        self.counters.note(signal, outcome, records, protocol=protocol, checked=checked)
        return signal, outcome

    async def _export(
        self, signal: Signal, encoding: str, body: bytes, team: str | None = None
    ) -> tuple[Outcome, int, Checked | None]:
        if len(body) > INLINE_DECODE_BYTES:
            # A big body (JSON above all) takes a while to decode: do it off the event loop, which
            # then keeps serving other clients between the decoder's GIL slices. One at a time: a
            # decoded message takes about four times its size (settings.DECODED_BYTES_PER_BYTE).
            async with self._decoding:
                checked = await asyncio.to_thread(_check, signal, encoding, body, team)
        else:
            checked = _check(signal, encoding, body, team)
        if isinstance(checked, Outcome):
            return checked, 0, None
        body, encoding, records, rejected, message = checked[:5]
        if records - rejected <= 0:
            return accepted(rejected, message), 0, checked
        rec = WalRecord(signal, encoding, body, self.keep_content, time.time_ns())
        try:
            await self.wal.append(rec)
        except (OSError, RuntimeError) as e:
            outcome = overloaded(f"cannot store the payload right now ({e}); retry later", retry_after_s=5)
            return outcome, 0, checked
        return accepted(rejected, message), records - rejected, checked

    def summary(self) -> str:
        """One line: acknowledged and rejected records per signal."""
        parts = []
        for s, c in self.counters.by_signal.items():
            parts.append(f"{s} {c.records} ok/{c.rejected} rejected")
        bad = sum(c.refused for c in self._all())
        throttled = sum(c.throttled for c in self._all())
        lake = self.lake.line()
        return (
            "received " + ", ".join(parts) + f"; {bad} requests refused, {throttled} throttled; "
            f"WAL backlog {self.admission.backlog / 2**20:.1f} MiB" + (f"; {lake}" if lake else "")
        )

    def status(self) -> dict[str, Any]:
        """What ``GET /status`` answers: the lake's health, the WAL backlog, the counters."""
        return {
            "lake": self.lake.to_dict(),
            "wal_backlog_bytes": self.admission.backlog,
            "inflight_bytes": self.admission.inflight,
            "received": {
                s: {
                    "records": c.records,
                    "rejected": c.rejected,
                    "refused": c.refused,
                    "throttled": c.throttled,
                }
                for s, c in self.counters.by_signal.items()
            },
        }

    def _all(self) -> Iterable[SignalCounts]:
        yield from self.counters.by_signal.values()
        yield self.counters.unknown


async def poll_backlog(ingest: Ingest, interval_s: float = 0.25) -> None:
    """Keep ``admission.backlog`` current (runs until cancelled)."""
    while True:
        ingest.admission.backlog = await asyncio.to_thread(ingest.wal.backlog_bytes)
        await asyncio.sleep(interval_s)
