"""The runner behind ``traceflow serve``: OTLP/HTTP and OTLP/gRPC in one process, plus the sealer.

::

    exporters ─HTTP─► http.HttpServer ───┐                       (one uvloop event loop)
    exporters ─gRPC─► grpc.aio ──────────┴► ingest.Ingest ─► spool.Wal (group commit) ─► ACK
                                                               │ closed segments
                                          sealer process ◄─────┘ map ─► Lake.write_staged + publish

``run_server`` blocks until SIGTERM/SIGINT, then stops accepting, lets requests in flight finish,
closes the WAL, has the sealer seal everything, and returns 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import ssl
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import orjson
import prometheus_client
import uvloop

from traceflow import config
from traceflow.collectors import allocator, spool
from traceflow.collectors import grpc as otlp_grpc
from traceflow.collectors import http as otlp_http
from traceflow.collectors.ingest import Admission, Ingest, LakeHealth, poll_backlog
from traceflow.collectors.prometheus import CollectorMetrics
from traceflow.collectors.settings import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_BACKLOG_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INFLIGHT_BYTES,
    DEFAULT_METRICS_HOST,
    DEFAULT_ROLL_INTERVAL_S,
    DEFAULT_SUMMARY_INTERVAL_S,
    MIN_TOKEN_CHARS,
    READY_PREFIX,
    ServeConfig,
)
from traceflow.collectors.tokens import RELOAD_INTERVAL_S, TokenFileError, Tokens, token_problem

_logger = logging.getLogger("traceflow.serve")


class ServeError(Exception):
    """The server cannot start as asked (the message says why and what to do)."""


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def check_config(cfg: ServeConfig) -> None:
    """Refuse unsafe or inconsistent settings before binding anything."""
    if cfg.token is not None and (why := token_problem(cfg.token)) is not None:
        raise ServeError(
            f"the token (--token or TRACEFLOW_TOKEN) {why}: use at least {MIN_TOKEN_CHARS} printable "
            "characters without whitespace, e.g. from: python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'"
        )
    if not is_loopback(cfg.host) and not cfg.token and cfg.tokens is None:
        raise ServeError(
            f"refusing to listen on {cfg.host}, which is reachable from other machines, without a token: "
            "pass --token (or set TRACEFLOW_TOKEN) or --tokens FILE and give exporters the header "
            "'Authorization: Bearer <token>', or keep the default --host 127.0.0.1"
        )
    if (cfg.tls_cert is None) != (cfg.tls_key is None):
        raise ServeError("TLS needs both --tls-cert and --tls-key")
    for p in (cfg.tls_cert, cfg.tls_key):
        if p is not None and not p.is_file():
            raise ServeError(f"TLS file {p} does not exist")
    if cfg.http_port < 0 and cfg.grpc_port < 0:
        raise ServeError("both transports are disabled; enable --http-port or --grpc-port")
    if cfg.max_body_bytes <= 0:
        raise ServeError("--max-body-bytes must be positive")
    from traceflow.collectors.attribute_policy import AttributePolicy, PolicyError
    from traceflow.collectors.metric_state_file import max_streams_from_settings

    try:
        AttributePolicy.from_settings(cfg.drop_attrs, cfg.hash_attrs)
        max_streams_from_settings()
    except (PolicyError, ValueError) as e:
        raise ServeError(str(e)) from None


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind_http(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen for OTLP/HTTP on {_host_port(host, port)}: {e.strerror}") from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


@dataclass
class SealTotals:
    records: int = 0
    rows: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    quarantined: int = 0
    overflow: int = 0

    def add(self, stats: dict[str, Any]) -> None:
        self.records += int(stats.get("records", 0))
        self.rows.update(stats.get("rows", {}))
        self.rejected.update(stats.get("rejected", {}))
        self.quarantined += int(stats.get("quarantined", 0))
        self.overflow += int(stats.get("overflow", 0))

    def line(self) -> str:
        rows = ", ".join(f"{k} {v}" for k, v in sorted(self.rows.items())) or "none"
        rej = sum(self.rejected.values())
        over = (
            f"; {self.overflow} metric points beyond the stream cap per resource, stored without a delta"
            if self.overflow
            else ""
        )
        return f"sealed {self.records} payloads into rows ({rows}); mapper rejected {rej}{over}"


def _sealer_flags(cfg: ServeConfig) -> tuple[str, ...]:
    """The sealer's flags for ``--drop-attr``, ``--hash-attr`` and ``--retain`` (the hash key it reads
    from ``TRACEFLOW_HASH_SALT``, never from its command line)."""
    flags = [f for name in cfg.drop_attrs for f in ("--drop-attr", name)]
    flags += [f for name in cfg.hash_attrs for f in ("--hash-attr", name)]
    if cfg.retain_s is not None:
        flags += ["--retain", repr(cfg.retain_s)]
    return tuple(flags)


class SealerProcess:
    """Starts, feeds and supervises ``python -m traceflow.collectors.sealer``."""

    def __init__(
        self,
        data: Path | str,
        totals: SealTotals,
        wal_dir: Path | None = None,
        health: LakeHealth | None = None,
        metrics: CollectorMetrics | None = None,
        flags: tuple[str, ...] = (),
    ) -> None:
        self.data = data
        self.flags = flags  # the ingest policy and retention (:func:`_sealer_flags`)
        self.wal_dir = wal_dir
        self.totals = totals
        self.health = health or LakeHealth()
        self.metrics = metrics or CollectorMetrics()
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self.stopping = False
        self.started_ns = time.time_ns()  # before the server listens: the sealer's --started-ns

    async def start(self) -> None:
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "traceflow.collectors.sealer",
            str(self.data),
            *(["--wal-dir", str(self.wal_dir)] if self.wal_dir is not None else []),
            "--parent",
            str(os.getpid()),
            "--started-ns",
            str(self.started_ns),
            "--log-level",
            level if isinstance(level, str) else "INFO",
            *self.flags,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=config.child_environment(allocator.POLARS_ALLOCATOR_ENV),
            start_new_session=True,  # a terminal's Ctrl-C goes to the server, which stops us in order
        )
        self._reader = asyncio.create_task(self._read_stats(self.proc))

    async def _read_stats(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            try:
                stats = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(stats, dict):
                continue
            if "storage_error" in stats:  # the sealer cannot write the lake (or can again: None)
                error = stats["storage_error"]
                if error:
                    self.metrics.lake_write_failed()
                self.health.error = str(error) if error else None
                self.health.since = float(stats.get("since") or time.time()) if error else None
                self.health.segments = int(stats.get("segments", 0)) if error else 0
            else:
                self.totals.add(stats)
                self.metrics.sealed(float(stats.get("seconds", 0.0)))

    async def supervise(self) -> None:
        """Restart the sealer if it dies (backing off), until :meth:`stop`."""
        delay = 1.0
        while not self.stopping:
            assert self.proc is not None
            started = time.monotonic()
            code = await self.proc.wait()
            if self.stopping:
                return
            if time.monotonic() - started > 60:
                delay = 1.0  # it had been healthy for a while: not a crash loop
            _logger.error("the sealer exited with status %s; restarting it in %.0f s", code, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
            if not self.stopping:
                await self.start()

    async def stop(self, timeout_s: float) -> bool:
        """Ask the sealer to seal what is left and exit; True when it did within the timeout."""
        self.stopping = True
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return False
        assert proc.stdin is not None
        with contextlib.suppress(ConnectionError):
            proc.stdin.write(b"stop\n")
            await proc.stdin.drain()
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            _logger.warning(
                "the sealer did not finish within %.0f s; the rest is sealed on the next start", timeout_s
            )
            proc.kill()
            await proc.wait()
            return False
        if self._reader is not None:
            await self._reader
        return proc.returncode == 0


class Runner:
    """One running collector (use :func:`run_server` unless embedding it in tests)."""

    def __init__(self, cfg: ServeConfig) -> None:
        check_config(cfg)
        self.cfg = cfg
        try:
            self.tokens = Tokens(cfg.token, cfg.tokens)
        except TokenFileError as e:
            raise ServeError(f"--tokens: {e}") from None
        self.dir = spool.collector_dir(cfg.data, cfg.wal_dir)
        self.stop_event = asyncio.Event()
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.metrics_port: int | None = None
        self.totals = SealTotals()

    def _tls_context(self) -> ssl.SSLContext | None:
        if self.cfg.tls_cert is None or self.cfg.tls_key is None:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(str(self.cfg.tls_cert), str(self.cfg.tls_key))
        except (ssl.SSLError, OSError) as e:
            raise ServeError(
                f"cannot use --tls-cert {self.cfg.tls_cert} / --tls-key {self.cfg.tls_key}: {e}; "
                "pass a PEM certificate (chain) and its unencrypted PEM private key"
            ) from None
        return ctx

    async def run(self, ready: Any = None) -> int:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ServeError(f"cannot create {self.dir}: {e.strerror}; pass --data DIR") from None
        lock = spool.lock_file(self.dir / "server.lock", blocking=False)
        if lock is None:
            raise ServeError(
                f"another traceflow serve is already using {self.dir}; stop it, or give this one "
                "its own --wal-dir (or another --data)"
            )
        try:
            return await self._run(ready)
        finally:
            lock.close()

    async def _run(self, ready: Any) -> int:
        cfg = self.cfg
        wal = spool.Wal(
            self.dir / "wal", segment_bytes=cfg.segment_bytes, roll_interval_s=cfg.roll_interval_s
        )
        core = Ingest(
            wal,
            Admission(cfg.max_inflight_bytes, cfg.max_backlog_bytes),
            keep_content=cfg.keep_content,
            token=None,
            tokens=self.tokens,
        )
        # TLS files and both ports first: a bad certificate or a port in use fails fast, before the
        # WAL or the sealer start.
        tls = self._tls_context()
        sock = _bind_http(cfg.host, cfg.http_port) if cfg.http_port >= 0 else None
        grpc_server = None
        metrics_server: Any = None
        try:
            if cfg.grpc_port >= 0:
                grpc_server = self._grpc_server(core)
            if cfg.metrics_port >= 0:
                metrics_server = self._metrics_server(core)
        except BaseException:
            if sock is not None:
                sock.close()
            raise
        sealer = SealerProcess(
            cfg.data, self.totals, cfg.wal_dir, core.lake, core.metrics, flags=_sealer_flags(cfg)
        )
        tasks: list[asyncio.Task[None]] = []
        http_server: otlp_http.HttpServer | None = None
        try:
            wal.start()
            await sealer.start()
            tasks += [
                asyncio.create_task(sealer.supervise()),
                asyncio.create_task(poll_backlog(core)),
                asyncio.create_task(self._summaries(core)),
            ]
            if cfg.tokens is not None:
                tasks.append(asyncio.create_task(self._reload_tokens()))
            if sock is not None:
                self.http_port = sock.getsockname()[1]
                http_server = otlp_http.HttpServer(core, max_body_bytes=cfg.max_body_bytes)
                await http_server.start(sock, tls)
                sock = None  # owned by the server now
            if grpc_server is not None:
                await grpc_server.start()
            sys.stdout.write(self.ready_line() + "\n")
            sys.stdout.flush()
            if ready is not None:
                ready(self)
            await self.stop_event.wait()
            _logger.info("stopping: no new requests; finishing those in flight")
        finally:
            if sock is not None:
                sock.close()
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
            stops = []
            if http_server is not None:
                stops.append(http_server.stop(grace_s=10))
            if grpc_server is not None:
                stops.append(grpc_server.stop(grace=10))
            await asyncio.gather(*stops, return_exceptions=True)
            await asyncio.to_thread(wal.close)
            sealed = await sealer.stop(timeout_s=120)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            _logger.info("%s; %s; %s", core.summary(), self.totals.line(), wal.stats.line())
            if sealed:
                _logger.info("stopped; everything acknowledged is in the lake")
        return 0

    def _grpc_server(self, core: Ingest) -> grpc.aio.Server:
        cfg = self.cfg
        server = otlp_grpc.create_server(core, max_body_bytes=cfg.max_body_bytes)
        addr = _host_port(cfg.host, cfg.grpc_port)
        try:
            if cfg.tls_cert and cfg.tls_key:
                creds = grpc.ssl_server_credentials([(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())])
                port = server.add_secure_port(addr, creds)
            else:
                port = server.add_insecure_port(addr)
        except RuntimeError:
            port = 0
        if not port:
            raise ServeError(
                f"cannot listen for OTLP/gRPC on {addr} (address in use, or not an address here)"
            )
        self.grpc_port = port
        return server

    def _metrics_server(self, core: Ingest) -> Any:
        """``GET /metrics`` without the token on ``--metrics-host``:``--metrics-port`` (a thread)."""
        cfg = self.cfg
        try:
            server, _ = prometheus_client.start_http_server(
                cfg.metrics_port, addr=cfg.metrics_host, registry=core.metrics.registry
            )
        except OSError as e:
            raise ServeError(
                f"cannot listen for /metrics on "
                f"{_host_port(cfg.metrics_host, cfg.metrics_port)}: {e.strerror}"
            ) from None
        self.metrics_port = int(server.server_port)
        if not is_loopback(cfg.metrics_host):
            _logger.warning(
                "/metrics on %s asks for no token: anyone who reaches it reads the counters "
                "(team names included)",
                _host_port(cfg.metrics_host, self.metrics_port),
            )
        return server

    def ready_line(self) -> str:
        cfg = self.cfg
        scheme = "https" if cfg.tls_cert else "http"
        parts = []
        if self.http_port is not None:
            parts.append(f"OTLP/HTTP on {scheme}://{_host_port(cfg.host, self.http_port)}")
        if self.grpc_port is not None:
            parts.append(
                f"OTLP/gRPC on {_host_port(cfg.host, self.grpc_port)}{' (TLS)' if cfg.tls_cert else ''}"
            )
        if self.metrics_port is not None:
            parts.append(f"metrics on http://{_host_port(cfg.metrics_host, self.metrics_port)}/metrics")
        return f"{READY_PREFIX}{', '.join(parts)}, data {cfg.data}"

    async def _reload_tokens(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_INTERVAL_S)
            await asyncio.to_thread(self.tokens.refresh)

    async def _summaries(self, core: Ingest) -> None:
        while True:
            await asyncio.sleep(self.cfg.summary_interval_s)
            _logger.info("%s; %s; %s", core.summary(), self.totals.line(), core.wal.stats.line())


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )


def run_server(
    *,
    data: Path | str,
    wal_dir: Path | None = None,
    host: str = DEFAULT_HOST,
    http_port: int = DEFAULT_HTTP_PORT,
    grpc_port: int = DEFAULT_GRPC_PORT,
    token: str | None = None,
    tokens: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    keep_content: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    max_backlog_bytes: int = DEFAULT_MAX_BACKLOG_BYTES,
    summary_interval_s: float = DEFAULT_SUMMARY_INTERVAL_S,
    roll_interval_s: float = DEFAULT_ROLL_INTERVAL_S,
    drop_attrs: tuple[str, ...] = (),
    hash_attrs: tuple[str, ...] = (),
    retain_s: float | None = None,
    metrics_port: int = -1,
    metrics_host: str = DEFAULT_METRICS_HOST,
) -> int:
    """Run the collector until SIGTERM/SIGINT; returns the exit status (0 after a clean stop).

    Errors that prevent starting (non-loopback host without a token, a port in use, a data
    directory another collector holds) are logged as one line and return 2 (usage) or 1.
    """
    _configure_logging()
    allocator.return_freed_memory()
    cfg = ServeConfig(
        data=config.normalise_location(data) if config.is_url(data) else Path(data).expanduser(),
        wal_dir=wal_dir,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        token=token if token is not None and token != "" else None,
        tokens=tokens,
        tls_cert=tls_cert,
        tls_key=tls_key,
        keep_content=keep_content,
        max_body_bytes=max_body_bytes,
        max_inflight_bytes=max_inflight_bytes,
        max_backlog_bytes=max_backlog_bytes,
        summary_interval_s=summary_interval_s,
        roll_interval_s=roll_interval_s,
        drop_attrs=drop_attrs,
        hash_attrs=hash_attrs,
        retain_s=retain_s,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    try:
        runner = Runner(cfg)
    except ServeError as e:
        sys.stderr.write(f"traceflow serve: {e}\n")
        return 2

    async def main() -> int:
        loop = asyncio.get_running_loop()
        count = 0

        def on_signal() -> None:
            nonlocal count
            count += 1
            if count > 1:  # a second Ctrl-C: everything acknowledged is already in the WAL
                sys.stderr.write("traceflow serve: forced exit; the WAL is sealed on the next start\n")
                os._exit(130)
            runner.stop_event.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        return await runner.run()

    try:
        # uvloop: the event loop under both transports (uvicorn's httptools protocol and grpc.aio)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as loop_runner:
            return loop_runner.run(main())
    except ServeError as e:
        sys.stderr.write(f"traceflow serve: {e}\n")
        return 1
