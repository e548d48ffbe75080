"""Helpers shared by the chart modules: frames to inline Vega data, the "no data" chart, colours."""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Any, cast

import altair as alt

if TYPE_CHECKING:
    import polars as pl

WIDTH = 820
HEIGHT = 260

#: The four token kinds, in stacking order, and their colours (the same in every chart).
KINDS = ("cache_read", "cache_write", "cold_input", "output")
KIND_LABELS = {
    "cache_read": "cache read",
    "cache_write": "cache write",
    "cold_input": "cold input",
    "output": "output",
}
KIND_COLORS = alt.Scale(
    domain=[KIND_LABELS[k] for k in KINDS], range=["#4c78a8", "#f58518", "#e45756", "#54a24b"]
)


def utc_axis(**kwargs: Any) -> alt.Axis:
    """A time axis in UTC with 24-hour labels: ``HH:MM``, and the date (``Mon DD``) at midnight."""
    expr = (
        "utchours(datum.value) == 0 && utcminutes(datum.value) == 0"
        " ? utcFormat(datum.value, '%b %d') : utcFormat(datum.value, '%H:%M')"
    )
    return alt.Axis(labelExpr=expr, labelOverlap=True, **kwargs)


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def values(rows: list[dict[str, Any]]) -> alt.Data:
    """Rows as inline Vega data."""
    return alt.Data(values=rows)  # type: ignore[no-untyped-call]


def data(frame: pl.DataFrame) -> alt.Data:
    """The frame as inline Vega data: times as ISO-8601 UTC strings, NaN/inf as null."""
    return values([{k: _plain(v) for k, v in row.items()} for row in frame.to_dicts()])


def top(chart: Any) -> alt.TopLevelMixin:
    """The finished chart, typed (altair's chained methods are untyped)."""
    return cast("alt.TopLevelMixin", chart)


def is_empty(frame: pl.DataFrame | None, *required: str) -> bool:
    """True when there is nothing to draw: no frame, no rows, or a required column missing."""
    return frame is None or frame.height == 0 or any(c not in frame.columns for c in required)


#: Times before this are relative: offsets from a trace's start stored from 1970-01-01 UTC
#: (:mod:`traceflow.store.time_base`); no real telemetry is this old.
RELATIVE_BEFORE = dt.datetime(1990, 1, 1, tzinfo=dt.UTC)
_OFFSET_UNITS = (("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0))


def time_axis(frame: pl.DataFrame, field: str = "bucket_start") -> tuple[pl.DataFrame, alt.X, Any]:
    """The x encoding and tooltip of a time series: UTC times, or for a relative-time trace offsets
    from its start (``+2 h``), never 1970 dates. Returns the frame (with an ``offset`` label column
    for relative times), the x channel and the tooltip field."""
    import polars as pl

    last = frame[field].max()
    if not isinstance(last, dt.datetime) or last.replace(tzinfo=last.tzinfo or dt.UTC) >= RELATIVE_BEFORE:
        x = alt.X(f"{field}:T", title="time (UTC)", scale=alt.Scale(type="utc"), axis=utc_axis())
        return frame, x, f"{field}:T"
    seconds = (
        last.replace(tzinfo=last.tzinfo or dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    ).total_seconds()
    unit, size = next(((u, s) for u, s in _OFFSET_UNITS if seconds >= 2 * s), ("s", 1.0))
    ms = size * 1000
    frame = frame.with_columns(
        pl.format("+{} " + unit, (pl.col(field).dt.epoch("ms") / ms).round(2)).alias("offset")
    )
    x = alt.X(
        f"{field}:T",
        title="time since the trace's start",
        scale=alt.Scale(type="utc"),
        axis=alt.Axis(
            labelExpr=f"'+' + format(datum.value / {ms:g}, '.3~g') + ' {unit}'",
            description=f"time since the trace's start, from +0 to +{seconds / size:.3g} {unit}",
        ),
    )
    return frame, x, alt.Tooltip("offset:N", title="time since start")


def no_data(title: str, message: str = "No data in this selection") -> alt.TopLevelMixin:
    """A placeholder that says plainly why the chart is empty (never an error, never a blank box)."""
    return top(
        alt.Chart(values([{"message": message}]))
        .mark_text(size=16, color="#888")
        .encode(text="message:N")
        .properties(title=title, width=WIDTH, height=80)
    )


def bar_histogram(
    frame: pl.DataFrame,
    *,
    title: str,
    color: str,
    edges: tuple[str, str],
    edge_format: str,
    x: dict[str, Any],
    count: str,
    unit: str = "",
    more_tooltip: tuple[Any, ...] = (),
    empty: str = "No data in this selection",
) -> alt.TopLevelMixin:
    """A pre-binned histogram: one bar per row from column ``edges[0]`` to ``edges[1]`` (``x``: the
    x channel's options), ``count`` high from zero; the tooltip gives the edges (``edge_format``,
    titled "from"/"to" and ``unit``), the count and ``more_tooltip``. With no rows, a column missing
    or no counts, the :func:`no_data` placeholder saying ``empty``."""
    lo, hi = edges
    if is_empty(frame, lo, hi, count) or not frame[count].sum():
        return no_data(title, empty)
    suffix = f" {unit}" if unit else ""
    return top(
        alt.Chart(data(frame))
        .mark_bar(color=color, stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X(f"{lo}:Q", **x),
            x2=f"{hi}:Q",
            # bars from zero: y alone with x/x2 would draw thin strips at each count
            y=alt.Y(f"{count}:Q", title=count, scale=alt.Scale(zero=True)),
            y2=alt.datum(0),
            tooltip=[
                alt.Tooltip(f"{lo}:Q", format=edge_format, title="from" + suffix),
                alt.Tooltip(f"{hi}:Q", format=edge_format, title="to" + suffix),
                f"{count}:Q",
                *more_tooltip,
            ],
        )
        .properties(title=title, width=WIDTH, height=HEIGHT)
    )
