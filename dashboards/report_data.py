"""Gather the frames behind the HTML report for a selection of the lake.

Every frame is aggregated here (bucketed series, binned distributions, the longest sessions only),
so a report over millions of requests stays a small file. The chart modules take these frames as
they are; :mod:`.render` draws and writes them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from traceflow.schema import TOKEN_KINDS

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.analysis.report import Report
    from traceflow.prices import PriceModel
    from traceflow.store.selection import Selection

#: KV bytes per token assumed when none is given (MiniMax-M2 at FP8,
#: docs/sizing-formulas.md#kv-bytes-per-token): for the hit-ratio
#: and SSD charts, which need bytes.
DEFAULT_KV_BYTES_PER_TOKEN = 126_976.0
#: TTLs of the what-if cost curve (seconds).
CURVE_TTLS: tuple[float, ...] = (60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0)
#: The most buckets a time series gets; the resolution grows with the selection's span.
MAX_BUCKETS = 720
#: Groups shown per token-mix dimension (the rest are summed as "other").
MAX_GROUPS = 12
#: Sessions drawn in the context-growth chart, and points per session.
MAX_SESSIONS = 24
MAX_POINTS = 240
#: Requests fed to the hit-ratio sweep (the most recent).
MAX_SWEEP_REQUESTS = 20_000

#: The label of a group whose value (model, agent, ...) is missing or blank.
UNKNOWN = "(unknown)"

_NICE_S = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


@dataclass
class ReportData:
    """The text summary and one frame per chart (see each chart module for its frame)."""

    report: Report
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    resolution_s: float = 60.0
    kv_bytes_per_token: float = DEFAULT_KV_BYTES_PER_TOKEN
    requests: int = 0
    series_since: dt.datetime | None = None
    #: The time base of the time-series charts: ``agent`` or a public trace's own ``public:<source>``
    #: (:mod:`traceflow.store.time_base`); times of a trace stored from 1970 are drawn as offsets
    #: from its start (``+2 h``).
    time_base: str = "agent"
    #: The timeline (as text) of each session the misses chart links to, by session id.
    timelines: dict[str, str] = field(default_factory=dict)
    #: What ``traceflow check`` says of the selection's last whole day against the week before it: one
    #: sentence per alert that fired, or one saying none did (:func:`alert_lines`).
    alerts: list[str] = field(default_factory=list)
    #: Whether the capacity-planning part was gathered (:attr:`ReportOptions.capacity`).
    capacity: bool = True


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """What a report takes besides its selection (the options of ``traceflow report``).

    ``kv_bytes_per_token`` turns tokens into bytes (default: MiniMax-M2 at FP8); ``tiers`` are (name,
    bytes) marks on the hit-ratio chart; ``series_since`` starts the time-series charts (tokens over
    time, concurrent sessions, working set) later than the selection, e.g. at a live stream when the
    lake also holds old imports. ``ttls``, ``idle_after_s`` and ``resolution_s`` go to the text
    summary (:func:`traceflow.analysis.report.build_report`); the charts' buckets are never finer than
    ``resolution_s`` and never more than :data:`MAX_BUCKETS`.
    """

    kv_bytes_per_token: float | None = None
    #: Where ``kv_bytes_per_token`` comes from, in words (``--kv-model``: the model and dtype), for the notes.
    kv_said: str | None = None
    prices: PriceModel | None = None
    resolution_s: float | None = None
    tiers: Sequence[tuple[str, float]] = ()
    series_since: dt.datetime | None = None
    ttls: Sequence[float] = (300.0, 3600.0)
    idle_after_s: float = 900.0
    #: Gather the capacity-planning part (concurrent sessions, KV working set, hit ratio versus
    #: capacity, SSD drive writes): ``traceflow report --capacity``; without it its frames are left out.
    capacity: bool = True


#: A report of the selection alone.
DEFAULT_REPORT_OPTIONS = ReportOptions()


def _time_span(con: duckdb.DuckDBPyConnection, where: str, params: list[Any]) -> tuple[int, float]:
    row = con.execute(
        "SELECT count(*)::BIGINT, coalesce(epoch(max(recorded_time))"
        " - epoch(min(request_time)), 0)::DOUBLE"
        f" FROM requests WHERE {where}",
        params,
    ).fetchall()
    return (int(row[0][0]), float(row[0][1])) if row else (0, 0.0)


def pick_resolution(span_s: float, max_buckets: int = MAX_BUCKETS) -> float:
    """The smallest "nice" bucket width (>= 1 min) that keeps ``span_s`` under ``max_buckets``."""
    for nice in _NICE_S:
        if span_s / nice <= max_buckets:
            return float(nice)
    return float(math.ceil(span_s / max_buckets / 86400) * 86400)


def _top_groups(frame: pl.DataFrame, key: str, limit: int = MAX_GROUPS) -> pl.DataFrame:
    import polars as pl

    kinds = ["cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"]
    # a missing or blank model (agent, ...) is shown as "(unknown)", not as an empty row label
    name = pl.col(key).cast(pl.String)
    frame = frame.with_columns(
        pl.when(name.is_null() | (name.str.strip_chars() == ""))
        .then(pl.lit(UNKNOWN))
        .otherwise(name)
        .alias("group")
    )
    if frame.height > limit:
        ranked = frame.sort("total_tokens", descending=True)
        keep = ranked.head(limit - 1)
        rest = (
            ranked.tail(frame.height - limit + 1)
            .select(kinds)
            .sum()
            .with_columns(pl.lit("other").alias("group"))
        )
        frame = pl.concat([keep.select("group", *kinds), rest.select("group", *kinds)])
    if key == "day":
        frame = frame.sort("group")
    return frame.select("group", *kinds)


def mix_frame(con: duckdb.DuckDBPyConnection, selection: Selection | None) -> pl.DataFrame:
    """Long token mix: overall, then by model, agent and day."""
    import polars as pl

    from traceflow.analysis.mix import token_mix

    parts = []
    overall = token_mix(con, selection).with_columns(pl.lit("all").alias("overall"))
    for dim, frame in [("overall", overall)] + [
        (b, token_mix(con, selection, [b])) for b in ("model", "agent", "day")
    ]:
        if frame.height == 0 or not frame["requests"].sum():
            continue
        top = _top_groups(frame, dim)
        long = top.unpivot(index="group", variable_name="kind", value_name="tokens").with_columns(
            pl.lit(dim).alias("dimension"),
            pl.col("kind").str.replace("_tokens$", ""),
            pl.col("tokens").cast(pl.Int64),
        )
        parts.append(long.select("dimension", "group", "kind", "tokens"))
    if not parts:
        return pl.DataFrame(
            schema={"dimension": pl.String, "group": pl.String, "kind": pl.String, "tokens": pl.Int64}
        )
    return pl.concat(parts)


#: The groupings of the cost chart (each also by model, the stacks of its bars).
COST_DIMENSIONS = ("day", "model", "project", "agent")


def cost_frame(
    con: duckdb.DuckDBPyConnection, selection: Selection | None, prices: PriceModel | None = None
) -> pl.DataFrame:
    """``dimension, group, model, cost_usd, cost_without_cache_usd``: the bill and what it would have
    been without caching (``traceflow mix``'s savings columns) per day, model, project and agent, each
    split by model; at most :data:`MAX_GROUPS` groups per dimension (the costliest; the rest as
    "other"). A group of requests without a model name is not priced (null costs)."""
    import polars as pl

    from traceflow.analysis.mix import token_mix_rows

    schema = {
        "dimension": pl.String,
        "group": pl.String,
        "model": pl.String,
        "cost_usd": pl.Float64,
        "cost_without_cache_usd": pl.Float64,
    }
    rows = []
    for dim in COST_DIMENSIONS:
        by = [dim] if dim == "model" else [dim, "model"]
        for r in token_mix_rows(con, selection, by, prices).records():
            group = r[dim]
            label = UNKNOWN if group is None or not str(group).strip() else str(group)
            model = r["model"] if r["model"] is not None and str(r["model"]).strip() else UNKNOWN
            rows.append((dim, label, model, r["cost_usd"], r["cost_without_cache_usd"]))
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    parts = []
    for dim in COST_DIMENSIONS:
        part = frame.filter(pl.col("dimension") == dim)
        if dim != "day" and part["group"].n_unique() > MAX_GROUPS:
            ranked = (
                part.group_by("group")
                .agg(pl.col("cost_usd").fill_null(0).sum())
                .sort(["cost_usd", "group"], descending=[True, False])
            )
            keep = ranked.head(MAX_GROUPS - 1)["group"].to_list()
            part = (
                part.with_columns(
                    pl.when(pl.col("group").is_in(keep)).then(pl.col("group")).otherwise(pl.lit("other"))
                )
                .group_by("dimension", "group", "model")
                .agg(pl.col("cost_usd").sum(), pl.col("cost_without_cache_usd").sum())
            )
        parts.append(part.select(list(schema)))
    return pl.concat(parts).sort(["dimension", "group", "model"]) if parts else pl.DataFrame(schema=schema)


def alert_lines(con: duckdb.DuckDBPyConnection, selection: Selection | None) -> list[str]:
    """``traceflow check`` of the selection's last whole day (in its zone) against the 7 days before
    it, the selection's filters applied to both: one sentence per alert that fired, else one saying
    that none did (docs/forensics.md#traceflow-check)."""
    from traceflow.analysis.health import check
    from traceflow.store.selection import Selection

    sel = selection or Selection()
    where, params = sel.where()
    last = con.execute(f"SELECT max(request_time) FROM requests WHERE {where}", params).fetchall()
    if not last or last[0][0] is None:
        return []
    health = check(con, dataclasses.replace(sel, since=None, until=None), now=last[0][0])
    day = f"{health.window['since']:%Y-%m-%d}"
    if not health.fired:
        note = f" ({'; '.join(health.notes)})" if health.notes else ""
        return [f"No alert on {day}, the last whole day, against the 7 days before it{note}."]
    return [f"{day}: {_alert_text(f)}" for f in health.fired]


def _alert_text(fired: dict[str, Any]) -> str:
    """One alert of ``traceflow check`` as a sentence."""
    check = fired["check"]
    if check == "reuse_drop":
        return (
            f"the reuse ratio fell {fired['drop']:.1%} (from {fired['baseline']:.1%} to "
            f"{fired['window']:.1%}; alert above {fired['threshold']:.0%})."
        )
    if check == "unexplained_misses":
        return (
            f"unexplained misses rose to {fired['window']:.1%} of requests from {fired['baseline']:.1%} "
            f"({fired['window_unexplained_misses']:,} misses; alert above {fired['threshold']:.0%} points)."
        )
    if check == "write_amplification":
        return (
            f"cache writes per cache read rose {fired['rise']:.0%} (from {fired['baseline']:.3g} to "
            f"{fired['window']:.3g}; alert above {fired['threshold']:.0%})."
        )
    if check == "silence":
        return f"silence: {fired['reason']}"
    if "version" in fired:
        return (
            f"client misses rose with version {fired['version']} after {fired['previous_version']} "
            f"(alert above {fired['threshold']:.0%} points)."
        )
    details = ", ".join(f"{k} {v}" for k, v in fired.items() if k != "check")
    return f"{check}: {details}."


def tokens_frame(series: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    cols = [f"{k}_per_s" for k in TOKEN_KINDS]
    if series.height == 0:
        return pl.DataFrame(
            schema={"bucket_start": pl.Datetime("us", "UTC"), "kind": pl.String, "tokens_per_s": pl.Float64}
        )
    return (
        series.select("bucket_start", *cols)
        .unpivot(index="bucket_start", variable_name="kind", value_name="tokens_per_s")
        .with_columns(
            pl.col("kind").str.replace("_tokens_per_s$", ""), pl.col("tokens_per_s").cast(pl.Float64)
        )
    )


def reuse_frame(sessions: pl.DataFrame, bins: int = 20) -> pl.DataFrame:
    """Sessions binned by reuse ratio (20 bins of 5 %)."""
    import polars as pl

    schema = {"lo": pl.Float64, "hi": pl.Float64, "sessions": pl.Int64, "tokens": pl.Int64}
    if sessions.height == 0 or "reuse_ratio" not in sessions.columns:
        return pl.DataFrame(schema=schema)
    s = sessions.filter(pl.col("reuse_ratio").is_not_null()).with_columns(
        (pl.col("reuse_ratio").clip(0, 1) * bins).floor().clip(0, bins - 1).cast(pl.Int64).alias("b"),
        (pl.col("cold_input_tokens") + pl.col("cache_read_tokens") + pl.col("cache_write_tokens")).alias("t"),
    )
    agg = s.group_by("b").agg(
        pl.len().cast(pl.Int64).alias("sessions"), pl.col("t").sum().cast(pl.Int64).alias("tokens")
    )
    return (
        agg.sort("b")
        .select(
            (pl.col("b") / bins).alias("lo"), ((pl.col("b") + 1) / bins).alias("hi"), "sessions", "tokens"
        )
        .cast(schema)  # type: ignore[arg-type]
    )


#: Sessions of the misses chart (most missed tokens first), each linked to its timeline.
MISS_SESSIONS = 10
#: Requests shown of each linked session's timeline in the HTML report.
TIMELINE_ROWS = 300


def misses_frame(
    con: duckdb.DuckDBPyConnection, selection: Selection | None, prices: PriceModel | None = None
) -> pl.DataFrame:
    """One row per miss cause (``session`` null): ``session, cause, misses, missed_tokens,
    miss_cost_usd`` (see :mod:`traceflow.analysis.misses`); then, for the :data:`MISS_SESSIONS` sessions
    with the most missed tokens, one row per session and cause of its misses."""
    import polars as pl

    from traceflow.analysis.misses import CAUSES, MissOptions, miss_counts

    counts = miss_counts(con, selection, ["session"], MissOptions(prices=prices)).filter(
        pl.col("cause").is_not_null()
    )
    totals = counts.group_by("cause").agg(
        pl.col("misses").sum(), pl.col("missed_tokens").sum(), pl.col("miss_cost_usd").sum()
    )
    by_cause = {r["cause"]: r for r in totals.iter_rows(named=True)}
    rows = [
        {
            "session": None,
            "cause": c,
            "misses": int(by_cause[c]["misses"]) if c in by_cause else 0,
            "missed_tokens": int(by_cause[c]["missed_tokens"]) if c in by_cause else 0,
            "miss_cost_usd": float(by_cause[c]["miss_cost_usd"]) if c in by_cause else 0.0,
        }
        for c in CAUSES
    ]
    per_session = counts.filter(pl.col("session").is_not_null() & (pl.col("missed_tokens") > 0))
    top = (
        per_session.group_by("session")
        .agg(pl.col("missed_tokens").sum())
        .sort(["missed_tokens", "session"], descending=[True, False])
        .head(MISS_SESSIONS)["session"]
        .to_list()
    )
    linked = per_session.filter(pl.col("session").is_in(top)).sort(["session", "cause"])
    for r in linked.iter_rows(named=True):
        rows.append({k: r[k] for k in ("session", "cause", "misses", "missed_tokens", "miss_cost_usd")})
    return pl.DataFrame(
        rows,
        schema={
            "session": pl.String,
            "cause": pl.String,
            "misses": pl.Int64,
            "missed_tokens": pl.Int64,
            "miss_cost_usd": pl.Float64,
        },
    )


def timeline_texts(
    con: duckdb.DuckDBPyConnection, misses: pl.DataFrame, prices: PriceModel | None = None
) -> dict[str, str]:
    """The terminal timeline (``traceflow timeline``) of each session of the misses chart, as text
    (at most :data:`TIMELINE_ROWS` requests each)."""
    from traceflow.analysis.misses import MissOptions
    from traceflow.analysis.timeline import headline, table, timelines
    from traceflow.output import Rows, render

    if misses.is_empty() or "session" not in misses.columns:
        return {}
    sessions = sorted({s for s in misses["session"].to_list() if s is not None})
    out = {}
    for session, records in timelines(con, sessions, MissOptions(prices=prices)).items():
        shown = table(records[:TIMELINE_ROWS])
        more = len(records) - TIMELINE_ROWS
        tail = f"\n({more:,} more requests: traceflow timeline {session})" if more > 0 else ""
        out[session] = headline(session, records) + "\n" + render(Rows.of(shown), "table") + tail
    return out


def context_frame(
    con: duckdb.DuckDBPyConnection,
    where: str,
    params: list[Any],
    sessions: int = MAX_SESSIONS,
    points: int = MAX_POINTS,
) -> pl.DataFrame:
    """Context per request of the main stream of the longest sessions (thinned to ``points`` each)."""
    from traceflow.store.sql import query_frame

    # the longest sessions first (an aggregate), then the requests of those only: no copy of every
    # main-stream request of the lake
    main = (
        f"FROM requests WHERE ({where}) AND session_id IS NOT NULL AND parent_session_id IS NULL "
        "AND request_time IS NOT NULL"
    )
    sql = f"""
WITH top AS (
    SELECT session_id AS s, count(*) AS n, min(epoch(request_time)) AS t0 {main}
    GROUP BY s ORDER BY n DESC, s LIMIT {int(sessions)}
),
main AS (
    SELECT session_id AS s, epoch(request_time) AS t, context_tokens AS ctx {main}
      AND session_id IN (SELECT s FROM top)
),
numbered AS (
    SELECT m.s, (m.t - top.t0) / 60.0 AS elapsed_min, m.ctx, top.n,
           row_number() OVER (PARTITION BY m.s ORDER BY m.t) - 1 AS i
    FROM main m JOIN top USING (s)
)
SELECT left(s, 8) AS session, elapsed_min, ctx AS context_tokens
FROM numbered
WHERE i % greatest(1, ceil(n / {int(points)}))::BIGINT = 0 OR i = n - 1
ORDER BY session, elapsed_min
"""
    return query_frame(con, sql, [*params, *params])  # the selection twice: top, then main


def ttft_frame(con: duckdb.DuckDBPyConnection, where: str, params: list[Any]) -> pl.DataFrame:
    """Requests with a time to first token, in log-spaced bins (4 per decade)."""
    from traceflow.store.sql import query_frame

    sql = f"""
SELECT power(10, b / 4.0) AS lo_ms, power(10, (b + 1) / 4.0) AS hi_ms, count(*)::BIGINT AS requests
FROM (SELECT floor(log10(greatest(ttft_ms, 1)) * 4)::BIGINT AS b FROM requests
      WHERE ({where}) AND ttft_ms IS NOT NULL AND ttft_ms > 0)
GROUP BY b ORDER BY b
"""
    return query_frame(con, sql, params)


def dwpd_frame(
    con: duckdb.DuckDBPyConnection, where: str, params: list[Any], kv_bytes_per_token: float, zone: str
) -> pl.DataFrame:
    """Per day in ``zone`` (the selection's): the cache writes as KV bytes, as drive writes per day of
    the assumed SSD array (:data:`traceflow.kv.sizing.DEFAULT_SSD`, the defaults of ``traceflow size``)."""
    import polars as pl

    from traceflow.kv.sizing import DEFAULT_SSD, dwpd
    from traceflow.store import zones
    from traceflow.store.sql import query_frame

    day = zones.period_sql("day", "request_time", zone)  # the day in --tz
    sql = f"""
SELECT {day} AS day,
       coalesce(sum(cache_write_tokens), 0)::BIGINT AS write_tokens,
       (epoch(max(recorded_time))
        - epoch(min(request_time)))::DOUBLE AS span_s
FROM requests WHERE ({where}) AND request_time IS NOT NULL
GROUP BY day ORDER BY day
"""
    frame = query_frame(con, sql, params)
    if frame.height == 0 or not frame["write_tokens"].sum():
        return pl.DataFrame(schema={"day": pl.String, "dwpd": pl.Float64, "rated_dwpd": pl.Float64})
    rows = []
    for r in frame.to_dicts():
        # a partial day (a short demo) is scaled to the rate over the part that has traffic
        seconds = min(max(r["span_s"] or 0.0, 60.0), 86_400.0)
        rate = r["write_tokens"] * kv_bytes_per_token / seconds
        rows.append(
            {
                "day": r["day"],
                "dwpd": dwpd(
                    rate, DEFAULT_SSD.drives, DEFAULT_SSD.drive_bytes, DEFAULT_SSD.raid, DEFAULT_SSD.waf
                ),
                "rated_dwpd": DEFAULT_SSD.rated_dwpd,
            }
        )
    return pl.DataFrame(rows)


def hit_ratio_frame(
    con: duckdb.DuckDBPyConnection,
    where: str,
    params: list[Any],
    kv_bytes_per_token: float,
    tiers: Sequence[tuple[str, float]] = (),
    block_size: int = 512,
    limit: int = MAX_SWEEP_REQUESTS,
) -> pl.DataFrame:
    """Hit ratio versus LRU capacity for the most recent ``limit`` requests (prefix chains from the
    token counts, as ``traceflow simulate`` builds them when the lake has no hash ids)."""
    import polars as pl

    from traceflow.kv.simulate import sweep
    from traceflow.kv.trace import chains_from_counts

    schema = {
        "capacity_bytes": pl.Float64,
        "hit_ratio": pl.Float64,
        "token_hit_ratio": pl.Float64,
        "tier": pl.String,
    }
    rows = con.execute(
        f"""SELECT * FROM (
            SELECT epoch(request_time)::DOUBLE AS t,
                   coalesce(session_id, event_id) || '/' || coalesce(parent_session_id, '') AS stream,
                   context_tokens AS ctx
            FROM requests WHERE ({where}) AND request_time IS NOT NULL
            ORDER BY t DESC LIMIT {int(limit)}) WHERE ctx > 0 ORDER BY t""",
        params,
    ).fetchall()
    if len(rows) < 2:
        return pl.DataFrame(schema=schema)
    trace = chains_from_counts(
        [r[0] for r in rows], [r[1] for r in rows], [int(r[2]) for r in rows], block_size
    )
    block_bytes = int(block_size * kv_bytes_per_token)
    curve = sweep(trace, None, block_bytes)
    out = [
        {
            "capacity_bytes": float(p["capacity_bytes"]),
            "hit_ratio": p["hit_ratio"],
            "token_hit_ratio": p["token_hit_ratio"],
            "tier": None,
        }
        for p in curve
    ]
    out += [
        {"capacity_bytes": float(b), "hit_ratio": None, "token_hit_ratio": None, "tier": name}
        for name, b in tiers
    ]
    return pl.DataFrame(out, schema=schema)


def gather(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    options: ReportOptions = DEFAULT_REPORT_OPTIONS,
) -> ReportData:
    """Run the analyses over the selection and aggregate one frame per chart (``options``: see
    :class:`ReportOptions`)."""
    import polars as pl

    from traceflow.analysis.load import load_series
    from traceflow.analysis.report import build_report
    from traceflow.analysis.sessions import sessions as session_rows
    from traceflow.analysis.ttl import ttl_whatif
    from traceflow.analysis.working_set import working_set_series
    from traceflow.store import time_base
    from traceflow.store.lake import share_rollup
    from traceflow.store.selection import Selection
    from traceflow.store.sql import share_steps

    share_steps(con)  # the per-stream window computed once for all the report's queries
    share_rollup(con)  # and the token sums per day, model, agent and session, for its mixes
    sel = selection or Selection()
    where, params = sel.where()
    n, _ = _time_span(con, where, params)
    # the time charts cover one time base (the real telemetry where the selection mixes them)
    series_sel, series_sources, _ = time_base.series_selection(sel, time_base.selection_sources(con, sel))
    if options.series_since is not None and (sel.since is None or options.series_since > sel.since):
        series_sel = dataclasses.replace(series_sel, since=options.series_since)
    series_n, span = _time_span(con, *series_sel.where())
    res = max(float(options.resolution_s or 0.0), pick_resolution(span))
    kv = float(options.kv_bytes_per_token or DEFAULT_KV_BYTES_PER_TOKEN)
    report = build_report(
        con,
        sel,
        ttls=tuple(options.ttls),
        prices=options.prices,
        kv_bytes_per_token=options.kv_bytes_per_token,
        idle_after_s=options.idle_after_s,
        # the headline figures at the headline resolution, as `report` and `working-set` compute them;
        # only the charts take the coarser buckets of a long selection
        resolution_s=time_base.headline_resolution(options.resolution_s),
    )
    out = ReportData(
        report=report,
        resolution_s=res,
        kv_bytes_per_token=kv,
        requests=n,
        series_since=series_sel.since,
        time_base=time_base.bases(series_sources)[0] if series_sources else time_base.AGENT,
        capacity=options.capacity,
    )
    f = out.frames
    f["cost"] = cost_frame(con, sel, options.prices) if n else pl.DataFrame()
    f["savings"] = f["cost"]
    out.alerts = alert_lines(con, sel) if n else []
    f["token_mix"] = mix_frame(con, sel)
    series = load_series(con, series_sel, res) if series_n else pl.DataFrame()
    f["tokens_over_time"] = tokens_frame(series)
    if options.capacity:
        f["concurrent_sessions"] = (
            series.select("bucket_start", "active_sessions", "new_sessions")
            if series.height
            else pl.DataFrame()
        )
    f["reuse_ratio"] = reuse_frame(session_rows(con, sel)) if n else reuse_frame(pl.DataFrame())
    f["gaps"] = report.gap_histogram
    f["ttl_cost"] = ttl_whatif(con, sel, CURVE_TTLS, options.prices)
    f["misses"] = misses_frame(con, sel, options.prices) if n else pl.DataFrame()
    out.timelines = timeline_texts(con, f["misses"], options.prices)
    f["context_growth"] = context_frame(con, where, params)
    f["ttft"] = ttft_frame(con, where, params)
    if not options.capacity:  # the capacity-planning part is not drawn: not gathered either
        return out
    ws = []
    given_kv = options.kv_bytes_per_token
    for ttl in (300.0, 3600.0):
        s = working_set_series(con, series_sel, ttl, res, given_kv) if series_n else pl.DataFrame()
        if s.height:
            from traceflow.units import format_duration

            cols = ["bucket_start", "tokens"] + (["bytes"] if "bytes" in s.columns else [])
            ws.append(s.select(cols).with_columns(pl.lit(f"{format_duration(ttl)} TTL").alias("ttl")))
    f["working_set"] = pl.concat(ws) if ws else pl.DataFrame()
    f["hit_ratio"] = hit_ratio_frame(con, where, params, kv, options.tiers)
    f["dwpd"] = dwpd_frame(con, where, params, kv, sel.zone)
    return out
