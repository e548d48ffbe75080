"""What ``traceflow serve`` can be told, with every default written once.

Standard library only, so the CLI shows these defaults in ``--help`` without importing gRPC.
The environment variables behind some of them are read by :mod:`traceflow.config`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 4318
DEFAULT_GRPC_PORT = 4317
DEFAULT_MAX_BODY_BYTES = 64 << 20
DEFAULT_MAX_INFLIGHT_BYTES = 256 << 20
DEFAULT_MAX_BACKLOG_BYTES = 2 << 30
DEFAULT_SUMMARY_INTERVAL_S = 60.0
DEFAULT_ROLL_INTERVAL_S = 1.0
DEFAULT_SEGMENT_BYTES = 8 << 20
#: where ``--metrics-port`` serves ``/metrics`` (without the token) unless ``--metrics-host`` says
DEFAULT_METRICS_HOST = "127.0.0.1"


def memory_bound_bytes(max_inflight_bytes: int, max_body_bytes: int) -> int:
    """The peak RSS of ``traceflow serve``'s two processes together (docs/collector.md).

    Each holds a base (the interpreter, grpc, polars: 150 MiB), up to 2.5 times
    ``--max-inflight-bytes`` (the server: grpc's buffer and Python's copy of each message being
    received; the sealer: a WAL segment holds at most what was in flight while it was written, read
    whole and made into frames) and one message decoded at a time (:data:`DECODED_BYTES_PER_BYTE`
    times its size; OTLP/JSON's excess is counted in flight: :data:`JSON_DECODED_BYTES_PER_BYTE`). The
    sealer also holds its compiled kernels (numba and LLVM: :data:`SEALER_KERNEL_BYTES`).
    """
    return (
        2 * (150 << 20)
        + SEALER_KERNEL_BYTES
        + 5 * max_inflight_bytes
        + 2 * DECODED_BYTES_PER_BYTE * max_body_bytes
    )


#: what a message takes once decoded, per byte of its protobuf encoding (upb's objects for each
#: attribute; Claude Code records: 3.7-3.8): each process decodes one large message at a time
DECODED_BYTES_PER_BYTE = 4
#: the same per byte of OTLP/JSON (orjson's dicts, then the message; Claude Code records: 10.5-10.8).
#: The server counts the difference against ``--max-inflight-bytes`` as a JSON body arrives
#: (collectors/http.py) and logs it as protobuf, so the sealer decodes protobuf only.
JSON_DECODED_BYTES_PER_BYTE = 11


#: what numba and LLVM add to the sealer's memory (the columnar mapping, traceflow/otlp/logs_columnar.py)
SEALER_KERNEL_BYTES = 200 << 20


#: the shortest bearer token ``serve`` accepts (printable ASCII, no whitespace)
MIN_TOKEN_CHARS = 16
#: the quarantine's limits (collectors/quarantine.py; TRACEFLOW_QUARANTINE_MAX_BYTES / _MAX_AGE_DAYS)
DEFAULT_QUARANTINE_MAX_BYTES = 256 << 20
DEFAULT_QUARANTINE_MAX_AGE_DAYS = 30


@dataclass
class ServeConfig:
    data: Path | str  # a directory, or an s3://bucket/prefix URL
    wal_dir: Path | None = None  # the write-ahead log's folder (default: under the data's local root)
    host: str = DEFAULT_HOST
    http_port: int = DEFAULT_HTTP_PORT  # 0 picks a free port, a negative number disables the transport
    grpc_port: int = DEFAULT_GRPC_PORT
    token: str | None = None
    tokens: Path | None = None  # a 'TEAM TOKEN' file (collectors/tokens.py)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    keep_content: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    max_backlog_bytes: int = DEFAULT_MAX_BACKLOG_BYTES
    summary_interval_s: float = DEFAULT_SUMMARY_INTERVAL_S
    roll_interval_s: float = DEFAULT_ROLL_INTERVAL_S
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    drop_attrs: tuple[str, ...] = ()  # attributes removed before rows are stored (--drop-attr)
    hash_attrs: tuple[str, ...] = ()  # attributes stored as a keyed hash (--hash-attr)
    retain_s: float | None = None  # drop day partitions older than this, once a day (--retain)
    metrics_port: int = -1  # a listener of its own for /metrics, without the token (-1: none)
    metrics_host: str = DEFAULT_METRICS_HOST


#: How the line ``traceflow serve`` prints on standard output once it listens starts; the rest is
#: ``OTLP/HTTP on URL, OTLP/gRPC on HOST:PORT[ (TLS)], data DATA`` (:class:`ReadyLine`).
READY_PREFIX = "traceflow serve: "


def serve_argv(data: Path | str, *extra: str) -> list[str]:
    """The command line of ``python -m traceflow serve`` on free ports for ``data``: read the ports
    it bound from its ready line (:class:`ReadyLine`). ``extra`` flags come last, so they win."""
    return [
        sys.executable,
        "-m",
        "traceflow",
        "serve",
        "--data",
        str(data),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        *extra,
    ]


@dataclass(frozen=True)
class ReadyLine:
    """What a collector's ready line says it listens on (``""`` for a transport that is off)."""

    http_url: str  # http(s)://HOST:PORT
    grpc_target: str  # HOST:PORT
    metrics_url: str = ""  # http://HOST:PORT/metrics with --metrics-port

    @classmethod
    def parse(cls, line: str) -> ReadyLine | None:
        """The addresses in ``line``; None when it is not a ready line (the collector failed).

        >>> ReadyLine.parse("traceflow serve: OTLP/HTTP on https://127.0.0.1:4318, "
        ...                 "OTLP/gRPC on 127.0.0.1:4317 (TLS), data /tmp/lake")
        ReadyLine(http_url='https://127.0.0.1:4318', grpc_target='127.0.0.1:4317', metrics_url='')
        >>> ReadyLine.parse("Traceback (most recent call last):") is None
        True
        """
        if not line.startswith(READY_PREFIX):
            return None
        http = grpc = metrics = ""
        for part in line.removeprefix(READY_PREFIX).strip().split(", "):
            if part.startswith("OTLP/HTTP on "):
                http = part.removeprefix("OTLP/HTTP on ")
            elif part.startswith("OTLP/gRPC on "):
                grpc = part.removeprefix("OTLP/gRPC on ").split(" ")[0]
            elif part.startswith("metrics on "):
                metrics = part.removeprefix("metrics on ")
        return cls(http, grpc, metrics)
