"""Periods and zones (issue 25): ``mix --by day/week/month`` and ``--tz`` against totals grouped
independently, in Python, from the lake's per-request rows of a generated Claude Code corpus."""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_generator
from traceflow.store.lake import Lake

KINDS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
CLI = Callable[..., tuple[int, str, str]]


@pytest.fixture
def corpus_lake(tmp_path: Path, cli: CLI, lake: Lake) -> list[dict[str, Any]]:
    """The lake filled from a generated 2 MB corpus (19 days, sub-agents); its per-request rows."""
    corpus = tmp_path / "corpus"
    corpus_generator().generate_corpus(corpus, 2.0, 5)
    code, _, err = cli("import", "claude-code", str(corpus / "projects"))
    assert code == 0, err
    con = lake.connect(["requests"])
    cur = con.execute(f"SELECT started_at, ended_at, {', '.join(KINDS)} FROM requests")
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    for r in rows:  # a request's time: its start, else its end (independent of the view's column)
        r["t"] = r["started_at"] if r["started_at"] is not None else r["ended_at"]
    assert len(rows) > 100
    return rows


def _label(period: str, t: dt.datetime, zone: str) -> str:
    """The period of ``t`` in ``zone``, by the calendar (not the code under test)."""
    local = t.astimezone(zoneinfo.ZoneInfo(zone))
    if period == "day":
        return f"{local.year:04d}-{local.month:02d}-{local.day:02d}"
    if period == "month":
        return f"{local.year:04d}-{local.month:02d}"
    year, week, _ = local.isocalendar()
    monday = dt.date.fromisocalendar(year, week, 1)  # ISO weeks start on Monday
    return monday.isoformat()


def _expected(rows: list[dict[str, Any]], period: str, zone: str) -> dict[str, tuple[int, ...]]:
    acc: dict[str, list[int]] = defaultdict(lambda: [0] * (1 + len(KINDS)))
    for r in rows:
        a = acc[_label(period, r["t"], zone)]
        a[0] += 1
        for i, k in enumerate(KINDS):
            a[i + 1] += r[k] or 0
    return {k: tuple(v) for k, v in acc.items()}


def _mix(cli: CLI, period: str, *extra: str) -> dict[str, tuple[int, ...]]:
    code, out, err = cli("mix", "--by", period, "--format", "json", *extra)
    assert code == 0, err
    return {r[period]: (r["requests"], *(r[k] for k in KINDS)) for r in json.loads(out)}


@pytest.mark.parametrize(
    ("period", "zone"),
    [("month", "UTC"), ("week", "UTC"), ("day", "Asia/Tokyo"), ("week", "America/Los_Angeles")],
)
def test_periods_equal_independent_grouping(
    corpus_lake: list[dict[str, Any]], cli: CLI, period: str, zone: str
) -> None:
    extra = () if zone == "UTC" else ("--tz", zone)
    got = _mix(cli, period, *extra)
    want = _expected(corpus_lake, period, zone)
    assert got == want
    assert sum(v[0] for v in got.values()) == len(corpus_lake)


def test_tokyo_days_differ_from_utc_days(corpus_lake: list[dict[str, Any]], cli: CLI) -> None:
    """The corpus has requests between 15:00 and 24:00 UTC, which fall on the next Tokyo day."""
    assert _expected(corpus_lake, "day", "UTC") != _expected(corpus_lake, "day", "Asia/Tokyo")
    assert _mix(cli, "day") == _expected(corpus_lake, "day", "UTC")


