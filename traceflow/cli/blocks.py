"""``traceflow blocks``: the 5-hour billing blocks (:mod:`traceflow.analysis.blocks`), once or live."""

from __future__ import annotations

import datetime as dt
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from traceflow.cli.options import LakeQuery, PricesOpt, echo, with_lake_query, with_personal_selection
from traceflow.errors import UsageError

if TYPE_CHECKING:
    from traceflow.output import Rows
    from traceflow.prices import PriceModel
    from traceflow.store.selection import Selection


@with_personal_selection
@with_lake_query
def blocks(
    active: Annotated[
        bool, typer.Option("--active", "-a", help="Only the active block, with its projection.")
    ] = False,
    gaps: Annotated[bool, typer.Option("--gaps/--no-gaps", help="Show the holes between blocks.")] = True,
    live: Annotated[
        bool,
        typer.Option("--live", help="Refresh the active block in the terminal until Ctrl-C (or --count)."),
    ] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between --live refreshes.")] = 5.0,
    count: Annotated[
        int, typer.Option("--count", help="With --live: stop after this many refreshes (0: until Ctrl-C).")
    ] = 0,
    prices: PricesOpt = None,
    recent: Annotated[
        bool, typer.Option("--recent", "-r", help="Only the blocks of the last 3 days and the active one.")
    ] = False,
    order: Annotated[str | None, typer.Option("--order", "-o", help="asc (the default) or desc.")] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            "-j",
            help="ccusage's `blocks --json` document (docs/ccusage.md); --format json is traceflow's rows.",
        ),
    ] = False,
    breakdown: Annotated[
        bool, typer.Option("--breakdown", "-b", help="Accepted for ccusage's sake (the models are listed).")
    ] = False,
    offline: Annotated[
        bool,
        typer.Option("--offline/--no-offline", "-O", help="Accepted for ccusage's sake: prices are local."),
    ] = False,
    *,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Show the 5-hour billing blocks as ccusage counts them, with burn rates and a projection.

    Per block its requests, tokens by kind, cost and burn rate; the active block's projection to its end.

    A block starts at its first request's UTC hour and ends 5 hours later; a request at or after the
    end starts the next. Times print in --tz (default: TRACEFLOW_TZ, else this machine's zone).
    """
    from traceflow.analysis.blocks import billing_blocks, table
    from traceflow.output import Rows
    from traceflow.prices import PriceModel

    pm = PriceModel.load(prices)
    if order not in (None, "asc", "desc"):
        raise UsageError(f"--order {order!r}: choose asc or desc")
    if json_out and not live:
        from traceflow.analysis.usage import blocks_document
        from traceflow.output import to_json

        con = query.connect(["requests"])
        doc = blocks_document(con, selection, selection.zone, pm, active=active, recent=recent, order=order)
        typer.echo(to_json(doc))
        return
    if not live:
        con = query.connect(["requests"])
        now = dt.datetime.now(dt.UTC)
        rows = billing_blocks(con, selection, pm, now=now, active_only=active, gaps=gaps)
        if recent:
            since = now - dt.timedelta(days=3)
            rows = Rows(rows.columns, [r for r in rows.rows if r[0] >= since or r[2] == "active"])
        if order == "desc":
            rows = Rows(rows.columns, rows.rows[::-1])
        if query.fmt != "table":
            echo(rows, query.fmt, zone=selection.zone)
        elif active:
            typer.echo(_panels(rows, now, selection.zone))
        else:
            echo(table(rows), query.fmt, zone=selection.zone)
        if query.fmt == "table":
            typer.echo(f"Prices: {pm.describe()}.")
        return
    if interval < 0.1:
        raise UsageError(f"--interval {interval:g} is too short; refresh at most ten times a second")
    if count < 0:
        raise UsageError("--count must be 0 (until Ctrl-C) or more")
    _live(query, selection, pm, interval, count)


def _live(query: LakeQuery, selection: Selection, pm: PriceModel, interval: float, count: int) -> None:
    """Print the active block every ``interval`` seconds: the chain is the whole history's, as in
    ``blocks`` (a window's first request is not where a block starts)."""
    from traceflow.analysis.blocks import billing_blocks

    clear = sys.stdout.isatty() and query.fmt == "table"
    shown = 0
    try:
        while count == 0 or shown < count:
            now = dt.datetime.now(dt.UTC)
            con = query.connect(["requests"])  # a fresh view each time: new files are seen
            rows = billing_blocks(con, selection, pm, now=now, active_only=True, gaps=False)
            con.close()
            if query.fmt == "table":
                typer.echo(("\x1b[H\x1b[2J" if clear else "") + _panels(rows, now, selection.zone))
            else:
                echo(rows, query.fmt, zone=selection.zone)
            shown += 1
            if count == 0 or shown < count:
                time.sleep(interval)
    except KeyboardInterrupt:
        typer.echo("")


def _panels(rows: Rows, now: dt.datetime, zone: str) -> str:
    """The active blocks (one per user) as panels (:func:`traceflow.analysis.blocks.panel`), in ``zone``."""
    from traceflow.analysis.blocks import panel
    from traceflow.store import zones

    records = [zones.localise(r, zone) for r in rows.records()] or [None]
    local = now.astimezone(zones.tzinfo(zone))
    return "\n\n".join("\n".join(panel(r, local)) for r in records)


COMMANDS = {"blocks": blocks}
