"""Hostile HTTP/1.1 framings (issue 13): each is refused (4xx) or the connection closed, never read as
a valid request, and after each the server still serves a normal request.

The OTLP/HTTP server runs in-process on 127.0.0.1 in a thread of its own (real WAL, no sealer), with
short deadlines so the slow-client cases take about a second; the clients are raw blocking sockets.
Every body is an empty OTLP/JSON logs request padded with spaces to the length the framing claims,
so reading a framing the lenient way would be answered 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from traceflow.collectors import spool
from traceflow.collectors.http import HttpServer
from traceflow.collectors.http_limits import Limits
from traceflow.collectors.ingest import Admission, Ingest

HEAD_TIMEOUT_S = 1.0
BODY_GRACE_S = 1.0


def body(n: int) -> bytes:
    """An empty OTLP/JSON logs request of exactly ``n`` bytes."""
    return b"{" + b" " * (n - 2) + b"}"


JSON_HEAD = b"POST /v1/logs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
CHUNKED = JSON_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


def chunked(size_line: bytes, n: int = 19) -> bytes:
    return CHUNKED + size_line + b"\r\n" + body(n) + b"\r\n0\r\n\r\n"


def with_length(n: int) -> bytes:
    return JSON_HEAD + b"Content-Length: %d\r\n\r\n" % n + body(n)


#: name -> raw bytes sent at once on a fresh connection
FRAMINGS: dict[str, bytes] = {
    "chunk size 0x13": chunked(b"0x13"),
    "chunk size 0X13": chunked(b"0X13"),
    "chunk size +13": chunked(b"+13"),
    "chunk size ' 13'": chunked(b" 13"),
    "chunk size 13\\x0b": chunked(b"13\x0b"),
    "chunk size 1_0": chunked(b"1_0", 16),
    "chunk size -0": CHUNKED + b"-0\r\n\r\n",
    "6,000-character chunk-size line": chunked(b"1" * 6000),
    "Transfer-Encoding: chunked\\x0b": JSON_HEAD
    + b"Transfer-Encoding: chunked\x0b\r\n\r\n13\r\n"
    + body(19)
    + b"\r\n0\r\n\r\n",
    "Content-Length: 19\\xa0": JSON_HEAD + b"Content-Length: 19\xa0\r\n\r\n" + body(19),
    "header named Transfer-Encoding\\x00": JSON_HEAD
    + b"Transfer-Encoding\x00: chunked\r\n\r\n13\r\n"
    + body(19)
    + b"\r\n0\r\n\r\n",
    "bare LF hiding a header": b"POST /v1/logs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\n"
    + b"Transfer-Encoding: chunked\r\nContent-Length: 19\r\n\r\n"
    + body(19),
    "HTTP/1.9": with_length(19).replace(b"HTTP/1.1", b"HTTP/1.9", 1),
    "HTTP/2.0 in an HTTP/1 request line": with_length(19).replace(b"HTTP/1.1", b"HTTP/2.0", 1),
    "Content-Length: ² (superscript two)": JSON_HEAD + "Content-Length: ²\r\n\r\n".encode() + b"{}",
    "Content-Length: \\xb2 (² in Latin-1)": JSON_HEAD + b"Content-Length: \xb2\r\n\r\n{}",
    "Content-Length twice, different": JSON_HEAD
    + b"Content-Length: 2\r\nContent-Length: 19\r\n\r\n"
    + body(19),
    "Content-Length and chunked": JSON_HEAD
    + b"Content-Length: 19\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"13\r\n"
    + body(19)
    + b"\r\n0\r\n\r\n",
    "100 kB header in one write": JSON_HEAD
    + b"X-Big: "
    + b"a" * 100_000
    + b"\r\nContent-Length: 2\r\n\r\n{}",
    "100 kB request line in one write": b"POST /v1/logs?" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n",
    "100 kB of headers, one write, no end": JSON_HEAD + b"X-Big: a\r\n" * 10_000,
}


@dataclass
class Running:
    port: int
    loop: asyncio.AbstractEventLoop
    server: HttpServer


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp: Path = tmp_path_factory.mktemp("http-hostile")
    ready = threading.Event()
    box: dict[str, Running] = {}
    stop = threading.Event()

    def serve() -> None:
        async def main() -> None:
            wal = spool.Wal(tmp / "wal")
            wal.start()
            core = Ingest(wal, Admission(1 << 30, 1 << 40), keep_content=False, token=None)
            server = HttpServer(
                core,
                max_body_bytes=1 << 20,
                idle_timeout_s=5,
                limits=Limits(head_timeout_s=HEAD_TIMEOUT_S, body_grace_s=BODY_GRACE_S),
            )
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            await server.start(sock)
            box["r"] = Running(sock.getsockname()[1], asyncio.get_running_loop(), server)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            await server.stop(grace_s=1)
            await asyncio.to_thread(wal.close)

        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield box["r"]
    stop.set()
    thread.join(10)


def connect(r: Running) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", r.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s: socket.socket, limit_s: float = 10.0) -> bytes:
    """Everything the server sends until it closes (or ``limit_s`` passes)."""
    out = b""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    return out


def statuses(raw: bytes) -> list[int]:
    """The status of every complete response in ``raw`` (each has a Content-Length)."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.split(b"\r\n")
        out.append(int(lines[0].split(b" ")[1]))
        fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(b":") for x in lines[1:])}
        raw = rest[int(fields.get(b"content-length", b"0")) :]
    return out


