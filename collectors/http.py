"""OTLP/HTTP receiver: ``POST /v1/{logs,metrics,traces}`` and ``POST /`` on a lean HTTP/1.1 server.

Why not Starlette under uvicorn: with no httptools on this machine uvicorn parses HTTP with the
pure-Python h11, and moving a 365 kB export body through h11 and the ASGI/Starlette layers cost
4-5x more CPU than the rest of the acknowledgement path (measured: 130-150 vs 520-720 requests/s of
512 records on the same 2 cores; see benchmarks/README.md). OTLP/HTTP needs a small subset of
HTTP/1.1 (POST with a Content-Length or chunked body, keep-alive, ``Expect: 100-continue``), which
this module implements directly on ``asyncio.Protocol``; TLS comes from ``loop.create_server(ssl=)``.

Bodies are read against two bounds: ``max_body_bytes`` per request (on the wire and again while
decompressing, so a gzip bomb stops at the limit: 413) and the shared in-flight budget of
:class:`~.ingest.Admission` (503 + ``Retry-After``). Errors are answered with a ``google.rpc.Status``
in the request's encoding; success with an empty ``Export*ServiceResponse`` (or
``partial_success``) in the same Content-Type. One request per connection is handled at a time
(reading pauses meanwhile), so a pipelining client cannot make the server buffer without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time

from traceflow.collectors import ingest
from traceflow.collectors.inflate import ENCODINGS, BadBody, BodyTooLarge, Inflater
from traceflow.collectors.ingest import JSON, Ingest, Outcome, Reservation
from traceflow.collectors.spool import SIGNALS, Signal

_logger = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
#: after an early error, read and drop up to this much of the unread body to keep the connection
_DISCARD_LIMIT = 4 << 20
_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def response_bytes(
    status: int,
    body: bytes = b"",
    content_type: str = "text/plain",
    *,
    keep_alive: bool = True,
    extra: tuple[tuple[str, str], ...] = (),
) -> bytes:
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    head += [f"{k}: {v}" for k, v in extra]
    if not keep_alive:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def outcome_response(outcome: Outcome, signal: Signal | None, encoding: str, *, keep_alive: bool) -> bytes:
    extra: list[tuple[str, str]] = []
    if outcome.ok:
        body = ingest.export_response(signal or "logs", encoding, outcome.rejected, outcome.message)
    elif encoding == JSON:
        body = ingest.rpc_status_json(outcome.code, outcome.message, outcome.retry_after_s)
    else:
        body = ingest.rpc_status(outcome.code, outcome.message, outcome.retry_after_s)
    if outcome.retry_after_s is not None:
        extra.append(("Retry-After", str(outcome.retry_after_s)))
    if outcome.http_status == 401:
        extra.append(("WWW-Authenticate", 'Bearer realm="traceflow"'))
    return response_bytes(outcome.http_status, body, encoding, keep_alive=keep_alive, extra=tuple(extra))


class _Request:
    """The parsed head of one request and the state of reading its body."""

    __slots__ = (
        "chunked",
        "coding",
        "encoding",
        "headers",
        "inflater",
        "keep_alive",
        "left",
        "method",
        "parts",
        "path",
        "reservation",
        "signal",
        "wire",
    )

    def __init__(self, method: str, path: str, headers: dict[str, str], keep_alive: bool) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.keep_alive = keep_alive
        self.chunked = False
        self.left = 0  # body bytes (or bytes of the current chunk) still to read
        self.signal: Signal | None = None
        self.encoding = JSON
        self.coding = "identity"
        self.inflater: Inflater | None = None
        self.parts: list[bytes] = []
        self.wire = 0
        self.reservation = Reservation()


class HttpServer:
    """The OTLP/HTTP listener: owns the connections, their timeouts and the graceful stop."""

    def __init__(
        self,
        core: Ingest,
        *,
        max_body_bytes: int,
        idle_timeout_s: float = 75.0,
        request_timeout_s: float = 60.0,
        max_connections: int = 4096,
    ) -> None:
        self.core = core
        self.max_body_bytes = max_body_bytes
        self.idle_timeout_s = idle_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), sock=sock, ssl=ssl_context, backlog=1024
        )
        self._sweeper = asyncio.create_task(self._sweep())

    async def _sweep(self) -> None:
        """Close idle keep-alive connections and requests that stopped making progress."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for conn in list(self.connections):
                conn.check_timeout(now)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, let requests being handled finish (up to ``grace_s``), close the rest."""
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        deadline = time.monotonic() + grace_s
        while True:
            for conn in list(self.connections):
                if not conn.busy:
                    conn.close()
            if not self.connections or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.close()


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection (see the module docstring for what is supported)."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.core = server.core
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.req: _Request | None = None
        self.state = "head"  # head | body | chunk-size | chunk-data | chunk-end | trailers | busy | discard
        self.busy = False
        self.discard_left = 0
        self.last_activity = time.monotonic()

    # -- asyncio.Protocol --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if len(self.server.connections) >= self.server.max_connections:
            transport.write(
                response_bytes(
                    503, b"too many connections\n", keep_alive=False, extra=(("Retry-After", "1"),)
                )
            )
            transport.close()
            return
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.req is not None:
            self.core.admission.release(self.req.reservation)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self.state == "body" and not self.buf:
            data = self._take_body(data)  # fast path: body bytes straight from the socket
            if not data:
                return
        self.buf += data
        self._process()

    def eof_received(self) -> bool | None:
        return None  # close the connection

    # -- parsing -------------------------------------------------------------------------------------
    def _process(self) -> None:
        while self.transport is not None and self.buf:
            state = self.state
            if state == "head":
                if not self._read_head():
                    return
            elif state == "body":
                rest = self._take_body(bytes(self.buf))
                self.buf = bytearray(rest)
                if self.state == "body":
                    return
            elif state in ("chunk-size", "chunk-end", "trailers"):
                end = self.buf.find(b"\r\n")
                if end < 0:
                    if len(self.buf) > 4096:
                        self._fail(400, "malformed chunked body")
                    return
                line = bytes(self.buf[:end])
                del self.buf[: end + 2]
                self._chunk_line(line)
            elif state == "chunk-data":
                req = self.req
                assert req is not None
                n = min(req.left, len(self.buf))
                piece = bytes(self.buf[:n])
                del self.buf[:n]
                req.left -= n
                if not self._feed(piece):
                    return
                if req.left == 0:
                    self.state = "chunk-end"
            elif state == "discard":
                n = min(self.discard_left, len(self.buf))
                del self.buf[:n]
                self.discard_left -= n
                if self.discard_left == 0:
                    self.state = "head"
            else:  # busy: the rest waits for the response (reading is paused)
                return

    def _read_head(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD_BYTES:
                self._fail(431, "request head too large")
            return False
        head = bytes(self.buf[:end]).decode("latin-1")
        del self.buf[: end + 4]
        lines = head.split("\r\n")
        while lines and not lines[0]:  # tolerate stray CRLFs between requests
            lines.pop(0)
        parts = lines[0].split(" ") if lines else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._fail(400, "malformed request line")
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip() or line[0] in " \t":
                self._fail(400, "malformed header line")
                return False
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        conn_opts = headers.get("connection", "").lower()
        keep_alive = "close" not in conn_opts if version == "HTTP/1.1" else "keep-alive" in conn_opts
        if target.startswith(("http://", "https://")):  # absolute-form (through a proxy)
            target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
        path = target.split("?", 1)[0]
        self.req = _Request(method, path, headers, keep_alive)
        self._start_request()
        return True

    def _start_request(self) -> None:
        req = self.req
        assert req is not None
        headers = req.headers
        te = headers.get("transfer-encoding")
        cl = headers.get("content-length")
        if te is not None:
            if te.lower() != "chunked" or cl is not None:
                self._fail(400 if cl is not None else 501, "unsupported Transfer-Encoding")
                return
            req.chunked = True
        elif cl is not None:
            if not cl.isdigit():
                self._fail(400, "bad Content-Length")
                return
            req.left = int(cl)
        # routing
        path = req.path.rstrip("/") or "/"
        if path == "/healthz" and req.method == "GET":
            self._respond_early(response_bytes(200, b"ok\n", keep_alive=req.keep_alive))
            return
        if path == "/":
            signal: Signal | None = None
        elif path.startswith("/v1/") and path[4:] in SIGNALS:
            signal = path[4:]  # type: ignore[assignment]
        else:
            self._respond_early(response_bytes(404, b"not found\n", keep_alive=req.keep_alive))
            return
        if req.method != "POST":
            self._respond_early(
                response_bytes(405, b"use POST\n", keep_alive=req.keep_alive, extra=(("Allow", "POST"),))
            )
            return
        req.signal = signal
        early = self._precheck(req)
        if early is not None:
            self.core.counters.note(signal, early)
            self._respond_early(outcome_response(early, signal, req.encoding, keep_alive=req.keep_alive))
            return
        req.inflater = Inflater(req.coding, self.server.max_body_bytes)
        if "100-continue" in headers.get("expect", "").lower() and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if req.chunked:
            self.state = "chunk-size"
        elif req.left:
            self.state = "body"
        else:
            self._body_complete()

    def _precheck(self, req: _Request) -> Outcome | None:
        headers = req.headers
        encoding = ingest.media_type(headers.get("content-type"))
        req.encoding = encoding or JSON
        if not self.core.authorized(headers.get("authorization")):
            return ingest.unauthenticated()
        if encoding is None:
            ctype = headers.get("content-type") or "none"
            return ingest.unsupported(
                f"unsupported Content-Type {ctype!r}; send application/x-protobuf or application/json"
            )
        req.coding = headers.get("content-encoding", "identity").strip().lower() or "identity"
        if req.coding not in ENCODINGS:
            return ingest.unsupported(
                f"unsupported Content-Encoding {req.coding!r}; supported: {', '.join(ENCODINGS)}"
            )
        if not req.chunked and req.left > self.server.max_body_bytes:
            return ingest.too_large(self.server.max_body_bytes)
        if self.core.admission.backlog_full():
            return ingest.overload_outcome(self.core.admission)
        return None

    def _chunk_line(self, line: bytes) -> None:
        req = self.req
        assert req is not None
        if self.state == "chunk-end":
            if line:
                self._fail(400, "malformed chunked body")
            else:
                self.state = "chunk-size"
            return
        if self.state == "trailers":
            if not line:
                self._body_complete()
            return
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            self._fail(400, "malformed chunk size")
            return
        if size < 0:
            self._fail(400, "malformed chunk size")
        elif size == 0:
            self.state = "trailers"
        elif req.wire + size > self.server.max_body_bytes:
            self._finish_with(ingest.too_large(self.server.max_body_bytes))
        else:
            req.left = size
            self.state = "chunk-data"

    def _take_body(self, data: bytes) -> bytes:
        """Consume Content-Length body bytes from ``data``; returns what belongs to the next request."""
        req = self.req
        assert req is not None
        n = min(req.left, len(data))
        piece, rest = (data, b"") if n == len(data) else (data[:n], data[n:])
        req.left -= n
        if self._feed(piece) and req.left == 0:
            self._body_complete()
        return rest

    def _feed(self, piece: bytes) -> bool:
        """Account for and inflate one piece of the body; False when the request was answered."""
        req = self.req
        assert req is not None and req.inflater is not None
        admission = self.core.admission
        req.wire += len(piece)
        if req.wire > self.server.max_body_bytes:
            return self._finish_with(ingest.too_large(self.server.max_body_bytes))
        if not admission.grow(req.reservation, len(piece)):
            return self._finish_with(ingest.overload_outcome(admission))
        try:
            out = req.inflater.feed(piece)
        except BodyTooLarge:
            return self._finish_with(ingest.too_large(self.server.max_body_bytes))
        except BadBody as e:
            return self._finish_with(ingest.bad_request(str(e)))
        if out:
            if req.coding != "identity" and not admission.grow(req.reservation, len(out)):
                return self._finish_with(ingest.overload_outcome(admission))
            req.parts.append(out)
        return True

    def _body_complete(self) -> None:
        req = self.req
        assert req is not None and req.inflater is not None
        try:
            tail = req.inflater.finish()
        except BodyTooLarge:
            self._finish_with(ingest.too_large(self.server.max_body_bytes))
            return
        except BadBody as e:
            self._finish_with(ingest.bad_request(str(e)))
            return
        if tail:
            if not self.core.admission.grow(req.reservation, len(tail)):
                self._finish_with(ingest.overload_outcome(self.core.admission))
                return
            req.parts.append(tail)
        body = req.parts[0] if len(req.parts) == 1 else b"".join(req.parts)
        req.parts = []
        self.state = "busy"
        self.busy = True
        assert self.transport is not None
        self.transport.pause_reading()
        asyncio.get_running_loop().create_task(self._handle(req, body))

    async def _handle(self, req: _Request, body: bytes) -> None:
        try:
            signal, outcome = await self.core.export(req.signal, req.encoding, body)
        except Exception:
            _logger.exception("unexpected error handling an OTLP/HTTP export")
            signal, outcome = req.signal, Outcome(500, 13, "internal error; see the collector's log")
        finally:
            self.core.admission.release(req.reservation)
        if not outcome.ok and outcome.http_status == 400:
            _logger.info("refused a %s payload: %s", signal or "OTLP", outcome.message)
        self.busy = False
        self.req = None
        if self.transport is None:
            return
        self.transport.write(outcome_response(outcome, signal, req.encoding, keep_alive=req.keep_alive))
        if not req.keep_alive:
            self.transport.close()
            return
        self.state = "head"
        self.last_activity = time.monotonic()
        self.transport.resume_reading()
        if self.buf:
            self._process()

    # -- answering early -------------------------------------------------------------------------
    def _finish_with(self, outcome: Outcome) -> bool:
        """Answer ``outcome`` before the body was read completely; always returns False."""
        req = self.req
        assert req is not None
        self.core.counters.note(req.signal, outcome)
        self._respond_early(outcome_response(outcome, req.signal, req.encoding, keep_alive=req.keep_alive))
        return False

    def _respond_early(self, response: bytes) -> None:
        """Answer now; drop the rest of a small body to keep the connection, else close it."""
        req = self.req
        assert req is not None and self.transport is not None
        self.core.admission.release(req.reservation)
        req.parts = []
        unread = req.left if not req.chunked and self.state in ("head", "body") else -1
        keep = req.keep_alive and 0 <= unread <= _DISCARD_LIMIT
        if not keep and req.keep_alive:
            response = response.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
        self.transport.write(response)
        self.req = None
        if not keep:
            self.state = "closing"
            self.transport.close()
            return
        self.discard_left = unread
        self.state = "discard" if unread else "head"  # _process drops what is already buffered

    def _fail(self, status: int, message: str) -> None:
        """A protocol error: answer and close (the byte stream cannot be trusted any more)."""
        if self.transport is None:
            return
        self.transport.write(response_bytes(status, message.encode() + b"\n", keep_alive=False))
        self.state = "closing"
        if self.req is not None:
            self.core.admission.release(self.req.reservation)
        self.transport.close()

    # -- timeouts and shutdown -------------------------------------------------------------------------
    def check_timeout(self, now: float) -> None:
        if self.busy or self.transport is None:
            return
        idle = now - self.last_activity
        mid_request = self.state != "head" or bool(self.buf)
        if mid_request and idle > self.server.request_timeout_s:
            self._fail(408, "request timed out")
        elif not mid_request and idle > self.server.idle_timeout_s:
            self.close()

    def close(self) -> None:
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()


__all__ = ["HttpServer", "outcome_response"]
