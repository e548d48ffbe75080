"""Cache misses by cause: how many requests missed the prompt cache, why, and the tokens they lost.

Frame: :func:`traceflow.dashboards.report_data.misses_frame` (``cause, misses, missed_tokens,
cost_usd``, one row per cause of :data:`traceflow.analysis.misses.CAUSES`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "Cache misses by cause"
ORDER = ["first_request", "model_switch", "compaction", "ttl_expired", "unexplained"]


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "cause", "misses", "missed_tokens") or not frame["misses"].sum():
        return no_data(TITLE)
    base = alt.Chart(data(frame)).encode(
        y=alt.Y("cause:N", sort=ORDER, title=None),
        tooltip=[
            "cause:N",
            alt.Tooltip("misses:Q", format=",", title="misses"),
            alt.Tooltip("missed_tokens:Q", format=",", title="missed tokens"),
            alt.Tooltip("cost_usd:Q", format="$,.2f", title="cost"),
        ],
    )
    count = base.mark_bar(color="#e45756").encode(x=alt.X("misses:Q", title="misses (requests)"))
    tokens = base.mark_bar(color="#4c78a8").encode(
        x=alt.X("missed_tokens:Q", title="missed tokens (reusable prefix not read)")
    )
    half = (WIDTH - 40) // 2
    return top(
        alt.hconcat(
            count.properties(width=half, height=HEIGHT // 2),
            tokens.properties(width=half, height=HEIGHT // 2),
        ).properties(title=TITLE)
    )