def assert_still_serving(r: Running) -> None:
    with connect(r) as s:
        s.sendall(with_length(2))
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200"), reply


@pytest.mark.parametrize("name", list(FRAMINGS))
def test_hostile_framing_is_refused(running: Running, name: str) -> None:
    with connect(running) as s:
        try:
            s.sendall(FRAMINGS[name])
            s.shutdown(socket.SHUT_WR)  # nothing more is coming: the server must answer or close now
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed before everything was sent
        got = statuses(read_all(s))
    # Refused with a 4xx and nothing else: not one request was read as valid (no 200)
    assert got and all(400 <= g < 500 for g in got), (name, got)
    assert_still_serving(running)


def test_early_415_after_expect_100_continue_closes(running: Running) -> None:
    """The client has not sent the body: the answer closes the connection, so the next request the
    client sends on it is never read as that body (nor the body as a request)."""
    with connect(running) as s:
        s.sendall(
            b"POST /v1/logs HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 43\r\nExpect: 100-continue\r\n\r\n"
        )
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 415") and b"connection: close" in first.lower()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(with_length(43))  # the client's next request, which a lenient server reads as the body
        rest = read_all(s, 3)
    assert statuses(rest) == []  # closed: no second answer, no 100 Continue, no hang
    assert_still_serving(running)


def test_a_trickled_head_meets_its_total_deadline(running: Running) -> None:
    """One byte at a time keeps the connection active, but the head has a total deadline: 408."""
    head = JSON_HEAD + b"Content-Length: 2\r\n\r\n"
    start = time.monotonic()
    with connect(running) as s:
        for byte in head:
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.2)
            if time.monotonic() - start > HEAD_TIMEOUT_S + 2:
                break
        got = statuses(read_all(s, 3))
    assert got == [408]
    assert time.monotonic() - start < HEAD_TIMEOUT_S + 4
    assert_still_serving(running)


def test_a_connection_that_sends_nothing_is_closed(running: Running) -> None:
    with connect(running) as s:
        got = statuses(read_all(s, HEAD_TIMEOUT_S + 3))
    assert got == [408]


def test_a_trickled_body_is_cut_off(running: Running) -> None:
    with connect(running) as s:
        s.sendall(JSON_HEAD + b"Content-Length: 200\r\n\r\n{")
        start = time.monotonic()
        while time.monotonic() - start < BODY_GRACE_S + 3:
            try:
                s.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.25)
        got = statuses(read_all(s, 3))
    assert got == [408]
    assert_still_serving(running)


@pytest.mark.parametrize(
    "size_line", [b"0" * 5998 + b"13", b"13;x=" + b"a" * 6000], ids=["leading zeros", "long extension"]
)
def test_long_chunk_lines_with_one_reading_are_read_that_way(running: Running, size_line: bytes) -> None:
    """Leading zeros and a chunk extension are valid grammar with a single meaning (19 bytes here);
    llhttp neither buffers nor interprets extensions, and extension bytes do not count as body
    progress for the minimum body rate. The connection stays in step: the next request is served."""
    with connect(running) as s:
        s.sendall(chunked(size_line) + with_length(2))
        assert statuses(read_all(s, 2)) == [200, 200]


def test_a_head_trickled_in_pieces_over_the_size_limit_is_431(running: Running) -> None:
    with connect(running) as s:
        s.sendall(JSON_HEAD)
        try:
            for _ in range(20):
                s.sendall(b"X-Pad: " + b"a" * 8000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        got = statuses(read_all(s))
    assert got == [431]
    assert_still_serving(running)


def test_a_head_just_under_the_limit_is_served(running: Running) -> None:
    request = JSON_HEAD + b"X-Pad: " + b"a" * 60_000 + b"\r\nContent-Length: 2\r\n\r\n{}"
    with connect(running) as s:
        s.sendall(request + request)  # twice, pipelined in one write
        got = statuses(read_all(s, 2))
    assert got == [200, 200]
