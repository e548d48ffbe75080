"""Settings: every one in one table, resolved as flag > environment variable > default.

docs/settings.md lists each setting (a test checks it). This module is the only reader of the process
environment for traceflow's own settings, and imports only the standard library: the result
cache's fast path (``traceflow._entry``) resolves the data directory here before anything heavy.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

TYPE_CHECKING = False  # typing is not imported at run time (the result cache's fast path)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypeVar

    _N = TypeVar("_N", int, float)

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
        "Data directory that holds the Parquet lake, or `s3://bucket/prefix` (credentials and endpoint "
        "from the AWS variables); `--data` overrides it on every command.",
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
        "refresh",
        "TRACEFLOW_REFRESH",
        "1 (on)",
        "`0` stops read commands from first importing what is new in the local agent logs the lake "
        "imports (`--no-refresh` does it for one command; see docs/freshness.md).",
    ),
    Setting(
        "native",
        "TRACEFLOW_NATIVE",
        "1 (on where numba is installed)",
        "`0` makes `simulate` use its numpy LRU instead of the numba kernels (`traceflow.kv.lru_jit`): "
        "the same hits, slower; and the collector's sealer map Claude Code `api_request` records with a "
        "dict each instead of columns (`traceflow.otlp.logs_columnar`): the same rows, about twice the CPU.",
    ),
    Setting(
        "project_attribute",
        "TRACEFLOW_PROJECT_ATTRIBUTE",
        "project",
        "The OTLP resource attribute that names the project for `--by project` (e.g. set "
        "`OTEL_RESOURCE_ATTRIBUTES=project=web-app` on the agent); transcripts use their working directory.",
    ),
    Setting(
        "tz",
        "TRACEFLOW_TZ",
        "UTC",
        "Time zone of `--by day`/`week`/`month`, of billing blocks and of printed times, and of "
        "`--since`/`--until` times without an offset: an IANA name (`Asia/Tokyo`) or `local` (this "
        "machine's zone); `--tz` overrides it. UTC by default so that one lake gives one answer everywhere.",
    ),
    Setting(
        "prices",
        "TRACEFLOW_PRICES",
        "$XDG_CONFIG_HOME/traceflow/prices.json (~/.config/traceflow/prices.json)",
        "The user's price table: `traceflow prices update FILE` writes it from LiteLLM's price file; "
        "every priced report reads it over the built-in list (`--prices FILE` goes over both).",
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
        "opencode_data_dir",
        "OPENCODE_DATA_DIR",
        "$XDG_DATA_HOME/opencode (~/.local/share/opencode)",
        "Where `traceflow import opencode` looks for `storage/message/*/*.json` and `opencode.db`.",
    ),
    Setting(
        "qwen_data_dir",
        "QWEN_DATA_DIR",
        "~/.qwen",
        "Where `traceflow import qwen` looks for `projects/*/chats/*.jsonl`.",
    ),
    Setting(
        "amp_data_dir",
        "AMP_DATA_DIR",
        "$XDG_DATA_HOME/amp (~/.local/share/amp)",
        "Where `traceflow import amp` looks for `threads/*.json`.",
    ),
    Setting(
        "copilot_home",
        "COPILOT_HOME",
        "~/.copilot",
        "Where `traceflow import copilot` looks for `session-state/*/events.jsonl`.",
    ),
    Setting(
        "kimi_data_dir",
        "KIMI_DATA_DIR",
        "~/.kimi",
        "Where `traceflow import kimi` looks for `sessions/**/wire.jsonl` (and `config.json`).",
    ),
    Setting(
        "codebuff_data_dir",
        "CODEBUFF_DATA_DIR",
        "~/.config/manicode (and ~/.config/manicode-dev)",
        "Where `traceflow import codebuff` looks for `projects/*/chats/*/chat-messages.json`.",
    ),
    Setting(
        "kilo_data_dir",
        "KILO_DATA_DIR",
        "$XDG_DATA_HOME/kilo (~/.local/share/kilo)",
        "Where `traceflow import kilo` looks for `kilo.db`.",
    ),
    Setting(
        "pi_agent_dir",
        "PI_AGENT_DIR",
        "~/.pi/agent/sessions (and ~/.omp/agent/sessions)",
        "Where `traceflow import pi` looks for `<project>/*.jsonl`.",
    ),
    Setting(
        "openclaw_dir",
        "OPENCLAW_DIR",
        "~/.openclaw",
        "Where `traceflow import openclaw` looks for `agents/*/sessions/*.jsonl`.",
    ),
    Setting(
        "grok_home",
        "GROK_HOME",
        "~/.grok",
        "Where `traceflow import grok` looks for `sessions/**/updates.jsonl`.",
    ),
    Setting(
        "droid_sessions_dir",
        "DROID_SESSIONS_DIR",
        "~/.factory/sessions",
        "Where `traceflow import droid` looks for `**/*.settings.json`.",
    ),
    Setting(
        "goose_data_dir",
        "GOOSE_DATA_DIR",
        "$XDG_DATA_HOME/goose (~/.local/share/goose)",
        "Where `traceflow import goose` looks for `sessions/sessions.db`.",
    ),
    Setting(
        "hermes_home",
        "HERMES_HOME",
        "~/.hermes",
        "Where `traceflow import hermes` looks for `state.db`.",
    ),
    Setting(
        "zcode_home",
        "ZCODE_HOME",
        "~/.zcode",
        "Where `traceflow import zcode` looks for `cli/db/db.sqlite`.",
    ),
    Setting(
        "antigravity_data_dir",
        "ANTIGRAVITY_DATA_DIR",
        "~/.gemini/antigravity (and antigravity-cli, antigravity-ide)",
        "Where `traceflow import antigravity` looks for `conversations/*.db`.",
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
        "tokens",
        "TRACEFLOW_TOKENS",
        "(none)",
        "File of `TEAM TOKEN` lines: a token per team for `traceflow serve` (`--tokens`).",
    ),
    Setting(
        "metrics_port",
        "TRACEFLOW_METRICS_PORT",
        "-1",
        "Port of `traceflow serve`'s own `/metrics` listener, which asks for no token (`--metrics-port`; "
        "0 picks a free one, -1: none, `/metrics` is then on the OTLP/HTTP port with the token).",
    ),
    Setting(
        "metrics_host",
        "TRACEFLOW_METRICS_HOST",
        "127.0.0.1",
        "Address of the `--metrics-port` listener (`--metrics-host`).",
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
    Setting(
        "max_streams_per_resource",
        "TRACEFLOW_MAX_STREAMS_PER_RESOURCE",
        "50000",
        "Cumulative metric streams the collector keeps a baseline for per client (resource); a point of "
        "a new stream beyond them is stored without a delta, and the sealer's log says how many.",
    ),
    Setting(
        "retain",
        "TRACEFLOW_RETAIN",
        "(none: keep everything)",
        "Age past which `traceflow serve` drops the lake's day partitions, once a day (`--retain`, as "
        "`traceflow retain --older-than`), e.g. 90d.",
    ),
    Setting(
        "lease_seconds",
        "TRACEFLOW_LEASE_SECONDS",
        "60",
        "Length of the maintenance lease `compact`, `retain` and `forget` take on an s3:// lake "
        "(`v1/_state/maintenance.lease`): renewed every third of it while they run; one left by a "
        "crashed run is taken over once it has gone unrenewed this long.",
    ),
    Setting(
        "hash_salt",
        "TRACEFLOW_HASH_SALT",
        "(none)",
        "Secret key (16 characters or more) of the keyed hash `traceflow serve --hash-attr` writes "
        "in place of an attribute's value; keep it secret and unchanged (another key, other hashes).",
    ),
    Setting(
        "max_line_bytes",
        "TRACEFLOW_MAX_LINE_BYTES",
        "134217728 (128 MiB)",
        "The longest line `traceflow import` reads; a longer one is refused (exit 2) naming the file.",
    ),
    Setting(
        "max_document_bytes",
        "TRACEFLOW_MAX_DOCUMENT_BYTES",
        "268435456 (256 MiB)",
        "The largest whole-file document read (a kvcache-tester trace, a Gemini chat, a ClickHouse "
        "export, a price, profile or config file); a larger one is refused (exit 2).",
    ),
    Setting(
        "max_expansion",
        "TRACEFLOW_MAX_EXPANSION",
        "1000",
        "How many times its compressed size a .gz or .zst file may decompress to (checked past 16 MiB); "
        "beyond it the file is refused (exit 2) as a decompression bomb.",
    ),
    Setting(
        "spark_driver_memory",
        "TRACEFLOW_SPARK_DRIVER_MEMORY",
        "2g",
        "Heap of the Spark driver that `--engine spark` starts in local mode, where the tasks run (the "
        "gap and session reports over 10 M requests ran in 1g).",
    ),
)

_BY_NAME = {s.name: s for s in SETTINGS}

#: The variables that choose an object store and its credentials (``s3://`` lakes): botocore reads
#: them for s3fs; :func:`aws_environment` hands them to engines that must be told (Spark's S3A).
AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


def get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of setting ``name`` from its environment variable (``environ`` instead of the process
    environment when given); None when the variable is unset or empty.

    Callers apply the default: a flag given on the command line wins over this.
    """
    env = os.environ if environ is None else environ
    return env.get(_BY_NAME[name].env) or None


