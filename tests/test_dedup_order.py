"""Which copy of a request survives deduplication: a total order (traceflow.store.measures.dedup_order), the
same on every run and after compaction; copies that disagree on user or session are counted.

The lake here is the issue's case: one capture replayed for five users, each replay with new user and
session ids but the same request ids (so the same ``event_id``\\ s), equally complete, stored in one
batch (the same ``ingested_at``). Before the total order the surviving copy was whichever the engine's
threads met first, and ``gaps`` and ``misses`` changed from run to run.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import EXAMPLES
from traceflow.rows import stable_id
from traceflow.store.lake import Lake

CLI = Callable[..., tuple[int, str, str]]
USERS = 5
T0 = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
INGESTED = dt.datetime(2026, 8, 10, tzinfo=dt.UTC)


def _capture(sessions: int, turns: int) -> list[tuple[int, int, dt.datetime, int, int]]:
    """(session, turn, time, read, write) of a captured workload: gaps from seconds to an hour."""
    rng = random.Random(7)
    out = []
    for s in range(sessions):
        t = T0 + dt.timedelta(seconds=rng.randint(0, 86_400 * 3))
        context = 10_000
        for k in range(turns):
            t += dt.timedelta(seconds=rng.choice([2, 5, 30, 200, 400, 900, 4000]))
            read = context if rng.random() < 0.8 else 0
            write = rng.randint(100, 3000)
            out.append((s, k, t, read, write))
            context = read + write if read else write
    return out


def _replayed(lake: Lake, sessions: int = 400, turns: int = 25, files: int = 5) -> int:
    """Store the capture once per user, shuffled over ``files`` files per user; returns the requests."""
    capture = _capture(sessions, turns)
    rng = random.Random(11)
    for u in range(USERS):
        rows: list[dict[str, Any]] = [
            {
                "event_id": stable_id("anthropic-request", f"req_{s}_{k}"),
                "source": "otlp",
                "agent": "claude-code",
                "user_id": f"user-{u}",
                "session_id": f"session-{s}-{u}",
                "request_id": f"req_{s}_{k}",
                "started_at": t,
                "ended_at": t + dt.timedelta(seconds=3),
                "model": "claude-sonnet-4-5",
                "cold_input_tokens": 3,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "output_tokens": 50,
                "seq": k,
                "ingested_at": INGESTED,
            }
            for s, k, t, read, write in capture
        ]
        rng.shuffle(rows)
        for i in range(files):
            lake.append("requests", rows[i::files])
    return len(capture)


def test_replayed_copies_give_the_same_gaps_and_misses_on_ten_runs(
    lake: Lake, cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEFLOW_CACHE", "0")
    requests = _replayed(lake)
    answers = set()
    for _ in range(10):
        code, gaps, err = cli("gaps", "--format", "json")
        assert code == 0, err
        code, misses, err = cli("misses", "--format", "json")
        assert code == 0, err
        answers.add((gaps, misses))
    assert len(answers) == 1
    # every request survives once, as the copy stored first: user-0's, whose files were written first
    con = lake.connect(["requests"])
    assert con.execute("SELECT count(*), min(user_id), max(user_id) FROM requests").fetchone() == (
        requests,
        "user-0",
        "user-0",
    )
    assert lake.conflicts() == requests  # each request's five copies disagree on user and session
    # compaction keeps the same copies, and the count of what it resolved
    lake.compact("requests")
    assert cli("gaps", "--format", "json")[1] == next(iter(answers))[0]
    assert lake.conflicts() == requests


@pytest.mark.parametrize("column", ["attributes", "session_id", "model", "cost_usd"])
def test_of_equal_copies_the_one_stored_first_survives(tmp_path: Path, column: str) -> None:
    """Two equally complete copies stored with the same ``ingested_at``, differing in one column, in
    two files, and again in one file: the view keeps the copy stored first (the file written first,
    the earlier row), on every connection, and compaction keeps the same one."""
    row: dict[str, Any] = {
        "event_id": "e1",
        "source": "otlp",
        "session_id": "s",
        "started_at": T0,
        "model": "m",
        "cold_input_tokens": 1,
        "cache_read_tokens": 2,
        "cache_write_tokens": 3,
        "output_tokens": 4,
        "cost_usd": 0.5,
        "attributes": '{"project": "alpha"}',
        "ingested_at": INGESTED,
    }
    other = {**row, column: {"attributes": '{"project": "beta"}', "cost_usd": 0.25}.get(column, "z")}
    for i, (first, second) in enumerate(((row, other), (other, row))):
        for together in (False, True):
            lake = Lake(tmp_path / f"{i}-{together}")
            if together:
                lake.append("requests", [first, second])
            else:
                lake.append("requests", [first])
                lake.append("requests", [second])
            query = f"SELECT {column} FROM requests"
            kept = {tuple(lake.connect(["requests"]).execute(query).fetchall()) for _ in range(3)}
            assert kept == {((first[column],),)}
            lake.compact("requests")
            assert lake.connect(["requests"]).execute(query).fetchall() == [(first[column],)]


def test_the_import_summary_counts_disagreeing_copies(tmp_path: Path, cli: CLI) -> None:
    """An OTLP export replayed as another user's session: the import says so."""
    doc = orjson.loads((EXAMPLES / "claude-otlp-logs.json").read_bytes())
    replay = json.loads(json.dumps(doc))
    for record in replay["resourceLogs"][0]["scopeLogs"][0]["logRecords"]:
        for kv in record["attributes"]:
            if kv["key"] in ("session.id", "user.id"):
                kv["value"] = {"stringValue": "replayed-" + str(kv["value"].get("stringValue"))}
    path = tmp_path / "logs.json"
    path.write_bytes(orjson.dumps(doc) + b"\n" + orjson.dumps(replay) + b"\n")
    code, out, err = cli("import", "otlp-json", str(path), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["conflicting_requests"] == 1  # the one api_request with a request id
    code, out, err = cli("import", "otlp-json", str(path))
    assert code == 0, err
    assert "no new rows" in out and "disagree" not in out  # nothing imported: not counted again


def test_status_reports_the_request_ids_whose_copies_disagree(lake: Lake, cli: CLI) -> None:
    """``traceflow status`` over two copies of one request that disagree on user and session, two
    equal copies of another (differing only in completeness), and three plain requests of another
    source: 1 conflicting id, as counted here from the rows written; 5 requests; the newest
    record and its age."""
    from traceflow.store.overview import status

    def row(event: str, user: str, session: str, minute: int, source: str = "otlp") -> dict[str, Any]:
        return {
            "event_id": event,
            "source": source,
            "agent": "claude-code" if source == "otlp" else "codex",
            "user_id": user,
            "session_id": session,
            "started_at": T0 + dt.timedelta(minutes=minute),
            "ended_at": T0 + dt.timedelta(minutes=minute, seconds=2),
            "model": "m",
            "cold_input_tokens": 10 + minute,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "output_tokens": 5,
            "ingested_at": INGESTED,
        }

    rows = [
        row("e1", "alice", "s1", 0),
        row("e1", "bob", "s9", 0),  # the same request replayed as bob's: disagrees
        row("e2", "alice", "s1", 1),
        {**row("e2", "alice", "s1", 1), "output_tokens": 50},  # a more complete copy: agrees
        *(row(f"c{k}", "carol", "s3", 10 + k, source="codex-test") for k in range(3)),
    ]
    lake.append("requests", rows[:2])
    lake.append("requests", rows[2:])
    seen: dict[str, set[tuple[str, str]]] = {}
    for r in rows:
        seen.setdefault(r["event_id"], set()).add((r["user_id"], r["session_id"]))
    disagreeing = sum(1 for pairs in seen.values() if len(pairs) > 1)
    assert disagreeing == 1
    code, out, err = cli("status", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["conflicting_requests"] == disagreeing
    assert got["requests"] == len(seen) == 5
    assert {(s["source"], s["agent"]): s["requests"] for s in got["sources"]} == {
        ("otlp", "claude-code"): 2,
        ("codex-test", "codex"): 3,
    }
    newest = T0 + dt.timedelta(minutes=12)  # the last codex request's time (its start)
    assert dt.datetime.fromisoformat(got["newest_record"]) == newest
    later = status(lake, now=newest + dt.timedelta(minutes=5))
    assert (later.conflicting_requests, later.age_s) == (1, 300.0)
    code, out, err = cli("status")
    assert code == 0, err
    assert "conflicting request ids: 1 " in out and "requests: 5" in out
