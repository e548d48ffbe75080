"""Chart details (issue 25): what each chart draws must be readable, not merely valid Vega-Lite."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import polars as pl

from traceflow.dashboards import concurrent_sessions, dwpd, ttl_cost

T0 = dt.datetime(2026, 8, 1, 12, tzinfo=dt.UTC)


def _layers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for layer in spec.get("layer", []):
        out += _layers(layer) if "layer" in layer else [layer]
    return out


def _mark(layer: dict[str, Any]) -> dict[str, Any]:
    mark = layer["mark"]
    return mark if isinstance(mark, dict) else {"type": mark}


def test_dwpd_far_below_the_rating_keeps_its_own_axis_and_states_the_rating() -> None:
    frame = pl.DataFrame(
        {"day": ["2026-08-01", "2026-08-02"], "dwpd": [0.001, 0.0012], "rated_dwpd": [3.0, 3.0]}
    )
    spec = dwpd.chart(frame).to_dict(validate=True)
    # no layer puts the rating (3) on the y scale the bars share: the axis spans the data
    assert all(layer.get("encoding", {}).get("y", {}).get("field") == "dwpd" for layer in _layers(spec))
    subtitle = spec["title"]["subtitle"]
    assert "rated 3 DWPD" in subtitle and "0.0012" in subtitle and "0.04%" in subtitle


def test_dwpd_near_the_rating_draws_it_as_a_rule() -> None:
    frame = pl.DataFrame({"day": ["2026-08-01"], "dwpd": [1.3], "rated_dwpd": [1.0]})
    text = json.dumps(dwpd.chart(frame).to_dict(validate=True))
    assert "rated 1 DWPD" in text and '"rule"' in text


def _ttl_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ttl_s": [60.0, 300.0, 3600.0],
            "ttl": ["1m", "5m", "1h"],
            "requests": [10, 10, 10],
            "cost_usd": [3.0, 2.0, 2.4],
            "share_requests_expired": [0.4, 0.1, 0.01],
            "best": [False, True, False],
        }
    )


def test_ttl_expired_points_are_red_like_their_line() -> None:
    spec = ttl_cost.chart(_ttl_frame()).to_dict(validate=True)
    expired = [
        layer
        for layer in _layers(spec)
        if layer.get("encoding", {}).get("y", {}).get("field") == "share_requests_expired"
    ]
    assert len(expired) == 1
    mark = _mark(expired[0])
    assert mark["color"] == "#e45756"
    assert isinstance(mark["point"], dict) and mark["point"]["color"] == "#e45756"


def test_ttl_axis_reads_durations_at_the_ttls() -> None:
    spec = ttl_cost.chart(_ttl_frame()).to_dict(validate=True)
    x = next(layer["encoding"]["x"] for layer in _layers(spec) if "x" in layer.get("encoding", {}))
    x = x if "axis" in x else spec["encoding"]["x"]
    assert "seconds" not in x["title"]
    assert x["axis"]["values"] == [60.0, 300.0, 3600.0]
    assert "'m'" in x["axis"]["labelExpr"] and "'h'" in x["axis"]["labelExpr"]


def test_concurrent_sessions_bars_under_the_area_and_bucket_width_shown() -> None:
    frame = pl.DataFrame(
        {
            "bucket_start": [T0, T0 + dt.timedelta(minutes=5), T0 + dt.timedelta(minutes=10)],
            "active_sessions": [2, 3, 1],
            "new_sessions": [2, 1, 0],
        }
    )
    spec = concurrent_sessions.chart(frame).to_dict(validate=True)
    marks = [_mark(layer)["type"] for layer in _layers(spec)]
    assert marks == ["bar", "area"]  # the area is drawn last, over the bars
    assert spec["title"]["subtitle"] == "5m buckets"
    area = _layers(spec)[1]
    assert "per 5m bucket" in area["encoding"]["y"]["title"]
