"""The analysis commands: ``gaps``, ``ttl``, ``sessions``, ``load``, ``working-set``, ``report``,
``query`` and ``queries`` (listed in :data:`COMMANDS`, registered by :mod:`traceflow.cli.app`).

Each command parses its options, calls one library function and prints; heavy modules are imported
inside the command bodies so ``traceflow --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.options import (
    DataOpt,
    FormatOpt,
    LakeQuery,
    PricesOpt,
    connect,
    display,
    echo,
    echo_note,
    echo_sections,
    open_lake,
    with_lake_query,
    with_selection,
)
from traceflow.cli.sizing import KvChoice, with_kv
from traceflow.errors import UsageError
from traceflow.units import format_duration, parse_duration

if TYPE_CHECKING:
    from collections.abc import Callable

    import polars as pl

    from traceflow.output import Rows
    from traceflow.store.selection import Selection

TtlOpt = Annotated[
    list[str] | None,
    typer.Option("--ttl", help="A cache TTL: seconds or 30s, 5m, 1h, 1d (repeatable)."),
]
KvBytesOpt = Annotated[
    float | None,
    typer.Option(
        "--kv-bytes-per-token", help="KV-cache bytes per token of the model, for bytes (e.g. 126976)."
    ),
]
ResolutionOpt = Annotated[str, typer.Option("--resolution", help="Bucket width: seconds or 1s, 1m, 1h.")]
IdleAfterOpt = Annotated[
    str,
    typer.Option(
        "--idle-after", help="Idle time after which a request is an idle return (a returning user)."
    ),
]


GapsByOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--by",
        help="Group by agent, model, session, day, week, month, user, source, kind, project, host, "
        "subagent_type, "
        "attr:NAME (a resource attribute) or tool (the tool whose result a request followed); "
        "repeatable or comma-separated.",
    ),
]
SessionsByOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--by",
        help="Group by agent, model, session, day, week, month, user, source, project, host, attr:NAME "
        "or tool (repeatable or comma-separated).",
    ),
]


def _ttls(values: list[str] | None, default: tuple[float, ...]) -> list[float]:
    return [parse_duration(v, "--ttl") for v in values] if values else list(default)


def _coarsened(asked: float, used: float) -> None:
    """Say on stderr when the time grid's buckets were made coarser than ``--resolution``."""
    from traceflow.store.time_base import coarsening_note

    note = coarsening_note(asked, used)
    if note:
        typer.echo(f"note: {note}", err=True)


def _transpose(row: dict[str, Any]) -> Rows:
    from traceflow.output import Rows

    return Rows(["metric", "value"], [(k, v) for k, v in row.items()])


