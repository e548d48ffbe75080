"""Token mix: the share of cache reads, cache writes, cold input and output, overall and per group.

Frame (long): ``dimension`` (``overall``, ``model``, ``agent``, ``day``, ...), ``group``, ``kind``
(``cache_read``, ``cache_write``, ``cold_input``, ``output``), ``tokens``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import KIND_COLORS, KIND_LABELS, KINDS, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Token mix"


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "dimension", "group", "kind", "tokens") or not frame["tokens"].sum():
        return no_data(TITLE)
    import polars as pl

    frame = frame.with_columns(
        pl.col("kind").replace_strict(KIND_LABELS, default=pl.col("kind")).alias("kind"),
        pl.col("kind").replace_strict({k: i for i, k in enumerate(KINDS)}, default=9).alias("order"),
    )
    dims = list(dict.fromkeys(frame["dimension"].to_list()))
    base = (
        alt.Chart(data(frame))
        .transform_joinaggregate(group_tokens="sum(tokens)", groupby=["dimension", "group"])
        .transform_calculate(share="datum.group_tokens > 0 ? datum.tokens / datum.group_tokens : 0")
    )
    bars = (
        base.mark_bar()
        .encode(
            x=alt.X(
                "sum(tokens):Q", stack="normalize", title="share of all tokens", axis=alt.Axis(format="%")
            ),
            y=alt.Y("group:N", title=None, sort=None),
            color=alt.Color("kind:N", scale=KIND_COLORS, title="kind"),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("dimension:N"),
                alt.Tooltip("group:N"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("tokens:Q", format=",.0f"),
                alt.Tooltip("share:Q", format=".2%"),
            ],
        )
        .properties(width=WIDTH - 140)
    )
    return top(
        bars.facet(row=alt.Row("dimension:N", title=None, sort=dims, header=alt.Header(labelAngle=0)))
        .resolve_scale(y="independent")
        .properties(title=TITLE)
    )
