"""``traceflow serve``: the OTLP collector (:func:`traceflow.collectors.server.run_server`).

Each setting comes from its flag, else its environment variable (:mod:`traceflow.config`), else the
default in :mod:`traceflow.collectors.settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from traceflow import config
from traceflow.cli.options import DataOpt
from traceflow.collectors import settings as s
from traceflow.errors import UsageError
from traceflow.units import parse_duration, parse_size

T = TypeVar("T")


def _variable(name: str) -> str:
    """The environment variable of setting ``name`` (:data:`traceflow.config.SETTINGS`)."""
    return next(x.env for x in config.SETTINGS if x.name == name)


def _setting(flag: T | None, name: str, default: T, parse: Callable[[str], T]) -> T:
    """``flag``, else the setting's environment variable parsed, else ``default``."""
    if flag is not None:
        return flag
    value = config.get(name)
    if value is None:
        return default
    try:
        return parse(value)
    except ValueError as e:
        raise UsageError(f"${_variable(name)}={value!r}: {e}") from None


#: The options that fall back to a setting's environment variable: the setting's name -> the option's
#: help, and the default ``--help`` names after the variable (None: the variable alone).
_FROM_SETTING: dict[str, tuple[str, object]] = {
    "host": ("Address to bind; anything but loopback requires --token.", s.DEFAULT_HOST),
    "http_port": ("OTLP/HTTP port (0 picks a free one, -1 turns it off).", s.DEFAULT_HTTP_PORT),
    "grpc_port": ("OTLP/gRPC port (0 picks a free one, -1 turns it off).", s.DEFAULT_GRPC_PORT),
    "token": ("Bearer token clients must send (Authorization header).", None),
    "tls_cert": ("PEM certificate: serve both transports over TLS.", None),
    "tls_key": ("PEM private key for --tls-cert.", None),
    "retain": (
        "Once a day, drop the day partitions older than this age (as `traceflow retain`): 90d.",
        "keep everything",
    ),
    "metrics_port": (
        "Serve Prometheus's GET /metrics on this port too, without the token (0 picks a free one, -1: "
        "only on the OTLP/HTTP port, behind the token).",
        -1,
    ),
    "metrics_host": ("Address of the --metrics-port listener.", s.DEFAULT_METRICS_HOST),
}


def _from_setting(name: str) -> Any:
    """The option of setting ``name`` as :data:`_FROM_SETTING` describes it."""
    help_text, default = _FROM_SETTING[name]
    variable = "$" + _variable(name)
    return typer.Option(
        help=help_text, show_default=variable if default is None else f"{variable}, else {default}"
    )


def _size(value: str, option: str) -> int:
    return int(parse_size(value, option))


def _port(value: int, option: str) -> int:
    """``value`` if it is a TCP port, 0 (a free one) or negative (off); above 65535 is refused rather
    than wrapped round to another port by the socket layer."""
    if value > 65535:
        raise UsageError(f"{option} {value} is not a port; give 1-65535, 0 for a free one, or -1 for off")
    return value


