"""The cache commands: ``misses`` (why requests missed the prompt cache), ``timeline`` (one
session's requests side by side), ``compare`` (misses at a boundary against matched idle gaps),
``check`` (cache health against a baseline, for cron) and ``ttl --observed`` (the TTL the writes
asked for, per day), listed in :data:`COMMANDS` and registered by :mod:`traceflow.cli.app`.

``ttl`` itself is defined in :mod:`traceflow.cli.analyses`; its ``--observed`` flag calls
:func:`observed_ttl` here. ``traceflow check`` exits :data:`~traceflow.analysis.health.ALERT_EXIT` (4)
when a check fired, 0 when healthy; 1 and 2 remain errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.options import (
    ByOpt,
    DataOpt,
    FormatOpt,
    LakeQuery,
    PricesOpt,
    echo,
    echo_note,
    echo_sections,
    echo_text,
    open_lake,
    with_lake_query,
    with_options,
    with_selection,
)
from traceflow.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from traceflow.analysis.misses import MissOptions
    from traceflow.store.selection import Selection

MissTokensOpt = Annotated[
    int,
    typer.Option("--miss-tokens", help="A cache read this many tokens below the reusable prefix is a miss."),
]
CompactionDropOpt = Annotated[
    float,
    typer.Option(
        "--compaction-drop", help="A context drop, as a share of the previous context, that is a compaction."
    ),
]


def _miss_options(prices: Path | None, miss_tokens: int, compaction_drop: float) -> MissOptions:
    from traceflow.analysis.misses import MissOptions
    from traceflow.prices import PriceModel

    return MissOptions(
        prices=PriceModel.load(prices), miss_tokens=miss_tokens, compaction_drop=compaction_drop
    )


#: ``--prices``, ``--miss-tokens`` and ``--compaction-drop`` in place of a command's ``options``
#: parameter: it receives one :class:`~traceflow.analysis.misses.MissOptions`.
with_miss_options = with_options(
    "options",
    (
        ("prices", PricesOpt, None),
        ("miss_tokens", MissTokensOpt, 1024),
        ("compaction_drop", CompactionDropOpt, 0.5),
    ),
    _miss_options,
)


@with_selection
@with_lake_query
@with_miss_options
def misses(
    by: ByOpt = None,
    list_: Annotated[bool, typer.Option("--list", help="One row per miss instead of the counts.")] = False,
    *,
    options: MissOptions,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Count cache misses by cause, with the missed tokens and what they cost.

    Causes: first_request, model_switch, compaction, ttl_expired, unexplained.
    """
    from traceflow.analysis import misses as m
    from traceflow.output import Rows
    from traceflow.store.sql import split_by

    fmt = query.fmt
    groups = split_by(by)
    con = query.connect(["requests", "events", "metric_points"])
    from traceflow.store import recorded

    selection, left = recorded.narrow(con, selection, "misses")
    if list_:
        if groups:
            raise UsageError("--list prints one row per miss; it takes no --by")
        frame = m.miss_rows(con, selection, options, misses_only=True).drop("miss")
        if fmt == "table":  # when, why and how much first: a session id is 36 characters
            frame = frame.select(*m.LIST_ESSENTIAL, *(c for c in frame.columns if c not in m.LIST_ESSENTIAL))
        echo(frame, fmt, essential=m.LIST_ESSENTIAL, zone=selection.zone)
        echo_note(left.note(), fmt)
        return
    if groups:
        reports = m.miss_groups(con, selection, groups, options)
        if fmt == "json":
            echo(reports, fmt, zone=selection.zone)
            echo_note(left.note(), fmt)
            return
        cols = [*groups, *m.flat(reports[0]).keys()] if reports else [*groups]
        rows = [(*(r[g] for g in groups), *m.flat(r).values()) for r in reports]
        echo(
            Rows(cols, rows),
            fmt,
            essential=(*groups, "misses", "missed_tokens", "miss_cost_usd"),
            zone=selection.zone,
        )
        echo_note(left.note(), fmt)
        return
    report = m.miss_report(con, selection, options)
    if fmt == "json":
        echo({**report, "left_out": left.as_json()}, fmt, zone=selection.zone)
        return
    requests = report["requests"]
    judged = requests - report["not_applicable"]  # the shares are of the requests that were judged

    def share(n: int | None) -> float | None:
        return n / judged if judged and n is not None else None

    rows = [
        (c, v["misses"], share(v["misses"]), v["missed_tokens"], v["miss_cost_usd"])
        for c, v in report["by_cause"].items()
    ]
    total_cost = m.total_cost(report["by_cause"])
    rows.append(("all", report["misses"], share(report["misses"]), report["missed_tokens"], total_cost))
    result = Rows(["cause", "misses", "share_of_requests", "missed_tokens", "miss_cost_usd"], rows)
    if fmt in ("table", "markdown"):
        misses = report["misses"]
        head = f"{requests:,} requests, {f'{misses:,}' if misses is not None else 'n/a'} misses"
        if report["not_applicable"]:
            head += (
                f"; {report['not_applicable']:,} request(s) without a session or block hashes not judged "
                "(not applicable)"
            )
        typer.echo(head)
    echo(result, fmt, zone=selection.zone)
    echo_note(left.note(), fmt)