def test_setting_is_the_default_zone(
    corpus_lake: list[dict[str, Any]], cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEFLOW_TZ", "Asia/Tokyo")
    assert _mix(cli, "day") == _expected(corpus_lake, "day", "Asia/Tokyo")
    assert _mix(cli, "day", "--tz", "UTC") == _expected(corpus_lake, "day", "UTC")


def test_rollup_answers_utc_periods_only(corpus_lake: list[dict[str, Any]], cli: CLI) -> None:
    """After compaction the stored daily rollup (UTC days) answers UTC weeks and months; a Tokyo
    grouping must not be read off it."""
    code, _, err = cli("compact")
    assert code == 0, err
    for period, zone in (("week", "UTC"), ("month", "UTC"), ("day", "Asia/Tokyo"), ("week", "Asia/Tokyo")):
        extra = () if zone == "UTC" else ("--tz", zone)
        assert _mix(cli, period, *extra) == _expected(corpus_lake, period, zone), (period, zone)


def test_since_without_offset_is_read_in_the_zone(corpus_lake: list[dict[str, Any]], cli: CLI) -> None:
    days = sorted(_expected(corpus_lake, "day", "Asia/Tokyo"))
    start = days[len(days) // 2]
    bound = dt.datetime.fromisoformat(start).replace(tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))
    want = sum(1 for r in corpus_lake if r["t"] >= bound)
    code, out, err = cli("mix", "--since", start, "--tz", "Asia/Tokyo", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["requests"] == want
    utc_bound = bound.replace(tzinfo=dt.UTC)
    assert want != sum(1 for r in corpus_lake if r["t"] >= utc_bound)  # the zone made a difference


def test_printed_times_are_in_the_zone(corpus_lake: list[dict[str, Any]], cli: CLI) -> None:
    code, out, err = cli("working-set", "--tz", "Asia/Tokyo", "--format", "json")
    assert code == 0, err
    peak = json.loads(out)["peak_at"]
    assert peak.endswith("+09:00")
    code, out, _ = cli("working-set", "--format", "json")
    utc = json.loads(out)["peak_at"]
    assert utc.endswith("+00:00")
    assert dt.datetime.fromisoformat(utc) == dt.datetime.fromisoformat(peak)


@pytest.mark.parametrize("bad", ["Asia/Tokio", "Mars/Olympus", "../etc/passwd", "x'y"])
def test_unknown_zone_is_one_line(cli: CLI, bad: str) -> None:
    code, _, err = cli("mix", "--by", "day", "--tz", bad)
    assert code == 2
    assert "is not a time zone" in err and "Asia/Tokyo" in err


def test_per_stream_queries_group_by_period_in_the_zone(corpus_lake: list[dict[str, Any]], cli: CLI) -> None:
    """``misses`` and ``gaps`` group their per-request rows (``started_at``) by the same periods."""
    want = {k: v[0] for k, v in _expected(corpus_lake, "week", "Asia/Tokyo").items()}
    code, out, err = cli("misses", "--by", "week", "--tz", "Asia/Tokyo", "--format", "json")
    assert code == 0, err
    assert {r["week"]: r["requests"] for r in json.loads(out)} == want
    months = {k: v[0] for k, v in _expected(corpus_lake, "month", "America/Los_Angeles").items()}
    code, out, err = cli("misses", "--by", "month", "--tz", "America/Los_Angeles", "--format", "json")
    assert code == 0, err
    assert {r["month"]: r["requests"] for r in json.loads(out)} == months
    code, out, err = cli("sessions", "--by", "month", "--format", "json")
    assert code == 0, err
    assert sum(r["requests"] for r in json.loads(out)) == len(corpus_lake)


def test_check_window_is_yesterday_in_the_zone() -> None:
    from traceflow.analysis.health import default_window

    now = dt.datetime(2026, 8, 3, 20, 0, tzinfo=dt.UTC)  # already 4 August in Tokyo
    assert default_window(now, "UTC") == (
        dt.datetime(2026, 8, 2, tzinfo=dt.UTC),
        dt.datetime(2026, 8, 3, tzinfo=dt.UTC),
    )
    since, until = default_window(now, "Asia/Tokyo")
    assert (since, until) == (
        dt.datetime(2026, 8, 2, 15, 0, tzinfo=dt.UTC),  # 3 August 00:00 in Tokyo
        dt.datetime(2026, 8, 3, 15, 0, tzinfo=dt.UTC),
    )


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Los_Angeles", "Australia/Lord_Howe"])
def test_period_twins_agree(zone: str) -> None:
    """zones.period_of (Python) and zones.period_sql (DuckDB) give every period the calendar's
    label, on times around midnights, week and month ends and DST changes."""
    import duckdb

    from traceflow.store import zones

    start = dt.datetime(2026, 3, 27, tzinfo=dt.UTC)
    times = [start + dt.timedelta(minutes=97 * i) for i in range(400)]  # 27 days, every 97 minutes
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE t AS SELECT unnest(?::TIMESTAMPTZ[]) AS ts", [times])
    for period in zones.PERIODS:
        sql = con.execute(f"SELECT ts, {zones.period_sql(period, 'ts', zone)} FROM t ORDER BY ts").fetchall()
        assert len(sql) == len(times)
        for ts, label in sql:
            assert label == zones.period_of(period, ts, zone) == _label(period, ts, zone), (period, ts)


# four requests around midnight, one hour apart in UTC and nine hours ahead in Tokyo (UTC+9):
# (UTC time, cold input tokens); each request's Tokyo day is worked out by hand beside it
_MIDNIGHT = [
    (dt.datetime(2026, 7, 31, 14, 30, tzinfo=dt.UTC), 1),  # Tokyo 07-31 23:30
    (dt.datetime(2026, 7, 31, 15, 30, tzinfo=dt.UTC), 10),  # Tokyo 08-01 00:30
    (dt.datetime(2026, 7, 31, 23, 30, tzinfo=dt.UTC), 100),  # Tokyo 08-01 08:30
    (dt.datetime(2026, 8, 1, 0, 30, tzinfo=dt.UTC), 1000),  # Tokyo 08-01 09:30
]
#: (period, zone) -> {label: (requests, cold input tokens)}, by hand from the comments above.
_MIDNIGHT_WANT = {
    ("day", "UTC"): {"2026-07-31": (3, 111), "2026-08-01": (1, 1000)},
    ("day", "Asia/Tokyo"): {"2026-07-31": (1, 1), "2026-08-01": (3, 1110)},
    ("month", "UTC"): {"2026-07": (3, 111), "2026-08": (1, 1000)},
    ("month", "Asia/Tokyo"): {"2026-07": (1, 1), "2026-08": (3, 1110)},
    ("week", "UTC"): {"2026-07-27": (4, 1111)},  # Friday 31 July and Saturday 1 August: one ISO week
    ("week", "Asia/Tokyo"): {"2026-07-27": (4, 1111)},
}


@pytest.fixture
def midnight_lake(lake: Lake) -> Lake:
    ingested = dt.datetime(2026, 8, 2, tzinfo=dt.UTC)
    rows = [
        {
            "event_id": f"m{i}", "source": "claude-code-otlp", "agent": "claude-code", "session_id": "s1",
            "request_id": f"q{i}", "seq": i, "model": "claude-sonnet-4-5", "started_at": at,
            "ended_at": at + dt.timedelta(seconds=5), "cold_input_tokens": cold, "cache_read_tokens": 0,
            "cache_write_tokens": 0, "output_tokens": 7, "ingested_at": ingested,
        }
        for i, (at, cold) in enumerate(_MIDNIGHT)
    ]  # fmt: skip
    lake.append("requests", rows)
    return lake


def _mix_by(con: Any, sel: Any, period: str) -> dict[str, tuple[int, int]]:
    from traceflow.analysis.mix import token_mix

    got = token_mix(con, sel, [period])
    return {r[period]: (r["requests"], r["cold_input_tokens"]) for r in got.iter_rows(named=True)}


def test_two_zones_in_one_process_without_a_context_manager(midnight_lake: Lake) -> None:
    """The zone is the selection's: two selections of different zones, asked in either order and
    interleaved, each get their own days, weeks and months (no process state between the calls)."""
    from traceflow.store.selection import Selection

    con = midnight_lake.connect(["requests"])
    utc, tokyo = Selection(zone="UTC"), Selection(zone="Asia/Tokyo")
    for sel in (tokyo, utc, tokyo, utc):
        for period in ("day", "month", "week"):
            assert _mix_by(con, sel, period) == _MIDNIGHT_WANT[(period, sel.zone)], (period, sel.zone)
    # a window in the selection is an instant; the days it is grouped into are the selection's zone
    since = dt.datetime(2026, 7, 31, 15, 0, tzinfo=dt.UTC)  # Tokyo's midnight of 1 August
    assert _mix_by(con, Selection(since=since, zone="Asia/Tokyo"), "day") == {"2026-08-01": (3, 1110)}
    assert _mix_by(con, Selection(since=since, zone="UTC"), "day") == {
        "2026-07-31": (2, 110),
        "2026-08-01": (1, 1000),
    }


def test_misses_and_gaps_by_day_take_the_selection_zone(midnight_lake: Lake) -> None:
    from traceflow.analysis import gaps, misses
    from traceflow.store.selection import Selection

    con = midnight_lake.connect(["requests", "events", "metric_points"])
    for zone, want in (
        ("Asia/Tokyo", {"2026-07-31": 1, "2026-08-01": 3}),
        ("UTC", {"2026-07-31": 3, "2026-08-01": 1}),
    ):
        got = misses.miss_counts(con, Selection(zone=zone), ["day"])
        per_day: dict[str, int] = defaultdict(int)
        for r in got.iter_rows(named=True):
            per_day[r["day"]] += r["requests"]
        assert dict(per_day) == want, zone
    # a gap belongs to the day of the request after it: the 2nd, 3rd and 4th requests
    for zone, want in (("Asia/Tokyo", {"2026-08-01": 3}), ("UTC", {"2026-07-31": 2, "2026-08-01": 1})):
        got = gaps.gap_summary(con, Selection(zone=zone), gaps.DEFAULT_TTLS, ["day"])
        assert {r["day"]: r["gaps"] for r in got.iter_rows(named=True)} == want, zone


def test_naive_since_is_read_in_the_zone(midnight_lake: Lake, cli: CLI) -> None:
    # 2026-08-01 without an offset: Tokyo's midnight with --tz Asia/Tokyo, UTC's without
    code, out, err = cli("mix", "--by", "day", "--since", "2026-08-01", "--tz", "Asia/Tokyo", "-f", "json")
    assert code == 0, err
    assert {r["day"]: r["requests"] for r in json.loads(out)} == {"2026-08-01": 3}
    code, out, err = cli("mix", "--by", "day", "--since", "2026-08-01", "-f", "json")
    assert code == 0, err
    assert {r["day"]: r["requests"] for r in json.loads(out)} == {"2026-08-01": 1}


def test_a_bad_zone_is_refused_naming_the_fix() -> None:
    from traceflow.errors import UsageError
    from traceflow.store.selection import Selection

    with pytest.raises(UsageError, match="IANA name"):
        Selection(zone="Mars/Olympus")
