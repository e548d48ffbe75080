"""The HTTP/1.1 subset the OTLP/HTTP receiver speaks, checked byte by byte on a real socket.

The server runs in-process (the WAL is real; no sealer), so these tests are fast.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from collectors_support import api_request_logs

from traceflow.collectors import spool
from traceflow.collectors.http import HttpServer
from traceflow.collectors.http_limits import Limits
from traceflow.collectors.ingest import Admission, Ingest

BODY = api_request_logs(3)[0].SerializeToString()
PB_HEAD = b"POST /v1/logs HTTP/1.1\r\nContent-Type: application/x-protobuf\r\n"
CHUNKED_HEAD = PB_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


def _post(
    body: bytes, extra: str = "", path: str = "/v1/logs", ctype: str = "application/x-protobuf"
) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: {ctype}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


Run = Callable[[Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]], None]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """Run a client coroutine against a fresh in-process server."""

    def _run(client: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> None:
        async def main() -> None:
            wal = spool.Wal(tmp_path / "wal")
            wal.start()
            core = Ingest(wal, Admission(1 << 30, 1 << 40), keep_content=False, token=None)
            server = HttpServer(
                core,
                max_body_bytes=1 << 20,
                idle_timeout_s=1.5,
                limits=Limits(head_timeout_s=1.0, body_grace_s=0.5, max_connections=3),
            )
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            port = sock.getsockname()[1]
            await server.start(sock)
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                await asyncio.wait_for(client(reader, writer), 20)
                writer.close()
            finally:
                await server.stop(grace_s=1)
                await asyncio.to_thread(wal.close)

        asyncio.run(main())

    return _run


async def _closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), 5) == b""


def test_keep_alive_and_pipelining(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_post(BODY) + _post(BODY) + _post(b"{}", ctype="application/json"))
        for expected in (b"", b"", b"{}"):
            status, _, body = await _read_response(reader)
            assert (status, body) == (200, expected)

    run(client)


def test_expect_100_continue(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            _post(b"", "Expect: 100-continue\r\n").replace(
                b"Content-Length: 0", f"Content-Length: {len(BODY)}".encode()
            )
        )
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(BODY)
        assert (await _read_response(reader))[0] == 200

    run(client)


def test_chunked_with_extensions_and_trailers(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        half = len(BODY) // 2
        writer.write(
            CHUNKED_HEAD
            + f"{half:x};ext=1\r\n".encode()
            + BODY[:half]
            + b"\r\n"
            + f"{len(BODY) - half:X}\r\n".encode()
            + BODY[half:]
            + b"\r\n0\r\nX-Trailer: 1\r\n\r\n"
        )
        assert (await _read_response(reader))[0] == 200
        writer.write(_post(BODY))  # the connection is still usable
        assert (await _read_response(reader))[0] == 200

    run(client)


def test_early_error_keeps_the_connection_when_the_body_is_small(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_post(b"0123456789", ctype="text/plain") + _post(BODY))
        assert (await _read_response(reader))[0] == 415
        assert (await _read_response(reader))[0] == 200

    run(client)


def test_413_on_content_length_closes_without_reading(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(PB_HEAD + b"Content-Length: 99999999999\r\n\r\n")
        status, headers, _ = await _read_response(reader)
        assert status == 413 and headers["connection"] == "close"
        assert await _closed(reader)

    run(client)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"POST /v1/logs HTTP/2.0\r\n\r\n", 400),
        (b"POST /v1/logs HTTP/1.1\r\nbad header\r\n\r\n", 400),
        (b"POST /v1/logs HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST /v1/logs HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"POST /v1/logs HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (
            CHUNKED_HEAD + b"zz\r\n",
            400,
        ),
        (b"POST /v1/logs HTTP/1.1\r\nX: " + b"a" * 70_000, 431),
    ],
)
def test_protocol_errors_are_answered_and_closed(run: Run, raw: bytes, status: int) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(raw)
        got, headers, _ = await _read_response(reader)
        assert got == status
        assert headers["connection"] == "close"
        assert await _closed(reader)

    run(client)


def test_a_stalled_request_times_out(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_post(BODY)[:-10])  # never finishes the body (slowloris)
        status, _, _ = await _read_response(reader)
        assert status == 408
        assert await _closed(reader)

    run(client)


def test_an_idle_keep_alive_connection_is_closed(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_post(BODY))
        assert (await _read_response(reader))[0] == 200
        assert await _closed(reader)  # after idle_timeout_s

    run(client)


def test_http_1_0_closes_after_the_response(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_post(BODY).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
        status, headers, _ = await _read_response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await _closed(reader)

    run(client)


def test_absolute_form_target_and_query_string(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_post(BODY, path="http://collector:4318/v1/logs?x=1"))
        assert (await _read_response(reader))[0] == 200

    run(client)


def test_a_connection_over_the_cap_gets_503_at_once(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = writer.get_extra_info("peername")[1]
        others = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]  # 3 open: the cap
        over_r, over_w = await asyncio.open_connection("127.0.0.1", port)
        status, headers, _ = await _read_response(over_r)  # answered before sending anything
        assert status == 503 and headers["retry-after"] == "1" and headers["connection"] == "close"
        assert await _closed(over_r)
        over_w.close()
        for _, w in others:
            w.close()
        await asyncio.sleep(0.1)
        writer.write(_post(BODY))  # the connections under the cap are served
        assert (await _read_response(reader))[0] == 200

    run(client)


def test_early_401_415_413_with_expect_close_the_connection(run: Run) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"POST /v1/logs HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        status, headers, _ = await _read_response(reader)
        assert status == 415 and headers["connection"] == "close"
        assert await _closed(reader)

    run(client)
