"""``traceflow blocks``: the 5-hour billing blocks (:mod:`traceflow.analysis.blocks`), once or live."""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from traceflow.cli.options import LakeQuery, PricesOpt, echo, with_lake_query, with_selection
from traceflow.errors import UsageError

if TYPE_CHECKING:
    from traceflow.prices import PriceModel
    from traceflow.store.selection import Selection

#: How far back ``--live`` reads: the active block began at most 5 hours ago.
LIVE_WINDOW = dt.timedelta(hours=6)


@with_selection
@with_lake_query
def blocks(
    active: Annotated[
        bool, typer.Option("--active", help="Only the active block, with its projection.")
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
    *,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Show the 5-hour billing blocks as ccusage counts them, with burn rates and a projection.

    Per block its requests, tokens by kind, cost and burn rate; the active block's projection to its end.

    A block starts at its first request's UTC hour and ends 5 hours later; a request at or after the
    end starts the next. Times print in --tz (default UTC).
    """
    from traceflow.analysis.blocks import billing_blocks
    from traceflow.prices import PriceModel

    pm = PriceModel.load(prices)
    if not live:
        con = query.connect(["requests"])
        echo(billing_blocks(con, selection, pm, active_only=active, gaps=gaps), query.fmt)
        if query.fmt == "table":
            typer.echo(f"Prices: {pm.describe()}.")
        return
    if interval != interval or interval == float("inf"):  # NaN or infinity
        raise UsageError(f"--interval {interval:g} is not a number of seconds; give one such as 5")
    if interval < 0.1:
        raise UsageError(f"--interval {interval:g} is too short; refresh at most ten times a second")
    if count < 0:
        raise UsageError("--count must be 0 (until Ctrl-C) or more")
    _live(query, selection, pm, interval, count)


def _live(query: LakeQuery, selection: Selection, pm: PriceModel, interval: float, count: int) -> None:
    """Print the active block every ``interval`` seconds, reading only the last hours of the lake."""
    from traceflow.analysis.blocks import billing_blocks, live_line
    from traceflow.store import zones

    clear = sys.stdout.isatty() and query.fmt == "table"
    shown = 0
    try:
        while count == 0 or shown < count:
            now = dt.datetime.now(dt.UTC)
            since = now - LIVE_WINDOW
            window = replace(selection, since=max(since, selection.since) if selection.since else since)
            con = query.connect(["requests"])  # a fresh view each time: new files are seen
            rows = billing_blocks(con, window, pm, now=now, active_only=True, gaps=False)
            con.close()
            records = [zones.localise(r) for r in rows.records()]
            if query.fmt == "table":
                text = "\n".join(live_line(records[0] if records else None, now.astimezone(zones.tzinfo())))
                typer.echo(("\x1b[H\x1b[2J" if clear else "") + text)
            else:
                echo(rows, query.fmt)
            shown += 1
            if count == 0 or shown < count:
                time.sleep(interval)
    except KeyboardInterrupt:
        typer.echo("")


COMMANDS = {"blocks": blocks}
