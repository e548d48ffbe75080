"""OTLP/HTTP memory holds to the same bound as gRPC's (docs/collector.md, traceflow serve): valid
messages from 16 concurrent clients keep the server and the sealer together under
``settings.memory_bound_bytes``, and every acknowledged record is in the lake.

The clients are raw sockets on 127.0.0.1 that send a body in 64 KiB pieces and stop as soon as the
server answers (an early 503 closes the connection), so the test process sends no more than is read.
Peak RSS is each process's ``VmHWM`` (``/proc/PID/status``).
"""

from __future__ import annotations

import asyncio
import http.client
import select
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from collectors_support import Server, api_request_logs, count_requests, query, wait_for
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from test_collectors_grpc_memory import peak_rss_mib, sealer_pid, valid_messages

from traceflow.collectors import spool
from traceflow.collectors.http import OtlpApp
from traceflow.collectors.ingest import Admission, Ingest, Reservation
from traceflow.collectors.settings import (
    DECODED_BYTES_PER_BYTE,
    JSON_DECODED_BYTES_PER_BYTE,
    memory_bound_bytes,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/PID/status")

MiB = 1 << 20
PIECE = 64 << 10
PROTOBUF, JSON = "application/x-protobuf", "application/json"
#: bytes of one Claude Code ``api_request`` record in compact OTLP/JSON, about
JSON_RECORD_BYTES = 2000


def json_messages(clients: int, size: int) -> list[tuple[bytes, list[str]]]:
    """``clients`` valid OTLP/JSON ``ExportLogsServiceRequest`` bodies of about ``size`` bytes, as
    :func:`valid_messages` builds protobuf ones (distinct request ids per client)."""
    template, ids = api_request_logs(size // JSON_RECORD_BYTES, tag="TTTTTTTT")
    body = orjson.dumps(json_format.MessageToDict(template))
    return [
        (body.replace(b"TTTTTTTT", b"j%07d" % k), [i.replace("TTTTTTTT", f"j{k:07d}") for i in ids])
        for k in range(clients)
    ]


@dataclass
class Answer:
    """What one raw OTLP/HTTP POST got back."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    sent: int = 0  # body bytes sent before the answer
    error: str = ""


def raw_post(url: str, path: str, body: bytes, content_type: str, timeout_s: float = 300.0) -> Answer:
    """POST ``body`` on a new connection, in pieces, stopping as soon as an answer arrives."""
    parts = urlsplit(url)
    out = Answer()
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=timeout_s)
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head)
        view = memoryview(body)
        while out.sent < len(body):
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break  # answered before the whole body was read
            sock.sendall(view[out.sent : out.sent + PIECE])
            out.sent += min(PIECE, len(body) - out.sent)
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        out.status = response.status
        out.headers = {k.lower(): v for k, v in response.getheaders()}
    except OSError as e:  # the server closed the connection while the body was being sent
        out.error = f"{type(e).__name__}: {e}"
    finally:
        sock.close()
    return out


def server_share_mib(budget_mib: float, body_mib: float) -> float:
    """The server's share of the documented bound (docs/collector.md, traceflow serve): its base,
    2.5 x ``--max-inflight-bytes`` of bodies being received and one message decoded at a time,
    four times ``--max-body-bytes``."""
    return 150 + 2.5 * budget_mib + 4 * body_mib


def post_until_stored(
    url: str, body: bytes, content_type: str, deadline: float, refusals: list[Answer]
) -> Answer:
    """:func:`raw_post` again after each refusal (kept in ``refusals``) until the body is stored (200)
    or ``deadline`` (``time.monotonic()``) passes: after a 503/429's ``Retry-After``, or after 1 s
    when the connection was reset (a server that answers early closes the connection, and the reset
    can overtake its answer), as OTLP exporters do."""
    while True:
        answer = raw_post(url, "/v1/logs", body, content_type)
        if answer.status not in (None, 429, 503) or time.monotonic() > deadline:
            return answer
        refusals.append(answer)
        time.sleep(float(answer.headers.get("retry-after", "1")))


def test_concurrent_http_clients_of_valid_messages_keep_server_and_sealer_under_the_bound(
    tmp_path: Path,
) -> None:
    """Valid messages of Claude Code records over OTLP/HTTP (24 clients of 6 MiB protobuf and 24 of
    1 MiB OTLP/JSON, each sending again after every 503/429's ``Retry-After``), with the bound scaled
    down as tests/test_collectors_grpc_memory.py scales it: server and sealer together stay under it,
    every refusal says when to retry, and every acknowledged record is in the lake once."""
    budget, body = 24, 8
    messages = [(m, PROTOBUF) for m in valid_messages(24, 6 * MiB)]
    messages += [(m, JSON) for m in json_messages(24, 1 * MiB)]  # each counts 8 MiB
    assert all(len(m[0]) <= body * MiB for m, _ in messages)
    with Server(
        tmp_path,
        "--max-body-bytes",
        f"{body}MiB",
        "--max-inflight-bytes",
        f"{budget}MiB",
        "--grpc-port",
        "-1",
    ) as srv:
        assert srv.proc is not None
        sealer = sealer_pid(srv.proc.pid)
        answers = [Answer() for _ in messages]
        refusals: list[Answer] = []
        deadline = time.monotonic() + 180

        def one(k: int) -> None:
            (payload, _), ctype = messages[k]
            answers[k] = post_until_stored(srv.http_url, payload, ctype, deadline, refusals)

        threads = [threading.Thread(target=one, args=(k,)) for k in range(len(messages))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        acked = [ids for ((_, ids), _), a in zip(messages, answers, strict=True) if a.status == 200]
        wal = tmp_path / "v1/_state/collector/wal"
        want = sum(len(ids) for ids in acked)
        assert wait_for(lambda: not any(wal.glob("*.wal")) and count_requests(tmp_path) >= want, 300)
        server_peak, sealer_peak = peak_rss_mib(srv.proc.pid), peak_rss_mib(sealer)
        stored = count_requests(tmp_path)
        distinct = query(tmp_path, "select count(distinct request_id) from requests")[0][0]
    print()
    bound = memory_bound_bytes(budget * MiB, body * MiB) / MiB
    assert server_peak + sealer_peak < bound, f"server {server_peak:.0f} + sealer {sealer_peak:.0f} MiB"
    assert server_peak < server_share_mib(budget, body), f"server {server_peak:.0f} MiB"
    answered = [a for a in refusals if a.status is not None]
    assert answered, refusals  # the budget filled (and not every answer was overtaken by a reset)
    for a in answered:
        assert float(a.headers["retry-after"]) > 0, a
    for a in answers:
        assert a.status in (200, 429, 503), a  # stored, or still no room at the deadline
    assert len(acked) >= len(messages) // 2, answers
    assert stored == distinct == want


def _post_in_process(
    app: OtlpApp, body: bytes, content_type: str, pieces: int = 4
) -> tuple[int, dict[bytes, bytes]]:
    """POST ``body`` to ``app`` (ASGI, in ``pieces``): the status and headers of its answer."""
    size = -(-len(body) // pieces)
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    scope = {
        "type": "http",
        "path": "/v1/logs",
        "method": "POST",
        "headers": [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))],
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        piece = chunks.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(chunks)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], dict(sent[0]["headers"])


def _in_process(tmp_path: Path, budget: int) -> tuple[OtlpApp, spool.Wal, Admission]:
    wal = spool.Wal(tmp_path / "wal")
    admission = Admission(budget, 1 << 40)
    core = Ingest(wal, admission, keep_content=False, token=None)
    return OtlpApp(core, 8 * MiB), wal, admission


def test_an_otlp_json_body_counts_its_decoded_excess_against_the_budget(tmp_path: Path) -> None:
    """A JSON body of n bytes holds n x (1 + JSON_DECODED - DECODED) bytes of the in-flight budget
    (settings.py): with 1 byte held by another request and a budget of 4 n, the JSON body is refused
    with Retry-After while the same records as protobuf (smaller still) are taken."""
    msg, _ = api_request_logs(300)
    as_json = orjson.dumps(json_format.MessageToDict(msg))
    as_pb = msg.SerializeToString()
    assert JSON_DECODED_BYTES_PER_BYTE - DECODED_BYTES_PER_BYTE + 1 > 4  # 4 n cannot hold it
    app, wal, admission = _in_process(tmp_path, 4 * len(as_json))
    other = Reservation()
    assert admission.grow(other, 1)
    wal.start()
    try:
        status, headers = _post_in_process(app, as_json, JSON)
        assert (status, headers.get(b"retry-after")) == (503, b"1")
        assert admission.inflight == 1  # the refused request gave back all it held
        assert _post_in_process(app, as_pb, PROTOBUF)[0] == 200
        admission.release(other)
        assert _post_in_process(app, as_json, JSON)[0] == 200  # alone, it is always taken
    finally:
        wal.close()
    assert admission.inflight == 0


def test_otlp_json_is_logged_as_protobuf_for_the_sealer(tmp_path: Path) -> None:
    """The sealer decodes what the WAL holds: an OTLP/JSON payload is logged as protobuf (a third
    of JSON's memory once decoded), the same records."""
    msg, _ = api_request_logs(50)
    app, wal, _ = _in_process(tmp_path, 64 * MiB)
    wal.start()
    try:
        assert _post_in_process(app, orjson.dumps(json_format.MessageToDict(msg)), JSON)[0] == 200
    finally:
        wal.close()
    records = [
        rec for seg in sorted((tmp_path / "wal").glob("*.wal")) for rec in spool.scan_segment(seg).records
    ]
    assert [r.content_type for r in records] == [PROTOBUF]
    logged = ExportLogsServiceRequest.FromString(records[0].body)
    assert logged == msg
