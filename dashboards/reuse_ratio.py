"""Distribution of the per-session reuse ratio (cache reads / input tokens), pre-binned.

Frame: ``lo``, ``hi`` (bin edges in 0..1), ``sessions``, ``tokens`` (input tokens of those sessions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Reuse ratio per session"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "lo", "hi", "sessions") or not frame["sessions"].sum():
        return no_data(TITLE)
    return top(
        alt.Chart(data(frame))
        .mark_bar(color="#4c78a8", stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X(
                "lo:Q",
                title="reuse ratio (cache read / input tokens)",
                scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format="%"),
            ),
            x2="hi:Q",
            # bars from zero: y alone with x/x2 would draw thin strips at each count
            y=alt.Y("sessions:Q", title="sessions", scale=alt.Scale(zero=True)),
            y2=alt.datum(0),
            tooltip=[
                alt.Tooltip("lo:Q", format=".0%", title="from"),
                alt.Tooltip("hi:Q", format=".0%", title="to"),
                "sessions:Q",
                alt.Tooltip("tokens:Q", format=",.0f", title="input tokens"),
            ],
        )
        .properties(title=TITLE, width=WIDTH, height=HEIGHT)
    )
