"""OTLP/gRPC receiver: the three standard collector services on a ``grpc.aio`` server.

The servicers subclass opentelemetry-proto's ``*ServiceServicer`` bases but are registered with
identity (de)serializers: the request arrives as the raw protobuf bytes, which are checked and
written to the WAL as they are (no decode-reencode on the acknowledgement path). grpc itself
inflates ``grpc-encoding: gzip`` and enforces ``max_receive_message_length`` after inflation.

**Memory.** grpc buffers a message whole before a handler sees it, and announces no length
before, so every call is answered by :class:`_Gate`, which decides before the message is read:

* a wrong or missing token: ``UNAUTHENTICATED``;
* a full sealing backlog: ``UNAVAILABLE``;
* more than ``MAX_CALLS_PER_CONNECTION`` calls in progress on the caller's connection: ``UNAVAILABLE``;
* otherwise the call reserves the largest message it may send (``max_receive_message_length``, which
  is ``--max-body-bytes``) against the in-flight byte budget it shares with HTTP
  (``ingest.Admission``, ``--max-inflight-bytes``): a message counts from before its first frame.
  A call that does not fit waits up to ``ADMISSION_WAIT_S`` for others to finish, then is refused
  with ``UNAVAILABLE``. Once its message is read, the reservation shrinks to the message's size
  until the answer. A message must arrive within ``READ_GRACE_S`` plus one second per
  ``MIN_READ_BYTES_PER_S`` of the largest message, or the call is refused (``DEADLINE_EXCEEDED``).

A refused call is answered by a request-streaming handler that never asks for its message, so grpc
holds no more of it than the HTTP/2 flow-control window. Every ``UNAVAILABLE`` carries a
``google.rpc.RetryInfo`` detail in ``grpc-status-details-bin``; bad data is ``INVALID_ARGUMENT``.
So the bytes of gRPC messages held at once stay under ``--max-inflight-bytes`` (or one message, when
a single one is larger), whatever the number of clients and connections. Decoded, a message takes
about four times its size (upb's objects for each attribute); large messages are decoded one at a
time (``Ingest.export``), so at most one such copy exists: the server's RSS stays under the bound of
docs/collector.md (``traceflow serve``, ``settings.memory_bound_bytes``).

**Leaks.** A request iterator left suspended after its message, or an abort raised through a frame
that holds the message (the traceback keeps the frame until the cycle collector runs), kept every
message alive: each 60 MiB call grew the server by 60 MiB. :func:`_first` runs the iterator to its
end and :class:`_Gate` aborts from a frame without the message.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from typing import Any, NoReturn

import grpc
from grpc import aio
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from traceflow.collectors import allocator, ingest
from traceflow.collectors.ingest import PROTOBUF, Ingest, Outcome
from traceflow.collectors.spool import Signal

_logger = logging.getLogger(__name__)

SERVICE_NAMES: dict[Signal, str] = {
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
}

_CODES = {
    ingest.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ingest.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ingest.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ingest.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ingest.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
}
DEADLINE_EXCEEDED = ingest.DEADLINE_EXCEEDED


#: calls in progress on one connection (the HTTP/2 limit is higher, so that the rest get RetryInfo)
MAX_CALLS_PER_CONNECTION = 16
#: HTTP/2 streams one connection may open at once (beyond: REFUSED_STREAM, by grpc itself)
MAX_STREAMS_PER_CONNECTION = 64
#: how long a call waits for room in the in-flight budget before UNAVAILABLE
ADMISSION_WAIT_S = 5.0
#: how long a message may take to arrive: READ_GRACE_S + the largest message / MIN_READ_BYTES_PER_S
READ_GRACE_S = 30.0
MIN_READ_BYTES_PER_S = 1 << 20
#: a call that held this much hands the allocator's freed pages back when it ends
TRIM_AFTER_BYTES = 8 << 20
#: the retry delay gRPC clients are told when their connection has too many calls in progress
BUSY_CONNECTION_RETRY_S = 1


class _Export:
    """The ``Export`` method shared by the three services (called with the message read)."""

    signal: Signal
    core: Ingest

    async def Export(self, request: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        answer = await self.answer(request)
        if isinstance(answer, Outcome):
            await _abort(context, answer)
        return answer

    async def answer(self, request: bytes, team: str | None = None) -> bytes | Outcome:
        """The response to ``request``, or the outcome to abort the call with (``team``: the
        ``team.id`` its records get, :meth:`Ingest.export`)."""
        _, outcome = await self.core.export(self.signal, PROTOBUF, request, protocol="grpc", team=team)
        if not outcome.ok:
            return outcome
        return ingest.export_response(self.signal, PROTOBUF, outcome.rejected, outcome.message)


async def _abort(context: aio.ServicerContext[Any, Any], outcome: Outcome) -> NoReturn:
    details = ingest.rpc_status(outcome.code, outcome.message, outcome.retry_after_s)
    await context.abort(
        _CODES.get(outcome.code, grpc.StatusCode.INTERNAL),
        outcome.message,
        trailing_metadata=(("grpc-status-details-bin", details),),
    )
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


class LogsServicer(_Export, logs_service_pb2_grpc.LogsServiceServicer):
    signal: Signal = "logs"

    def __init__(self, core: Ingest) -> None:
        self.core = core


class MetricsServicer(_Export, metrics_service_pb2_grpc.MetricsServiceServicer):
    signal: Signal = "metrics"

    def __init__(self, core: Ingest) -> None:
        self.core = core


class TraceServicer(_Export, trace_service_pb2_grpc.TraceServiceServicer):
    signal: Signal = "traces"

    def __init__(self, core: Ingest) -> None:
        self.core = core


_SIGNAL_OF_METHOD: dict[str, Signal] = {f"/{name}/Export": signal for signal, name in SERVICE_NAMES.items()}


async def _refuse_unauthenticated(request_iterator: Any, context: aio.ServicerContext[Any, Any]) -> bytes:
    await _abort(context, ingest.unauthenticated())  # the request stream is never read


class _Gate(aio.ServerInterceptor):
    """Answers every call before its message is read (see the module docstring): refuses it, or
    reserves room for its largest message, reads it, and hands it to the servicer."""

    def __init__(self, core: Ingest, max_message_bytes: int) -> None:
        self.core = core
        self.max_message_bytes = max_message_bytes
        self.read_timeout_s = READ_GRACE_S + max_message_bytes / MIN_READ_BYTES_PER_S
        self.calls: Counter[str] = Counter()  # calls in progress, by connection (peer address)
        self._servicers: dict[Signal, _Export] = {
            s.signal: s for s in (LogsServicer(core), MetricsServicer(core), TraceServicer(core))
        }

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        core = self.core
        token = _authorization(details.invocation_metadata)
        signal = _SIGNAL_OF_METHOD.get(details.method)
        if not core.authorized(token):
            core.counters.note(signal, ingest.unauthenticated(), protocol="grpc")
            return _REFUSE_UNAUTHENTICATED
        if signal is None:
            return await continuation(details)  # UNIMPLEMENTED, from grpc
        if core.admission.backlog_full():
            outcome = ingest.overload_outcome(core.admission)
            core.counters.note(signal, outcome, protocol="grpc")
            return grpc.stream_unary_rpc_method_handler(_refusal(outcome))
        return self._handlers[signal]

    @functools.cached_property
    def _handlers(self) -> dict[Signal, Any]:
        return {s: grpc.stream_unary_rpc_method_handler(self._bounded(s)) for s in self._servicers}

    def _bounded(self, signal: Signal) -> Any:
        servicer = self._servicers[signal]

        async def export(request_iterator: Any, context: aio.ServicerContext[Any, Any]) -> bytes:
            peer = context.peer()
            if self.calls[peer] >= MAX_CALLS_PER_CONNECTION:
                busy = ingest.overloaded(
                    f"more than {MAX_CALLS_PER_CONNECTION} calls in progress on this connection; retry later",
                    retry_after_s=BUSY_CONNECTION_RETRY_S,
                )
                self.core.counters.note(signal, busy, protocol="grpc")
                answer: bytes | Outcome = busy
            else:
                self.calls[peer] += 1
                caller = self.core.caller(_authorization(context.invocation_metadata()))
                try:
                    if caller is None:  # the tokens file changed since the call was let in
                        answer = ingest.unauthenticated()
                        self.core.counters.note(signal, answer, protocol="grpc")
                    else:
                        answer = await self._receive(signal, servicer, request_iterator, caller.forced_team)
                finally:
                    self.calls[peer] -= 1
                    if not self.calls[peer]:
                        del self.calls[peer]
            if isinstance(answer, Outcome):
                # raised here, in a frame that holds no message: an exception's traceback keeps its
                # frames' locals alive until the cycle collector runs, a 60 MiB message included
                await _abort(context, answer)
            return answer

        return export

    async def _receive(
        self, signal: Signal, servicer: _Export, request_iterator: Any, team: str | None
    ) -> bytes | Outcome:
        """Reserve room for the largest message, read it, answer it; never raises an abort."""
        core = self.core
        res = ingest.Reservation()
        try:
            refusal = None
            request: bytes | None = None
            if not await core.admission.acquire(res, self.max_message_bytes, ADMISSION_WAIT_S):
                refusal = ingest.overload_outcome(core.admission)
            else:
                try:
                    request = await asyncio.wait_for(_first(request_iterator), self.read_timeout_s)
                except TimeoutError:
                    refusal = Outcome(408, DEADLINE_EXCEEDED, "the message took too long to arrive")
            if refusal is not None or request is None:
                refusal = refusal or ingest.bad_request("no request message")
                core.counters.note(signal, refusal, protocol="grpc")
                return refusal
            core.admission.shrink(res, len(request))
            return await servicer.answer(request, team)  # counted by Ingest.export
        finally:
            if res.held >= TRIM_AFTER_BYTES:
                allocator.trim()  # the message's pages back to the system before the next is admitted
            core.admission.release(res)


def _authorization(metadata: Any) -> str | bytes | None:
    """The ``authorization`` value of a call's metadata (None without one)."""
    token = None
    for key, value in metadata or ():
        if key == "authorization":
            token = value
    return token


