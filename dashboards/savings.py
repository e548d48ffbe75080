"""The bill against what it would have been without prompt caching, per day.

Frame: :func:`traceflow.dashboards.report_data.cost_frame` (its ``day`` rows: ``group`` is the day,
``cost_usd`` the bill, ``cost_without_cache_usd`` every input token priced as cold input).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "The bill with prompt caching and without it"
SERIES = {"cost_usd": "billed (with caching)", "cost_without_cache_usd": "without caching"}
COLORS = alt.Scale(domain=list(SERIES.values()), range=["#4c78a8", "#bab0ac"])


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    import polars as pl

    if is_empty(frame, "dimension", "group", "cost_usd", "cost_without_cache_usd"):
        return no_data(TITLE)
    days = (
        frame.filter(pl.col("dimension") == "day")
        .group_by("group")
        .agg(pl.col("cost_usd").sum(), pl.col("cost_without_cache_usd").sum())
    )
    if days.is_empty() or not days["cost_without_cache_usd"].fill_null(0).sum():
        return no_data(TITLE, "No data priced in this selection (no request names a priced model)")
    billed, without = float(days["cost_usd"].sum()), float(days["cost_without_cache_usd"].sum())
    long = (
        days.rename({"group": "day"})
        .unpivot(index="day", on=list(SERIES), variable_name="series", value_name="usd")
        .with_columns(pl.col("series").replace_strict(SERIES))
    )
    subtitle = f"billed ${billed:,.2f}; without caching ${without:,.2f}; saved ${without - billed:,.2f}"
    return top(
        alt.Chart(data(long))
        .mark_line(point=True)
        .encode(
            x=alt.X("day:O", title="day", axis=alt.Axis(labelAngle=-45)),
            y=alt.Y("usd:Q", title="USD per day", axis=alt.Axis(format="$,.0f")),
            color=alt.Color("series:N", scale=COLORS, title=None, legend=alt.Legend(orient="top")),
            tooltip=["day:O", "series:N", alt.Tooltip("usd:Q", format="$,.2f", title="cost")],
        )
        .properties(title=alt.TitleParams(TITLE, subtitle=subtitle), width=WIDTH, height=HEIGHT)
    )