def serve(
    host: Annotated[str | None, _from_setting("host")] = None,
    http_port: Annotated[int | None, _from_setting("http_port")] = None,
    grpc_port: Annotated[int | None, _from_setting("grpc_port")] = None,
    data: DataOpt = None,
    wal_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of this collector's write-ahead log, on local disk; give each collector that "
            "shares a machine and a lake its own (default: under the data directory, or for an "
            "s3:// lake under $XDG_STATE_HOME/traceflow/lakes).",
            show_default=False,
        ),
    ] = None,
    token: Annotated[str | None, _from_setting("token")] = None,
    tokens: Annotated[
        Path | None,
        typer.Option(
            help="File of 'TEAM TOKEN' lines (TOKEN or sha256:HEX; team * is an administrator): a token "
            "per team, each record's team.id set from its token; re-read when it changes.",
            show_default=False,
        ),
    ] = None,
    tls_cert: Annotated[Path | None, _from_setting("tls_cert")] = None,
    tls_key: Annotated[Path | None, _from_setting("tls_key")] = None,
    keep_content: Annotated[
        bool,
        typer.Option(help="Store prompt, response and tool text the agents attach (dropped by default)."),
    ] = False,
    max_body_bytes: Annotated[
        str,
        typer.Option(help="Largest request body, after decompression (larger: HTTP 413): 64MiB, 100MB."),
    ] = f"{s.DEFAULT_MAX_BODY_BYTES >> 20}MiB",
    max_inflight_bytes: Annotated[
        str,
        typer.Option(help="Bytes being received at once (more: 503 with Retry-After)."),
    ] = f"{s.DEFAULT_MAX_INFLIGHT_BYTES >> 20}MiB",
    max_backlog_bytes: Annotated[
        str,
        typer.Option(help="Write-ahead log not yet sealed into the lake (more: 503)."),
    ] = f"{s.DEFAULT_MAX_BACKLOG_BYTES >> 30}GiB",
    summary_interval: Annotated[
        float, typer.Option(help="Seconds between one-line summaries.")
    ] = s.DEFAULT_SUMMARY_INTERVAL_S,
    roll_interval: Annotated[
        float, typer.Option(hidden=True, help="Seconds between WAL segment rolls (tests).")
    ] = s.DEFAULT_ROLL_INTERVAL_S,
    drop_attr: Annotated[
        list[str] | None,
        typer.Option(help="Attribute removed before records are stored (repeatable), e.g. user.email."),
    ] = None,
    hash_attr: Annotated[
        list[str] | None,
        typer.Option(
            help="Attribute stored as a keyed hash (repeatable), keyed with $TRACEFLOW_HASH_SALT.",
        ),
    ] = None,
    retain: Annotated[str | None, _from_setting("retain")] = None,
    metrics_port: Annotated[int | None, _from_setting("metrics_port")] = None,
    metrics_host: Annotated[str | None, _from_setting("metrics_host")] = None,
) -> None:
    """Receive OTLP logs, metrics and traces over HTTP (4318) and gRPC (4317) into the lake."""
    config.quiet_grpc_fork()  # before gRPC starts
    from traceflow.collectors.server import run_server

    tls_cert = _setting(tls_cert, "tls_cert", None, Path)
    tls_key = _setting(tls_key, "tls_key", None, Path)
    if (tls_cert is None) != (tls_key is None):
        raise UsageError("give --tls-cert and --tls-key together")
    retain_age = _setting(retain, "retain", None, str)
    code = run_server(
        data=config.data_location(data),
        wal_dir=wal_dir,
        host=_setting(host, "host", s.DEFAULT_HOST, str),
        http_port=_port(_setting(http_port, "http_port", s.DEFAULT_HTTP_PORT, int), "--http-port"),
        grpc_port=_port(_setting(grpc_port, "grpc_port", s.DEFAULT_GRPC_PORT, int), "--grpc-port"),
        token=_setting(token, "token", None, str),
        tokens=_setting(tokens, "tokens", None, Path),
        tls_cert=tls_cert,
        tls_key=tls_key,
        keep_content=keep_content,
        max_body_bytes=_size(max_body_bytes, "--max-body-bytes"),
        max_inflight_bytes=_size(max_inflight_bytes, "--max-inflight-bytes"),
        max_backlog_bytes=_size(max_backlog_bytes, "--max-backlog-bytes"),
        summary_interval_s=summary_interval,
        roll_interval_s=roll_interval,
        drop_attrs=tuple(drop_attr or ()),
        hash_attrs=tuple(hash_attr or ()),
        retain_s=None if retain_age is None else parse_duration(retain_age, "--retain"),
        metrics_port=_port(_setting(metrics_port, "metrics_port", -1, int), "--metrics-port"),
        metrics_host=_setting(metrics_host, "metrics_host", s.DEFAULT_METRICS_HOST, str),
    )
    raise typer.Exit(code)


#: The commands of this module, by name (registered by :mod:`traceflow.cli.app`).
COMMANDS: dict[str, Callable[..., Any]] = {"serve": serve}