async def _first(request_iterator: Any) -> bytes | None:
    """The call's message (None if there is none). The iterator is run to its end: one left
    suspended keeps the message it read alive in grpc (the memory of every such call leaked)."""
    first: bytes | None = None
    async for message in request_iterator:
        if first is None:
            first = bytes(message)
    return first


def _refusal(outcome: Outcome) -> Any:
    async def refuse(request_iterator: Any, context: aio.ServicerContext[Any, Any]) -> bytes:
        await _abort(context, outcome)

    return refuse


_REFUSE_UNAUTHENTICATED: Any = grpc.stream_unary_rpc_method_handler(_refuse_unauthenticated)


def create_server(core: Ingest, *, max_body_bytes: int) -> aio.Server:
    """A ``grpc.aio`` server with the OTLP services registered (ports are added by the caller)."""
    options = [
        ("grpc.max_receive_message_length", max_body_bytes),
        ("grpc.max_send_message_length", 4 << 20),
        ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        # no window growth by bandwidth-delay probing: a stream whose message is not being read (its
        # call waits for the budget) holds at most the initial 64 KiB window, not several MiB
        ("grpc.http2.bdp_probe", 0),
    ]
    # every OTLP call is answered by the gate; anything else finds no handler (UNIMPLEMENTED)
    return aio.server(options=options, interceptors=[_Gate(core, max_body_bytes)])
