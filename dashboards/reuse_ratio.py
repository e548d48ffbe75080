"""Distribution of the per-session reuse ratio (cache reads / input tokens), pre-binned.

Frame: ``lo``, ``hi`` (bin edges in 0..1), ``sessions``, ``tokens`` (input tokens of those sessions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import bar_histogram

if TYPE_CHECKING:
    import polars as pl

TITLE = "Reuse ratio per session"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    return bar_histogram(
        frame,
        title=TITLE,
        color="#4c78a8",
        edges=("lo", "hi"),
        edge_format=".0%",
        x={
            "title": "reuse ratio (cache read / input tokens)",
            "scale": alt.Scale(domain=[0, 1]),
            "axis": alt.Axis(format="%"),
        },
        count="sessions",
        more_tooltip=(alt.Tooltip("tokens:Q", format=",.0f", title="input tokens"),),
    )
