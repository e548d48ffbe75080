"""OTLP/HTTP receiver: ``POST /v1/{logs,metrics,traces}`` and ``POST /``, an ASGI app under uvicorn.

HTTP/1.1 itself (framing, keep-alive, pipelining, ``Expect: 100-continue``, TLS) is uvicorn's with
httptools (llhttp), which refuses ambiguous framing; :mod:`.http_limits` adds the head deadline, the
head size limit, the minimum body rate and the connection cap that uvicorn leaves open.

:class:`OtlpApp` reads each body against two bounds: ``max_body_bytes`` per request (on the wire and
again while decompressing, so a gzip bomb stops at the limit: 413) and the in-flight budget it shares
with gRPC (:class:`~.ingest.Admission`; 503 + ``Retry-After``). An OTLP/JSON body counts more: what
it takes once decoded beyond a protobuf message's share (``settings.JSON_DECODED_BYTES_PER_BYTE``
less ``DECODED_BYTES_PER_BYTE`` times each inflated byte), so the server stays under the documented
bound (docs/collector.md, ``settings.memory_bound_bytes``) whichever encoding arrives. Errors are
answered with a ``google.rpc.Status`` in the request's encoding, success with an
``Export*ServiceResponse`` (empty, or with ``partial_success``) once the payload is durably in the
write-ahead log. A request answered
before its body was read keeps the connection only when the rest of the body is certain to follow and
is small; otherwise (``Expect: 100-continue`` not yet granted, a chunked or large body) the answer
says ``Connection: close`` and the connection closes, so no body is ever read as a next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from typing import Any

import orjson
from uvicorn.config import Config
from uvicorn.server import ServerState

from traceflow.collectors import ingest, prometheus
from traceflow.collectors.http_limits import LimitedHttpToolsProtocol, Limits
from traceflow.collectors.inflate import ENCODINGS, BadBody, BodyTooLarge, Inflater
from traceflow.collectors.ingest import JSON, Ingest, Outcome, Reservation
from traceflow.collectors.settings import DECODED_BYTES_PER_BYTE, JSON_DECODED_BYTES_PER_BYTE
from traceflow.collectors.spool import SIGNALS, Signal

_logger = logging.getLogger(__name__)

#: an early answer keeps the connection (uvicorn reads and drops the rest of the body) up to this
_DISCARD_LIMIT = 4 << 20
_PATHS: dict[str, Signal | None] = {"/": None, **{f"/v1/{s}": s for s in SIGNALS}}

Scope = dict[str, Any]
Receive = Any
Send = Any


class _Early(Exception):
    """An outcome known before the body was completely read."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


class OtlpApp:
    """The ASGI application: one OTLP/HTTP export request per call."""

    def __init__(self, core: Ingest, max_body_bytes: int) -> None:
        self.core = core
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"].rstrip("/") or "/"
        method = scope["method"]
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers[name] = headers[name] + b", " + value if name in headers else value
        if path == "/healthz" and method == "GET":
            await _respond(send, 200, b"ok\n", b"text/plain")
            return
        if path == "/status" and method == "GET":
            if not self.core.may_read(headers.get(b"authorization")):
                await _respond(send, 401, b"missing or wrong bearer token\n", b"text/plain")
                return
            await _respond(send, 200, orjson.dumps(self.core.status()), b"application/json")
            return
        if path == "/metrics" and method == "GET":
            if not self.core.may_read(headers.get(b"authorization")):
                await _respond(send, 401, b"missing or wrong bearer token\n", b"text/plain")
                return
            await _respond(send, 200, self.core.metrics.exposition(), prometheus.CONTENT_TYPE.encode())
            return
        if path not in _PATHS:
            await _respond(send, 404, b"not found\n", b"text/plain", close=_must_close(headers))
            return
        if method != "POST":
            await _respond(
                send, 405, b"use POST\n", b"text/plain", ((b"allow", b"POST"),), close=_must_close(headers)
            )
            return
        signal = _PATHS[path]
        encoding = ingest.media_type(headers.get(b"content-type", b"").decode("latin-1"))
        early = self._precheck(headers, encoding)
        if early is not None:
            self.core.counters.note(signal, early)
            await _answer(send, early, signal, encoding or JSON, close=_must_close(headers))
            return
        assert encoding is not None
        reservation = Reservation()
        try:
            try:
                body = await self._read_body(receive, headers, reservation, encoding)
            except _Early as e:
                self.core.counters.note(signal, e.outcome)
                await _answer(send, e.outcome, signal, encoding, close=True)
                return
            if body is None:  # the client went away
                return
            caller = self.core.caller(headers.get(b"authorization"))
            try:
                if caller is None:  # the tokens file changed while the body arrived
                    outcome = ingest.unauthenticated()
                    self.core.counters.note(signal, outcome)
                else:
                    signal, outcome = await self.core.export(signal, encoding, body, team=caller.forced_team)
            except Exception:
                _logger.exception("unexpected error handling an OTLP/HTTP export")
                outcome = Outcome(500, 13, "internal error; see the collector's log")
        finally:
            self.core.admission.release(reservation)
        if not outcome.ok and outcome.http_status == 400:
            _logger.info("refused a %s payload: %s", signal or "OTLP", outcome.message)
        await _answer(send, outcome, signal, encoding)

    def _precheck(self, headers: dict[bytes, bytes], encoding: str | None) -> Outcome | None:
        if not self.core.authorized(headers.get(b"authorization")):
            return ingest.unauthenticated()
        if encoding is None:
            ctype = headers.get(b"content-type", b"").decode("latin-1") or "none"
            return ingest.unsupported(
                f"unsupported Content-Type {ctype!r}; send application/x-protobuf or application/json"
            )
        coding = _coding(headers)
        if coding not in ENCODINGS:
            return ingest.unsupported(
                f"unsupported Content-Encoding {coding!r}; supported: {', '.join(ENCODINGS)}"
            )
        if _content_length(headers) > self.max_body_bytes:
            return ingest.too_large(self.max_body_bytes)
        if self.core.admission.backlog_full():
            return ingest.overload_outcome(self.core.admission)
        return None

    async def _read_body(
        self, receive: Receive, headers: dict[bytes, bytes], reservation: Reservation, encoding: str
    ) -> bytes | None:
        """The whole (inflated) body, None if the client disconnected; raises :class:`_Early`.

        Wire bytes count against the in-flight budget as they arrive, inflated bytes too when the body
        is compressed, and an OTLP/JSON body's excess once decoded (the module docstring)."""
        admission = self.core.admission
        coding = _coding(headers)
        excess = JSON_DECODED_BYTES_PER_BYTE - DECODED_BYTES_PER_BYTE if encoding == JSON else 0
        inflated = 0 if coding == "identity" else 1  # the wire bytes were counted already
        inflater = Inflater(coding, self.max_body_bytes)
        parts: list[bytes] = []
        wire = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None
            piece: bytes = message.get("body", b"")
            more = message.get("more_body", False)
            if not piece:
                continue
            wire += len(piece)
            if wire > self.max_body_bytes:
                raise _Early(ingest.too_large(self.max_body_bytes))
            if not admission.grow(reservation, len(piece)):
                raise _Early(ingest.overload_outcome(admission))
            out = _inflate(inflater.feed, piece, self.max_body_bytes)
            if out:
                held = (inflated + excess) * len(out)
                if held and not admission.grow(reservation, held):
                    raise _Early(ingest.overload_outcome(admission))
                parts.append(out)
        tail = _inflate(lambda _: inflater.finish(), b"", self.max_body_bytes)
        if tail:
            if not admission.grow(reservation, (inflated + excess) * len(tail)):
                raise _Early(ingest.overload_outcome(admission))
            parts.append(tail)
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _coding(headers: dict[bytes, bytes]) -> str:
    return headers.get(b"content-encoding", b"identity").decode("latin-1").strip().lower() or "identity"


