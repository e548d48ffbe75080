"""Tokens per second by kind over time (stacked), from the load series.

Frame (long): ``bucket_start`` (datetime), ``kind``, ``tokens_per_s``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import (
    HEIGHT,
    KIND_COLORS,
    KIND_LABELS,
    KINDS,
    WIDTH,
    data,
    is_empty,
    no_data,
    top,
    utc_axis,
)

if TYPE_CHECKING:
    import polars as pl

TITLE = "Tokens per second by kind"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "bucket_start", "kind", "tokens_per_s"):
        return no_data(TITLE)
    import polars as pl

    frame = frame.with_columns(
        pl.col("kind").replace_strict(KIND_LABELS, default=pl.col("kind")).alias("kind"),
        pl.col("kind").replace_strict({k: i for i, k in enumerate(KINDS)}, default=9).alias("order"),
    )
    return top(
        alt.Chart(data(frame))
        .mark_area(interpolate="step-after")
        .encode(
            x=alt.X("bucket_start:T", title="time (UTC)", scale=alt.Scale(type="utc"), axis=utc_axis()),
            y=alt.Y("tokens_per_s:Q", stack="zero", title="tokens / s"),
            color=alt.Color("kind:N", scale=KIND_COLORS, title="kind"),
            order=alt.Order("order:Q"),
            tooltip=["bucket_start:T", "kind:N", alt.Tooltip("tokens_per_s:Q", format=",.1f")],
        )
        .properties(title=TITLE, width=WIDTH, height=HEIGHT)
    )