@with_selection
@with_lake_query
def gaps(
    ttl: TtlOpt = None,
    by: GapsByOpt = None,
    histogram: Annotated[
        bool, typer.Option("--histogram", help="Print only the log-scaled histogram.")
    ] = False,
    *,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Idle gaps between requests of a session (agent loops vs human turns) against cache TTLs."""
    from traceflow.analysis import gaps as g
    from traceflow.analysis.report import gap_rows
    from traceflow.output import Rows
    from traceflow.store.sql import split_by

    fmt = query.fmt
    ttls = _ttls(ttl, g.DEFAULT_TTLS)
    groups = split_by(by)
    con = query.connect(["requests", "events"])
    from traceflow.store import recorded

    selection, left = recorded.narrow(con, selection, "gaps")
    if histogram:
        echo(g.gap_histogram(con, selection), fmt, zone=selection.zone)
        echo_note(left.note(), fmt)
        return
    report = g.gap_report(con, selection, ttls, groups)
    if fmt == "json":
        echo({**report, "left_out": left.as_json()}, fmt, zone=selection.zone)
        return
    if fmt == "csv":
        echo(g.gap_summary(con, selection, ttls, groups), fmt, zone=selection.zone)
        echo_note(left.note(), fmt)
        return
    sections: list[tuple[str, Rows | pl.DataFrame]] = [
        (
            "Idle gaps (seconds)",
            Rows(["metric", "all", "human", "agent"], gap_rows(report, ttls, max_row=True)),
        )
    ]
    if groups:
        cols = [
            *groups,
            "gaps",
            "human_gaps",
            "agent_gaps",
            "p50_s",
            "p90_s",
            "p99_s",
            "human_p50_s",
            *[f"share_over_{g._ttl_key(t)}" for t in ttls],
        ]
        sections.append((f"By {', '.join(groups)}", g.gap_summary(con, selection, ttls, groups).select(cols)))
    hist = g.gap_histogram(con, selection).select(
        "label", "gaps", "human_gaps", "agent_gaps", "share", "cum_share"
    )
    sections.append(("Histogram (log-scaled bins)", hist))
    echo_sections(sections, fmt, zone=selection.zone)
    echo_note(left.note(), fmt)


@with_selection
@with_lake_query
def ttl(
    ttl: TtlOpt = None,
    prices: PricesOpt = None,
    by: Annotated[
        list[str] | None,
        typer.Option("--by", help="model: one row per TTL and model (with --observed: any grouping of mix)."),
    ] = None,
    observed: Annotated[
        bool,
        typer.Option("--observed", help="The TTL the cache writes asked for, per UTC day, and its changes."),
    ] = False,
    *,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Compare cache TTLs: what each would have cost, and which is cheapest.

    Per TTL (5m, 1h and each --ttl): the requests whose prefix expired, the tokens to rewrite, the cost
    under the price model, and the best TTL; plus what the data shows.
    """
    from traceflow.analysis.ttl import ttl_list, ttl_report
    from traceflow.prices import PriceModel
    from traceflow.store.sql import split_by

    fmt = query.fmt
    groups = split_by(by)
    if observed:
        from traceflow.cli.cache import observed_ttl

        observed_ttl(selection, groups, prices, query.data, fmt)
        return
    if groups not in ([], ["model"]):
        raise UsageError("ttl groups only --by model")
    con = query.connect(["requests"])
    from traceflow.store import recorded

    selection, left = recorded.narrow(con, selection, "ttl")
    result = ttl_report(con, selection, ttl_list(_ttls(ttl, ())), PriceModel.load(prices))
    if fmt == "json":
        echo({**result.as_dict(), "left_out": left.as_json()}, fmt, zone=selection.zone)
        return
    if groups:
        table = result.by_model.select(
            "ttl_s",
            "model",
            "requests",
            "expired_requests",
            "rewrite_tokens",
            "read_tokens",
            "write_tokens",
            "write_multiplier",
            "cost_usd",
            "expiry_cost_usd",
        )
    else:
        table = result.whatif
    if fmt == "csv":
        echo(table, fmt, zone=selection.zone)
        echo_note(left.note(), fmt)
        return
    best = result.best_ttl_s
    seen = result.as_dict()["observed"]
    summary = _transpose(
        {
            "best_ttl": format_duration(best) if best is not None else None,
            "observed_cost_usd": seen["cost_usd"],
            "reported_cost_usd": seen["reported_cost_usd"],
            "prices_as_of": result.prices.as_of,
            "price_table": result.prices.source,
        }
    )
    echo_sections(
        [
            ("TTL what-if", table if groups else table.drop("ttl_s")),
            ("Best TTL and observed cost", summary),
            ("Observed cache writes after short, medium and long gaps", result.validation),
        ],
        fmt,
        zone=selection.zone,
    )
    echo_note(left.note(), fmt)


@with_selection
@with_lake_query
def sessions(
    by: SessionsByOpt = None,
    list_: Annotated[
        bool, typer.Option("--list", help="One row per session instead of the summary.")
    ] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", help="With --list: at most this many sessions.")
    ] = None,
    idle_after: IdleAfterOpt = "15m",
    compaction_drop: Annotated[
        float,
        typer.Option(
            "--compaction-drop",
            help="Context drop (share of the previous context) that counts as a compaction.",
        ),
    ] = 0.5,
    *,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Describe the sessions: turns, duration, context growth, compactions and idle returns.

    Turns, requests, duration, context at start and end, growth per turn, compactions, sub-agents and
    idle returns (a user back after a long idle); in aggregate, per group, or one row each (--list).
    """
    from traceflow.analysis import sessions as s
    from traceflow.store.sql import split_by

    fmt = query.fmt
    groups = split_by(by)
    idle_s = parse_duration(idle_after, "--idle-after")
    con = query.connect(["requests", "events"])
    if list_:
        echo(
            s.sessions(con, selection, idle_s, compaction_drop, limit),
            fmt,
            essential=s.LIST_ESSENTIAL,
            zone=selection.zone,
        )
        return
    frame = s.session_summary(con, selection, groups, idle_s, compaction_drop)
    if not groups and fmt in ("table", "markdown"):
        echo(_transpose(frame.to_dicts()[0]), fmt, zone=selection.zone)
        return
    echo(frame, fmt, single=not groups, essential=(*groups, *s.SUMMARY_ESSENTIAL), zone=selection.zone)


@with_selection
@with_lake_query
def load(
    resolution: ResolutionOpt = "1m",
    series: Annotated[
        bool, typer.Option("--series", help="Print the time series instead of the summary.")
    ] = False,
    *,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Measure arrivals and load: new sessions, requests and tokens per second over time.

    New sessions per minute and whether they are Poisson (index of dispersion), requests/s, sessions
    open at once, tokens/s by kind.
    """
    from traceflow.analysis.load import load_overview, load_resolution, load_series

    fmt = query.fmt
    res = parse_duration(resolution, "--resolution")
    con = query.connect(["requests"])
    if series:
        _coarsened(res, load_resolution(con, selection, res))
        echo(load_series(con, selection, res), fmt, zone=selection.zone)
        return
    summary = load_overview(con, selection, res)
    _coarsened(res, float(summary["resolution_s"][0]))
    if fmt in ("table", "markdown"):
        echo(_transpose(summary.to_dicts()[0]), fmt, zone=selection.zone)
        return
    echo(summary, fmt, single=True, zone=selection.zone)


@with_selection
@with_kv
@with_lake_query
def working_set(
    ttl: TtlOpt = None,
    resolution: ResolutionOpt = "1m",
    kv_bytes_per_token: KvBytesOpt = None,
    series: Annotated[
        bool, typer.Option("--series", help="Print the time series (first --ttl) instead of the summary.")
    ] = False,
    *,
    selection: Selection,
    kv: KvChoice,
    query: LakeQuery,
) -> None:
    """Measure the live KV working set for a TTL (default 5m) over time.

    The context held by sessions idle for less than the TTL; peak, p95, mean (tokens, and bytes with
    --kv-model NAME or --kv-bytes-per-token).
    """
    from traceflow.analysis.working_set import (
        DEFAULT_TTL_S,
        working_set_resolution,
        working_set_series,
        working_set_summary,
    )

    fmt = query.fmt
    ttls = _ttls(ttl, (DEFAULT_TTL_S,))
    res = parse_duration(resolution, "--resolution")
    kv_bytes_per_token, kv_said = kv.per_token(kv_bytes_per_token)
    con = query.connect(["requests"])
    from traceflow.store import recorded

    selection, left = recorded.narrow(con, selection, "working-set")
    if series:
        _coarsened(res, working_set_resolution(con, selection, ttls[0], res))
        echo(working_set_series(con, selection, ttls[0], res, kv_bytes_per_token), fmt, zone=selection.zone)
        echo_note(left.note(), fmt)
        return
    summary = working_set_summary(con, selection, ttls, res, kv_bytes_per_token)
    _coarsened(res, float(summary["resolution_s"].max()))  # type: ignore[arg-type]
    if kv_said is not None:  # the bytes' assumption, beside them
        import polars as pl

        summary = summary.with_columns(pl.lit(kv_said).alias("kv_assumption"))
    if fmt == "json" and len(ttls) == 1:
        echo({**summary.row(0, named=True), "left_out": left.as_json()}, fmt, zone=selection.zone)
        return
    echo(summary, fmt, single=len(ttls) == 1 and fmt == "json", zone=selection.zone)
    echo_note(left.note(), fmt)


@with_selection
@with_kv
def report(
    ttl: TtlOpt = None,
    prices: PricesOpt = None,
    kv_bytes_per_token: KvBytesOpt = None,
    idle_after: IdleAfterOpt = "15m",
    resolution: ResolutionOpt = "1m",
    *,
    selection: Selection,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write a self-contained HTML report with charts (opens offline)."),
    ] = None,
    png: Annotated[Path | None, typer.Option("--png", help="Also write one PNG per chart into DIR.")] = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Also write one SVG per chart into DIR.")] = None,
    capacity: Annotated[
        bool,
        typer.Option(
            "--capacity",
            help="With --html/--png/--svg, also draw the capacity-planning part (concurrent sessions, "
            "KV working set, hit ratio versus cache capacity, SSD drive writes per day).",
        ),
    ] = False,
    kv: KvChoice,
) -> None:
    """Summarise every analysis in one report (with --html, the charts too).

    Reuse ratio, gaps against the 5m and 1h TTLs and what they cost, sessions, arrivals and the KV
    working set.
    """
    from traceflow.analysis.report import build_report, render_markdown, render_text
    from traceflow.paths import output_file, output_folder
    from traceflow.prices import PriceModel

    if fmt == "csv":
        raise UsageError("traceflow report has no csv form; use --format table, markdown or json")
    kv_bytes_per_token, kv_said = kv.per_token(kv_bytes_per_token)
    # the output paths first: a bad one fails before anything is printed
    html = output_file(html, "--html") if html is not None else None
    png = output_folder(png, "--png") if png is not None else None
    svg = output_folder(svg, "--svg") if svg is not None else None
    drawn = None
    if html or png or svg:  # the report gathered once, over one connection: printed, then drawn
        from traceflow.dashboards.report_data import ReportOptions, gather

        options = ReportOptions(
            kv_bytes_per_token=kv_bytes_per_token,
            kv_said=kv_said,
            prices=PriceModel.load(prices),
            ttls=_ttls(ttl, ()),
            idle_after_s=parse_duration(idle_after, "--idle-after"),
            resolution_s=parse_duration(resolution, "--resolution"),
            capacity=capacity,
        )
        con = open_lake(data).connect()
        drawn = gather(con, selection, options)
        rep = drawn.report
    else:
        rep = build_report(
            connect(data, ["requests", "events"]),
            selection,
            _ttls(ttl, ()),
            PriceModel.load(prices),
            kv_bytes_per_token,
            parse_duration(idle_after, "--idle-after"),
            parse_duration(resolution, "--resolution"),
        )
    shown = display()
    if fmt != "json" and shown.freshness is not None:  # a lake fed by serve: how fresh, first
        typer.echo(shown.freshness[0])
    said = f"KV bytes per token: {kv_said}\n" if kv_said else ""
    if fmt == "json":
        doc = rep.as_dict()
        doc["settings"]["kv_assumption"] = kv_said
        echo(doc, fmt, zone=selection.zone)
    elif fmt == "markdown":
        typer.echo(render_markdown(rep) + said, nl=False)
    else:
        typer.echo(render_text(rep, wide=shown.wide) + said, nl=False)
    if drawn is not None:
        from traceflow.dashboards.render import write_report

        written = write_report(con, selection, options, html=html, png_dir=png, svg_dir=svg, data=drawn)
        paths = [written["html"]] if "html" in written else []
        paths += written.get("png", []) + written.get("svg", [])
        typer.echo(
            f"wrote {len(paths)} file(s): {', '.join(map(str, paths[:3]))}"
            + (" ..." if len(paths) > 3 else ""),
            err=True,
        )


def query(
    name: Annotated[str, typer.Argument(help="A packaged query (see `traceflow queries`), e.g. gaps.")],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="NAME=VALUE for a $NAME in the query (repeatable)."),
    ] = None,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Run a packaged query from queries/ with its $parameters."""
    from traceflow.store import sql

    params = sql.parse_param_options(param)
    sql.load(name)  # an unknown name is a usage error before the lake is opened
    echo(sql.run(open_lake(data).connect(), name, params), fmt)


def queries(fmt: FormatOpt = "table") -> None:
    """List the packaged queries with what they answer, their parameters and columns."""
    from traceflow.store import sql

    echo(sql.listing(), fmt)


#: The commands of this module, by name (registered by :mod:`traceflow.cli.app`).
COMMANDS: dict[str, Callable[..., Any]] = {
    "gaps": gaps,
    "ttl": ttl,
    "sessions": sessions,
    "load": load,
    "working-set": working_set,
    "report": report,
    "query": query,
    "queries": queries,
}
