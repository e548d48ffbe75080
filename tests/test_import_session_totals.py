"""Agents that record a session's running totals (Droid, Goose, Hermes) rewrite them as the session
runs: one row per session, keyed by the session, so the lake's dedup (the most complete copy first)
keeps the newest total and a re-import of a grown session replaces its row instead of adding to it."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.test_agents_ccusage import DATA
from tests.test_agents_mix import run

DROID = "5b0c8e61-2f4a-4d7e-9c13-7a8e2d4f6b90"


def _totals(lake: Path) -> dict[str, int]:
    rows = json.loads(run("mix", "--by", "agent", "--format", "json", "--data", str(lake)))
    return {r["agent"]: (r["requests"], r["total_tokens"]) for r in rows}


def _sessions(lake: Path) -> dict[str, int]:
    doc = json.loads(run("session", "--json", "--no-refresh", "--timezone", "UTC", "--data", str(lake)))
    return {r["period"]: r["totalTokens"] for r in doc["session"]}


def test_droid_keeps_the_newest_total(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    shutil.copytree(DATA / "droid" / ".factory" / "sessions", folder)
    lake = tmp_path / "lake"
    run("import", "droid", str(folder), "--data", str(lake))
    first = _sessions(lake)[DROID]
    assert first == 18422 + 9310 + 61240 + 1284096 + 2214  # the fixture's five counts
    path = folder / "-home-dev-api" / f"{DROID}.settings.json"
    settings = json.loads(path.read_text())
    settings["tokenUsage"] = {
        "inputTokens": 20001,
        "outputTokens": 10100,
        "cacheCreationTokens": 64000,
        "cacheReadTokens": 1400000,
        "thinkingTokens": 2500,
    }
    path.write_text(json.dumps(settings))
    run("import", "droid", str(folder), "--data", str(lake))
    assert _sessions(lake)[DROID] == 20001 + 10100 + 64000 + 1400000 + 2500
    assert _totals(lake)["droid"][0] == 3  # three sessions with tokens, one row each


def test_goose_keeps_the_newest_total(tmp_path: Path) -> None:
    db = tmp_path / "goose" / "sessions" / "sessions.db"
    db.parent.mkdir(parents=True)
    con = sqlite3.connect(db)
    con.executescript((DATA / "goose" / "sessions.sql").read_text())
    con.commit()
    lake = tmp_path / "lake"
    run("import", "goose", str(db), "--data", str(lake))
    assert _sessions(lake)["20260601_1"] == 412906
    con.execute(
        "UPDATE sessions SET accumulated_input_tokens = 450000, accumulated_output_tokens = 16000,"
        " accumulated_total_tokens = 466000 WHERE id = '20260601_1'"
    )
    con.commit()
    con.close()
    run("import", "goose", str(db), "--data", str(lake))
    sessions = _sessions(lake)
    assert sessions["20260601_1"] == 466000
    assert sessions["20260601_2"] == 96440  # untouched, counted once after two imports
    assert _totals(lake)["goose"] == (3, 412906 - 412906 + 466000 + 96440 + 5530)
