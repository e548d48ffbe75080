"""Collector load benchmark: sustained acknowledged records/s over OTLP/HTTP and OTLP/gRPC.

Usage::

    python benchmarks/bench_collector.py                       # both transports, 20 s each
    python benchmarks/bench_collector.py --duration 30 --exporters 6 --transport http --json out.json

What it does, in one run:

1. builds distinct Claude-Code-shaped ``api_request`` log batches (512 records each, as Claude Code
   2.1.332 sends them);
2. measures the *decode-only* ceiling on one core: ``ExportLogsServiceRequest.ParseFromString`` of
   the same payloads plus reading every attribute into Python values, no storage;
3. per transport, starts ``python -m traceflow serve`` on free ports with a fresh data
   directory, runs ``--exporters`` concurrent exporters (one connection each, one request in flight
   each, like the SDK's batch exporters) for ``--duration`` seconds, and reports acknowledged
   records/s, p50/p99 export latency, throttled requests and the peak RSS of the server and sealer
   processes; then waits for the sealer to drain the WAL and checks every acknowledged record is in
   the lake exactly once.

``--compare-http`` instead measures the OTLP/HTTP layer alone, the current server (ASGI app under
uvicorn + httptools on uvloop) against the hand-written HTTP/1.1 server it replaced, in one run: each
is served by this script (``--serve-http IMPL DATA``: WAL + ingest core + the HTTP server, no gRPC,
no sealer) and loaded with the same exporters; reported are acknowledged records/s and server CPU µs
per request. The old server is not kept in the tree: its source is read at benchmark time with
``git show <--old-http-ref>:collectors/http.py`` (default: the last commit that had it) and imported
from a temporary file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from traceflow.collectors.settings import ReadyLine, serve_argv

LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


# -- payloads -------------------------------------------------------------------------------------------
def _kv(key: str, value: str | int | float | bool) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def claude_code_batch(n: int, tag: str) -> tuple[bytes, list[str]]:
    """One export request of ``n`` Claude Code ``api_request`` events; returns (bytes, request ids)."""
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    for k, v in (
        ("host.arch", "amd64"),
        ("os.type", "linux"),
        ("os.version", "6.18.44"),
        ("service.name", "claude-code"),
        ("service.version", "2.1.332"),
    ):
        rl.resource.attributes.append(_kv(k, v))
    sl = rl.scope_logs.add()
    sl.scope.name, sl.scope.version = "com.anthropic.claude_code.events", "2.1.332"
    session, prompt = str(uuid.uuid4()), str(uuid.uuid4())
    t0 = time.time_ns()
    ids = []
    for i in range(n):
        ts = t0 + i * 1_000_000
        rid = f"req_{tag}_{i}"
        ids.append(rid)
        attrs: list[tuple[str, Any]] = [
            ("user.id", "0958b0c8144faf33c9b6b1945beab0733300758e007e3ce0d2dd13de025b8b78"),
            ("session.id", session),
            ("anthropic.provider", "firstParty"),
            ("terminal.type", "dumb"),
            ("event.name", "api_request"),
            ("event.timestamp", "2026-11-29T17:52:09.625Z"),
            ("event.sequence", i),
            ("prompt.id", prompt),
            ("model", "claude-opus-5-5"),
            ("input_tokens", 11 + i % 7),
            ("output_tokens", 22 + i % 300),
            ("cache_read_tokens", 4444 + 37 * i),
            ("cache_creation_tokens", 333),
            ("cache_creation_5m_tokens", 300),
            ("cache_creation_1h_tokens", 33),
            ("cost_usd", 0.0031368),
            ("cost_usd_micros", 3137),
            ("duration_ms", 690 + i),
            ("ttft_ms", 180),
            ("request_id", rid),
            ("speed", "normal"),
            ("query_source", "sdk"),
            ("effort", "medium"),
        ]
        sl.log_records.append(
            LogRecord(
                time_unix_nano=ts,
                observed_time_unix_nano=ts,
                flags=1,
                body=AnyValue(string_value="claude_code.api_request"),
                attributes=[_kv(k, v) for k, v in attrs],
                trace_id=os.urandom(16),
                span_id=os.urandom(8),
            )
        )
    return req.SerializeToString(), ids


# -- decode-only ceiling ----------------------------------------------------------------------------------
def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return _attrs(v.kvlist_value.values)
    return getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    """Attributes as a dict; strings (most values) take one field read, no WhichOneof."""
    d: dict[str, Any] = {}
    for kv in kvs:
        v = kv.value
        s = v.string_value
        d[kv.key] = s if s else _value(v)
    return d


DECODE_CPU_US: list[float] = []  # CPU microseconds per record of the last decode_only() run


def decode_only(payloads: list[bytes], seconds: float) -> float:
    """Records/s for parse + read every attribute and field into Python values (one core)."""
    records = 0
    sink: list[Any] = []
    t0 = time.perf_counter()
    c0 = time.process_time()
    while time.perf_counter() - t0 < seconds:
        for body in payloads:
            msg = ExportLogsServiceRequest.FromString(body)
            for rl in msg.resource_logs:
                sink.append(_attrs(rl.resource.attributes))
                for sl in rl.scope_logs:
                    sink.append((sl.scope.name, sl.scope.version))
                    for rec in sl.log_records:
                        sink.append(_attrs(rec.attributes))
                        sink.append(
                            (
                                rec.time_unix_nano,
                                rec.observed_time_unix_nano,
                                _value(rec.body),
                                rec.trace_id,
                                rec.span_id,
                                rec.flags,
                                rec.event_name,
                            )
                        )
                        records += 1
            sink.clear()
    DECODE_CPU_US.append((time.process_time() - c0) / records * 1e6)
    return records / (time.perf_counter() - t0)


# -- server -------------------------------------------------------------------------------------------
class ServerProc:
    """``python -m traceflow serve`` on free ports (``extra`` may override them: the last flag wins)."""

    def __init__(
        self, data: Path | str, extra: list[str], env: dict[str, str] | None = None, log: Path | None = None
    ) -> None:
        cmd = serve_argv(data, "--summary-interval", "3600", *extra)
        # stderr to a file when given: an unread pipe fills up and blocks a long-running server
        with contextlib.ExitStack() as stack:
            err = stack.enter_context(open(log, "ab")) if log is not None else subprocess.PIPE
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, env={**os.environ, **env} if env else None
            )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline().decode() if ready else ""
        bound = ReadyLine.parse(line)
        if bound is None:
            self.proc.kill()
            raise SystemExit(f"server did not start: {line!r}")
        self.http = bound.http_url.removeprefix("http://")
        self.grpc = bound.grpc_target

    def pids(self) -> dict[str, int]:
        out = {"server": self.proc.pid}
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    stat = (proc / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    out["sealer"] = int(proc.name)
        return out

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(600)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class RawHttp:
    """A minimal keep-alive HTTP/1.1 client, so the load generator spends little of the shared CPU
    (``http.client`` parses response headers with the email package)."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sent = self.sock.sendmsg([head, body])
        if sent < len(head) + len(body):  # a short write (the socket has a timeout): send the rest
            self.sock.sendall((head + body)[sent:])
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        raw, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        payload, self.buf = self.buf[:n], self.buf[n:]
        if headers.get("connection") == "close":
            raise ConnectionError("server closed the connection")
        return status, headers, payload

    def close(self) -> None:
        self.sock.close()


