"""One summary of every analysis for a selection: reuse, gaps against the TTLs and what they cost,
sessions, arrivals, and the KV working set (``traceflow report``).

:func:`build_report` runs the analyses (each one pass over the lake) and returns a :class:`Report`
of frames; :meth:`Report.as_dict` is the JSON contract, :func:`render_markdown` and
:func:`render_text` are for people. The headline sentences answer the questions the report exists
for: the reuse ratio, how often gaps outlive the 5-minute and 1-hour TTLs and what that costs, and
how much KV the sessions would occupy.

The time sections (arrivals and load, the KV working set) cover one time base: a selection that
mixes agent telemetry with public serving traces has them over the agent telemetry only (unless
``--source`` selects a trace), and ``time_base`` (a headline sentence too) says what they cover and
what was left out (:mod:`traceflow.store.time_base`). Their headline figures are taken at the
headline resolution (:func:`traceflow.store.time_base.headline_resolution`: one minute unless
``--resolution`` says otherwise, coarser only past the bucket cap), printed beside each figure; the
dashboard and ``working-set`` take them at the same, so they agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from traceflow.analysis import gaps as gaps_mod
from traceflow.prices import PriceModel
from traceflow.units import format_duration, format_size

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.analysis.ttl import TtlResult
    from traceflow.output import Rows
    from traceflow.store.selection import Selection


@dataclass(frozen=True)
class Report:
    """The frames behind ``traceflow report``."""

    mix: pl.DataFrame  # one row: traceflow.analysis.mix.COLUMNS
    gap_summary: pl.DataFrame  # one row: traceflow.analysis.gaps.summary_columns(ttls)
    gap_histogram: pl.DataFrame
    ttl: TtlResult
    sessions: pl.DataFrame  # one row: traceflow.analysis.sessions.SUMMARY
    load: pl.DataFrame  # one row: traceflow.analysis.load.load_summary
    working_set: pl.DataFrame  # one row per TTL: traceflow.analysis.working_set.SUMMARY_COLUMNS
    ttls: tuple[float, ...]
    idle_after_s: float
    kv_bytes_per_token: float | None
    #: ``series``: the time base of the time sections (None without requests); ``sources``: each
    #: source's time base; ``note``: what the time sections leave out, when the selection mixes them.
    time_base: dict[str, Any] = field(default_factory=dict)
    #: Per UTC day: cache write and read tokens and their ratio, the write amplification.
    write_amplification: pl.DataFrame | None = None

    def gaps_dict(self) -> dict[str, Any]:
        rows = self.gap_summary.to_dicts()
        out = gaps_mod._group_object(rows[0], self.ttls, ()) if rows else {}
        out["ttls"] = list(self.ttls)
        out["histogram"] = self.gap_histogram.to_dicts()
        return out

    def as_dict(self) -> dict[str, Any]:
        """The ``traceflow report --format json`` object (stable keys)."""
        return {
            "headline": headline(self),
            "mix": _one(self.mix),
            "gaps": self.gaps_dict(),
            "ttl": self.ttl.as_dict(),
            "sessions": _one(self.sessions),
            "load": _one(self.load),
            "working_set": self.working_set.to_dicts(),
            "write_amplification": (
                self.write_amplification.to_dicts() if self.write_amplification is not None else []
            ),
            "time_base": self.time_base,
            "settings": {
                "ttls": list(self.ttls),
                "idle_after_s": self.idle_after_s,
                "kv_bytes_per_token": self.kv_bytes_per_token,
            },
        }


def _one(frame: pl.DataFrame) -> dict[str, Any]:
    rows = frame.to_dicts()
    return rows[0] if rows else {}


def build_report(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    ttls: Sequence[float] = (300.0, 3600.0),
    prices: PriceModel | None = None,
    kv_bytes_per_token: float | None = None,
    idle_after_s: float = 900.0,
    resolution_s: float = 60.0,
) -> Report:
    """Run every analysis over the selection (the time sections over one time base of it:
    :func:`traceflow.store.time_base.series_selection`)."""
    from traceflow.analysis.load import arrivals_note, load_series, load_summary
    from traceflow.analysis.mix import token_mix
    from traceflow.analysis.sessions import session_summary
    from traceflow.analysis.ttl import ttl_list, ttl_report
    from traceflow.analysis.working_set import working_set_summary
    from traceflow.store import time_base
    from traceflow.store.lake import share_rollup
    from traceflow.store.sql import Engine, share_steps

    if not isinstance(con, Engine):
        share_steps(con)  # the per-stream window computed once for all the report's queries
        share_rollup(con)  # and the token sums per day, model, agent and session, for its mixes
    all_ttls = tuple(ttl_list(ttls))
    sources = time_base.selection_sources(con, selection)
    series_sel, series_sources, note = time_base.series_selection(selection, sources)
    applies, arrivals = arrivals_note(series_sources)
    bases = time_base.bases(series_sources)
    summary = gaps_mod.gap_summary(con, selection, all_ttls, histogram=True)
    return Report(
        mix=token_mix(con, selection, prices=prices),
        gap_summary=summary.drop("hist"),
        gap_histogram=gaps_mod._histogram_from_maps(summary.to_dicts()[0]),
        ttl=ttl_report(con, selection, all_ttls, prices),
        sessions=session_summary(con, selection, idle_after_s=idle_after_s),
        load=load_summary(
            load_series(con, series_sel, resolution_s), resolution_s, arrivals=applies, note=arrivals
        ),
        working_set=working_set_summary(con, series_sel, all_ttls, resolution_s, kv_bytes_per_token),
        write_amplification=write_amplification_by_day(con, selection),
        ttls=all_ttls,
        idle_after_s=idle_after_s,
        kv_bytes_per_token=kv_bytes_per_token,
        time_base={
            "series": bases[0] if bases else None,
            "sources": {str(s.source): s.time_base for s in sources},
            "note": note,
        },
    )


def write_amplification_by_day(con: duckdb.DuckDBPyConnection, selection: Selection | None) -> pl.DataFrame:
    """Per UTC day (``mix --by day``): ``day, cache_write_tokens, cache_read_tokens,
    write_amplification`` (writes / reads; null on a day without reads)."""
    import polars as pl

    from traceflow.analysis.mix import token_mix_rows

    rows = token_mix_rows(con, selection, ["day"]).records()
    return pl.DataFrame(
        [
            {
                "day": r["day"],
                "cache_write_tokens": r["cache_write_tokens"],
                "cache_read_tokens": r["cache_read_tokens"],
                "write_amplification": (
                    r["cache_write_tokens"] / r["cache_read_tokens"] if r["cache_read_tokens"] else None
                ),
            }
            for r in rows
        ],
        schema={
            "day": pl.String,
            "cache_write_tokens": pl.Int64,
            "cache_read_tokens": pl.Int64,
            "write_amplification": pl.Float64,
        },
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _count(x: float | None, noun: str) -> str:
    """``x`` and ``noun``, plural unless ``x`` prints as 1: ``1 turn``, ``2 turns``, ``1.5 turns``.

    >>> _count(1, "turn"), _count(2.0, "turn"), _count(1.5, "turn"), _count(None, "turn")
    ('1 turn', '2 turns', '1.5 turns', 'n/a turns')
    """
    text = _num(x)
    return f"{text} {noun}" if text == "1" else f"{text} {noun}s"


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.2f}{unit}"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _buckets(resolution_s: float | None) -> str:
    """The bucket width a figure was taken at, in words: "1-minute buckets"."""
    if not resolution_s:
        return "buckets n/a"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if resolution_s >= size and resolution_s % size == 0:
            return f"{resolution_s / size:g}-{unit} buckets"
    return f"{resolution_s:g}-second buckets"


def headline(report: Report) -> list[str]:
    """The report's findings as sentences."""
    lines: list[str] = []
    mix = _one(report.mix)
    sess = _one(report.sessions)
    if not mix.get("requests"):
        return ["No requests in the selection."]
    inputs = mix["cold_input_tokens"] + mix["cache_read_tokens"] + mix["cache_write_tokens"]
    n_sessions = f"{sess['sessions']:,} sessions" if sess.get("sessions") is not None else "no sessions"
    lines.append(
        f"Reuse ratio {_pct(mix.get('reuse_ratio'))} of {_num(inputs)} input tokens in "
        f"{mix['requests']:,} requests ({n_sessions}); "
        f"{_pct(mix.get('share_cache_read'))} of all tokens were cache reads, "
        f"{_pct(mix.get('share_cache_write'))} cache writes."
    )
    if mix.get("savings_share") is not None or mix.get("unpriced_tokens"):
        from traceflow.analysis.mix import savings_line

        lines.append(savings_line(mix))
    g = report.gaps_dict()
    if g.get("gaps"):
        parts = []
        for t in report.ttls:
            key = f"{t:g}"
            share, human = g["share_over"][key], g["human"]["share_over"][key]
            parts.append(f"{_pct(share)} of gaps ({_pct(human)} of human gaps) outlive {format_duration(t)}")
        lines.append(
            f"Idle gaps: {'; '.join(parts)}. Median gap {_dur(g['p50_s'])}, "
            f"median human gap {_dur(g['human']['p50_s'])}, p99 {_dur(g['p99_s'])}."
        )
    w = report.ttl.whatif
    if w.height:
        costs = ", ".join(
            f"{r['ttl']} {_usd(r['cost_usd'])} ({_pct(r['share_requests_expired'])} of requests expire)"
            for r in w.to_dicts()
        )
        best = report.ttl.best_ttl_s
        best_label = format_duration(best) if best else "n/a"
        lines.append(f"TTL what-if ({report.ttl.prices.describe()}): {costs}; best TTL: {best_label}.")
        five = w.filter(w["ttl_s"] == 300.0).to_dicts()
        if five and five[0]["expiry_cost_usd"]:
            lines.append(
                f"Under the 5-minute TTL, expired prefixes ({_num(five[0]['rewrite_tokens'])} tokens) "
                f"add {_usd(five[0]['expiry_cost_usd'])} over reading them from the cache."
            )
    v = report.ttl.validation
    if v.height:
        rows = {r["gap_class"]: r for r in v.to_dicts()}
        longer = [
            rows[c] for c in ("medium", "long") if c in rows and rows[c].get("write_vs_short") is not None
        ]
        if "short" in rows and longer:
            ratio = ", ".join(f"{_num(r['write_vs_short'])}x after {r['gap_class']} gaps" for r in longer)
            lines.append(
                f"Data check: requests wrote {ratio} as much cache per request as after gaps under "
                f"{format_duration(rows['short']['gap_to_s'])}."
            )
    if report.time_base.get("note"):
        lines.append(report.time_base["note"])
    for r in report.working_set.to_dicts():
        extra = ""
        if r.get("peak_bytes") is not None:
            extra = f" = {format_size(r['peak_bytes'])} peak, {format_size(r['p95_bytes'])} p95"
        lines.append(
            f"KV working set at a {r['ttl']} TTL ({_buckets(r.get('resolution_s'))}): "
            f"peak {_num(r['peak_tokens'])} tokens, p95 {_num(r['p95_tokens'])}, "
            f"mean {_num(r['mean_tokens'])}{extra}."
        )
    if sess.get("sessions"):
        lines.append(
            f"Sessions: median {_count(sess['requests_p50'], 'request')} and "
            f"{_count(sess['turns_p50'], 'turn')} "
            f"over {_dur(sess['duration_p50_s'])}; context {_num(sess['context_start_p50'])} -> "
            f"{_num(sess['context_end_p50'])} tokens (median), "
            f"{_num(sess['growth_per_turn_mean'])} per turn; "
            f"{sess['sessions_with_compaction']:,} compacted, "
            f"{sess['sessions_with_idle_return']:,} came back after {_dur(report.idle_after_s)} idle "
            f"(reloading {_num(sess['idle_return_reload_tokens'])} tokens)."
        )
        if sess.get("write_amplification") is not None:
            lines.append(
                f"Write amplification (cache writes / reads): {sess['write_amplification']:.3g} overall; "
                f"per session median {sess['write_amplification_p50']:.3g}, "
                f"max {sess['write_amplification_max']:.3g}."
            )
    ld = _one(report.load)
    if ld.get("new_sessions_per_min") is None:  # too few sessions for a rate (one, say)
        if ld.get("note"):
            lines.append(f"Arrivals: {ld['note']}.")
    elif ld.get("sessions"):
        verdict = "consistent with Poisson" if ld.get("poisson") else "not Poisson"
        within = ld.get("index_of_dispersion_within_hour")
        within_text = f"; {within:.2f} within each hour" if within is not None else ""
        p_value = f"{ld['p_value']:.2g}" if ld.get("p_value") is not None else "n/a"
        rate = ld.get("new_sessions_per_min")
        peak = ld.get("active_sessions_peak")
        per_s = ld.get("requests_per_s_peak")
        lines.append(
            f"Arrivals ({_buckets(ld.get('resolution_s'))}): "
            f"{'n/a' if rate is None else f'{rate:.3g}'} new sessions/min, index of dispersion "
            f"{_num(ld['index_of_dispersion'])} (p = {p_value}: {verdict}{within_text}); "
            f"peak {'n/a' if peak is None else f'{peak:,}'} sessions open, "
            f"{'n/a' if per_s is None else f'{per_s:.3g}'} requests/s."
        )
    return lines


