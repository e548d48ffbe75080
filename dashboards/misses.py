"""Cache misses by cause: what the misses cost in dollars and how many requests missed the prompt
cache, by cause; and the sessions that lost the most, each bar (their misses' cost by cause) a link to
the session's timeline in the report. Every panel colours a cause alike (:data:`CAUSE_COLORS`).

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
#: One colour per cause, the same in every panel and legend whichever causes a selection has (a scale
#: taken from the data gave ``unexplained`` the colour of ``ttl_expired`` in a panel without the others).
CAUSE_COLORS = alt.Scale(
    domain=ORDER, range=["#9ecae9", "#b279a2", "#f58518", "#4c78a8", "#e45756", "#72b7b2", "#7f7f7f"]
)


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
    color = alt.Color("cause:N", scale=CAUSE_COLORS, sort=ORDER, title="cause")
    cost = base.mark_bar().encode(
        x=alt.X("miss_cost_usd:Q", title="what the misses cost (USD)", axis=alt.Axis(format="$,.2f")),
        color=color,
    )
    count = base.mark_bar().encode(x=alt.X("misses:Q", title="misses (requests)"), color=color)
    half = (WIDTH - 200) // 2
    panels = alt.hconcat(
        cost.properties(width=half, height=HEIGHT // 2),
        count.properties(width=half, height=HEIGHT // 2),
    )
    sessions = frame.filter(pl.col("session").is_not_null()) if has_sessions else frame.clear()
    if sessions.is_empty():
        return top(panels.properties(title=TITLE))
    sessions = sessions.with_columns(
        pl.col("session").map_elements(lambda s: "#" + anchor(s), return_dtype=pl.String).alias("href")
    )
    order = (
        sessions.group_by("session")
        .agg(pl.col("miss_cost_usd").fill_null(0).sum(), pl.col("missed_tokens").sum())
        .sort(["miss_cost_usd", "missed_tokens", "session"], descending=[True, True, False])
    )["session"].to_list()  # ties by session id: the same order on every run
    linked = (
        alt.Chart(data(sessions), title="Sessions with the most missed tokens (click: its timeline)")
        .mark_bar(cursor="pointer")
        .encode(
            y=alt.Y("session:N", sort=order, title=None),
            x=alt.X(
                "sum(miss_cost_usd):Q", title="what their misses cost (USD)", axis=alt.Axis(format="$,.2f")
            ),
            color=color,
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
