"""``traceflow retain`` and ``traceflow forget``: remove old partitions, or one user's or session's
rows, from the lake (:mod:`traceflow.store.retention`), and say what went."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.lake import _writing
from traceflow.cli.options import DataOpt, FormatOpt, display, open_lake

if TYPE_CHECKING:
    from traceflow.store.lake import Lake

DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print what would be removed; remove nothing.")]


def _report(removals: list[Any], fmt: str, dry_run: bool) -> None:
    import polars as pl

    from traceflow.output import render, to_json

    rows = [r.as_dict() for r in removals]
    total = sum(r.rows for r in removals)
    if fmt == "json":
        typer.echo(to_json({"dry_run": dry_run, "rows_removed": 0 if dry_run else total, "partitions": rows}))
        return
    schema = {
        "table": pl.String,
        "partition": pl.String,
        "rows_removed": pl.Int64,
        "files_removed": pl.Int64,
        "files_written": pl.Int64,
    }
    if rows:
        typer.echo(render(pl.DataFrame(rows, schema=schema), fmt, display=display()))
    if fmt == "table":
        verb = "would remove" if dry_run else "removed"
        tail = " (dry run: nothing removed)" if dry_run else ""
        typer.echo(f"{verb} {total} stored rows from {len(rows)} partitions{tail}")


def _drop_copies(lake: Lake) -> None:
    """Remove what this machine keeps computed from the lake's rows beside it: the usage ledger of
    the Claude Code transcripts (:mod:`traceflow.importers.claude_code_usage`) and the result cache
    (:mod:`traceflow.store.result_cache`). Both are rebuilt on the next read; neither is served
    after a removal anyway (they are keyed by the lake's files), but they still hold the rows."""
    import shutil

    from traceflow.importers import claude_code_usage as usage

    imports = lake.state_dir / "imports"
    for name in (usage.LEDGER, usage.REQUESTS, usage.COVERED):
        (imports / name).unlink(missing_ok=True)
    shutil.rmtree(imports / usage.ANSWERS, ignore_errors=True)
    shutil.rmtree(lake.base / "_cache" / "results", ignore_errors=True)


def retain(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Drop the partitions whose whole day is older than this age: 90d, 2160h.",
        ),
    ],
    data: DataOpt = None,
    fmt: FormatOpt = "table",
    dry_run: DryRunOpt = False,
) -> None:
    """Drop every table's day partitions older than an age; store the derived views again."""
    from traceflow.store.retention import retain as drop_old
    from traceflow.units import parse_duration

    seconds = parse_duration(older_than, "--older-than")
    lake = open_lake(data, refresh=False)
    with _writing(lake, "retain"):
        removals = drop_old(lake, seconds, dry_run=dry_run)
        if removals and not dry_run:
            _drop_copies(lake)
    _report(removals, fmt, dry_run)


def forget(
    user: Annotated[str | None, typer.Option("--user", help="Remove every row of this user id.")] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Remove every row of this session id.")
    ] = None,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
    dry_run: DryRunOpt = False,
) -> None:
    """Remove one user's or one session's rows from every table, recorded in the audit table."""
    from traceflow.store.retention import forget as remove_rows

    lake = open_lake(data, refresh=False)
    with _writing(lake, "forget"):
        removals = remove_rows(lake, user=user, session=session, dry_run=dry_run)
        if removals and not dry_run:
            _drop_copies(lake)
    _report(removals, fmt, dry_run)


#: The commands of this module, by name (registered by :mod:`traceflow.cli.app`).
COMMANDS: dict[str, Callable[..., Any]] = {"retain": retain, "forget": forget}
