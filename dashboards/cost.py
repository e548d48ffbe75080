"""What the agents cost: per day, per model, per project and per agent, each bar stacked by model with
its total at its end.

Frame: :func:`traceflow.dashboards.report_data.cost_frame` (``dimension, group, model, cost_usd,
cost_without_cache_usd``: one row per group of ``day``, ``model``, ``project`` and ``agent`` and model,
priced as ``traceflow mix`` prices them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Cost per day, model, project and agent"
#: The panels, in order, and their titles.
DIMENSIONS = {"day": "per day", "model": "per model", "project": "per project", "agent": "per agent"}


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    import polars as pl

    if is_empty(frame, "dimension", "group", "model", "cost_usd"):
        return no_data(TITLE)
    if not frame["cost_usd"].fill_null(0).sum():
        return no_data(TITLE, "No data priced in this selection (no request names a priced model)")
    models = sorted({m for m in frame["model"].to_list() if m is not None})
    colors = alt.Scale(domain=models, scheme="tableau10")
    panels = []
    for dim, title in DIMENSIONS.items():
        part = frame.filter((pl.col("dimension") == dim) & pl.col("cost_usd").is_not_null())
        if part.is_empty():
            continue
        totals = part.group_by("group").agg(pl.col("cost_usd").sum().alias("total_usd"))
        order = (
            sorted(totals["group"].to_list())
            if dim == "day"
            else totals.sort(["total_usd", "group"], descending=[True, False])["group"].to_list()
        )
        y = alt.Y("group:N", sort=order, title=None)
        bars = (
            alt.Chart(data(part))
            .mark_bar()
            .encode(
                y=y,
                x=alt.X("sum(cost_usd):Q", title="cost (USD)", axis=alt.Axis(format="$,.0f")),
                color=alt.Color("model:N", scale=colors, title="model"),
                order=alt.Order("model:N"),
                tooltip=[
                    alt.Tooltip("group:N", title=dim),
                    "model:N",
                    alt.Tooltip("cost_usd:Q", format="$,.2f", title="cost"),
                    alt.Tooltip("cost_without_cache_usd:Q", format="$,.2f", title="without caching"),
                ],
            )
        )
        labels = (
            alt.Chart(data(totals))
            .mark_text(align="left", dx=4, fontSize=11)
            .encode(y=y, x="total_usd:Q", text=alt.Text("total_usd:Q", format="$,.2f"))
        )
        panels.append(
            alt.layer(bars, labels).properties(
                title=f"Cost {title}", width=WIDTH - 160, height=max(40, 16 * len(order))
            )
        )
    return top(alt.vconcat(*panels).properties(title=TITLE).resolve_scale(color="shared"))
