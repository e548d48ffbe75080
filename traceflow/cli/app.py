"""The ``traceflow`` command: each command parses its options, calls one library function, prints.

Library errors (:mod:`traceflow.errors`) become a one-line message on stderr: exit status 2 for a
usage problem, 1 for anything else. ``traceflow import`` exits 3 when it skipped bad records.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from traceflow import __version__
from traceflow.config import data_dir
from traceflow.errors import TraceflowError, UsageError
from traceflow.output import FORMATS

if TYPE_CHECKING:
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Token-traffic analytics for AI agents: collect, store, analyse, replay, size.",
)

DataOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="Data directory (default: $TRACEFLOW_DATA, else ~/.local/share/traceflow).",
        show_default=False,
    ),
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table, json, csv or markdown.")]
SinceOpt = Annotated[
    str | None, typer.Option(help="Only requests at or after this time (2026-08-01, 2026-08-01T12:00Z, 7d).")
]
UntilOpt = Annotated[str | None, typer.Option(help="Only requests before this time.")]
AgentOpt = Annotated[list[str] | None, typer.Option("--agent", help="Only this agent (repeatable).")]
ModelOpt = Annotated[list[str] | None, typer.Option("--model", help="Only this model (repeatable).")]
SessionOpt = Annotated[
    list[str] | None, typer.Option("--session", help="Only this session, sub-agents included (repeatable).")
]
UserOpt = Annotated[list[str] | None, typer.Option("--user", help="Only this user id (repeatable).")]
SourceOpt = Annotated[
    list[str] | None, typer.Option("--source", help="Only rows from this source, e.g. otlp (repeatable).")
]


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of :data:`FORMATS`, else a usage error."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r} is not one of: {', '.join(FORMATS)}")
    return fmt


def selection_options(
    since: str | None,
    until: str | None,
    agent: list[str] | None = None,
    model: list[str] | None = None,
    session: list[str] | None = None,
    user: list[str] | None = None,
    source: list[str] | None = None,
) -> Selection:
    """The :class:`Selection` the common options describe."""
    from traceflow.store.selection import Selection, parse_time

    return Selection(
        since=parse_time(since, "--since") if since else None,
        until=parse_time(until, "--until") if until else None,
        agents=tuple(agent or ()),
        models=tuple(model or ()),
        sessions=tuple(session or ()),
        users=tuple(user or ()),
        sources=tuple(source or ()),
    )


def open_lake(data: Path | None) -> Lake:
    """The lake in ``--data``, else ``$TRACEFLOW_DATA``, else the XDG data dir."""
    from traceflow.store.lake import Lake

    return Lake(data_dir(data))


class _Progress:
    """A one-line progress bar on a terminal's stderr; silent when piped."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {frac:6.1%} {done / 1e6:,.1f}/{total / 1e6:,.1f} MB")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


@app.command("import")
def import_(
    source: Annotated[
        str,
        typer.Argument(
            help="claude-code, codex, gemini, otlp-json, mooncake, azure, kvcache-tester, bailian, burstgpt."
        ),
    ],
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Files or directories (default: the agent's own log folder).")
    ] = None,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
    jobs: Annotated[
        int | None, typer.Option(help="Worker processes for large imports (default: CPUs).")
    ] = None,
) -> None:
    """Import agent logs or trace files into the lake; files already imported add nothing."""
    from traceflow import importers
    from traceflow.importers.run import run_import
    from traceflow.output import to_json

    check_format(fmt)
    importer = importers.get(source)
    lake = open_lake(data)
    progress = _Progress(f"importing {source}", enabled=fmt != "json")
    if not paths and not importer.default_paths():
        typer.echo(
            f"traceflow: no {source} logs found in the default location; pass a PATH "
            "(see `traceflow import --help` and the README's table of sources)",
            err=True,
        )
    try:
        summary = run_import(lake, importer, paths or None, progress=progress, jobs=jobs)
    finally:
        progress.close()
    for err in summary.errors:
        typer.echo(f"skipped {err}", err=True)
    if summary.skipped > len(summary.errors):
        typer.echo(f"... and {summary.skipped - len(summary.errors)} more skipped records", err=True)
    if fmt == "json":
        typer.echo(to_json(summary.as_dict()))
    else:
        typer.echo(str(summary))
    if summary.skipped:
        raise typer.Exit(3)


