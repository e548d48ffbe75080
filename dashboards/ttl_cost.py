"""TTL what-if: what the selection would have cost under each cache TTL, and the share that expires.

Frame: :func:`traceflow.analysis.ttl.ttl_whatif` (``ttl_s, ttl, cost_usd, share_requests_expired, best``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt

from traceflow.dashboards._base import HEIGHT, WIDTH, data, is_empty, no_data, top

if TYPE_CHECKING:
    import polars as pl

TITLE = "TTL what-if: cost and expired requests per cache TTL"
RED = "#e45756"
#: Vega expression: an axis value in seconds as ``30s``, ``5m``, ``1h``, ``1d``.
DURATION_LABEL = (
    "datum.value >= 86400 ? format(datum.value / 86400, '.3~g') + 'd'"
    " : datum.value >= 3600 ? format(datum.value / 3600, '.3~g') + 'h'"
    " : datum.value >= 60 ? format(datum.value / 60, '.3~g') + 'm'"
    " : format(datum.value, '.3~g') + 's'"
)


def chart(frame: pl.DataFrame) -> alt.TopLevelMixin:
    if is_empty(frame, "ttl_s", "cost_usd") or ("requests" in frame.columns and not frame["requests"].sum()):
        return no_data(TITLE)
    import polars as pl

    if "best" not in frame.columns:
        frame = frame.with_columns(pl.lit(False).alias("best"))
    if "share_requests_expired" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.Float64).alias("share_requests_expired"))
    if "ttl" not in frame.columns:
        frame = frame.with_columns(pl.col("ttl_s").cast(pl.String).alias("ttl"))
    ticks = sorted({float(t) for t in frame["ttl_s"].drop_nulls() if t and t > 0})
    base = alt.Chart(data(frame)).encode(
        x=alt.X(
            "ttl_s:Q",
            scale=alt.Scale(type="log"),
            title="cache TTL (log scale)",
            axis=alt.Axis(values=ticks, labelExpr=DURATION_LABEL),
        ),
        tooltip=[
            "ttl:N",
            alt.Tooltip("cost_usd:Q", format="$,.2f", title="cost"),
            alt.Tooltip("share_requests_expired:Q", format=".1%", title="requests expired"),
            "best:N",
        ],
    )
    cost = base.mark_line(point=True, color="#4c78a8").encode(
        y=alt.Y("cost_usd:Q", title="cost (USD)", axis=alt.Axis(format="$,.2f", titleColor="#4c78a8"))
    )
    best = (
        base.transform_filter("datum.best")
        .mark_point(size=180, shape="diamond", filled=True, color="#54a24b")
        .encode(y="cost_usd:Q")
    )
    best_label = (
        base.transform_filter("datum.best")
        .mark_text(dy=-14, color="#54a24b")
        .encode(y="cost_usd:Q", text=alt.Text("ttl:N"))
    )
    expired = base.mark_line(
        point=alt.OverlayMarkDef(color=RED, fill=RED), strokeDash=[5, 3], color=RED
    ).encode(
        y=alt.Y(
            "share_requests_expired:Q",
            title="requests whose prefix expired",
            axis=alt.Axis(format="%", titleColor=RED),
        )
    )
    return top(
        alt.layer(cost + best + best_label, expired)
        .resolve_scale(y="independent")
        .properties(title=TITLE, width=WIDTH, height=HEIGHT)
    )
