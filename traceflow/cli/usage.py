"""``traceflow daily | weekly | monthly | session``: ccusage's everyday views and JSON (docs/ccusage.md).

The options are ccusage 20's (``--since/--until`` as YYYYMMDD or ISO dates, ``--timezone``/``-z``,
``--order``, ``--breakdown``, ``--json``, ``--offline``) beside traceflow's ``--data``, ``--prices``
and ``--format``. The zone of these personal views is the machine's unless ``--timezone``/``--tz``
or ``TRACEFLOW_TZ`` names another (:func:`personal_zone`); it is named under every table and in every
JSON document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.options import (
    LakeQuery,
    PricesOpt,
    WhereOpt,
    build_selection,
    echo,
    with_lake_query,
    with_options,
)

if TYPE_CHECKING:
    from traceflow.store.selection import Selection

CcSinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since", "-s", help="Only requests recorded on or after this date (20261103, 2026-11-03, 7d)."
    ),
]
CcUntilOpt = Annotated[
    str | None,
    typer.Option(
        "--until",
        "-u",
        help="Only requests recorded up to this date, that whole day included (20261105, 2026-11-05); "
        "a time (2026-11-05T12:00) ends just before it.",
    ),
]
TimezoneOpt = Annotated[
    str | None,
    typer.Option(
        "--timezone",
        "-z",
        "--tz",
        help="Zone of the days, weeks and months and of --since/--until: an IANA name (Asia/Tokyo), UTC "
        "or local (default: $TRACEFLOW_TZ, else this machine's zone).",
        show_default=False,
    ),
]
OrderOpt = Annotated[
    str | None,
    typer.Option(
        "--order", "-o", help="asc or desc (default: periods oldest first, sessions costliest first)."
    ),
]
ViewAgentOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--agent",
        help="Only this agent (repeatable), by traceflow's or ccusage's name (claude, codex, gemini, "
        "opencode, qwen, amp, copilot, kimi, codebuff, kilo, pi, openclaw, grok, droid, goose, hermes, "
        "zcode, antigravity), as `ccusage AGENT daily` selects one.",
    ),
]
BreakdownOpt = Annotated[bool, typer.Option("--breakdown", "-b", help="A row per model under each period.")]
JsonOpt = Annotated[bool, typer.Option("--json", "-j", help="ccusage's JSON document (see docs/ccusage.md).")]
OfflineOpt = Annotated[
    bool,
    typer.Option(
        "--offline/--no-offline",
        "-O",
        help="Accepted for ccusage's sake: traceflow's prices are always local (--prices, "
        "`traceflow prices update`).",
    ),
]


@dataclass(frozen=True)
class Window:
    """What ``--since``, ``--until`` and ``--timezone`` ask for: the selection, which carries the zone."""

    selection: Selection

    @property
    def zone(self) -> str:
        return self.selection.zone


def personal_zone(tz: str | None) -> str:
    """The zone of a personal view: ``tz`` (``--timezone``), else the ``tz`` setting
    (``TRACEFLOW_TZ``; a server lake may pin UTC there), else this machine's zone."""
    from traceflow.store import zones

    return zones.personal_zone(tz)


def build_window(
    since: str | None = None,
    until: str | None = None,
    timezone: str | None = None,
    agent: list[str] | None = None,
    where: list[str] | None = None,
) -> Window:
    """The :class:`Window` of the options: dates without an offset read in the view's zone; ``agent``
    (``--agent``) by the lake's name or ccusage's (:func:`traceflow.analysis.usage.lake_agent`);
    ``where``: the ``--where`` filters (:mod:`traceflow.store.filters`)."""
    from traceflow.analysis.usage import lake_agent

    agents = [lake_agent(a) for a in agent or ()]
    return Window(build_selection(since, until, agents or None, tz=personal_zone(timezone), where=where))


#: The window options, in the order ``--help`` shows them.
WINDOW_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("since", CcSinceOpt, None),
    ("until", CcUntilOpt, None),
    ("timezone", TimezoneOpt, None),
    ("agent", ViewAgentOpt, None),
    ("where", WhereOpt, None),
)


def with_window(command: Any) -> Any:
    """Give ``command`` ``--since``, ``--until``, ``--timezone``, ``--agent`` and ``--where`` in place of its
    ``window``."""
    return with_options("window", WINDOW_OPTIONS, build_window)(command)


def footer(zone: str, prices: str) -> str:
    """The lines under a table (each under 80 characters): the zone, when requests count, the prices."""
    return f"Zone: {zone}; requests count when the agent recorded them (as ccusage).\nPrices: {prices}."


def _view(
    view: str,
    window: Window,
    query: LakeQuery,
    prices: Any,
    order: str | None,
    breakdown: bool,
    json_out: bool,
) -> None:
    from traceflow.analysis import usage
    from traceflow.output import to_json
    from traceflow.prices import PriceModel

    pm = PriceModel.load(prices)
    con = query.connect(["requests"])
    rows = usage.ordered(view, usage.periods(con, view, window.selection, window.zone, pm), order)
    if json_out or query.fmt == "json":
        typer.echo(to_json(usage.document(view, rows, window.zone, prices=pm)))
        return
    echo(usage.table(view, rows, breakdown=breakdown), query.fmt)
    if query.fmt == "table":
        typer.echo(footer(window.zone, pm.describe()))


def _command(view: str, doc: str) -> Any:
    @with_window
    @with_lake_query
    def command(
        order: OrderOpt = None,
        breakdown: BreakdownOpt = False,
        json_out: JsonOpt = False,
        offline: OfflineOpt = False,
        prices: PricesOpt = None,
        *,
        window: Window,
        query: LakeQuery,
    ) -> None:
        _view(view, window, query, prices, order, breakdown, json_out)

    command.__doc__ = doc
    command.__name__ = view
    return command


_TAIL = (
    "\n\nEach request is filed at the time the agent recorded it, in the machine's zone unless "
    "--timezone or TRACEFLOW_TZ says otherwise; --json prints ccusage 20's document (docs/ccusage.md)."
)

COMMANDS = {
    "daily": _command("daily", "Tokens and cost per day, as `ccusage daily` shows them." + _TAIL),
    "weekly": _command(
        "weekly", "Tokens and cost per ISO week (from Monday), as `ccusage weekly` shows them." + _TAIL
    ),
    "monthly": _command("monthly", "Tokens and cost per month, as `ccusage monthly` shows them." + _TAIL),
    "session": _command(
        "session",
        "Tokens and cost per session (sub-agents in the session that spawned them), as `ccusage "
        "session` shows them." + _TAIL,
    ),
}
