"""SSD drive writes per day if every new KV block (the cache writes) were written to an SSD tier.

Frame: ``day`` (date or string), ``dwpd`` (drive writes per day of that day's traffic), optionally
``rated_dwpd`` (the drives' endurance rating, drawn as a rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top, values

if TYPE_CHECKING:
    import polars as pl

TITLE = "SSD tier: drive writes per day"
#: The rating is drawn as a rule only when the busiest day reaches this share of it.
RULE_FROM = 0.1


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "day", "dwpd"):
        return no_data(TITLE)
    bars = (
        alt.Chart(data(frame))
        .mark_bar(color="#9d755d")
        .encode(
            x=alt.X("day:N", title="day (UTC)"),
            y=alt.Y("dwpd:Q", title="drive writes per day"),
            tooltip=["day:N", alt.Tooltip("dwpd:Q", format=",.3f")],
        )
    )
    layers = [bars]
    title: str | alt.TitleParams = TITLE
    if "rated_dwpd" in frame.columns and frame["rated_dwpd"].null_count() < frame.height:
        rated = float(frame["rated_dwpd"].drop_nulls()[0])
        peak = float(frame["dwpd"].max() or 0.0)  # type: ignore[arg-type]
        if peak >= RULE_FROM * rated:
            rule = alt.Chart(values([{"rated": rated, "label": f"rated {rated:g} DWPD"}]))
            layers.append(rule.mark_rule(color="#e45756", strokeDash=[4, 3]).encode(y="rated:Q"))
            layers.append(
                rule.mark_text(align="left", x=4, dy=-6, color="#e45756").encode(y="rated:Q", text="label:N")
            )
        else:
            # A rule at the rating would stretch the axis until the bars vanish: the axis follows
            # the data and the rating is stated above it.
            title = alt.TitleParams(
                TITLE,
                subtitle=f"peak {peak:.3g} DWPD: {peak / rated:.2%} of the drives' rated {rated:g} DWPD",
            )
    return top(alt.layer(*layers).properties(title=title, width=WIDTH, height=HEIGHT))
