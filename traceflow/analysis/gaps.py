"""Inter-turn idle gaps (docs/forensics.md#traceflow-gaps): how long a session sits idle between requests,
against cache TTLs.

Within a session *stream* (one ``(session_id, parent_session_id)``: a sub-agent is its own stream),
requests are ordered by ``(started_at, seq)`` and a request's idle gap is its ``started_at`` minus
the latest ``ended_at`` among the earlier requests of the stream (the previous request's, unless an
earlier one overlapping it ended later), clamped at 0. A gap is an *agent* gap when both requests
serve the same ``prompt_id`` (a tool loop), a *human* gap when the prompt is new, *unknown* when the
source has no prompt ids. Gaps are computed over the whole lake and the selection keeps the gaps of
its requests (the first request of a window keeps its gap), so gap counts add up over disjoint
windows. The SQL is ``queries/gaps.sql`` and ``queries/gap_histogram.sql``; this module aggregates
them in DuckDB (nothing per gap reaches Python).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from traceflow.store import groups, sql
from traceflow.store.quantiles import Column, Quantile, grouped_sql
from traceflow.store.selection import zone_of
from traceflow.units import format_duration

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

#: TTLs (seconds) whose share of longer gaps is reported by default: the providers' 5 min and 1 h.
DEFAULT_TTLS: tuple[float, ...] = (300.0, 3600.0)

QUANTILES = (0.5, 0.9, 0.99)
KINDS = ("human", "agent")

#: Histogram bin edges in seconds (a bin holds lo <= gap < hi; the last is open-ended), roughly
#: log-spaced with edges at the 5-minute and 1-hour TTLs; ``queries/gap_histogram.sql`` uses the same.
BIN_EDGES: tuple[float, ...] = (
    0.0,
    0.1,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1200.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    28800.0,
    86400.0,
)


#: The histogram key of a gap: bin * 4 + kind code (human 1, agent 2, unknown 3); gap_bin is the
#: bin of :data:`BIN_EDGES` that ``queries/steps.sql`` computes.
_HIST_KEY = "gap_bin * 4 + CASE kind WHEN 'human' THEN 1 WHEN 'agent' THEN 2 ELSE 3 END"


#: The mean gap in seconds, summed as whole microseconds (``gap_s`` is a count of them over 1e6,
#: ``queries/steps.sql``): integers add up to the same sum in any order, where DuckDB adds the
#: partial sums of a float column in the order its threads finish, which changed the mean's last
#: digit from run to run (and one lake's mean from another's with the same gaps).
_MEAN_S = "avg(CAST(round(gap_s * 1e6) AS BIGINT)){filter} / 1e6"


def _ttl_key(ttl_s: float) -> str:
    return f"{ttl_s:g}".replace(".", "_")


def summary_columns(ttls: Sequence[float]) -> list[str]:
    """The columns of :func:`gap_summary` after the ``by`` columns."""
    cols = ["gaps", "human_gaps", "agent_gaps", "unknown_gaps", "p50_s", "p90_s", "p99_s", "mean_s", "max_s"]
    cols += [f"share_over_{_ttl_key(t)}" for t in ttls]
    for kind in KINDS:
        cols += [f"{kind}_p50_s", f"{kind}_p90_s", f"{kind}_p99_s", f"{kind}_mean_s"]
        cols += [f"{kind}_share_over_{_ttl_key(t)}" for t in ttls]
    return cols


def _selection(selection: Selection | None) -> tuple[dict[str, str], dict[str, Any]]:
    block, params = sql.selection_block(selection)
    return {"selection": block, "order": ""}, params


def gap_rows(con: duckdb.DuckDBPyConnection, selection: Selection | None = None) -> pl.DataFrame:
    """One row per gap (the columns of ``queries/gaps.sql``), ordered by session and position."""
    block, params = sql.selection_block(selection)
    return sql.run(con, "gaps", params, blocks={"selection": block})


def gap_summary(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    ttls: Sequence[float] = DEFAULT_TTLS,
    by: Sequence[str] = (),
    *,
    histogram: bool = False,
) -> pl.DataFrame:
    """Counts, exact quantiles (p50/p90/p99), mean and max of the gaps, and the share of gaps longer
    than each TTL; overall and for human and agent gaps; one row, or one per ``by`` group.

    Columns: the ``by`` names, then :func:`summary_columns` (``share_over_300`` is the share of
    gaps longer than 300 s; NULL quantiles where a group has no gaps of that kind). With
    ``histogram`` also ``hist``: a map from ``bin * 4 + kind`` (bin: index into :data:`BIN_EDGES`;
    kind: 1 human, 2 agent, 3 unknown) to count, computed in the same pass.
    """
    keys = groups.row_keys(by, zone=zone_of(selection), kind=True)
    by_rank = isinstance(con, sql.Engine)  # another engine (Spark): quantiles by rank, store.quantiles
    columns: list[Column] = [
        ("gaps", "count(*)::BIGINT"),
        ("human_gaps", "count(*) FILTER (WHERE kind = 'human')::BIGINT"),
        ("agent_gaps", "count(*) FILTER (WHERE kind = 'agent')::BIGINT"),
        ("unknown_gaps", "count(*) FILTER (WHERE kind = 'unknown')::BIGINT"),
        ("q_all", Quantile("gap_s", QUANTILES)),
        ("mean_s", _MEAN_S.format(filter="")),
        ("max_s", "max(gap_s)"),
    ]
    columns += [
        (f"share_over_{_ttl_key(t)}", f"avg(CASE WHEN gap_s > {float(t)!r} THEN 1.0 ELSE 0.0 END)")
        for t in ttls
    ]
    for kind in KINDS:
        columns.append((f"q_{kind}", Quantile("gap_s", QUANTILES, f"kind = '{kind}'")))
        columns.append((f"{kind}_mean_s", _MEAN_S.format(filter=f" FILTER (WHERE kind = '{kind}')")))
        columns += [
            (
                f"{kind}_share_over_{_ttl_key(t)}",
                f"avg(CASE WHEN gap_s > {float(t)!r} THEN 1.0 ELSE 0.0 END) FILTER (WHERE kind = '{kind}')",
            )
            for t in ttls
        ]
    blocks, params = _selection(selection)
    # With stored steps the histogram is a separate scan, run concurrently on a second cursor (the
    # quantiles' final sort leaves a core idle); otherwise it rides along in the same pass, so the
    # window is computed once. DuckDB evaluates histogram() through a materialised copy of the
    # input, which at 100 M gaps costs more than the second scan.
    # Another engine (Spark) has no histogram(): it always counts the bins in a second query.
    separate = histogram and not by and (isinstance(con, sql.Engine) or sql.uses_stored_steps(con))
    if histogram and not separate:
        columns.append(("hist", f"histogram({_HIST_KEY})"))
    inner = grouped_sql(keys, columns, by_rank=by_rank)
    outer_cols = [groups.ident(b) for b in by] + [
        "gaps",
        "human_gaps",
        "agent_gaps",
        "unknown_gaps",
        "q_all[1] AS p50_s",
        "q_all[2] AS p90_s",
        "q_all[3] AS p99_s",
        "mean_s",
        "max_s",
    ]
    outer_cols += [f"share_over_{_ttl_key(t)}" for t in ttls]
    for kind in KINDS:
        outer_cols += [
            f"q_{kind}[1] AS {kind}_p50_s",
            f"q_{kind}[2] AS {kind}_p90_s",
            f"q_{kind}[3] AS {kind}_p99_s",
        ]
        outer_cols.append(f"{kind}_mean_s")
        outer_cols += [f"{kind}_share_over_{_ttl_key(t)}" for t in ttls]
    if histogram and not separate:
        outer_cols.append("hist")
    wrap = f"SELECT {', '.join(outer_cols)} FROM ({inner}) AS s"
    if not separate:
        return sql.run(con, "gaps", params, blocks=blocks, wrap=wrap)
    import polars as pl

    hist_wrap = f"SELECT {_HIST_KEY} AS k, count(*) AS n FROM {{q}} AS g GROUP BY 1"
    if isinstance(con, sql.Engine):
        summary = sql.run(con, "gaps", params, blocks=blocks, wrap=wrap)
        counts = sql.run(con, "gaps", params, blocks=blocks, wrap=hist_wrap)
        as_map = [{"key": k, "value": n} for k, n in counts.sort("k").iter_rows()]
        return summary.with_columns(pl.Series("hist", [as_map]))
    cursor = con.cursor()  # the same database and views, its own connection
    try:
        with cf.ThreadPoolExecutor(max_workers=1) as pool:
            hist = pool.submit(sql.run, cursor, "gaps", params, blocks=blocks, wrap=hist_wrap)
            summary = sql.run(con, "gaps", params, blocks=blocks, wrap=wrap)
            counts = hist.result()
    finally:
        cursor.close()
    as_map = [{"key": k, "value": n} for k, n in counts.sort("k").iter_rows()]
    return summary.with_columns(pl.Series("hist", [as_map]))


def gap_histogram(con: duckdb.DuckDBPyConnection, selection: Selection | None = None) -> pl.DataFrame:
    """Gaps in log-spaced bins (``queries/gap_histogram.sql``) with ``label``, ``share`` and ``cum_share``."""

    block, params = sql.selection_block(selection)
    frame = sql.run(con, "gap_histogram", params, blocks={"selection": block})
    return _finish_histogram(frame.drop("bin"))


def _histogram_from_maps(row: dict[str, Any]) -> pl.DataFrame:
    """The :func:`gap_histogram` frame from the ``hist`` map of a :func:`gap_summary` row."""
    import polars as pl

    value = row.get("hist") or {}
    if isinstance(value, list):  # a MAP may come as a list of key/value structs
        value = {kv["key"]: kv["value"] for kv in value}
    all_: dict[int, int] = {}
    human: dict[int, int] = {}
    agent: dict[int, int] = {}
    unknown: dict[int, int] = {}
    for key, count in dict(value).items():
        b, code = divmod(int(key), 4)
        all_[b] = all_.get(b, 0) + int(count)
        target = {1: human, 2: agent}.get(code, unknown)
        target[b] = target.get(b, 0) + int(count)
    bins = sorted(all_)
    frame = pl.DataFrame(
        {
            "lo_s": [BIN_EDGES[b] for b in bins],
            "hi_s": [BIN_EDGES[b + 1] if b + 1 < len(BIN_EDGES) else None for b in bins],
            "gaps": [all_[b] for b in bins],
            "human_gaps": [human.get(b, 0) for b in bins],
            "agent_gaps": [agent.get(b, 0) for b in bins],
            "unknown_gaps": [unknown.get(b, 0) for b in bins],
        },
        schema={
            "lo_s": pl.Float64,
            "hi_s": pl.Float64,
            "gaps": pl.Int64,
            "human_gaps": pl.Int64,
            "agent_gaps": pl.Int64,
            "unknown_gaps": pl.Int64,
        },
    )
    return _finish_histogram(frame)


def _finish_histogram(frame: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    total = frame["gaps"].sum() if frame.height else 0

    def label(lo: float, hi: float | None) -> str:
        return f">= {format_duration(lo)}" if hi is None else f"{format_duration(lo)}-{format_duration(hi)}"

    labels = [label(lo, hi) for lo, hi in zip(frame["lo_s"].to_list(), frame["hi_s"].to_list(), strict=True)]
    return frame.with_columns(
        pl.Series("label", labels, dtype=pl.String),
        (pl.col("gaps") / total if total else pl.lit(None, pl.Float64)).alias("share"),
        (pl.col("gaps").cum_sum() / total if total else pl.lit(None, pl.Float64)).alias("cum_share"),
    ).select(
        "label", "lo_s", "hi_s", "gaps", "human_gaps", "agent_gaps", "unknown_gaps", "share", "cum_share"
    )


def _share_map(row: dict[str, Any], prefix: str, ttls: Sequence[float]) -> dict[str, Any]:
    return {f"{t:g}": row.get(f"{prefix}share_over_{_ttl_key(t)}") for t in ttls}


def _group_object(row: dict[str, Any], ttls: Sequence[float], by: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {b: row[b] for b in by}
    for key in (
        "gaps",
        "human_gaps",
        "agent_gaps",
        "unknown_gaps",
        "p50_s",
        "p90_s",
        "p99_s",
        "mean_s",
        "max_s",
    ):
        out[key] = row.get(key)
    out["share_over"] = _share_map(row, "", ttls)
    for kind in KINDS:
        out[kind] = {
            "gaps": row.get(f"{kind}_gaps"),
            "p50_s": row.get(f"{kind}_p50_s"),
            "p90_s": row.get(f"{kind}_p90_s"),
            "p99_s": row.get(f"{kind}_p99_s"),
            "mean_s": row.get(f"{kind}_mean_s"),
            "share_over": _share_map(row, f"{kind}_", ttls),
        }
    return out


def gap_report(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    ttls: Sequence[float] = DEFAULT_TTLS,
    by: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``traceflow gaps --format json`` object (stable keys).

    ``gaps, human_gaps, agent_gaps, unknown_gaps, p50_s, p90_s, p99_s, mean_s, max_s``,
    ``share_over`` (TTL seconds as a string -> share of gaps longer), ``human`` and ``agent`` (the
    same for that kind), ``ttls``, ``histogram`` (list of bins) and, with ``by``, ``groups`` (one
    object like the top level, without histogram, per group).
    """
    overall = gap_summary(con, selection, ttls, histogram=True).to_dicts()[0]
    out = _group_object(overall, ttls, ())
    out["ttls"] = [float(t) for t in ttls]
    out["histogram"] = _histogram_from_maps(overall).to_dicts()
    if by:
        out["by"] = list(by)
        out["groups"] = [_group_object(r, ttls, by) for r in gap_summary(con, selection, ttls, by).to_dicts()]
    return out
