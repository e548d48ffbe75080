"""The explorer's charts, as Vega-Lite specs without their data: the page fetches each chart's rows
from the JSON API (the ``traceflow ... --format json`` document) and hands them to the spec as the
named dataset :data:`ROWS`. Pure functions, like the report's charts in ``traceflow.dashboards``.
"""

from __future__ import annotations

from typing import Any

#: The name of every chart's dataset (the page sets ``datasets[ROWS]`` to the API's rows).
ROWS = "rows"
#: The token kinds of a request or a group, as the API names them, and their labels.
KINDS = {
    "cache_read_tokens": "cache read",
    "cache_write_tokens": "cache write",
    "cold_input_tokens": "cold input",
    "output_tokens": "output",
}
#: The kinds of a timeline row (its cache writes split by TTL).
TIMELINE_KINDS = {
    "cache_read_tokens": "cache read",
    "cache_write_5m_tokens": "cache write 5m",
    "cache_write_1h_tokens": "cache write 1h",
    "cold_input_tokens": "cold input",
    "output_tokens": "output",
}
_COLOURS = ["#2563eb", "#f59e0b", "#d97706", "#9ca3af", "#10b981"]


def _data() -> Any:
    import altair as alt

    return alt.Data(name=ROWS)  # type: ignore[no-untyped-call]


def _label(kinds: dict[str, str]) -> str:
    """A Vega expression naming the kind of ``datum.column``.

    >>> _label({"a_tokens": "a", "b_tokens": "b"})
    "datum.column === 'a_tokens' ? 'a' : 'b'"
    """
    *first, (_, last) = kinds.items()
    return "".join(f"datum.column === '{c}' ? '{label}' : " for c, label in first) + f"'{last}'"


def _kind_colour(labels: list[str]) -> Any:
    import altair as alt

    return alt.Color("kind:N", title="kind", sort=labels, scale=alt.Scale(domain=labels, range=_COLOURS))


def tokens_per_day() -> dict[str, Any]:
    """Tokens per day by kind, stacked: the rows of ``traceflow mix --by day``."""
    import altair as alt

    labels = list(KINDS.values())
    chart = (
        alt.Chart(_data())
        .transform_fold(list(KINDS), as_=["column", "tokens"])
        .transform_calculate(kind=_label(KINDS))
        .mark_bar()
        .encode(
            x=alt.X("day:O", title="day"),
            y=alt.Y("sum(tokens):Q", title="tokens"),
            color=_kind_colour(labels),
            tooltip=["day:O", "kind:N", alt.Tooltip("sum(tokens):Q", title="tokens", format=",")],
        )
        .properties(width="container", height=220)
    )
    spec: dict[str, Any] = chart.to_dict(validate=False)
    return spec


def misses_by_cause() -> dict[str, Any]:
    """Cache misses and missed tokens by cause: the ``by_cause`` of ``traceflow misses``, one row a
    cause (``cause``, ``misses``, ``missed_tokens``, ``miss_cost_usd``)."""
    import altair as alt

    base = alt.Chart(_data()).encode(
        y=alt.Y("cause:N", title=None, sort=None),
        tooltip=["cause:N", alt.Tooltip("misses:Q", format=","), alt.Tooltip("missed_tokens:Q", format=",")],
    )
    count = base.mark_bar(color="#dc2626").encode(x=alt.X("misses:Q", title="misses")).properties(width=260)
    tokens = base.mark_bar(color="#7c3aed").encode(x=alt.X("missed_tokens:Q", title="missed tokens"))
    return alt.hconcat(count, tokens.properties(width=260)).to_dict(validate=False)


def timeline() -> dict[str, Any]:
    """One session's requests in order, their tokens stacked by kind, a miss marked with its cause:
    the rows of ``traceflow timeline SESSION`` (the page numbers them as ``request``)."""
    import altair as alt

    labels = list(TIMELINE_KINDS.values())
    bars = (
        alt.Chart(_data())
        .transform_fold(list(TIMELINE_KINDS), as_=["column", "tokens"])
        .transform_calculate(kind=_label(TIMELINE_KINDS))
        .mark_bar()
        .encode(
            x=alt.X("request:O", title="request"),
            y=alt.Y("tokens:Q", title="tokens", stack="zero"),
            color=_kind_colour(labels),
            tooltip=["request:O", "started_at:N", "kind:N", alt.Tooltip("tokens:Q", format=","), "cause:N"],
        )
    )
    misses = (
        alt.Chart(_data())
        .transform_filter("datum.cause != null")
        .mark_text(dy=-8, color="#dc2626", fontWeight="bold", text="miss")
        .encode(x="request:O", y=alt.Y("total:Q"), tooltip=["request:O", "cause:N", "missed_tokens:Q"])
        .transform_calculate(
            total="datum.cold_input_tokens + datum.cache_read_tokens + datum.cache_write_5m_tokens"
            " + datum.cache_write_1h_tokens + datum.output_tokens"
        )
    )
    return alt.layer(bars, misses).properties(width="container", height=240).to_dict(validate=False)


def specs() -> dict[str, dict[str, Any]]:
    """Every chart of the explorer by the id of its element in the page."""
    return {
        "chart-days": tokens_per_day(),
        "chart-misses": misses_by_cause(),
        "chart-timeline": timeline(),
    }
