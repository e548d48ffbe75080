"""Cache misses by cause: how many requests missed the prompt cache, why, and the tokens they lost;
and the sessions that lost the most, each bar a link to the session's timeline in the report.

Frame: :func:`traceflow.dashboards.report_data.misses_frame` (``session, cause, misses,
missed_tokens, miss_cost_usd``: one row per cause of :data:`traceflow.analysis.misses.CAUSES` with
``session`` null, then one per session and cause of the sessions with the most missed tokens; a frame
without ``session`` has the cause rows only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.analysis.misses import CAUSES
from traceflow.analysis.timeline import anchor
from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Cache misses by cause"
ORDER = list(CAUSES)


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    import polars as pl

    if is_empty(frame, "cause", "misses", "missed_tokens") or not frame["misses"].sum():
        return no_data(TITLE)
    has_sessions = "session" in frame.columns
    causes = frame.filter(pl.col("session").is_null()) if has_sessions else frame
    base = alt.Chart(data(causes)).encode(
        y=alt.Y("cause:N", sort=ORDER, title=None),
        tooltip=[
            "cause:N",
            alt.Tooltip("misses:Q", format=",", title="misses"),
            alt.Tooltip("missed_tokens:Q", format=",", title="missed tokens"),
            alt.Tooltip("miss_cost_usd:Q", format="$,.2f", title="cost"),
        ],
    )
    count = base.mark_bar(color="#e45756").encode(x=alt.X("misses:Q", title="misses (requests)"))
    tokens = base.mark_bar(color="#4c78a8").encode(
        x=alt.X("missed_tokens:Q", title="missed tokens (reusable prefix not read)")
    )
    half = (WIDTH - 40) // 2
    panels = alt.hconcat(
        count.properties(width=half, height=HEIGHT // 2),
        tokens.properties(width=half, height=HEIGHT // 2),
    )
    sessions = frame.filter(pl.col("session").is_not_null()) if has_sessions else frame.clear()
    if sessions.is_empty():
        return top(panels.properties(title=TITLE))
    sessions = sessions.with_columns(
        pl.col("session").map_elements(lambda s: "#" + anchor(s), return_dtype=pl.String).alias("href")
    )
    order = (
        sessions.group_by("session").agg(pl.col("missed_tokens").sum()).sort("missed_tokens", descending=True)
    )["session"].to_list()
    linked = (
        alt.Chart(data(sessions), title="Sessions with the most missed tokens (click: its timeline)")
        .mark_bar(cursor="pointer")
        .encode(
            y=alt.Y("session:N", sort=order, title=None),
            x=alt.X("sum(missed_tokens):Q", title="missed tokens"),
            color=alt.Color("cause:N", sort=ORDER, title="cause"),
            href="href:N",
            tooltip=[
                "session:N",
                "cause:N",
                alt.Tooltip("misses:Q", format=",", title="misses"),
                alt.Tooltip("missed_tokens:Q", format=",", title="missed tokens"),
                alt.Tooltip("miss_cost_usd:Q", format="$,.2f", title="cost"),
            ],
        )
        .properties(width=WIDTH - 200, height=max(60, 18 * len(order)))
    )
    return top(alt.vconcat(panels, linked).properties(title=TITLE))