# -- load ---------------------------------------------------------------------------------------------
@dataclass
class Load:
    transport: str
    exporters: int
    batch: int
    duration_s: float
    acked_records: int = 0
    acked_requests: int = 0
    throttled: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    #: with ``retry``, a request that failed (connection lost, 503, UNAVAILABLE) is sent again as it
    #: was, as the SDKs' exporters do; otherwise the exporter moves on to the next one
    retry: bool = False
    #: with ``budget``, each exporter stops after that many acknowledged requests (or the deadline)
    budget: int | None = None
    #: when a list, the key of every acknowledged request: its ids are ``request_ids(key, batch)``
    acked_keys: list[str] | None = None
    live_acked_records: int = 0  # updated as acknowledgements arrive (for a side thread to watch)


TAG = b"TTTTTTTT"  # 8 bytes in every request id of a template batch, replaced per send


def templates(batch: int, distinct: int) -> list[bytes]:
    """``distinct`` batches whose request ids (``req_TTTTTTTT_<j>_<n>``) get a per-send tag."""
    return [claude_code_batch(batch, TAG.decode() + f"_{j:03d}")[0] for j in range(distinct)]


def request_ids(key: str, batch: int) -> list[str]:
    """The request ids of the acknowledged request ``key`` (an entry of ``Load.acked_keys``)."""
    return [f"req_{key}_{n}" for n in range(batch)]


