"""Sessions open at once and new sessions per bucket, over time (from the load series).

Frame: ``bucket_start`` (datetime), ``active_sessions``, ``new_sessions``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top, utc_axis

if TYPE_CHECKING:
    import polars as pl

TITLE = "Concurrent sessions"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "bucket_start", "active_sessions"):
        return no_data(TITLE)
    base = alt.Chart(data(frame)).encode(
        x=alt.X("bucket_start:T", title="time (UTC)", scale=alt.Scale(type="utc"), axis=utc_axis())
    )
    active = base.mark_area(interpolate="step-after", color="#4c78a8", opacity=0.5, line=True).encode(
        y=alt.Y("active_sessions:Q", title="sessions open / new per bucket"),
        tooltip=["bucket_start:T", "active_sessions:Q"]
        + (["new_sessions:Q"] if "new_sessions" in frame.columns else []),
    )
    layers = [active]
    if "new_sessions" in frame.columns:
        layers.append(base.mark_bar(color="#f58518", opacity=0.8).encode(y="new_sessions:Q"))
    return top(alt.layer(*layers).properties(title=TITLE, width=WIDTH, height=HEIGHT))
