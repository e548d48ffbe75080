"""OTLP/gRPC receiver: the three standard collector services on a ``grpc.aio`` server.

The servicers subclass opentelemetry-proto's ``*ServiceServicer`` bases but are registered with
identity (de)serializers: the request arrives as the raw protobuf bytes, which are checked and
written to the WAL as they are (no decode-reencode on the acknowledgement path). grpc itself
inflates ``grpc-encoding: gzip`` and enforces ``max_receive_message_length`` after inflation.

A call with a wrong or missing token is refused on its metadata, before its message is read
(:class:`_Gate`); the bodies of the others count against the same in-flight byte budget as HTTP's
(``ingest.Admission``) once grpc has received them (gRPC announces no length before the message),
and grpc refuses any larger than ``max_receive_message_length`` (``--max-body-bytes``).

Bad data is ``INVALID_ARGUMENT``; throttling is ``UNAVAILABLE`` with a ``google.rpc.RetryInfo``
detail in ``grpc-status-details-bin``; a wrong or missing token is ``UNAUTHENTICATED``.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import grpc
from grpc import aio
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from traceflow.collectors import ingest
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
}


class _Export:
    """The ``Export`` method shared by the three services."""

    signal: Signal
    core: Ingest

    async def Export(self, request: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        core = self.core  # the token was checked by _Gate, before the message was read
        if core.admission.backlog_full():
            outcome = ingest.overload_outcome(core.admission)
            core.counters.note(self.signal, outcome)
            await _abort(context, outcome)
        res = ingest.Reservation()
        try:
            if not core.admission.grow(res, len(request)):
                outcome = ingest.overload_outcome(core.admission)
                core.counters.note(self.signal, outcome)
                await _abort(context, outcome)
            _, outcome = await core.export(self.signal, PROTOBUF, request)
        finally:
            core.admission.release(res)
        if not outcome.ok:
            await _abort(context, outcome)
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


def handlers(core: Ingest) -> list[grpc.GenericRpcHandler]:
    """Generic handlers for the three services, taking and returning raw bytes."""
    out = []
    for servicer in (LogsServicer(core), MetricsServicer(core), TraceServicer(core)):
        # no (de)serializers: the handler takes and returns bytes
        method: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(servicer.Export)
        out.append(grpc.method_handlers_generic_handler(SERVICE_NAMES[servicer.signal], {"Export": method}))
    return out


_SIGNAL_OF_METHOD: dict[str, Signal] = {f"/{name}/Export": signal for signal, name in SERVICE_NAMES.items()}


async def _refuse_unauthenticated(request_iterator: Any, context: aio.ServicerContext[Any, Any]) -> bytes:
    await _abort(context, ingest.unauthenticated())  # the request stream is never read


class _Gate(aio.ServerInterceptor):
    """Refuses a call on its metadata alone, before its message is read: a missing or wrong token
    (``UNAUTHENTICATED``), or a full sealing backlog (``UNAVAILABLE``). A refused call is answered by
    a request-streaming handler that never asks for the message, so grpc buffers no more of it than
    the HTTP/2 flow-control window; a wrong token cannot make the server hold a 64 MiB body."""

    def __init__(self, core: Ingest) -> None:
        self.core = core

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        core = self.core
        token = None
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                token = value
        signal = _SIGNAL_OF_METHOD.get(details.method)
        if not core.authorized(token):
            core.counters.note(signal, ingest.unauthenticated())
            return _REFUSE_UNAUTHENTICATED
        if signal is not None and core.admission.backlog_full():
            outcome = ingest.overload_outcome(core.admission)
            core.counters.note(signal, outcome)
            return grpc.stream_unary_rpc_method_handler(_overload_handler(outcome))
        return await continuation(details)


def _overload_handler(outcome: Outcome) -> Any:
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
        ("grpc.max_concurrent_streams", 16),  # per connection: bounds the messages buffered before us
    ]
    server = aio.server(options=options, interceptors=[_Gate(core)])
    server.add_generic_rpc_handlers(handlers(core))
    return server
