"""Settings: every one in one table, resolved as flag > environment variable > default.

The README lists each setting (a test checks it). This module is the only reader of the process
environment for traceflow's own settings, and imports only the standard library: the result
cache's fast path (``traceflow._entry``) resolves the data directory here before anything heavy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TYPE_CHECKING = False  # typing is not imported at run time (the result cache's fast path)
if TYPE_CHECKING:
    from collections.abc import Mapping

#: Every data directory resolved in this process, in order. The fast path stores a result only when
#: the command resolved exactly the directory whose lake it validated the result against.
resolved: list[str] = []


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: str
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "data",
        "TRACEFLOW_DATA",
        "$XDG_DATA_HOME/traceflow (~/.local/share/traceflow)",
        "Data directory that holds the Parquet lake; `--data DIR` overrides it on every command.",
    ),
    Setting(
        "memory_limit",
        "TRACEFLOW_MEMORY_LIMIT",
        "DuckDB's default (80 % of RAM)",
        "Memory DuckDB may use for queries, e.g. 4GB; it spills to <data>/v1/_tmp beyond that.",
    ),
    Setting(
        "token",
        "TRACEFLOW_TOKEN",
        "(none)",
        "Bearer token `traceflow serve` requires from clients; needed to bind a non-loopback address.",
    ),
    Setting(
        "cache",
        "TRACEFLOW_CACHE",
        "1 (on)",
        "`0` turns off the result cache that serves repeated reports (<data>/v1/_cache/results).",
    ),
    Setting(
        "native",
        "TRACEFLOW_NATIVE",
        "1 (on where numba is installed)",
        "`0` makes `simulate` use its numpy LRU instead of the numba kernels (`traceflow.kv.lru_jit`): "
        "the same hits, slower.",
    ),
    Setting(
        "project_attribute",
        "TRACEFLOW_PROJECT_ATTRIBUTE",
        "project",
        "The OTLP resource attribute that names the project for `--by project` (e.g. set "
        "`OTEL_RESOURCE_ATTRIBUTES=project=web-app` on the agent); transcripts use their working directory.",
    ),
    Setting(
        "claude_config_dir",
        "CLAUDE_CONFIG_DIR",
        "~/.claude",
        "Where `traceflow import claude-code` looks for `projects/**/*.jsonl` "
        "(comma-separated list allowed).",
    ),
    Setting(
        "codex_home",
        "CODEX_HOME",
        "~/.codex",
        "Where `traceflow import codex` looks for `sessions/**/rollout-*.jsonl`.",
    ),
    Setting(
        "gemini_dir",
        "GEMINI_DIR",
        "~/.gemini",
        "Where `traceflow import gemini` looks for `tmp/*/chats/*.jsonl`.",
    ),
    Setting(
        "host",
        "TRACEFLOW_HOST",
        "127.0.0.1",
        "Address `traceflow serve` binds (`--host`); anything but loopback requires a token.",
    ),
    Setting(
        "http_port",
        "TRACEFLOW_HTTP_PORT",
        "4318",
        "OTLP/HTTP port of `traceflow serve` (`--http-port`; 0 picks a free one, -1 turns it off).",
    ),
    Setting(
        "grpc_port",
        "TRACEFLOW_GRPC_PORT",
        "4317",
        "OTLP/gRPC port of `traceflow serve` (`--grpc-port`; 0 picks a free one, -1 turns it off).",
    ),
    Setting(
        "tls_cert",
        "TRACEFLOW_TLS_CERT",
        "(none)",
        "PEM certificate: `traceflow serve` serves both transports over TLS (`--tls-cert`, with a key).",
    ),
    Setting(
        "tls_key",
        "TRACEFLOW_TLS_KEY",
        "(none)",
        "PEM private key for the TLS certificate (`--tls-key`).",
    ),
    Setting(
        "quarantine_max_bytes",
        "TRACEFLOW_QUARANTINE_MAX_BYTES",
        "268435456 (256 MiB)",
        "Bytes the collector's quarantine (payloads it could not store) may hold; the oldest go first.",
    ),
    Setting(
        "quarantine_max_age_days",
        "TRACEFLOW_QUARANTINE_MAX_AGE_DAYS",
        "30",
        "Days a quarantined payload is kept (`traceflow quarantine list` shows them).",
    ),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of setting ``name`` from its environment variable (``environ`` instead of the process
    environment when given); None when the variable is unset or empty.

    Callers apply the default: a flag given on the command line wins over this.
    """
    env = os.environ if environ is None else environ
    return env.get(_BY_NAME[name].env) or None


def data_dir(flag: str | Path | None = None) -> Path:
    """The data directory: ``--data`` flag, else ``TRACEFLOW_DATA``, else the XDG data dir."""
    return Path(resolve_data_dir(flag))


def resolve_data_dir(flag: str | os.PathLike[str] | None = None) -> str:
    """``--data`` flag, else ``$TRACEFLOW_DATA``, else ``$XDG_DATA_HOME/traceflow`` (``~/.local/share``)."""
    if flag:
        path = os.path.expanduser(os.fspath(flag))
    else:
        env = get("data")
        if env:
            path = os.path.expanduser(env)
        else:
            xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
            path = os.path.join(xdg, "traceflow")
    resolved.append(path)
    return path


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/traceflow``, else ``~/.cache/traceflow``: downloads and bundles kept between runs."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceflow"
