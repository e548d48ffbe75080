"""Time to first token, pre-binned on a log scale.

Frame: ``lo_ms``, ``hi_ms`` (bin edges), ``requests``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import bar_histogram

if TYPE_CHECKING:
    import polars as pl

TITLE = "Time to first token"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    return bar_histogram(
        frame,
        title=TITLE,
        color="#72b7b2",
        edges=("lo_ms", "hi_ms"),
        edge_format=",.0f",
        unit="ms",
        x={
            "scale": alt.Scale(type="log"),
            "title": "time to first token (ms, log)",
            "axis": alt.Axis(format="~s", labelOverlap="greedy", labelSeparation=6, labelFlush=True),
        },
        count="requests",
        empty="No time-to-first-token data in this selection",
    )
