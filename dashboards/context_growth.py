"""Context growth per session: context tokens of each request against time since the session began.

Frame: ``session`` (label), ``elapsed_min``, ``context_tokens`` (one row per request of the
sessions shown; the report picks the longest sessions and thins their points).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Context growth per session"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "session", "elapsed_min", "context_tokens"):
        return no_data(TITLE)
    return top(
        alt.Chart(data(frame))
        .mark_line(interpolate="step-after", strokeWidth=1.2, opacity=0.8)
        .encode(
            x=alt.X("elapsed_min:Q", title="minutes since the session's first request"),
            y=alt.Y("context_tokens:Q", title="context tokens (input incl. cache)"),
            color=alt.Color("session:N", legend=None),
            tooltip=[
                "session:N",
                alt.Tooltip("elapsed_min:Q", format=".1f"),
                alt.Tooltip("context_tokens:Q", format=",.0f"),
            ],
        )
        .properties(title=TITLE, width=WIDTH, height=HEIGHT)
    )