def at_least_one(name: str, parse: type[_N], default: _N, unit: str) -> _N:
    """Setting ``name`` read as a number by ``parse`` (``int`` or ``float``) for the settings that must
    be a finite number of ``unit`` of 1 or more; ``default`` when unset. Other text raises ValueError
    naming the variable, the rule and the default."""
    text = get(name)
    if text is None:
        return default
    try:
        value = parse(text)
    except ValueError:
        value = parse(0)
    if not 1 <= value < math.inf:  # also NaN
        kind = "whole number" if parse is int else "number"
        raise ValueError(
            f"{_BY_NAME[name].env}={text!r} is not a {kind} of {unit} of at least 1; unset it for the "
            f"default ({default:g})"
        )
    return value


def aws_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The :data:`AWS_VARIABLES` that are set (and not empty), from ``environ`` or the process."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in AWS_VARIABLES if env.get(name)}


def data_dir(flag: str | Path | None = None) -> Path:
    """The data directory: ``--data`` flag, else ``TRACEFLOW_DATA``, else the XDG data dir.

    An object-store location (``s3://bucket/prefix``) comes back as ``Path("s3:/bucket/prefix")``:
    pass it to :class:`traceflow.store.lake.Lake` (which repairs it) or use :func:`data_location`.
    """
    return Path(resolve_data_dir(flag))