def gap_rows(gaps: dict[str, Any], ttls: Sequence[float], *, max_row: bool = False) -> list[tuple[Any, ...]]:
    """The rows (metric, all, human, agent) of a gap report (``gaps.gap_report``): the counts and
    percentiles, ``max_s`` when ``max_row``, then the share of gaps over each TTL."""
    rows: list[tuple[Any, ...]] = [
        (m, gaps[m], gaps["human"].get(m), gaps["agent"].get(m))
        for m in ("gaps", "p50_s", "p90_s", "p99_s", "mean_s")
    ]
    if max_row:
        rows.append(("max_s", gaps["max_s"], None, None))
    for t in ttls:
        key = f"{t:g}"
        shares = (gaps[side]["share_over"][key] for side in ("human", "agent"))
        rows.append((f"share_over_{format_duration(t)}", gaps["share_over"][key], *shares))
    return rows


def _section_tables(report: Report) -> list[tuple[str, Rows | pl.DataFrame]]:
    from traceflow.output import Rows

    g = report.gaps_dict()
    gap_frame = Rows(
        ["metric", "all", "human", "agent"], gap_rows(g, report.ttls) if g.get("gaps") is not None else []
    )
    return [
        ("Token mix", report.mix),
        ("Idle gaps", gap_frame),
        (
            "Gap histogram",
            report.gap_histogram.select("label", "gaps", "human_gaps", "agent_gaps", "share", "cum_share"),
        ),
        (
            "TTL what-if",
            report.ttl.whatif.select(
                "ttl",
                "share_requests_expired",
                "rewrite_tokens",
                "share_tokens_rewritten",
                "cost_usd",
                "expiry_cost_usd",
                "best",
            ),
        ),
        ("Cache writes after short and long gaps (observed)", report.ttl.validation),
        ("Sessions", _transpose(report.sessions)),
        *(
            [("Write amplification per day", report.write_amplification)]
            if report.write_amplification is not None
            else []
        ),
        ("Arrivals and load", _transpose(report.load)),
        ("KV working set", report.working_set),
    ]


def _transpose(frame: pl.DataFrame) -> Rows:
    from traceflow.output import Rows

    return Rows(["metric", "value"], list(_one(frame).items()))


def render_markdown(report: Report) -> str:
    """The report as Markdown: headline bullets, then one table per analysis."""
    from traceflow.output import render

    out = ["# traceflow report", ""]
    out += [f"- {line}" for line in headline(report)]
    for title, frame in _section_tables(report):
        out += ["", f"## {title}", "", render(frame, "markdown")]
    return "\n".join(out) + "\n"


def render_text(report: Report, *, wide: bool = False) -> str:
    """The report as plain text tables (``--format table``): sentences wrap at 100 characters, or
    the terminal's width where it is narrower (as the tables fit it, unless ``wide``: ``--wide``)."""
    import textwrap

    from traceflow.output import Display, render, table_width

    width = min(100, table_width(wide=wide) or 100)
    out = ["traceflow report", "================", ""]
    out += [
        textwrap.fill(line, width=width, initial_indent="* ", subsequent_indent="  ")
        for line in headline(report)
    ]
    for title, frame in _section_tables(report):
        out += ["", title, "-" * len(title), render(frame, "table", display=Display(wide=wide))]
    return "\n".join(out) + "\n"