def _connect(host: str, port: int, deadline: float) -> RawHttp | None:
    """A connection, retried until the deadline (a collector being restarted refuses for a while)."""
    while True:
        try:
            return RawHttp(host, port)
        except OSError:
            if time.perf_counter() >= deadline:
                return None
            time.sleep(0.1)


def _exporter(
    load: Load,
    target: str,
    batches: list[bytes],
    k: int,
    deadline: float,
    lock: threading.Lock,
) -> None:
    lat: list[float] = []
    acked = 0
    throttled = errors = 0
    keys: list[str] = []
    i = k
    body: bytes | None = None
    key = ""

    def more() -> bool:
        return time.perf_counter() < deadline and (load.budget is None or len(keys) < load.budget)

    def next_body() -> bytes:
        nonlocal i, key
        tag = b"%c%02d%05d" % (ord(load.transport[0]), k, i % 100_000)
        key = f"{tag.decode()}_{i % len(batches):03d}"
        out = batches[i % len(batches)].replace(TAG, tag)
        i += load.exporters
        return out

    def ok() -> None:
        nonlocal acked, body
        acked += load.batch
        keys.append(key)
        body = None
        with lock:
            load.live_acked_records += load.batch

    def failed() -> None:
        nonlocal body
        if not load.retry:
            body = None

    if load.transport == "http":
        host, port = target.rsplit(":", 1)
        conn = _connect(host, int(port), deadline)
        while conn is not None and more():
            body = body or next_body()
            t = time.perf_counter()
            try:
                status, headers, payload = conn.post("/v1/logs", body)
            except OSError:
                errors += 1
                failed()
                conn.close()
                conn = _connect(host, int(port), deadline)
                continue
            lat.append((time.perf_counter() - t) * 1000)
            if status == 200 and payload == b"":
                ok()
            elif status in (429, 503):
                throttled += 1
                failed()
                time.sleep(float(headers.get("retry-after") or 1))
            else:
                errors += 1
                failed()
        if conn is not None:
            conn.close()
    else:
        with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            call = ch.unary_unary(LOGS_EXPORT)
            while more():
                body = body or next_body()
                t = time.perf_counter()
                try:
                    raw = call(body, timeout=60)
                except grpc.RpcError as e:
                    if e.code() == grpc.StatusCode.UNAVAILABLE:
                        throttled += 1
                        time.sleep(1)
                    else:
                        errors += 1
                    failed()
                    continue
                lat.append((time.perf_counter() - t) * 1000)
                if raw == b"":
                    ok()
                else:
                    failed()
    with lock:
        load.latencies_ms += lat
        load.acked_records += acked
        load.acked_requests += len(lat)
        load.throttled += throttled
        load.errors += errors
        if load.acked_keys is not None:
            load.acked_keys += keys


