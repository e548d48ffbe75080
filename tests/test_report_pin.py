"""The report's numbers are pinned: a small generated lake's report (the text summary's JSON and every
chart's frame) is the same as before the report was rebuilt to compute once (issue 34: the window
materialised once per connection, the report gathered once, ``mix`` in one scan).

``tests/report_pin.json`` was written by the code *before* that change (``python -m
tests.test_report_pin`` rewrites it; do so only for a change that is meant to alter the numbers).
It is a regression pin, not a golden figure: the figures themselves are checked against independent
computation in the analyses' own tests."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

from traceflow.dashboards.report_data import ReportOptions, gather
from traceflow.store.lake import Lake
from traceflow.store.selection import Selection

PIN = Path(__file__).with_name("report_pin.json")
OPTIONS = ReportOptions(ttls=(300.0, 900.0, 3600.0), resolution_s=60)
#: The frames pinned (those the report drew before issue 34; later frames are new).
FRAMES = (
    "token_mix",
    "tokens_over_time",
    "concurrent_sessions",
    "reuse_ratio",
    "gaps",
    "ttl_cost",
    "misses",
    "context_growth",
    "working_set",
    "hit_ratio",
    "ttft",
    "dwpd",
)


def _lake(root: Path) -> Lake:
    import polars as pl

    from traceflow.replay.synth import generate, preset

    start = dt.datetime(2026, 8, 1, 15, 50, tzinfo=dt.UTC)
    trace = generate(preset("agentic-coding"), 700, seed=11, start_us=int(start.timestamp()) * 1_000_000)
    frame = trace.lake_frame().with_columns(
        (pl.col("duration_ms").fill_null(1000.0) * 0.25 + 150.0).alias("ttft_ms")
    )
    lake = Lake(root)
    lake.append("requests", frame)
    return lake


def _plain(value: Any) -> Any:
    """JSON-ready, floats to 9 significant digits (the same numbers, not the same last bit)."""
    if isinstance(value, float):
        return value if not math.isfinite(value) or value == 0 else float(f"{value:.9g}")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return value


def snapshot(root: Path) -> dict[str, Any]:
    """The report of the whole lake and of a narrower selection, as plain JSON."""
    lake = _lake(root)
    out: dict[str, Any] = {}
    since = dt.datetime(2026, 8, 1, 16, 30, tzinfo=dt.UTC)
    for name, sel in (("all", None), ("since", Selection(since=since))):
        data = gather(lake.connect(), sel, OPTIONS)
        out[name] = {
            "report": _plain(json.loads(json.dumps(data.report.as_dict(), default=str))),
            # rows in a stable order (ties of a frame's own order may come either way)
            "frames": {
                k: sorted(_plain(data.frames[k].to_dicts()), key=lambda r: json.dumps(r, sort_keys=True))
                for k in FRAMES
                if k in data.frames
            },
            "timelines": sorted(data.timelines),
            "requests": data.requests,
        }
    return out


def test_report_numbers_are_unchanged(tmp_path: Path) -> None:
    pinned = json.loads(PIN.read_text())
    now = json.loads(json.dumps(snapshot(tmp_path / "data")))
    for name in pinned:
        assert now[name]["requests"] == pinned[name]["requests"]
        assert now[name]["report"] == pinned[name]["report"], name
        for key in FRAMES:
            assert now[name]["frames"].get(key) == pinned[name]["frames"].get(key), (name, key)
        assert now[name]["timelines"] == pinned[name]["timelines"]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        PIN.write_text(json.dumps(snapshot(Path(tmp) / "data"), indent=1, sort_keys=True) + "\n")


def test_the_report_sorts_the_window_once(tmp_path: Path) -> None:
    """Every per-stream query of the report reads one window per selection: one temporary table of
    steps.sql's rows on the connection (issue 34), the whole lake's holding every request with tokens."""
    lake = _lake(tmp_path / "data")
    con = lake.connect()
    gather(con, None, OPTIONS)
    tables = con.execute(
        "SELECT table_name, estimated_size FROM duckdb_tables() WHERE table_name LIKE '_tf_steps_%'"
    ).fetchall()
    expected = con.execute("SELECT count(*) FROM requests WHERE total_tokens > 0").fetchall()[0][0]
    # once over the whole lake; the others (the alerts' days, the linked sessions' timelines) narrowed
    # to the sessions they read
    assert [n for _, n in tables].count(expected) == 1 and all(
        n < expected for _, n in tables if n != expected
    )


def test_mix_in_one_scan_equals_totals_then_costs(tmp_path: Path) -> None:
    """``mix`` sums the totals and the per-model sums it prices in one scan (GROUPING SETS); its rows
    are those of the two scans it replaced: the totals (``_sums``) beside the savings per group."""
    import polars as pl

    from traceflow.analysis import mix

    lake = Lake(tmp_path / "data")
    frame = _lake(tmp_path / "src").connect().sql("SELECT * FROM requests").pl()
    models = pl.when(pl.int_range(pl.len()) % 3 == 0).then(pl.lit("claude-opus-4-5"))
    frame = frame.with_columns(
        models.when(pl.int_range(pl.len()) % 7 == 0).then(None).otherwise(pl.col("model")).alias("model")
    )
    lake.append("requests", frame.select([c for c in frame.columns if c not in ("request_time",)]))
    con = lake.connect()
    sel = Selection()
    for by in ([], ["day"], ["model"], ["day", "model"], ["agent"], ["project"]):
        n, m = len(by), len(by) + len(mix.COLUMNS)
        saved = mix.savings_by_group(con, sel, by)
        two = [(*r[:m], *saved.get(tuple(r[:n]), mix.UNPRICED), *r[m:]) for r in mix._sums(con, sel, by)]
        assert mix.token_mix_rows(con, sel, by).rows == two, by
    assert len(mix.token_mix_rows(con, sel, ["model"]).rows) == 3  # two models and none


def test_check_splits_one_misses_pass_into_its_periods(tmp_path: Path) -> None:
    """``check`` judges the misses of its baseline and window in one pass of misses.sql split at the
    window's start; each part is what ``misses`` reports for that period alone."""

    from traceflow.analysis import misses
    from traceflow.analysis.health import check

    con = _lake(tmp_path / "data").connect()
    # the lake's requests start from 15:50 to 16:02: the window its last 6 minutes, the baseline before
    since = dt.datetime(2026, 8, 1, 15, 56, tzinfo=dt.UTC)
    until = dt.datetime(2026, 8, 1, 16, 5, tzinfo=dt.UTC)
    health = check(con, Selection(since=since, until=until), baseline_days=6 / 1440)
    start = since - dt.timedelta(minutes=6)
    for part, sel in (
        (health.window, Selection(since=since, until=until)),
        (health.baseline, Selection(since=start, until=since)),
    ):
        alone = misses.miss_report(con, sel)
        assert alone["requests"] > 0
        assert (part["requests"], part["misses"], part["unexplained_misses"]) == (
            alone["requests"],
            alone["misses"],
            alone["by_cause"]["unexplained"]["misses"],
        )
    assert health.window["misses"] > 0 and health.baseline["misses"] > 0


def test_the_capacity_part_only_with_capacity(tmp_path: Path) -> None:
    """``report --capacity`` (``ReportOptions.capacity``) adds the capacity-planning part; without it
    those frames and charts are left out and every other frame is the same."""
    import dataclasses

    from traceflow.dashboards.render import CHARTS, build_charts

    lake = _lake(tmp_path / "data")
    full = gather(lake.connect(), None, OPTIONS)
    short = gather(lake.connect(), None, dataclasses.replace(OPTIONS, capacity=False))
    capacity = {c.key for c in CHARTS if c.part == "capacity"}
    assert capacity <= set(full.frames) and not capacity & set(short.frames)
    for key, frame in short.frames.items():  # rows in a stable order (ties may come either way)
        assert frame.sort(frame.columns).equals(full.frames[key].sort(frame.columns)), key
    assert {c.key for c, _ in build_charts(short)}.isdisjoint(capacity)
    assert capacity <= {c.key for c, _ in build_charts(full)}
