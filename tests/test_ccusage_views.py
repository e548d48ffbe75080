"""``daily``/``weekly``/``monthly``/``session``/``blocks --json`` without ccusage (its oracle test is
tests/test_ccusage_oracle.py): recorded time, zones, Total rows, order, sessions with sub-agents, an
inclusive date-only ``--until`` everywhere, and the nearest command for a misspelt one.

Every expected number is summed by hand from the rows written here."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from traceflow.store.lake import Lake
from traceflow.store.selection import parse_end

Cli = Callable[..., tuple[int, str, str]]
US = 1_000_000
T0 = dt.datetime(2026, 11, 3, 14, 0, tzinfo=dt.UTC)  # 23:00 in Tokyo

# (event_id, session, parent, model, sent, recorded (seconds after T0), cold, read, write, output)
ROWS = [
    # sent before Tokyo's midnight of the 3rd, recorded after it: the 4th in Tokyo, by recorded time
    ("a", "s1", None, "claude-sonnet-4-5", 3598, 3603, 10, 1000, 100, 50),
    ("b", "agent-x", "s1", "claude-haiku-4-5", 7200, 7205, 1, 200, 20, 5),
    ("c", "s2", None, "claude-sonnet-4-5", -7200, -7196, 3, 300, 30, 7),
    ("d", "s2", None, "claude-sonnet-4-5", 172800, 172809, 2, 100, 0, 4),
    # a public trace's request (stored from 1970): no ccusage view counts it
    ("p", "trace", None, None, -T0.timestamp() + 300, -T0.timestamp() + 360, 9, 9, 9, 9),
]


def _us(t: dt.datetime) -> int:
    return int(t.timestamp() * US)


@pytest.fixture
def filled(lake: Lake) -> Lake:
    lake.append(
        "requests",
        [
            {
                "event_id": e,
                "source": "mooncake" if e == "p" else "claude-code-jsonl",
                "agent": None if e == "p" else "claude-code",
                "model": model,
                "session_id": session,
                "parent_session_id": parent,
                "started_at": _us(T0 + dt.timedelta(seconds=sent)),
                "ended_at": _us(T0 + dt.timedelta(seconds=recorded)),
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "output_tokens": out,
            }
            for e, session, parent, model, sent, recorded, cold, read, write, out in ROWS
        ],
    )
    return lake


def _doc(cli: Cli, *args: str) -> dict[str, object]:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert isinstance(doc, dict)
    return doc


def test_daily_files_requests_at_their_recorded_time_in_the_zone(filled: Lake, cli: Cli) -> None:
    doc = _doc(cli, "daily", "--timezone", "Asia/Tokyo")
    rows = doc["daily"]
    assert isinstance(rows, list)
    # c: 12:00Z+4s = 21:00 Tokyo on the 3rd; a (recorded 15:00:03Z) and b: the 4th; d: the 5th.
    assert [(r["period"], r["inputTokens"], r["cacheReadTokens"]) for r in rows] == [
        ("2026-11-03", 3, 300),
        ("2026-11-04", 11, 1200),
        ("2026-11-05", 2, 100),
    ]
    assert rows[1]["modelsUsed"] == ["claude-haiku-4-5", "claude-sonnet-4-5"]
    assert rows[1]["totalTokens"] == 10 + 1000 + 100 + 50 + 1 + 200 + 20 + 5
    assert doc["totals"]["inputTokens"] == 16  # type: ignore[index]  # the public trace's row is left out
    assert doc["traceflow"]["zone"] == "Asia/Tokyo"  # type: ignore[index]
    # in UTC the same rows fall on the 3rd (a, b, c) and the 5th (d)
    utc = _doc(cli, "daily", "--tz", "UTC")["daily"]
    assert [(r["period"], r["inputTokens"]) for r in utc] == [("2026-11-03", 14), ("2026-11-05", 2)]  # type: ignore[union-attr]


def test_order_weekly_monthly_and_the_total_row(filled: Lake, cli: Cli) -> None:
    rows = _doc(cli, "daily", "-z", "Asia/Tokyo", "--order", "desc")["daily"]
    assert [r["period"] for r in rows] == ["2026-11-05", "2026-11-04", "2026-11-03"]  # type: ignore[union-attr]
    weekly = _doc(cli, "weekly", "-z", "Asia/Tokyo")["weekly"]
    assert [r["period"] for r in weekly] == ["2026-11-02"]  # type: ignore[union-attr]  # the Monday
    assert [r["period"] for r in _doc(cli, "monthly", "-z", "UTC")["monthly"]] == ["2026-11"]  # type: ignore[union-attr]
    code, out, _ = cli("daily", "-z", "Asia/Tokyo", "--breakdown")
    assert code == 0
    lines = out.splitlines()
    total = next(line for line in lines if line.startswith("Total"))
    assert "1,832" in total  # every token of a, b, c and d
    assert "Zone: Asia/Tokyo" in out
    assert any("└─ haiku-4-5" in line for line in lines)


def test_session_counts_sub_agents_in_their_parent(filled: Lake, cli: Cli) -> None:
    rows = _doc(cli, "session", "-z", "UTC")["session"]
    got = {r["period"]: r["totalTokens"] for r in rows}  # type: ignore[union-attr]
    assert got == {"s1": 10 + 1000 + 100 + 50 + 1 + 200 + 20 + 5, "s2": 3 + 300 + 30 + 7 + 2 + 100 + 0 + 4}
    assert rows[0]["period"] == "s1"  # type: ignore[index]  # the costliest first
    assert rows[0]["metadata"] == {"lastActivity": "2026-11-03T16:00:05.000Z"}  # type: ignore[index]


def test_blocks_json_has_ccusage_keys(filled: Lake, cli: Cli) -> None:
    blocks = _doc(cli, "blocks")["blocks"]
    real = [b for b in blocks if not b["isGap"]]  # type: ignore[union-attr]
    assert [b["id"] for b in real] == ["2026-11-03T12:00:00.000Z", "2026-11-05T14:00:00.000Z"]
    assert real[0]["entries"] == 3 and real[0]["tokenCounts"]["inputTokens"] == 14
    assert [b["isGap"] for b in blocks] == [False, True, False]  # type: ignore[union-attr]
    assert blocks[1]["startTime"] == "2026-11-03T21:00:05.000Z"  # type: ignore[index]  # last request + 5 h


def test_a_date_only_until_includes_that_day(filled: Lake, cli: Cli) -> None:
    assert parse_end("2026-11-05", "--until") == dt.datetime(2026, 11, 6, tzinfo=dt.UTC)
    assert parse_end("20261105", "--until") == dt.datetime(2026, 11, 6, tzinfo=dt.UTC)
    assert parse_end("2026-11-05T12:00Z", "--until") == dt.datetime(2026, 11, 5, 12, tzinfo=dt.UTC)
    rows = _doc(cli, "daily", "-z", "Asia/Tokyo", "--since", "20261103", "--until", "20261104")["daily"]
    assert [r["period"] for r in rows] == ["2026-11-03", "2026-11-04"]  # type: ignore[union-attr]
    # the same in every command: mix's window now ends at the end of the 5th (UTC)
    code, out, _ = cli("mix", "--since", "2026-11-03", "--until", "2026-11-05", "-f", "json")
    assert code == 0 and json.loads(out)["requests"] == 4
    code, out, _ = cli("mix", "--since", "2026-11-03", "--until", "2026-11-04", "-f", "json")
    assert code == 0 and json.loads(out)["requests"] == 3


def test_a_misspelt_command_names_the_nearest() -> None:
    out = subprocess.run([sys.executable, "-m", "traceflow", "day"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "did you mean `traceflow daily`" in out.stderr


@pytest.mark.parametrize("view", ["daily", "weekly", "monthly", "session"])
def test_tables_fit_80_columns_with_tokens_and_cost(
    view: str, filled: Lake, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(view, "-z", "Asia/Tokyo")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    header = " ".join(out.splitlines()[:3])
    assert "total" in header and "cost" in header  # the essential columns stay
    assert "Zone: Asia/Tokyo" in out


def test_agents_are_named_as_ccusage_names_them(filled: Lake, cli: Cli) -> None:
    at = T0 + dt.timedelta(days=2, hours=1)
    filled.append(
        "requests",
        [
            {
                "event_id": "x",
                "source": "codex",
                "agent": "codex",
                "model": "gpt-5",
                "session_id": "cx",
                "started_at": _us(at),
                "ended_at": _us(at),
                "cold_input_tokens": 7,
                "output_tokens": 1,
            }
        ],
    )
    daily = _doc(cli, "daily", "-z", "UTC")["daily"]
    assert [(r["period"], r["agent"], r["metadata"]) for r in daily] == [  # type: ignore[union-attr]
        ("2026-11-03", "all", {"agents": ["claude"]}),
        ("2026-11-05", "all", {"agents": ["claude", "codex"]}),
    ]
    sessions = {r["period"]: r["agent"] for r in _doc(cli, "session", "-z", "UTC")["session"]}  # type: ignore[union-attr]
    assert sessions == {"s1": "claude", "s2": "claude", "cx": "codex"}


def test_blocks_json_window_keeps_the_whole_chain(filled: Lake, cli: Cli) -> None:
    """``--since`` shows the blocks that start in the window; the chain is the whole history's: a
    request recorded at 16:00:05 still belongs to the block that began at 12:00, not to one of its own."""
    late = _doc(cli, "blocks", "--since", "2026-11-03T16:00Z")["blocks"]
    assert [b["id"] for b in late] == ["2026-11-05T14:00:00.000Z"]  # type: ignore[union-attr]
    desc = _doc(cli, "blocks", "--order", "desc")["blocks"]
    assert [b["isGap"] for b in desc] == [False, True, False]  # type: ignore[union-attr]
    assert desc[0]["id"] == "2026-11-05T14:00:00.000Z"  # type: ignore[index]
    assert _doc(cli, "blocks", "--recent")["blocks"] == []  # nothing in the last 3 days