def run_load(
    transport: str,
    target: str | list[str],
    batches: list[bytes],
    batch: int,
    exporters: int,
    duration: float,
    *,
    load: Load | None = None,
) -> Load:
    """``exporters`` threads for ``duration`` s; exporter k sends to ``target[k % len(target)]``.

    Pass ``load`` for the retry, budget and acknowledged-keys options (see :class:`Load`).
    """
    load = load or Load(transport, exporters, batch, duration)
    targets = [target] if isinstance(target, str) else target
    lock = threading.Lock()
    start = time.perf_counter()
    deadline = start + duration
    threads = [
        threading.Thread(target=_exporter, args=(load, targets[k % len(targets)], batches, k, deadline, lock))
        for k in range(exporters)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load.duration_s = time.perf_counter() - start
    return load


def _pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def bench_transport(transport: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    data = root / f"data-{transport}"
    server = ServerProc(data, args.server_arg or [])
    drain_s: float | None = None
    sealer_cpu = float("nan")
    try:
        target = server.http if transport == "http" else server.grpc
        # templates whose request ids get a per-send tag: every acknowledged record is distinct
        batches = templates(args.batch, args.distinct)
        pids = server.pids()
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        load = run_load(transport, target, batches, args.batch, args.exporters, args.duration)
        server_cpu = cpu_seconds(pids["server"]) - cpu0["server"]
        if not args.no_drain:
            t0 = time.perf_counter()
            wal = data / "v1/_state/collector/wal"
            while any(wal.glob("*")) and time.perf_counter() - t0 < args.drain_timeout:
                time.sleep(0.2)
            drain_s = time.perf_counter() - t0
        sealer_cpu = cpu_seconds(pids["sealer"]) - cpu0["sealer"] if "sealer" in pids else float("nan")
        rss = {name: round(peak_rss_mib(pid), 1) for name, pid in pids.items()}
    finally:
        server.stop()
    rows = distinct = None
    if drain_s is not None:
        from traceflow.store.lake import Lake

        con = Lake(data).connect(["requests"])
        row = con.execute("select count(*), count(distinct request_id) from requests").fetchone()
        con.close()
        rows, distinct = (int(row[0]), int(row[1])) if row else (0, 0)
    result = {
        "transport": transport,
        "exporters": args.exporters,
        "batch": args.batch,
        "duration_s": round(load.duration_s, 2),
        "acked_records": load.acked_records,
        "acked_records_per_s": round(load.acked_records / load.duration_s),
        "export_p50_ms": round(_pct(load.latencies_ms, 50), 1),
        "export_p99_ms": round(_pct(load.latencies_ms, 99), 1),
        "throttled_requests": load.throttled,
        "errors": load.errors,
        "peak_rss_mib": rss,
        "drain_after_load_s": None if drain_s is None else round(drain_s, 1),
        "sealed_records_per_s": None
        if drain_s is None
        else round(load.acked_records / (load.duration_s + drain_s)),
        # CPU per record is steadier than wall-clock rates on a shared machine: the rate one core
        # could sustain is 1e6 / (microseconds per record)
        "server_cpu_us_per_record": round(server_cpu / max(load.acked_records, 1) * 1e6, 2),
        "sealer_cpu_us_per_record": None
        if drain_s is None
        else round(sealer_cpu / max(load.acked_records, 1) * 1e6, 1),
        "rows_in_lake": rows,
        "distinct_request_ids_in_lake": distinct,
    }
    if not args.keep_data:
        shutil.rmtree(data, ignore_errors=True)
    return result


# -- old vs new HTTP server ------------------------------------------------------------------------------
OLD_HTTP_REF = "38dc89d"  # the last commit with the hand-written collectors/http.py


def _load_old_http(ref: str) -> Any:
    src = subprocess.run(
        ["git", "show", f"{ref}:collectors/http.py"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="old-http-")) / "old_http.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location("traceflow.collectors.old_http", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve_http(impl: str, data: Path, old_ref: str) -> int:
    """Serve OTLP/HTTP only (WAL + ingest core + one HTTP server) until SIGTERM; prints ``port N``."""
    from traceflow.collectors import spool
    from traceflow.collectors.ingest import Admission, Ingest
    from traceflow.collectors.settings import DEFAULT_MAX_BACKLOG_BYTES, DEFAULT_MAX_INFLIGHT_BYTES

    if impl == "old":
        server_class = _load_old_http(old_ref).HttpServer
    else:
        from traceflow.collectors.http import HttpServer as server_class

    async def main() -> None:
        wal = spool.Wal(data / "wal")
        wal.start()
        # the backlog is never drained here (no sealer): do not let it throttle
        core = Ingest(
            wal,
            Admission(DEFAULT_MAX_INFLIGHT_BYTES, max(DEFAULT_MAX_BACKLOG_BYTES, 1 << 40)),
            keep_content=False,
            token=None,
        )
        server = server_class(core, max_body_bytes=64 << 20)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        sock.setblocking(False)
        await server.start(sock)
        print(f"port {sock.getsockname()[1]}", flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop(grace_s=5)
        await asyncio.to_thread(wal.close)

    if impl == "old-uvloop" or impl == "new":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    else:
        asyncio.run(main())
    return 0


HTTP_IMPLS = {
    "old": "hand-written HTTP/1.1 on asyncio (before issue 13)",
    "new": "ASGI app under uvicorn + httptools, uvloop (traceflow serve)",
    "new-asyncio": "the same on the default asyncio loop",
}


def _serve_and_load(impl: str, args: argparse.Namespace, root: Path, batches: list[bytes]) -> dict[str, Any]:
    data = root / f"http-{impl}"
    data.mkdir()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-http", impl, str(data), "--old-http-ref", args.old_http_ref],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 300)  # a loaded machine imports slowly
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("port "):
        proc.kill()
        raise SystemExit(f"the {impl} HTTP server did not start: {line!r}")
    cpu0 = cpu_seconds(proc.pid)
    load = run_load(
        "http", f"127.0.0.1:{line.split()[1]}", batches, args.batch, args.exporters, args.duration
    )
    cpu = cpu_seconds(proc.pid) - cpu0
    rss = peak_rss_mib(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    shutil.rmtree(data, ignore_errors=True)
    return {
        "server": impl,
        "acked_requests": load.acked_requests,
        "acked_records_per_s": round(load.acked_records / load.duration_s),
        "server_cpu_us_per_request": round(cpu / max(load.acked_requests, 1) * 1e6),
        "export_p50_ms": round(_pct(load.latencies_ms, 50), 1),
        "errors": load.errors,
        "throttled": load.throttled,
        "peak_rss_mib": round(rss, 1),
    }


def compare_http(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """``--rounds`` rounds, the servers taking turns within each (a shared machine's load drifts)."""
    batches = templates(args.batch, args.distinct)
    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in HTTP_IMPLS}
    for _ in range(args.rounds):
        for impl in HTTP_IMPLS:
            runs[impl].append(_serve_and_load(impl, args, root, batches))
            print(json.dumps(runs[impl][-1]), flush=True)
    results = []
    for impl, rs in runs.items():
        rates = [r["acked_records_per_s"] for r in rs]
        cpus = [r["server_cpu_us_per_request"] for r in rs]
        results.append(
            {
                "server": impl,
                "what": HTTP_IMPLS[impl],
                "request_bytes": len(batches[0]),
                "acked_records_per_s_median": round(statistics.median(rates)),
                "acked_records_per_s": rates,
                "server_cpu_us_per_request_median": round(statistics.median(cpus)),
                "server_cpu_us_per_request": cpus,
                "errors": sum(r["errors"] for r in rs),
                "peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
            }
        )
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load per transport")
    p.add_argument("--exporters", type=int, default=4, help="concurrent exporters (connections)")
    p.add_argument("--batch", type=int, default=512, help="log records per export request")
    p.add_argument("--distinct", type=int, default=32, help="payload templates (ids differ per send anyway)")
    p.add_argument("--transport", choices=["http", "grpc", "both"], default="both")
    p.add_argument("--decode-seconds", type=float, default=5.0)
    p.add_argument("--no-drain", action="store_true", help="do not wait for the sealer to empty the WAL")
    p.add_argument("--drain-timeout", type=float, default=600.0)
    p.add_argument("--keep-data", action="store_true")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--server-arg", action="append", help="extra argument for the server (repeatable)")
    p.add_argument(
        "--compare-http",
        action="store_true",
        help="compare the OTLP/HTTP server with the hand-written one it replaced (HTTP layer only)",
    )
    p.add_argument(
        "--old-http-ref", default=OLD_HTTP_REF, help="git revision holding the old collectors/http.py"
    )
    p.add_argument("--rounds", type=int, default=3, help="--compare-http: rounds (servers take turns)")
    p.add_argument("--serve-http", nargs=2, metavar=("IMPL", "DATA"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_http:
        return serve_http(args.serve_http[0], Path(args.serve_http[1]), args.old_http_ref)
    if args.compare_http:
        root = Path(tempfile.mkdtemp(prefix="bench-http-"))
        try:
            runs = compare_http(args, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print()
        print(
            "| server | request kB | acked records/s, median (runs) | server CPU µs/request, median (runs) "
            "| errors | peak RSS MiB |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for r in runs:
            rates = ", ".join(f"{x:,}" for x in r["acked_records_per_s"])
            cpus = ", ".join(str(x) for x in r["server_cpu_us_per_request"])
            print(
                f"| {r['what']} | {r['request_bytes'] / 1000:.0f} | {r['acked_records_per_s_median']:,} "
                f"({rates}) | {r['server_cpu_us_per_request_median']} ({cpus}) | {r['errors']} | "
                f"{r['peak_rss_mib']} |"
            )
        if args.json:
            args.json.write_text(json.dumps(runs, indent=2))
        return 0

    sample = [claude_code_batch(args.batch, f"decode{j}") for j in range(8)]
    body_bytes = len(sample[0][0])
    load_before = os.getloadavg()
    ceiling = decode_only([b for b, _ in sample], args.decode_seconds)
    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "loadavg_at_start": [round(x, 2) for x in load_before],
        "payload_bytes_per_batch": body_bytes,
        "bytes_per_record": round(body_bytes / args.batch),
        "decode_only_records_per_s": round(ceiling),
        "decode_only_cpu_us_per_record": round(DECODE_CPU_US[-1], 2),
        "runs": [],
    }
    print(
        f"decode-only ceiling (parse + read every attribute, one core): {ceiling:,.0f} records/s, "
        f"{DECODE_CPU_US[-1]:.1f} CPU µs/record "
        f"({body_bytes / args.batch:.0f} B/record)",
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="bench-collector-"))
    try:
        for transport in ["http", "grpc"] if args.transport == "both" else [args.transport]:
            r = bench_transport(transport, args, root)
            r["share_of_decode_only"] = round(r["acked_records_per_s"] / ceiling, 2)
            results["runs"].append(r)
            print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        "| transport | acked records/s | vs decode-only | p50 ms | p99 ms | throttled "
        "| server CPU µs/record | peak RSS server / sealer MiB | sealed records/s (incl. drain) "
        "| sealer CPU µs/record | acked = stored |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results["runs"]:
        rss = r["peak_rss_mib"]
        exact = "n/a" if r["rows_in_lake"] is None else r["rows_in_lake"] == r["acked_records"]
        print(
            f"| {r['transport']} | {r['acked_records_per_s']:,} | {r['share_of_decode_only']:.0%} | "
            f"{r['export_p50_ms']} | {r['export_p99_ms']} | {r['throttled_requests']} | "
            f"{r['server_cpu_us_per_record']} | {rss.get('server')} / {rss.get('sealer')} | "
            f"{r['sealed_records_per_s'] or 'n/a'} | {r['sealer_cpu_us_per_record'] or 'n/a'} | {exact} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
