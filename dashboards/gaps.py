"""Inter-turn idle gaps on a log scale, human and agent stacked, against the 5 min and 1 h TTLs.

Frame: :func:`traceflow.analysis.gaps.gap_histogram` (``label, lo_s, hi_s, human_gaps, agent_gaps,
unknown_gaps``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top, values

if TYPE_CHECKING:
    import polars as pl

TITLE = "Idle gaps between requests (log scale)"
TTLS = ({"ttl_s": 300.0, "ttl": "5 min TTL"}, {"ttl_s": 3600.0, "ttl": "1 h TTL"})
FLOOR_S = 0.05  # a log axis has no 0: the first bin starts here


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if (
        is_empty(frame, "lo_s", "hi_s", "label")
        or not frame.select([c for c in ("human_gaps", "agent_gaps", "unknown_gaps") if c in frame.columns])
        .sum_horizontal()
        .sum()
    ):
        return no_data(TITLE)
    import polars as pl

    kinds = [c for c in ("human_gaps", "agent_gaps", "unknown_gaps") if c in frame.columns]
    long = (
        frame.select("label", "lo_s", "hi_s", *kinds)
        .with_columns(
            pl.col("lo_s").clip(lower_bound=FLOOR_S).alias("x0"),
            pl.coalesce(pl.col("hi_s"), pl.col("lo_s") * 2).alias("x1"),
        )
        .unpivot(index=["label", "x0", "x1"], on=kinds, variable_name="kind", value_name="gaps")
        .with_columns(pl.col("kind").str.replace("_gaps", ""))
        .drop("lo_s", "hi_s", strict=False)
        .filter(pl.col("gaps") > 0)
    )
    bars = (
        alt.Chart(data(long))
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("x0:Q", scale=alt.Scale(type="log"), title="idle gap before a request (seconds, log)"),
            x2="x1:Q",
            y=alt.Y("sum(gaps):Q", stack="zero", title="gaps"),
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(
                    domain=["human", "agent", "unknown"], range=["#e45756", "#4c78a8", "#bab0ac"]
                ),
                title="gap",
            ),
            tooltip=["label:N", "kind:N", alt.Tooltip("sum(gaps):Q", title="gaps")],
        )
    )
    ttl = alt.Chart(values(list(TTLS)))
    rules = ttl.mark_rule(color="black", strokeDash=[4, 3]).encode(x="ttl_s:Q")
    labels = ttl.mark_text(align="left", dx=4, dy=-4, baseline="top", fontSize=11).encode(
        x="ttl_s:Q", y=alt.value(0), text="ttl:N"
    )
    return top((bars + rules + labels).properties(title=TITLE, width=WIDTH, height=HEIGHT))