def data_location(flag: str | os.PathLike[str] | None = None) -> str:
    """The data location as text: a local directory, or an ``s3://bucket/prefix`` URL."""
    return normalise_location(resolve_data_dir(flag))


def normalise_location(location: str | os.PathLike[str]) -> str:
    """``location`` with ``~`` expanded, and the ``//`` a ``Path`` drops from ``s3://`` put back."""
    text = os.fspath(location)
    if text.startswith("s3:/") and not text.startswith("s3://"):
        text = "s3://" + text[len("s3:/") :]
    return text if is_url(text) else os.path.expanduser(text)


def is_url(location: str | os.PathLike[str]) -> bool:
    """True for an object-store location (``s3://...``; also a ``Path`` that swallowed the ``//``)."""
    return os.fspath(location).startswith("s3:/")


def local_root(location: str | os.PathLike[str]) -> Path:
    """Where this machine keeps a lake's local files: the data directory itself, or for an
    object-store lake ``$XDG_STATE_HOME/traceflow/lakes/s3/<bucket>/<prefix>`` (``~/.local/state``):
    staging files, import offsets, the collector's write-ahead log, DuckDB's spills."""
    text = normalise_location(location)
    if not is_url(text):
        return Path(text)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    rest = [p for p in text[len("s3://") :].split("/") if p not in ("", ".", "..")]
    return Path(state, "traceflow", "lakes", "s3", *rest)


def resolve_data_dir(flag: str | os.PathLike[str] | None = None) -> str:
    """``--data`` flag, else ``$TRACEFLOW_DATA``, else ``$XDG_DATA_HOME/traceflow`` (``~/.local/share``)."""
    if flag:
        path = normalise_location(flag)
    else:
        env = get("data")
        path = normalise_location(env) if env else os.path.join(xdg_data_home(), "traceflow")
    resolved.append(path)
    return path


def xdg_data_home() -> Path:
    """``$XDG_DATA_HOME``, else ``~/.local/share``: where traceflow's lake and several agents' logs live."""
    xdg = os.environ.get("XDG_DATA_HOME")
    return Path(xdg) if xdg else Path.home() / ".local" / "share"


def child_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``extra`` added: what a child process (the sealer) starts with."""
    return {**os.environ, **extra}


def tz_variable() -> str | None:
    """``$TZ``, the C library's zone (``traceflow.store.zones.local_zone`` reads it for ``--tz local``)."""
    return os.environ.get("TZ") or None


def prices_file(environ: Mapping[str, str] | None = None) -> Path:
    """The user's price table: ``TRACEFLOW_PRICES``, else ``$XDG_CONFIG_HOME/traceflow/prices.json``."""
    env = os.environ if environ is None else environ
    named = get("prices", env)
    if named:
        return Path(os.path.expanduser(named))
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "traceflow" / "prices.json"


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/traceflow``, else ``~/.cache/traceflow``: downloads and bundles kept between runs."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceflow"


def quiet_grpc_fork() -> None:
    """Turn gRPC's fork handlers off in this process (unless ``GRPC_ENABLE_FORK_SUPPORT`` is set).

    The collector forks only to exec its sealer, which never uses gRPC; with the handlers on, gRPC
    logs ``fork_posix.cc: Other threads are currently calling into gRPC, skipping fork() handlers``
    at every sealer start.
    """
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
