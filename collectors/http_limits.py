"""What uvicorn's httptools protocol leaves open, closed: head deadline, head size, slow bodies, a cap.

uvicorn (with httptools, llhttp underneath) parses HTTP/1.1 strictly, but on its own it waits for a
request head without any deadline, has no head size limit, times a body out never, and answers an
over-the-cap connection only once its head is complete. :class:`LimitedHttpToolsProtocol` adds:

* **a total deadline for the request head** (``head_timeout_s``): from the opening of the connection,
  or from the first byte of a later request on a kept-alive connection, to the end of the head. A
  client trickling one byte every few seconds is answered 408 and closed when it runs out, however
  active it looks.
* **a head size limit** (``max_head_bytes``), checked on every header the parser completes (so a head
  that arrives in one write is held to it too) and on the raw bytes of a head still arriving: 431.
* **a minimum body rate**: after ``body_grace_s``, a body must keep arriving at ``min_body_bytes_per_s``
  on average (time while the server itself has paused reading does not count): 408 and closed.
* **a connection cap** (``max_connections``): a connection over it is answered 503 with ``Retry-After``
  and closed as soon as it opens, before it can send anything.
* a larger read-ahead for bodies (``read_ahead_bytes``, 256 KiB instead of 64 KiB): fewer pauses per
  request, measurably less CPU for the 300 kB exports Claude Code sends (benchmarks/README.md).

Everything else (framing, keep-alive, pipelining, ``Expect: 100-continue``) is uvicorn's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState


@dataclass(frozen=True)
class Limits:
    """The bounds :class:`LimitedHttpToolsProtocol` enforces (see the module docstring)."""

    head_timeout_s: float = 10.0
    max_head_bytes: int = 64 * 1024
    body_grace_s: float = 30.0
    min_body_bytes_per_s: float = 16 * 1024
    max_connections: int = 4096
    #: body bytes read ahead of the application before reading pauses (uvicorn's own is 64 KiB;
    #: one read is up to 256 KiB, and pausing less often costs less CPU per request)
    read_ahead_bytes: int = 256 * 1024


class Refused(Exception):
    """A request head this server will not take, raised from a parser callback."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def plain_response(status: int, message: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    """A complete ``Connection: close`` response with a short text body (for protocol-level errors)."""
    body = message.encode() + b"\n"
    head = [STATUS_LINE[status], b"content-type: text/plain\r\n", b"content-length: %d\r\n" % len(body)]
    head += [name + b": " + value + b"\r\n" for name, value in extra]
    return b"".join([*head, b"connection: close\r\n\r\n", body])


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`Limits` (one instance per connection)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        limits: Limits,
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self._in_head = False  # the parser is inside a request head
        self._in_body = False  # ... inside a request body
        self._head_bytes = 0  # URL and header bytes the parser has handed over for this head
        self._head_raw = 0  # bytes fed while already inside this head (counts a header still arriving)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_start = 0.0
        self._body_bytes = 0
        # Bytes of the current write the parser has accounted for (heads estimated from their parts),
        # and where in it the open head began: how much of one write a head that began in it holds.
        self._consumed = 0
        self._head_start = 0

    # -- connection life cycle -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self.connections.discard(self)
            transport.write(plain_response(503, "too many connections", ((b"retry-after", b"1"),)))
            transport.close()
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

    # -- feeding the parser ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.parser is None:  # closed already (over the cap, or answered and closing)
            return
        was_in_head = self._in_head
        if self._head_timer is None and not self._in_body:
            self._arm_head_timer()  # bytes of a new request (or stray CRLFs) start its head deadline
        self._consumed = 0
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._unsupported_upgrade_warning()  # as uvicorn does: answered as a plain request
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, Refused):  # raised by one of the callbacks below
                self._refuse(e.__context__.status, e.__context__.message)
            else:
                self._refuse(400, f"invalid HTTP request: {e}")
            return
        if self._in_head:  # a head still incomplete: all of this write from its start is head
            self._head_raw += len(data) if was_in_head else len(data) - self._head_start
            if max(self._head_raw, self._head_bytes) > self.limits.max_head_bytes:
                self._refuse(431, f"request head larger than {self.limits.max_head_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = self._head_raw = 0
        self._head_start = self._consumed
        if self._head_timer is None:
            self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_head(self, n: int) -> None:
        self._consumed += n
        self._head_bytes += n
        if self._head_bytes > self.limits.max_head_bytes:
            raise Refused(431, f"request head larger than {self.limits.max_head_bytes} bytes")

    def on_headers_complete(self) -> None:
        if self.parser.get_http_version() not in ("1.0", "1.1"):
            raise Refused(400, "unsupported HTTP version; send HTTP/1.1")
        self._in_head = False
        self._consumed += len(self.parser.get_method()) + 14  # the rest of a canonical head's bytes
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._in_body = True
        self._body_start = self.loop.time()
        self._body_bytes = 0
        self._schedule_body_check()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._consumed += len(body)
        self._body_bytes += len(body)
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return  # (as uvicorn does) the rest of a body answered early is dropped
        cycle.body += body
        if len(cycle.body) > self.limits.read_ahead_bytes:
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        self._in_body = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    # -- deadlines ------------------------------------------------------------------------------------
    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._refuse(408, f"request head not received within {self.limits.head_timeout_s:g} s")

    def _schedule_body_check(self) -> None:
        lim = self.limits
        due = self._body_start + lim.body_grace_s + self._body_bytes / lim.min_body_bytes_per_s
        self._body_timer = self.loop.call_at(due, self._check_body_rate)

    def _check_body_rate(self) -> None:
        self._body_timer = None
        if not self._in_body or self.transport.is_closing():
            return
        lim = self.limits
        now = self.loop.time()
        if self.flow.read_paused:  # the server is not reading: the client is not the slow one
            self._body_start = now - self._body_bytes / lim.min_body_bytes_per_s
        elif now >= self._body_start + lim.body_grace_s + self._body_bytes / lim.min_body_bytes_per_s:
            self._refuse(
                408,
                f"request body arrived slower than {lim.min_body_bytes_per_s:g} bytes/s "
                f"(after the first {lim.body_grace_s:g} s)",
            )
            return
        self._schedule_body_check()

    def _refuse(self, status: int, message: str) -> None:
        """Answer a protocol-level error (unless a response is under way) and close the connection."""
        self._cancel_timers()
        in_body = self._in_body
        self._in_head = self._in_body = False
        transport = self.transport
        if transport.is_closing():
            return
        cycle = self.cycle
        if in_body and cycle is not None and cycle.response_complete:
            transport.close()  # the body of a request already answered (early) was being dropped
            return
        if cycle is not None and not cycle.response_complete:
            # The application is still answering an earlier request: let it finish, then close.
            cycle.keep_alive = False
            self.pipeline.clear()
            self.flow.pause_reading()
            if not cycle.response_started:
                cycle.disconnected = cycle.more_body  # a body still arriving cannot be completed
                if cycle.disconnected:
                    cycle.message_event.set()
                    transport.write(plain_response(status, message))
                    transport.close()
            return
        transport.write(plain_response(status, message))
        transport.close()


__all__ = ["LimitedHttpToolsProtocol", "Limits", "Refused", "plain_response"]
