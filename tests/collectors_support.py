"""Helpers for the collector tests: a server subprocess and Claude-Code-shaped OTLP payloads."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from tests.conftest import TESTDATA
from traceflow.collectors.settings import ReadyLine, serve_argv
from traceflow.store.lake import Lake

CAPTURES = TESTDATA / "claude-code-otlp"
PAYLOADS = Path(__file__).resolve().parent / "payloads"


def kv(key: str, value: str | int | float | bool | None) -> KeyValue:
    """An OTLP attribute of ``value``'s type (None: an empty value)."""
    if value is None:
        return KeyValue(key=key, value=AnyValue())
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def api_request_logs(
    n: int, *, session: str | None = None, start_ns: int | None = None, tag: str = ""
) -> tuple[ExportLogsServiceRequest, list[str]]:
    """``n`` Claude Code ``api_request`` events (as 2.1.332 sends them) and their request ids."""
    session = session or str(uuid.uuid4())
    start_ns = start_ns or time.time_ns()
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    for k, v in (
        ("host.arch", "amd64"),
        ("os.type", "linux"),
        ("service.name", "claude-code"),
        ("service.version", "2.1.332"),
    ):
        rl.resource.attributes.append(kv(k, v))
    sl = rl.scope_logs.add()
    sl.scope.name = "com.anthropic.claude_code.events"
    sl.scope.version = "2.1.332"
    ids = []
    prompt = str(uuid.uuid4())
    for i in range(n):
        ts = start_ns + i * 1_000_000
        rid = f"req_{tag}{uuid.uuid4().hex[:20]}"
        ids.append(rid)
        attrs: list[tuple[str, Any]] = [
            ("user.id", "0958b0c8144faf33c9b6b1945beab0733300758e007e3ce0d2dd13de025b8b78"),
            ("session.id", session),
            ("terminal.type", "dumb"),
            ("event.name", "api_request"),
            ("event.timestamp", time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts / 1e9))),
            ("event.sequence", i),
            ("prompt.id", prompt),
            ("model", "claude-opus-5-5"),
            ("input_tokens", 11 + i % 7),
            ("output_tokens", 22 + i % 50),
            ("cache_read_tokens", 4444 + i),
            ("cache_creation_tokens", 333),
            ("cache_creation_5m_tokens", 300),
            ("cache_creation_1h_tokens", 33),
            ("cost_usd", 0.0031368),
            ("duration_ms", 69),
            ("ttft_ms", 18),
            ("request_id", rid),
            ("speed", "normal"),
            ("query_source", "sdk"),
        ]
        rec = LogRecord(
            time_unix_nano=ts,
            observed_time_unix_nano=ts,
            body=AnyValue(string_value="claude_code.api_request"),
            attributes=[kv(k, v) for k, v in attrs],
            event_name="claude_code.api_request",
        )
        sl.log_records.append(rec)
    return req, ids


def stub(service: str, channel: grpc.Channel) -> Any:
    """The generated client stub of an OTLP service (``logs``, ``metrics`` or ``traces``)."""
    module = {
        "logs": logs_service_pb2_grpc,
        "metrics": metrics_service_pb2_grpc,
        "traces": trace_service_pb2_grpc,
    }
    cls = getattr(
        module[service],
        {"logs": "LogsServiceStub", "metrics": "MetricsServiceStub", "traces": "TraceServiceStub"}[service],
    )
    return cls(channel)


class Server:
    """``python -m traceflow serve`` on free ports, for one test (or one module)."""

    def __init__(self, data: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.data = data
        self.args = args
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_line = ""
        self.http_url = ""
        self.grpc_target = ""

    def start(self, timeout_s: float = 30.0) -> Server:
        cmd = serve_argv(self.data, *self.args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        bound = ReadyLine.parse(line.decode())
        if bound is None:
            self.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.stderr()}")
        self.ready_line = line.decode().strip()
        self.http_url, self.grpc_target = bound.http_url, bound.grpc_target
        return self

    def stderr(self) -> str:
        if self.proc is None or self.proc.stderr is None or self.proc.poll() is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")

    def stop(self, timeout_s: float = 60.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop(30)
            except subprocess.TimeoutExpired:
                self.kill()


def query(data: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    con = Lake(data).connect()
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 15.0, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def _cpu_ticks(server_pid: int) -> int:
    """CPU time (clock ticks) the collector's processes have used: the server and its children."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if stat.parent.name == str(server_pid) or fields[1] == str(server_pid):
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def wait_while_working(
    srv: Server, predicate: Callable[[], bool], idle_s: float = 60.0, limit_s: float = 900.0
) -> bool:
    """``predicate()`` within ``idle_s`` of the collector's last work, at most ``limit_s``: a deadline
    based on progress, for what the (niced) sealer does, which a loaded machine gives a small share of
    a core. Work is a second of CPU time used by the server and its sealer since the deadline was last
    moved (an idle collector polling its WAL takes minutes for one), so a sealer stuck or idle still
    fails after ``idle_s``."""
    assert srv.proc is not None
    start = time.monotonic()
    deadline = start + idle_s
    ticks = _cpu_ticks(srv.proc.pid)
    per_s = os.sysconf("SC_CLK_TCK")
    while time.monotonic() < min(deadline, start + limit_s):
        if predicate():
            return True
        now = _cpu_ticks(srv.proc.pid)
        if now - ticks >= per_s:
            ticks, deadline = now, time.monotonic() + idle_s
        time.sleep(0.1)
    return predicate()


def count_requests(data: Path, where: str = "true", params: Sequence[Any] = ()) -> int:
    return int(query(data, f"select count(*) from requests where {where}", params)[0][0])
