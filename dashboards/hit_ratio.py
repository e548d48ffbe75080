"""Cache hit ratio versus capacity (one LRU stack-distance sweep), with the tiers' capacities marked.

Frame: ``capacity_bytes``, ``hit_ratio``, ``token_hit_ratio`` (:func:`traceflow.kv.simulate.sweep`),
optionally ``tier`` rows: a row with ``tier`` set (and ``capacity_bytes``) draws a labelled rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Prefix-cache hit ratio versus capacity"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "capacity_bytes", "hit_ratio"):
        return no_data(TITLE)
    import polars as pl

    tiers = frame.filter(pl.col("tier").is_not_null()) if "tier" in frame.columns else frame.clear()
    curve = frame.filter(pl.col("tier").is_null()) if "tier" in frame.columns else frame
    curve = curve.filter(pl.col("capacity_bytes") > 0)
    if curve.height == 0:
        return no_data(TITLE)
    measures = [c for c in ("hit_ratio", "token_hit_ratio") if c in curve.columns]
    long = (
        curve.select("capacity_bytes", *measures)
        .unpivot(index="capacity_bytes", variable_name="measure", value_name="ratio")
        .with_columns(
            pl.col("measure").replace({"hit_ratio": "blocks hit", "token_hit_ratio": "prefix tokens hit"})
        )
    )
    x = alt.X("gb:Q", scale=alt.Scale(type="log"), title="cache capacity (GB, log)")
    lines = (
        alt.Chart(data(long))
        .transform_calculate(gb="datum.capacity_bytes / 1e9")
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("ratio:Q", title="hit ratio", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
            color=alt.Color("measure:N", title=None),
            tooltip=[
                alt.Tooltip("gb:Q", format=",.2f", title="GB"),
                "measure:N",
                alt.Tooltip("ratio:Q", format=".1%"),
            ],
        )
    )
    layers: list[alt.Chart] = [lines]
    if tiers.height:
        t = alt.Chart(data(tiers.select("tier", "capacity_bytes"))).transform_calculate(
            gb="datum.capacity_bytes / 1e9"
        )
        layers.append(t.mark_rule(strokeDash=[4, 3], color="black").encode(x="gb:Q"))
        layers.append(
            t.mark_text(align="left", dx=3, baseline="top", fontSize=11).encode(
                x="gb:Q", y=alt.value(2), text="tier:N"
            )
        )
    return top(alt.layer(*layers).properties(title=TITLE, width=WIDTH, height=HEIGHT))
