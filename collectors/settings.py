"""What ``traceflow serve`` can be told, with every default written once.

Standard library only, so the CLI shows these defaults in ``--help`` without importing gRPC.
The environment variables behind some of them are read by :mod:`traceflow.config`.
"""

from __future__ import annotations

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
    tls_cert: Path | None = None
    tls_key: Path | None = None
    keep_content: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    max_backlog_bytes: int = DEFAULT_MAX_BACKLOG_BYTES
    summary_interval_s: float = DEFAULT_SUMMARY_INTERVAL_S
    roll_interval_s: float = DEFAULT_ROLL_INTERVAL_S
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
