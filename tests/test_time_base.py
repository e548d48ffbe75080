"""Time bases (docs/everyday.md#time-bases): real telemetry beside relative-time traces on one small mixed
lake.

Analyses over time refuse a mix naming ``--source`` (load, working-set, export) or keep to one time
base and say so (report); no time grid passes the bucket cap; sessionless and t = 0-aligned traces
say "not applicable" for sessions and arrivals. Behaviour only, not timings
(``benchmarks/bench_mixed_lake.py`` measures those).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from traceflow.analysis import load, working_set
from traceflow.errors import QueryError, UsageError
from traceflow.store import sql, time_base
from traceflow.store.lake import Lake
from traceflow.store.selection import Selection

Cli = Callable[..., tuple[int, str, str]]
REAL = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _row(event: str, source: str, start: dt.datetime, session: str | None, seq: int) -> dict[str, Any]:
    return {
        "event_id": event,
        "source": source,
        "session_id": session,
        "started_at": start,
        "ended_at": start + dt.timedelta(seconds=2),
        "cold_input_tokens": 100,
        "cache_read_tokens": 900,
        "output_tokens": 10,
        "seq": seq,
    }


@pytest.fixture
def mixed(lake: Lake) -> Lake:
    """Claude Code telemetry over 200 days of 2026, a Mooncake trace (no sessions) and kv-cache-tester
    sessions that all start at t = 0, the last two stored from 1970."""
    rows = [
        _row(f"c{i}", "claude-code-jsonl", REAL + dt.timedelta(days=20 * i), f"s{i % 3}", i)
        for i in range(11)
    ]
    rows += [_row(f"m{i}", "mooncake", EPOCH + dt.timedelta(seconds=30 * i), None, i) for i in range(20)]
    rows += [
        _row(f"k{s}{i}", "kvcache-tester", EPOCH + dt.timedelta(seconds=60 * i), f"k{s}", i)
        for s in range(4)
        for i in range(5)
    ]
    lake.append("requests", rows)
    return lake


def as_json(cli: Cli, *args: str) -> Any:
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_time_base_follows_the_source() -> None:
    # each public serving trace its own base, Azure (absolute 2023 times) included; agents share one
    for source in (*time_base.RELATIVE_SOURCES, "azure"):
        assert time_base.time_base(source) == f"public:{source}"
    for source in ("claude-code-jsonl", "otlp-json", "codex", "tracelab", None):
        assert time_base.time_base(source) == time_base.AGENT


@pytest.mark.parametrize("command", [("load",), ("working-set",), ("export", "mooncake", "-o", "x.jsonl")])
def test_a_mixed_selection_is_refused_naming_source(mixed: Lake, cli: Cli, command: tuple[str, ...]) -> None:
    code, _, err = cli(*command)
    assert code == 2
    assert "mixes" in err and "--source claude-code-jsonl" in err and "--source mooncake" in err


def test_export_writes_nothing_from_a_mixed_selection(mixed: Lake, cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    code, _, _ = cli("export", "mooncake", "-o", str(out))
    assert code == 2 and not out.exists()
    code, _, err = cli("export", "mooncake", "-o", str(out), "--source", "mooncake")
    assert code == 0, err
    assert len(out.read_text().splitlines()) == 20


def test_grids_are_bounded(mixed: Lake, cli: Cli) -> None:
    con = mixed.connect()
    real = Selection(sources=("claude-code-jsonl",))
    # 200 days at one second would be 17 million buckets: coarsened to stay under the cap
    series = load.load_series(con, real, resolution_s=1)
    assert 1 < series.height <= time_base.MAX_BUCKETS
    width = (series["bucket_start"][1] - series["bucket_start"][0]).total_seconds()
    assert width > 1 and width == load.load_resolution(con, real, 1)
    ws = working_set.working_set_series(con, real, ttl_s=300, resolution_s=1)
    assert ws.height <= time_base.MAX_BUCKETS
    summary = as_json(cli, "load", "--source", "claude-code-jsonl", "--resolution", "1s")
    assert summary["resolution_s"] == width and summary["buckets"] == series.height
    code, _, err = cli("load", "--source", "claude-code-jsonl", "--resolution", "1s")
    assert code == 0 and "buckets" in err  # a note says the grid was coarsened
    # the packaged query refuses a grid past $max_buckets rather than building it
    with pytest.raises(QueryError, match="buckets"):
        sql.run(con, "load", {"resolution_s": 1.0, "max_buckets": 1000})


def test_bounded_resolution_never_passes_the_cap() -> None:
    for span in (0, 59, 3600, 86400 * 69, 86400 * 365 * 56, 86400 * 365 * 5000):
        for res in (0.5, 1, 60, 3600):
            width = time_base.bounded_resolution(span, res)
            assert width >= res and span / width + 2 <= time_base.MAX_BUCKETS


def test_sessionless_and_aligned_traces_are_not_applicable(mixed: Lake, cli: Cli) -> None:
    moon = as_json(cli, "sessions", "--source", "mooncake")
    assert moon["sessions"] is None and moon["sessionless_requests"] == 20
    assert moon["note"].startswith("not applicable")
    arrivals = as_json(cli, "load", "--source", "mooncake")
    assert arrivals["sessions"] is None and arrivals["new_sessions_per_min"] is None
    assert arrivals["requests"] == 20 and arrivals["note"].startswith("not applicable")
    kv = as_json(cli, "load", "--source", "kvcache-tester")
    assert kv["sessions"] == 4  # real sessions, but their starts (all t = 0) are not arrivals
    assert kv["poisson"] is None and kv["index_of_dispersion"] is None and "t = 0" in kv["note"]
    real = as_json(cli, "load", "--source", "claude-code-jsonl")
    assert real["sessions"] == 3 and real["new_sessions_per_min"] is not None
    # no arrivals caveat; only that its 200 days were coarsened past 1-minute buckets
    assert real["note"] == time_base.coarsening_note(60, real["resolution_s"]) and real["resolution_s"] > 60
    by = as_json(cli, "sessions", "--by", "source")
    assert {r["source"]: r["sessions"] for r in by} == {
        "claude-code-jsonl": 3,
        "kvcache-tester": 4,
        "mooncake": None,
    }


def test_report_keeps_time_sections_to_one_base(mixed: Lake, cli: Cli, tmp_path: Path) -> None:
    rep = as_json(cli, "report")
    assert rep["mix"]["requests"] == 51  # everything, for the sections without a time axis
    assert rep["time_base"]["series"] == "agent"
    assert rep["time_base"]["sources"]["mooncake"] == "public:mooncake"
    assert "--source mooncake" in rep["time_base"]["note"]
    assert rep["load"]["requests"] == 11  # the real telemetry only
    assert any("mixes time bases" in line for line in rep["headline"])
    assert rep["sessions"]["sessions"] == 7 and rep["sessions"]["sessionless_requests"] == 20


def test_relative_time_charts_are_labelled_as_offsets(mixed: Lake) -> None:
    from traceflow.dashboards import tokens_over_time
    from traceflow.dashboards.report_data import gather

    data = gather(mixed.connect(["requests", "events"]), Selection(sources=("mooncake",)))
    assert data.time_base == "public:mooncake"
    spec = tokens_over_time.chart(data.frames["tokens_over_time"]).to_dict()
    x = spec["encoding"]["x"]
    assert x["title"] == "time since the trace's start" and "+" in x["axis"]["labelExpr"]
    assert all(label.startswith("+") for label in pl.DataFrame(spec["data"]["values"])["offset"])
    real = gather(mixed.connect(["requests", "events"]), Selection(sources=("claude-code-jsonl",)))
    assert real.time_base == "agent"
    assert tokens_over_time.chart(real.frames["tokens_over_time"]).to_dict()["encoding"]["x"]["title"] == (
        "time (UTC)"
    )


def test_library_callers_get_the_usage_error(mixed: Lake) -> None:
    with pytest.raises(UsageError, match="--source"):
        working_set.working_set_summary(mixed.connect())