def _inflate(step: Any, piece: bytes, limit: int) -> bytes:
    try:
        out: bytes = step(piece)
    except BodyTooLarge:
        raise _Early(ingest.too_large(limit)) from None
    except BadBody as e:
        raise _Early(ingest.bad_request(str(e))) from None
    return out


def _content_length(headers: dict[bytes, bytes]) -> int:
    """The declared body length (0 when none; llhttp has refused anything but one plain number)."""
    value = headers.get(b"content-length", b"0")
    return int(value) if value.isdigit() else 0


def _must_close(headers: dict[bytes, bytes]) -> bool:
    """Whether answering before reading the body must close the connection (see the module docstring)."""
    if b"transfer-encoding" in headers:
        return True
    length = _content_length(headers)
    if length and b"100-continue" in headers.get(b"expect", b"").lower():
        return True  # the client may or may not send the body now: its next bytes cannot be trusted
    return length > _DISCARD_LIMIT


async def _answer(
    send: Send, outcome: Outcome, signal: Signal | None, encoding: str, *, close: bool = False
) -> None:
    extra: list[tuple[bytes, bytes]] = []
    if outcome.ok:
        body = ingest.export_response(signal or "logs", encoding, outcome.rejected, outcome.message)
    elif encoding == JSON:
        body = ingest.rpc_status_json(outcome.code, outcome.message, outcome.retry_after_s)
    else:
        body = ingest.rpc_status(outcome.code, outcome.message, outcome.retry_after_s)
    if outcome.retry_after_s is not None:
        extra.append((b"retry-after", str(outcome.retry_after_s).encode()))
    if outcome.http_status == 401:
        extra.append((b"www-authenticate", b'Bearer realm="traceflow"'))
    await _respond(send, outcome.http_status, body, encoding.encode(), tuple(extra), close=close)


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    extra: tuple[tuple[bytes, bytes], ...] = (),
    *,
    close: bool = False,
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body)), *extra]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class HttpServer:
    """The OTLP/HTTP listener: :class:`OtlpApp` under uvicorn's httptools protocol with :class:`Limits`."""

    def __init__(
        self,
        core: Ingest,
        *,
        max_body_bytes: int,
        idle_timeout_s: float = 75.0,
        limits: Limits | None = None,
    ) -> None:
        self.core = core
        self.limits = limits or Limits()
        self.config = Config(
            OtlpApp(core, max_body_bytes),
            http=LimitedHttpToolsProtocol,
            lifespan="off",
            access_log=False,
            log_config=None,
            proxy_headers=False,
            server_header=False,
            date_header=False,
            ws="none",
        )
        self.config.load()
        self.config.timeout_keep_alive = idle_timeout_s  # type: ignore[assignment]  # a float works
        self.state = ServerState()
        self._server: asyncio.base_events.Server | None = None

    def _protocol(self) -> LimitedHttpToolsProtocol:
        return LimitedHttpToolsProtocol(self.config, self.state, {}, self.limits)

    async def start(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, sock=sock, ssl=ssl_context, backlog=1024)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, let requests being handled finish (up to ``grace_s``), close the rest."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.state.connections):
            conn.shutdown()  # idle connections close now, busy ones after their response
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while (self.state.connections or self.state.tasks) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.state.connections):
            with contextlib.suppress(Exception):
                conn.transport.close()
        for task in list(self.state.tasks):
            task.cancel()


__all__ = ["HttpServer", "OtlpApp"]
