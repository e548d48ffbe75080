"""Time to first token, pre-binned on a log scale.

Frame: ``lo_ms``, ``hi_ms`` (bin edges), ``requests``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Time to first token"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "lo_ms", "hi_ms", "requests") or not frame["requests"].sum():
        return no_data(TITLE, "No time-to-first-token data in this selection")
    return top(
        alt.Chart(data(frame))
        .mark_bar(color="#72b7b2", stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X(
                "lo_ms:Q",
                scale=alt.Scale(type="log"),
                title="time to first token (ms, log)",
                axis=alt.Axis(format="~s", labelOverlap="greedy", labelSeparation=6, labelFlush=True),
            ),
            x2="hi_ms:Q",
            # bars from zero: y alone with x/x2 would draw thin strips at each count
            y=alt.Y("requests:Q", title="requests", scale=alt.Scale(zero=True)),
            y2=alt.datum(0),
            tooltip=[
                alt.Tooltip("lo_ms:Q", format=",.0f", title="from ms"),
                alt.Tooltip("hi_ms:Q", format=",.0f", title="to ms"),
                "requests:Q",
            ],
        )
        .properties(title=TITLE, width=WIDTH, height=HEIGHT)
    )
