"""The commands that fill, query and keep the lake: ``import``, ``mix``, ``sql``, ``compact``,
``snapshot``, ``status`` (and ``version``). Each parses its options, calls one library function and
prints.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow import __version__
from traceflow.cli.options import (
    ByOpt,
    DataOpt,
    EngineOpt,
    FormatOpt,
    LakeQuery,
    NoRefreshOpt,
    PricesOpt,
    SparkRemoteOpt,
    display,
    open_lake,
    with_lake_query,
    with_selection,
)
from traceflow.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection


@contextlib.contextmanager
def _writing(lake: Lake, command: str) -> Iterator[None]:
    """``command`` writes into ``lake``: a local lake it cannot write is refused up front, and a
    refusal met later (a table folder of another user's) ends in the same one line, not a traceback."""
    from traceflow import paths

    if lake.url is not None:  # an object store: its own errors name the bucket
        yield
        return
    root = lake.root
    paths.writable_lake(root, [lake.base, lake.staging, lake.state_dir / "imports"], command)
    try:
        yield
    except OSError as e:
        name = str(e.filename or "")
        if e.errno not in paths.NOT_WRITABLE_ERRNOS or not name.startswith(str(root)):
            raise
        raise paths.lake_not_writable(root, command, name, e) from None
    except Exception as e:  # DuckDB's IOException is no OSError
        first = str(e).splitlines()[0] if str(e) else ""
        refused = ("Permission denied", "Operation not permitted", "Read-only file system")
        if (
            type(e).__name__ != "IOException"
            or str(root) not in first
            or not any(r in first for r in refused)
        ):
            raise
        raise paths.lake_not_writable(root, command, "DuckDB", first) from None


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


def import_(
    source: Annotated[
        str,
        typer.Argument(
            help="claude-code, codex, gemini, opencode, qwen, amp, copilot, kimi, codebuff, kilo, pi, "
            "openclaw, grok, droid, goose, hermes, zcode, antigravity, otlp-json, mooncake, azure, "
            "kvcache-tester, bailian, burstgpt, tracelab, clickhouse-otel."
        ),
    ],
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Files or directories (default: the agent's own log folder).")
    ] = None,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
    jobs: Annotated[
        int | None,
        typer.Option(help="Worker processes for large imports (default: CPUs; 1 when none is free)."),
    ] = None,
) -> None:
    """Import agent logs or trace files into the lake; files already imported add nothing."""
    from traceflow import importers
    from traceflow.importers.interrupt import ImportInterrupted
    from traceflow.importers.refresh import folders, remember
    from traceflow.importers.run import run_import
    from traceflow.output import to_json

    importer = importers.get(source)
    lake = open_lake(data, create=True)
    progress = _Progress(f"importing {source}", enabled=fmt != "json")
    try:
        with _writing(lake, "import"):
            roots = paths or importer.default_paths()
            dirs = folders(roots)  # before the import lists them
            summary = run_import(lake, importer, paths or None, progress=progress, jobs=jobs)
            if summary.rows.get("requests"):
                summary.conflicts = lake.conflicts()
            # an agent's logs: later read commands bring them up to date first (docs/freshness.md)
            remember(lake, source, roots, dirs)
    except ImportInterrupted as e:
        progress.close()
        typer.echo(f"traceflow: interrupted: {e}", err=True)
        raise typer.Exit(130) from None
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


@with_selection
@with_lake_query
def mix(
    by: ByOpt = None,
    savings: Annotated[
        bool,
        typer.Option(
            "--savings/--no-savings",
            help="With the table format: the savings headline (cost with no cache vs with it).",
        ),
    ] = True,
    prices: PricesOpt = None,
    *,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """The token mix: cold input, cache read, cache write and output, their shares and the reuse ratio."""
    from traceflow.analysis.mix import ESSENTIAL, savings_line, token_mix_rows
    from traceflow.output import fit_text, render
    from traceflow.prices import PriceModel

    fmt = query.fmt
    groups = [g for item in (by or []) for g in item.split(",") if g]
    con = query.connect(["requests", "events"])
    pm = PriceModel.load(prices)
    result = token_mix_rows(con, selection, groups, pm)
    typer.echo(render(result, fmt, single=not groups, essential=(*groups, *ESSENTIAL), display=display()))
    if savings and fmt == "table" and not groups and result.rows:
        typer.echo(fit_text(savings_line(result.records()[0], pm), wide=display().wide))


def sql(
    query: Annotated[str | None, typer.Argument(help="A SELECT over the views.")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Read the query from this .sql file.")] = None,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
    no_refresh: NoRefreshOpt = False,
) -> None:
    """Run read-only SQL over the views: requests, events, metric_points, spans, audit."""
    from traceflow.output import render
    from traceflow.store.user_sql import run_sql

    if (query is None) == (file is None):
        raise UsageError('give either a query ("SELECT ...") or --file q.sql, not both or neither')
    text = query if query is not None else _read_sql_file(file)  # type: ignore[arg-type]
    frame = run_sql(open_lake(data, refresh=not no_refresh), text)
    typer.echo(render(frame, fmt, display=display()))


def _read_sql_file(file: Path) -> str:
    """The text of ``sql --file``, or a usage error naming what is wrong with the path."""
    if not file.exists():
        raise UsageError(f"--file {file} does not exist; pass the path of a .sql file holding one SELECT")
    if file.is_dir():
        raise UsageError(f"--file {file} is a directory; pass the path of a .sql file holding one SELECT")
    try:
        return file.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read --file {file} ({e}); pass a readable UTF-8 .sql file") from None


def compact(
    data: DataOpt = None,
    engine: EngineOpt = "duckdb",
    spark_remote: SparkRemoteOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Merge each partition's small files into one deduplicated file; store the derived views."""
    import polars as pl

    from traceflow.output import render

    lake = open_lake(data)
    with _writing(lake, "compact"):
        rows = _compact(lake, engine, spark_remote)
    typer.echo(render(pl.DataFrame(rows), fmt, display=display()))


def _compact(lake: Lake, engine: str, spark_remote: str | None) -> list[dict[str, Any]]:
    from traceflow.schema import TABLES
    from traceflow.store.lake import DERIVED

    rows = []
    derived_before = {v: len(lake.fresh_derived(v) or []) for v in DERIVED}
    if engine == "spark":
        from traceflow.engines.spark import compact as spark_compact
        from traceflow.engines.spark import lake_session

        spark = lake_session(lake, spark_remote)
    elif spark_remote or engine != "duckdb":
        raise UsageError(
            f"--engine {engine!r} --spark-remote {spark_remote!r}: use --engine spark with --spark-remote"
        )
    for table in TABLES:
        before, after = spark_compact(spark, lake, table) if engine == "spark" else lake.compact(table)
        rows.append({"table": table, "files_before": before, "files_after": after})
    # compacting requests also stores the views derived from them (steps, rollup), see Lake
    for view, before in derived_before.items():
        rows.append(
            {"table": view, "files_before": before, "files_after": len(lake.fresh_derived(view) or [])}
        )
    lake.clean_staging()
    return rows


def snapshot(
    out: Annotated[Path, typer.Argument(help="The .duckdb file to write (replaced if it exists).")],
    data: DataOpt = None,
) -> None:
    """Write a standalone DuckDB file with one table per view, for other tools."""
    from traceflow.store.user_sql import snapshot as write_snapshot

    counts = write_snapshot(open_lake(data), out)
    typer.echo(f"wrote {out}: " + ", ".join(f"{n} {t}" for t, n in counts.items()))


def status(data: DataOpt = None, fmt: FormatOpt = "table", no_refresh: NoRefreshOpt = False) -> None:
    """Show the lake's state: requests per source and agent, newest record, disagreeing copies.

    The last: request ids stored with copies that disagree on user or session (one copy counts).
    """
    import polars as pl

    from traceflow.cli.options import echo
    from traceflow.store.overview import status as lake_status

    state = lake_status(open_lake(data, refresh=not no_refresh))
    if fmt == "json":
        echo(state.as_dict(), fmt)
        return
    sources = pl.DataFrame(
        state.as_dict()["sources"],
        schema={
            "source": pl.String,
            "agent": pl.String,
            "requests": pl.Int64,
            "newest_request": pl.Datetime("us", "UTC"),
        },
    )
    if fmt == "table":
        typer.echo("\n".join(state.lines()) + "\n")
    echo(sources, fmt)


def version() -> None:
    """Print traceflow's version."""
    typer.echo(__version__)


#: The commands of this module, by name (registered by :mod:`traceflow.cli.app`).
COMMANDS: dict[str, Callable[..., Any]] = {
    "import": import_,
    "mix": mix,
    "sql": sql,
    "compact": compact,
    "snapshot": snapshot,
    "status": status,
    "version": version,
}