@app.command()
def mix(
    by: Annotated[
        list[str] | None,
        typer.Option("--by", help="Group by agent, model, session, day, user or source (repeatable)."),
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    agent: AgentOpt = None,
    model: ModelOpt = None,
    session: SessionOpt = None,
    user: UserOpt = None,
    source: SourceOpt = None,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """The token mix: cold input, cache read, cache write and output, their shares and the reuse ratio."""
    from traceflow.analysis.mix import token_mix_rows
    from traceflow.output import render

    check_format(fmt)
    groups = [g for item in (by or []) for g in item.split(",") if g]
    selection = selection_options(since, until, agent, model, session, user, source)
    con = open_lake(data).connect(["requests"])
    result = token_mix_rows(con, selection, groups)
    typer.echo(render(result, fmt, single=not groups))


@app.command()
def sql(
    query: Annotated[str | None, typer.Argument(help="A SELECT over the views.")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Read the query from this .sql file.")] = None,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Run read-only SQL over the views: requests, events, metric_points, spans."""
    from traceflow.output import render
    from traceflow.store.user_sql import run_sql

    check_format(fmt)
    if (query is None) == (file is None):
        raise UsageError('give either a query ("SELECT ...") or --file q.sql, not both or neither')
    text = query if query is not None else file.read_text()  # type: ignore[union-attr]
    frame = run_sql(open_lake(data), text)
    typer.echo(render(frame, fmt))


@app.command()
def compact(
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Merge each partition's small files into one deduplicated file; store the derived views."""
    import polars as pl

    from traceflow.output import render
    from traceflow.schema import TABLES
    from traceflow.store.lake import DERIVED

    check_format(fmt)
    lake = open_lake(data)
    rows = []
    derived_before = {v: len(lake.fresh_derived(v) or []) for v in DERIVED}
    for table in TABLES:
        before, after = lake.compact(table)
        rows.append({"table": table, "files_before": before, "files_after": after})
    # compacting requests also stores the views derived from them (steps, rollup), see Lake
    for view, before in derived_before.items():
        rows.append(
            {"table": view, "files_before": before, "files_after": len(lake.fresh_derived(view) or [])}
        )
    lake.clean_staging()
    typer.echo(render(pl.DataFrame(rows), fmt))


@app.command()
def snapshot(
    out: Annotated[Path, typer.Argument(help="The .duckdb file to write (replaced if it exists).")],
    data: DataOpt = None,
) -> None:
    """Write a standalone DuckDB file with one table per view, for other tools."""
    from traceflow.store.user_sql import snapshot as write_snapshot

    counts = write_snapshot(open_lake(data), out)
    typer.echo(f"wrote {out}: " + ", ".join(f"{n} {t}" for t, n in counts.items()))


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind; anything but loopback requires --token.")
    ] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(help="OTLP/HTTP port (0 picks a free one).")] = 4318,
    grpc_port: Annotated[int, typer.Option(help="OTLP/gRPC port (0 picks a free one).")] = 4317,
    data: DataOpt = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="TRACEFLOW_TOKEN", help="Bearer token clients must send (Authorization header)."),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate: serve both transports over TLS.")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key for --tls-cert.")] = None,
    keep_content: Annotated[
        bool,
        typer.Option(help="Store prompt, response and tool text the agents attach (dropped by default)."),
    ] = False,
    max_body_bytes: Annotated[
        int, typer.Option(help="Largest request body, after decompression (larger: HTTP 413).")
    ] = 64 << 20,
    summary_interval: Annotated[float, typer.Option(help="Seconds between one-line summaries.")] = 60.0,
) -> None:
    """Receive OTLP logs, metrics and traces over HTTP (4318) and gRPC (4317) into the lake."""
    from traceflow.collectors.server import run_server

    if (tls_cert is None) != (tls_key is None):
        raise UsageError("give --tls-cert and --tls-key together")
    code = run_server(
        data=data_dir(data),
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        token=token,
        tls_cert=tls_cert,
        tls_key=tls_key,
        keep_content=keep_content,
        max_body_bytes=max_body_bytes,
        summary_interval_s=summary_interval,
    )
    raise typer.Exit(code)


@app.command()
def version() -> None:
    """Print traceflow's version."""
    typer.echo(__version__)


#: Modules that define further commands on ``app`` when imported (analyses, sizing, ...).
COMMAND_MODULES = ("analyses", "dashboards", "sizing", "replay", "cache")


def register_all() -> None:
    """Import every command module so ``app`` knows all commands (help, docs, tests)."""
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.{name}")


def main() -> None:
    """Console-script entry point: run the app, turning traceflow errors into one-line messages.

    Typer builds every registered command's options at start-up, so the commands defined in this
    module run without loading the others (a quicker ``traceflow mix``); anything else, ``--help``
    included, loads them all.
    """
    own = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    if not (len(sys.argv) > 1 and sys.argv[1] in own):
        register_all()
    try:
        code = app(standalone_mode=False)  # returns the code of a typer.Exit instead of raising it
    except TraceflowError as e:
        typer.echo(f"traceflow: error: {e}", err=True)
        sys.exit(2 if isinstance(e, UsageError) else 1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except Exception as e:
        # Usage errors of typer's (vendored) click: bad options, missing arguments.
        show = getattr(e, "show", None)
        if callable(show) and isinstance(getattr(e, "exit_code", None), int):
            show()
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        raise
    sys.exit(code if isinstance(code, int) else 0)