@with_lake_query
@with_miss_options
def timeline(
    session: Annotated[str, typer.Argument(help="The session id (its sub-agents come with it).")],
    options: MissOptions,
    no_bars: Annotated[bool, typer.Option("--no-bars", help="Leave out the read/write/cold bars.")] = False,
    *,
    query: LakeQuery,
) -> None:
    """One session's requests in order: gap, model, version, tokens, TTL in force, miss cause.

    JSON: a list, one object per request (cause null for a hit).
    """
    from traceflow.analysis import timeline as t
    from traceflow.output import Rows

    fmt = query.fmt
    con = query.connect(["requests", "events", "metric_points"])
    records = t.timeline(con, session, options)
    if fmt == "json":
        echo(records, fmt)
        return
    if fmt == "csv":
        echo(Rows(t.KEYS, [[r[k] for k in t.KEYS] for r in records]), fmt)
        return
    echo_text(t.headline(session, records))
    echo(t.table(records, bars=not no_bars), fmt, essential=t.ESSENTIAL)


@with_selection
@with_lake_query
@with_miss_options
def compare(
    boundary: Annotated[
        str,
        typer.Option("--boundary", help="restart, version or model: the transition to compare."),
    ] = "restart",
    confidence: Annotated[
        float, typer.Option("--confidence", help="Confidence of the intervals (0.95).")
    ] = 0.95,
    *,
    options: MissOptions,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Compare misses at a boundary (restart, version, model) with idle gaps of matched length and TTL.

    The miss rates with Wilson intervals, their difference with Newcombe's interval, and the missed
    tokens per request on both sides.
    """
    from traceflow.analysis import compare as c
    from traceflow.output import Rows

    fmt = query.fmt
    con = query.connect(["requests", "events", "metric_points"])
    result = c.compare(con, selection, boundary, options, confidence)
    if fmt == "json":
        echo(result, fmt, zone=selection.zone)
        return
    b, k, d = result["boundaries"], result["controls"], result["difference"]
    rows = Rows(
        ["", "requests", "misses", "miss_rate", "ci_low", "ci_high", "missed_tokens_per_request"],
        [
            (
                f"at {boundary}",
                b["requests"],
                b["misses"],
                b["miss_rate"],
                b["ci_low"],
                b["ci_high"],
                b["missed_tokens_per_request"],
            ),
            (
                "matched idle gaps",
                k["requests"],
                k["misses"],
                k["miss_rate"],
                k["ci_low"],
                k["ci_high"],
                k["missed_tokens_per_request"],
            ),
            ("difference", None, None, d["miss_rate"], d["ci_low"], d["ci_high"], None),
        ],
    )
    why = c.missing(result)
    if why is not None and fmt in ("table", "markdown"):
        echo_text(why)
        return
    if fmt in ("table", "markdown"):
        echo_text(
            f"{boundary}: {b['requests']} transitions matched to idle gaps of the same length and TTL "
            f"({b['unmatched']} without a match); {result['confidence']:.0%} intervals"
        )
    echo(rows, fmt, zone=selection.zone)


def observed_ttl(
    selection: Selection, groups: list[str], prices: Path | None, data: Path | None, fmt: str
) -> None:
    """``traceflow ttl --observed``: the TTL in force per day (in --tz; and group) and its changes."""
    from traceflow.analysis.ttl_observed import ttl_in_force
    from traceflow.output import Rows
    from traceflow.prices import PriceModel

    con = open_lake(data).connect(["requests", "events", "metric_points"])
    result = ttl_in_force(con, selection, groups, PriceModel.load(prices))
    if fmt == "json":
        echo(result, fmt, zone=selection.zone)
        return
    keys = [g for g in groups if g != "day"]
    days = Rows(
        [*keys, "day", "ttl_in_force_s", "share_1h_writes"],
        [
            (*(d[k] for k in keys), d["day"], d["ttl_in_force_s"], d["share_1h_writes"])
            for d in result["days"]
        ],
    )
    if fmt == "csv":
        echo(days, fmt, zone=selection.zone)
        return
    changes = Rows(
        [*keys, "day", "from_s", "to_s", "extra_cost_usd"],
        [
            (*(c[k] for k in keys), c["day"], c["from_s"], c["to_s"], c["extra_cost_usd"])
            for c in result["changes"]
        ],
    )
    echo_sections(
        [
            (f"TTL in force per {'UTC day' if selection.zone == 'UTC' else f'day ({selection.zone})'}", days),
            ("Changes", changes),
        ],
        fmt,
        result["notes"],
        zone=selection.zone,
    )


@with_selection
def check(
    max_drop: Annotated[
        float,
        typer.Option(
            "--max-drop", help="Alert when the reuse ratio fell more than this share (0.25 = 25 %)."
        ),
    ] = 0.25,
    max_unexplained_rise: Annotated[
        float,
        typer.Option(
            "--max-unexplained-rise",
            help="Alert when the share of requests that are unexplained misses rose more than this (0.05).",
        ),
    ] = 0.05,
    max_version_rise: Annotated[
        float,
        typer.Option(
            "--max-version-rise",
            help="Alert when a new client version's share of restart, prefix_break and unexplained "
            "misses is more than this above the previous version's (0.05).",
        ),
    ] = 0.05,
    max_amplification_rise: Annotated[
        float,
        typer.Option(
            "--max-amplification-rise",
            help="Alert when cache writes / cache reads rose more than this share (1.0: doubled).",
        ),
    ] = 1.0,
    baseline_days: Annotated[
        float, typer.Option("--baseline-days", help="Baseline: this many days before the window.")
    ] = 7,
    min_requests: Annotated[
        int,
        typer.Option(
            "--min-requests",
            help="Alert when the window has fewer requests than this while the baseline had some (0: off).",
        ),
    ] = 1,
    webhook: Annotated[
        str | None, typer.Option("--webhook", help="POST the alert as JSON to this URL when a check fires.")
    ] = None,
    webhook_format: Annotated[
        str,
        typer.Option(
            "--webhook-format",
            help="The webhook's body: json (traceflow's object), slack (an incoming-webhook message) or "
            "alertmanager (Alertmanager's API v2 list of alerts: give .../api/v2/alerts as --webhook).",
        ),
    ] = "json",
    metrics_file: Annotated[
        Path | None,
        typer.Option(
            "--metrics-file",
            help="Also write the figures as Prometheus gauges to this file, atomically (for "
            "node_exporter's textfile collector: a *.prom file in its --collector.textfile.directory).",
        ),
    ] = None,
    pushgateway: Annotated[
        str | None,
        typer.Option("--pushgateway", help="Also push the gauges to this Prometheus Pushgateway URL."),
    ] = None,
    *,
    selection: Selection,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Check cache health: the window (default: the last UTC day) against the days before it.

    Exit status 0 when healthy, 4 when a check fired (1 and 2 are errors).
    """
    from traceflow.analysis import health, health_metrics, webhooks
    from traceflow.errors import TraceflowError

    webhooks.check_format(webhook_format)
    if metrics_file is not None:
        health_metrics.check_file(metrics_file)
    if pushgateway:
        health_metrics.check_url(pushgateway)
    con = open_lake(data).connect(["requests", "events", "metric_points"])
    thresholds = health.Thresholds(
        max_drop, max_unexplained_rise, min_requests, max_version_rise, max_amplification_rise
    )
    result = health.check(con, selection, baseline_days=baseline_days, thresholds=thresholds)
    body = result.as_dict()
    if fmt == "json":
        echo(body, fmt, zone=selection.zone)
    else:
        from traceflow.output import Rows

        rows = []
        for key in (
            "requests",
            "reuse_ratio",
            "misses",
            "unexplained_misses",
            "unexplained_share",
            "write_amplification",
        ):
            rows.append((key, result.window.get(key), result.baseline.get(key)))
        head = f"cache health: {body['status']}"
        fired = [
            f"fired: {f['check']}"
            + (f" {f['version']} after {f['previous_version']}" if "version" in f else "")
            + f" (threshold {f['threshold']})"
            + (f": {f['reason']}" if "reason" in f else "")
            for f in result.fired
        ]
        if fmt in ("table", "markdown"):
            echo_text("\n".join([head, *fired, *(f"note: {n}" for n in result.notes)]))
        echo(Rows(["metric", "window", "baseline"], rows), fmt, zone=selection.zone)
    failed = False  # a gauge not delivered: reported, and the status is 1 unless a check fired
    if metrics_file is not None or pushgateway:
        gauges = health_metrics.registry(result, selection)
        try:
            if metrics_file is not None:
                health_metrics.write_file(metrics_file, gauges)
        except TraceflowError as e:
            typer.echo(f"traceflow: error: {e}", err=True)
            failed = True
        try:
            if pushgateway:
                health_metrics.push(pushgateway, gauges, selection)
        except TraceflowError as e:
            typer.echo(f"traceflow: error: {e}", err=True)
            failed = True
    if result.alert:
        if webhook:
            try:
                health.post_webhook(webhook, webhooks.payload(webhook_format, result, selection))
            except TraceflowError as e:
                typer.echo(f"traceflow: error: {e}", err=True)
        raise typer.Exit(health.ALERT_EXIT)
    if failed:
        raise typer.Exit(1)


#: The commands of this module, by name (registered by :mod:`traceflow.cli.app`).
COMMANDS: dict[str, Callable[..., Any]] = {
    "misses": misses,
    "timeline": timeline,
    "compare": compare,
    "check": check,
}
