"""OTLP/gRPC memory is bounded like HTTP's: 16 clients × 60 MiB keep the server's RSS under a bound.

The clients are raw HTTP/2 connections (``h2``) that announce a 60 MiB gRPC message and stream it
from one shared 64 KiB chunk, as fast as the server's flow control lets them: the test process stays
small, and a refused call (trailers, then ``RST_STREAM``) stops its sender at once. The server's peak
RSS is its ``VmHWM`` (``/proc/PID/status``).
"""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from collectors_support import Server, api_request_logs, count_requests, wait_for
from google.rpc import error_details_pb2, status_pb2

from traceflow.collectors.settings import memory_bound_bytes

h2_connection = pytest.importorskip("h2.connection")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/PID/status")

LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
MiB = 1 << 20
CHUNK = b"\x00" * (64 << 10)  # field number 0: a body that does not decode, the worst case


def unknown_field_head(size: int) -> bytes:
    """The start of a ``size``-byte message that decodes: one unknown field 15 holding zeros."""
    n = size - 1
    for _ in range(3):  # the varint's own length shortens what it announces
        varint = _varint(n)
        n = size - 1 - len(varint)
    return b"\x7a" + _varint(n)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


@dataclass
class CallResult:
    """What one raw gRPC call got back."""

    status: int | None = None  # grpc-status
    details: bytes = b""  # grpc-status-details-bin (base64-decoded)
    sent: int = 0  # message bytes sent before the answer
    reset: bool = False
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def raw_call(
    target: str, size: int, *, path: str = LOGS, head: bytes = b"", timeout_s: float = 60.0
) -> CallResult:
    """Send one gRPC message of ``size`` bytes on a new HTTP/2 connection: ``head``, then zeros."""
    import base64

    host, port = target.rsplit(":", 1)
    out = CallResult()
    sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    try:
        conn = h2_connection.H2Connection(
            h2_config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(
            sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", target),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        pending = struct.pack(">BI", 0, size) + head  # the gRPC prefix: uncompressed, length
        left = size - len(head)
        done = False
        sock.sendall(conn.data_to_send())
        while not done:
            while (pending or left) and not done:
                window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if window <= 0:
                    break
                if not pending:
                    n = min(left, len(CHUNK))
                    pending, left = CHUNK[:n], left - n
                piece, pending = pending[:window], pending[window:]
                conn.send_data(sid, piece, end_stream=not pending and not left)
                out.sent += len(piece)
                sock.sendall(conn.data_to_send())
            data = sock.recv(1 << 16)
            if not data:
                break
            for ev in conn.receive_data(data):
                if isinstance(ev, (h2_events.ResponseReceived, h2_events.TrailersReceived)):
                    for k, v in ev.headers:
                        out.headers[str(k)] = str(v)
                    if isinstance(ev, h2_events.TrailersReceived) or "grpc-status" in out.headers:
                        done = True
                elif isinstance(ev, h2_events.DataReceived):
                    conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                elif isinstance(ev, h2_events.StreamReset):
                    out.reset, done = True, True
            sock.sendall(conn.data_to_send())
    except (OSError, Exception) as e:  # a connection the server closed, or an h2 protocol error
        out.error = f"{type(e).__name__}: {e}"
    finally:
        sock.close()
    if "grpc-status" in out.headers:
        out.status = int(out.headers["grpc-status"])
    if "grpc-status-details-bin" in out.headers:
        b64 = out.headers["grpc-status-details-bin"]
        out.details = base64.b64decode(b64 + "=" * (-len(b64) % 4))
    return out


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def flood(target: str, clients: int, size: int) -> list[CallResult]:
    results: list[CallResult] = [CallResult() for _ in range(clients)]

    def one(i: int) -> None:
        results[i] = raw_call(target, size)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def retry_delay_s(details: bytes) -> float | None:
    status = status_pb2.Status.FromString(details)
    for d in status.details:
        info = error_details_pb2.RetryInfo()
        if d.Unpack(info):
            return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return None


def open_partial_calls(
    target: str, calls: int, *, announce: int, send: int, wait_s: float
) -> list[CallResult]:
    """Open ``calls`` streams on one connection, each announcing an ``announce``-byte message and
    sending only ``send`` bytes of it; collect the answers that arrive within ``wait_s``."""
    import base64

    host, port = target.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=1)
    conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    results: dict[int, CallResult] = {}
    for _ in range(calls):
        sid = conn.get_next_available_stream_id()
        results[sid] = CallResult()
        conn.send_headers(
            sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", LOGS),
                (":authority", target),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        conn.send_data(sid, struct.pack(">BI", 0, announce) + b"\x00" * send)
        results[sid].sent = send
    sock.sendall(conn.data_to_send())
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                break
            for ev in conn.receive_data(data):
                sid = getattr(ev, "stream_id", 0)
                if sid not in results:
                    continue
                if isinstance(ev, (h2_events.ResponseReceived, h2_events.TrailersReceived)):
                    results[sid].headers.update({str(k): str(v) for k, v in ev.headers})
                elif isinstance(ev, h2_events.StreamReset):
                    results[sid].reset = True
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()
    for out in results.values():
        if "grpc-status" in out.headers:
            out.status = int(out.headers["grpc-status"])
        if "grpc-status-details-bin" in out.headers:
            b64 = out.headers["grpc-status-details-bin"]
            out.details = base64.b64decode(b64 + "=" * (-len(b64) % 4))
    return [results[k] for k in sorted(results)]


# -- the tests ---------------------------------------------------------------------------------------------
BUDGET_MIB = 128
#: bytes of one Claude Code ``api_request`` record in a message (``api_request_logs``), about
RECORD_BYTES = 700


def server_bound_mib(budget_mib: float) -> float:
    """The server's share of the documented bound (docs/collector.md, traceflow serve) when no
    message decodes: its base and 2.5 x ``--max-inflight-bytes``."""
    return 150 + 2.5 * budget_mib


def test_sixteen_clients_of_60_mib_keep_the_server_under_the_bound(tmp_path: Path) -> None:
    """Bodies that do not decode: each is refused once read, or not admitted."""
    with Server(
        tmp_path, "--max-body-bytes", "64MiB", "--max-inflight-bytes", f"{BUDGET_MIB}MiB", "--http-port", "-1"
    ) as srv:
        assert srv.proc is not None
        results = flood(srv.grpc_target, 16, 60 * MiB)
        peak = peak_rss_mib(srv.proc.pid)
    for r in results:
        assert r.status is not None, r  # every call is answered
        assert r.status in (3, 14), r  # the body does not decode, or no room: retry later
        if r.status == 14:
            delay = retry_delay_s(r.details)
            assert delay is not None and delay > 0, r
    assert peak < server_bound_mib(BUDGET_MIB), f"server peak RSS {peak:.0f} MiB"


def valid_messages(clients: int, size: int) -> list[tuple[bytes, list[str]]]:
    """``clients`` valid ``ExportLogsServiceRequest`` messages of about ``size`` bytes each, of Claude
    Code ``api_request`` records with distinct request ids: one template, its tag replaced per client."""
    template, ids = api_request_logs(size // RECORD_BYTES, tag="TTTTTTTT")
    body = template.SerializeToString()
    return [
        (body.replace(b"TTTTTTTT", b"c%07d" % k), [i.replace("TTTTTTTT", f"c{k:07d}") for i in ids])
        for k in range(clients)
    ]


def sealer_pid(server_pid: int) -> int:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == server_pid:
                return int(proc.name)
    raise AssertionError("no sealer process")


def test_sixteen_clients_of_valid_messages_keep_server_and_sealer_under_the_bound(tmp_path: Path) -> None:
    """Valid messages (16 x 6 MiB of Claude Code records: the benchmark sends 16 x 60 MiB, with the
    default budget) are decoded, logged and sealed: server and sealer together stay under the bound,
    and every acknowledged record is in the lake."""
    budget, body = 24, 8
    messages = valid_messages(16, 6 * MiB)
    with Server(
        tmp_path,
        "--max-body-bytes",
        f"{body}MiB",
        "--max-inflight-bytes",
        f"{budget}MiB",
        "--http-port",
        "-1",
    ) as srv:
        assert srv.proc is not None
        sealer = sealer_pid(srv.proc.pid)
        results: list[CallResult] = [CallResult() for _ in messages]

        def one(k: int) -> None:
            body = messages[k][0]
            results[k] = raw_call(srv.grpc_target, len(body), head=body)

        threads = [threading.Thread(target=one, args=(k,)) for k in range(len(messages))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        acked = [ids for (_, ids), r in zip(messages, results, strict=True) if r.status == 0]
        wal = tmp_path / "v1/_state/collector/wal"
        want = sum(len(ids) for ids in acked)
        assert wait_for(lambda: not any(wal.glob("*.wal")) and count_requests(tmp_path) >= want, 300)
        server_peak, sealer_peak = peak_rss_mib(srv.proc.pid), peak_rss_mib(sealer)
    for r in results:
        assert r.status in (0, 14), r  # stored, or no room: retry later
    assert len(acked) >= budget // body, results  # the budget holds three at once, and more after them
    assert count_requests(tmp_path) == want
    together = server_peak + sealer_peak
    bound = memory_bound_bytes(budget * MiB, body * MiB) / MiB
    assert together < bound, f"server {server_peak:.0f} + sealer {sealer_peak:.0f} MiB"


def test_calls_beyond_16_on_one_connection_are_told_when_to_retry(tmp_path: Path) -> None:
    with Server(tmp_path, "--max-body-bytes", "1MiB", "--http-port", "-1") as srv:
        results = open_partial_calls(srv.grpc_target, 20, announce=1000, send=10, wait_s=3)
    in_progress = [r for r in results if r.status is None]
    refused = [r for r in results if r.status is not None]
    assert len(in_progress) == 16, results  # waiting for the rest of their messages
    assert len(refused) == 4
    for r in refused:
        assert r.status == 14, r
        assert retry_delay_s(r.details) == 1.0


def test_a_call_the_budget_cannot_hold_is_told_when_to_retry(tmp_path: Path) -> None:
    """The budget counts a message from before its first frame: while one call's 1 MiB message is
    still arriving, another call cannot fit, and is refused without being read."""
    with Server(
        tmp_path, "--max-body-bytes", "1MiB", "--max-inflight-bytes", "1MiB", "--http-port", "-1"
    ) as srv:
        results: list[CallResult] = []
        t = threading.Thread(
            target=lambda: results.extend(
                open_partial_calls(srv.grpc_target, 1, announce=1000, send=10, wait_s=12)
            )
        )
        t.start()
        time.sleep(1)  # the holder is admitted
        refused = raw_call(srv.grpc_target, 100)
        t.join()
    assert results and results[0].status is None, results  # the holder was admitted, still waiting
    assert refused.status == 14, refused
    delay = retry_delay_s(refused.details)
    assert delay is not None and delay >= 1
