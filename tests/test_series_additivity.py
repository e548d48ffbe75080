"""``load`` and ``working-set`` series add up over disjoint windows only at one bucket width.

A lake that spans more than :data:`~traceflow.store.time_base.MAX_BUCKETS` minutes gets coarser
buckets than a window of it does (issue 31: the halves of an 80-day lake are grids of 1 minute, the
whole a grid of 2 minutes, so the halves no longer add up to the whole). The output says so, and
names the width at which every window adds up; asked at that width, the halves add up bucket by
bucket (the additive columns: counts, and rates over one width).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest

from traceflow.analysis import load, working_set
from traceflow.store import time_base
from traceflow.store.lake import Lake
from traceflow.store.selection import Selection

Cli = Callable[..., tuple[int, str, str]]
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DAYS = 80  # 80 days of minutes = 115,200 buckets: past the 100,000 cap, so 2-minute buckets
SPLIT = T0 + dt.timedelta(days=40, seconds=90)  # inside a 2-minute bucket (40 d + 60 s .. + 180 s)

LOAD_SUMS = (
    "new_sessions",
    "requests",
    "requests_per_s",
    "cold_input_tokens_per_s",
    "cache_read_tokens_per_s",
    "cache_write_tokens_per_s",
    "output_tokens_per_s",
)
WORKING_SET_SUMS = ("tokens", "tokens_end", "streams", "streams_end")


def _rows() -> list[dict[str, Any]]:
    """Three sessions: one on day 0, one across the split (requests 30 s apart around it), one on
    day 79; each request lasts 5 s."""
    starts = {
        "a": [T0, T0 + dt.timedelta(seconds=40)],
        "b": [SPLIT + dt.timedelta(seconds=s) for s in (-60, -30, 0, 30, 200)],
        "c": [T0 + dt.timedelta(days=DAYS - 1), T0 + dt.timedelta(days=DAYS - 1, seconds=70)],
    }
    rows = []
    for session, times in starts.items():
        for i, t in enumerate(times):
            rows.append(
                {
                    "event_id": f"{session}{i}",
                    "source": "test",
                    "agent": "claude-code",
                    "session_id": session,
                    "model": "claude-sonnet-4-5-20250929",
                    "started_at": t,
                    "ended_at": t + dt.timedelta(seconds=5),
                    "cold_input_tokens": 10 + i,
                    "cache_read_tokens": 1000 * i,
                    "cache_write_tokens": 500,
                    "output_tokens": 100,
                    "seq": len(rows),
                }
            )
    return rows


@pytest.fixture
def long_lake(lake: Lake) -> Lake:
    lake.append("requests", _rows())
    return lake


def _by_bucket(frame: pl.DataFrame, cols: tuple[str, ...]) -> dict[str, float]:
    return {f"{r['bucket_start'].isoformat()}/{c}": r[c] for r in frame.to_dicts() for c in cols if r[c]}


def _added(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


def _differ(whole: dict[str, float], halves: dict[str, float]) -> list[str]:
    return sorted(
        k
        for k in {*whole, *halves}
        if not math.isclose(whole.get(k, 0), halves.get(k, 0), rel_tol=1e-9, abs_tol=1e-6)
    )


def test_the_whole_is_coarsened_and_its_halves_are_not(long_lake: Lake) -> None:
    con = long_lake.connect()
    before, after = Selection(until=SPLIT), Selection(since=SPLIT)
    assert load.load_resolution(con, None) == 120.0
    assert load.load_resolution(con, before) == load.load_resolution(con, after) == 60.0
    assert working_set.working_set_resolution(con, None) == 120.0
    # so at the widths each picks for itself, the halves do not add up to the whole
    halves = _added(
        _by_bucket(load.load_series(con, before), LOAD_SUMS),
        _by_bucket(load.load_series(con, after), LOAD_SUMS),
    )
    assert _differ(_by_bucket(load.load_series(con), LOAD_SUMS), halves)


def test_the_coarsened_output_says_so_and_names_the_width_to_compare_at(long_lake: Lake, cli: Cli) -> None:
    con = long_lake.connect()
    summary = load.load_overview(con, None).to_dicts()[0]
    assert summary["resolution_s"] == 120.0
    assert "--resolution 2m" in summary["note"] and "add up" in summary["note"]
    assert working_set.working_set_summary(con, None)["resolution_s"].to_list() == [120.0]
    for command in (("load",), ("load", "--series"), ("working-set",), ("working-set", "--series")):
        code, out, err = cli(*command, "--format", "json")
        assert code == 0, err
        assert "--resolution 2m" in err and "add up" in err, command
    # a window that is not coarsened has no such note
    half = load.load_overview(con, Selection(until=SPLIT)).to_dicts()[0]
    assert half["resolution_s"] == 60.0 and half["note"] is None
    code, out, err = cli("load", "--until", SPLIT.isoformat(), "--format", "json")
    assert code == 0 and "add up" not in err and json.loads(out)["resolution_s"] == 60.0
    code, out, err = cli("working-set", "--until", SPLIT.isoformat(), "--format", "json")
    assert code == 0 and "add up" not in err and json.loads(out)["resolution_s"] == 60.0


def test_at_the_width_the_whole_names_the_halves_add_up(long_lake: Lake) -> None:
    con = long_lake.connect()
    width = float(load.load_overview(con, None)["resolution_s"][0])
    before, after = Selection(until=SPLIT), Selection(since=SPLIT)
    whole = _by_bucket(load.load_series(con, None, width), LOAD_SUMS)
    halves = _added(
        _by_bucket(load.load_series(con, before, width), LOAD_SUMS),
        _by_bucket(load.load_series(con, after, width), LOAD_SUMS),
    )
    assert whole and not _differ(whole, halves)
    # the split's bucket (40 d + 60 s to + 180 s) holds requests of both halves: b1 at + 60 s (before),
    # b2 at + 90 s and b3 at + 120 s (after); b0 at + 30 s and b4 at + 290 s fall outside it
    split_bucket = dt.datetime.fromtimestamp(SPLIT.timestamp() // 120 * 120, dt.UTC).isoformat()
    assert whole[f"{split_bucket}/requests"] == 3
    width = float(working_set.working_set_summary(con, None)["resolution_s"][0])
    whole = _by_bucket(working_set.working_set_series(con, None, resolution_s=width), WORKING_SET_SUMS)
    halves = _added(
        _by_bucket(working_set.working_set_series(con, before, resolution_s=width), WORKING_SET_SUMS),
        _by_bucket(working_set.working_set_series(con, after, resolution_s=width), WORKING_SET_SUMS),
    )
    assert whole and not _differ(whole, halves)
    assert time_base.MAX_BUCKETS < DAYS * 1440
