"""KV working set over time: the context a cache must hold at once, for each TTL.

Frame (long): ``bucket_start`` (datetime), ``ttl`` (label), ``tokens``, and optionally ``bytes``
(tokens × KV bytes per token); bytes are plotted when present.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top, utc_axis

if TYPE_CHECKING:
    import polars as pl

TITLE = "KV working set over time"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "bucket_start", "ttl", "tokens"):
        return no_data(TITLE)
    has_bytes = "bytes" in frame.columns and frame["bytes"].null_count() < frame.height
    y = (
        alt.Y("gb:Q", title="KV working set (GB)")
        if has_bytes
        else alt.Y("tokens:Q", title="KV working set (tokens)")
    )
    base = alt.Chart(data(frame))
    if has_bytes:
        base = base.transform_calculate(gb="datum.bytes / 1e9")
    return top(
        base.mark_line(interpolate="step-after")
        .encode(
            x=alt.X("bucket_start:T", title="time (UTC)", scale=alt.Scale(type="utc"), axis=utc_axis()),
            y=y,
            color=alt.Color("ttl:N", title="TTL"),
            tooltip=["bucket_start:T", "ttl:N", alt.Tooltip("tokens:Q", format=",.0f")]
            + ([alt.Tooltip("gb:Q", format=",.2f", title="GB")] if has_bytes else []),
        )
        .properties(title=TITLE, width=WIDTH, height=HEIGHT)
    )
