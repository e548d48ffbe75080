"""Sessions open at once and new sessions per bucket, over time (from the load series).

Frame: ``bucket_start`` (datetime), ``active_sessions``, ``new_sessions``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, time_axis, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Concurrent sessions"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "bucket_start", "active_sessions"):
        return no_data(TITLE)
    bucket = bucket_label(frame)
    frame, x, when = time_axis(frame)
    base = alt.Chart(data(frame)).encode(x=x)
    title = f"sessions open (blue) / new (orange) per {bucket} bucket" if bucket else "sessions"
    active = base.mark_area(
        interpolate="step-after", color="#4c78a8", opacity=0.35, line={"color": "#4c78a8"}
    ).encode(
        y=alt.Y("active_sessions:Q", title=title),
        tooltip=[when, "active_sessions:Q"] + (["new_sessions:Q"] if "new_sessions" in frame.columns else []),
    )
    layers = []
    if "new_sessions" in frame.columns:  # under the area, narrow: the open sessions stay visible
        layers.append(
            base.mark_bar(color="#f58518", opacity=0.6, width={"band": 0.5}).encode(y="new_sessions:Q")
        )
    layers.append(active)
    chart_title = alt.TitleParams(TITLE, subtitle=f"{bucket} buckets") if bucket else TITLE
    return top(alt.layer(*layers).properties(title=chart_title, width=WIDTH, height=HEIGHT))


def bucket_label(frame: pl.DataFrame) -> str | None:
    """The series' bucket width (the smallest step between bucket starts) as ``5m``, or None."""
    from traceflow.units import format_duration

    starts = sorted({t for t in frame["bucket_start"].drop_nulls()})
    steps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    steps = [s for s in steps if s > 0]
    return format_duration(min(steps)) if steps else None
