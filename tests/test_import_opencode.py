"""OpenCode importer on tests/data/agent-logs/opencode (sources: tests/data/SOURCES.md).

The expected numbers are read off the fixture's files by hand (each is named below), not from the
code: three sessions in JSON storage (one a sub-agent), two in the database (one a sub-agent), one
message in both.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from traceflow.importers.base import FileContext
from traceflow.importers.opencode import IMPORTER, data_dir
from traceflow.rows import stable_id
from traceflow.store.lake import Lake

FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "opencode"
A = "ses_6a1f0c2e3ffeY2qk0Ugq1Zc9Ab"  # JSON storage, claude-sonnet-4-5
B = "ses_6a1f0b71cffeQ8r3WbN2kLmPq4"  # its sub-agent (storage/session/.../B.json parentID = A)
C = "ses_69f2d3a85ffe1xVt7Hs4RkEu0m"  # gpt-5 with reasoning
D = "ses_5e02b9d41ffeHk3sQw8ZtYp1Lc"  # opencode.db
E = "ses_5e02b8f07ffeM4nXr6VbJu2Kd9"  # its sub-agent (session.parent_id = D)


def opencode_home(tmp: Path) -> Path:
    """A copy of the fixture with its ``opencode.db`` built from ``opencode.sql``."""
    home = tmp / "opencode"
    shutil.copytree(FIXTURE, home)
    con = sqlite3.connect(home / "opencode.db")
    con.executescript((home / "opencode.sql").read_text())
    con.commit()
    con.close()
    return home


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return opencode_home(tmp_path)


def rows_of(home: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in IMPORTER.discover(home):
        parsed = IMPORTER.parse(path.read_bytes(), FileContext(path=path))
        for row in parsed.requests:
            out.setdefault(row["attributes"]["message_id"], row)  # the lake's event_id dedup
    return out


def test_discovers_the_database_and_the_message_files(home: Path) -> None:
    files = IMPORTER.discover(home)
    assert files[0].name == "opencode.db"
    assert len(files) == 1 + 18  # 18 message files; session files and opencode.sql are not messages


def test_token_kinds_as_opencode_records_them(home: Path) -> None:
    rows = rows_of(home)
    a02 = rows["msg_a02"]  # input 12, output 310, cache read 0, write 14210
    assert (a02["cold_input_tokens"], a02["cache_read_tokens"], a02["cache_write_tokens"]) == (12, 0, 14210)
    assert (a02["output_tokens"], a02["reasoning_tokens"], a02["cost_usd"]) == (310, 0, 0.0579)
    assert a02.get("cache_write_5m_tokens") is None and a02.get("cache_write_1h_tokens") is None
    c02 = rows["msg_c02"]  # gpt-5: output 512 without the 1344 reasoning tokens
    assert (c02["output_tokens"], c02["reasoning_tokens"]) == (512 + 1344, 1344)
    c03 = rows["msg_c03"]  # "input": "820" (a string): read as the number it is
    assert c03["cold_input_tokens"] == 820 and c03["cache_read_tokens"] == 9088
    c04 = rows["msg_c04"]  # no tokens.cache object: read and write unknown, not zero
    assert c04["cache_read_tokens"] is None and c04["cache_write_tokens"] is None
    assert c04["cold_input_tokens"] == 1400


def test_sessions_sub_agents_prompts_and_times(home: Path) -> None:
    rows = rows_of(home)
    assert rows["msg_a02"]["session_id"] == A and rows["msg_a02"]["parent_session_id"] is None
    assert rows["msg_b02"]["session_id"] == B and rows["msg_b02"]["parent_session_id"] == A
    assert rows["msg_d02"]["session_id"] == D and rows["msg_d02"]["parent_session_id"] is None
    assert rows["msg_e03"]["session_id"] == E and rows["msg_e03"]["parent_session_id"] == D
    assert rows["msg_a05"]["prompt_id"] == "msg_a04"
    # 2026-03-09T23:59:58Z created, 2026-03-10T00:00:07Z completed
    assert rows["msg_a06"]["started_at"] == 1773100798000000
    assert rows["msg_a06"]["ended_at"] == 1773100807000000
    assert rows["msg_c05"]["ended_at"] is None  # still streaming: no completed time
    assert rows["msg_d02"]["model"] == "claude-opus-4-5" and rows["msg_d02"]["agent"] == "opencode"


def test_which_messages_give_no_row(home: Path) -> None:
    rows = rows_of(home)
    # users' messages, the aborted reply without tokens (a07), the reply without a model (c06)
    assert not {"msg_a01", "msg_a04", "msg_a07", "msg_c06", "msg_d01"} & set(rows)
    assert rows["msg_a08"]["attributes"]["error"] == "APIError"  # billed, then failed: kept
    assert len(rows) == 16  # 17 rows, msg_a03 twice (JSON and database)


def test_a_message_in_both_forms_has_one_id(home: Path) -> None:
    db = home / "opencode.db"
    from_db = [r for r in IMPORTER.parse(db.read_bytes(), FileContext(path=db)).requests]
    json_file = home / "storage" / "message" / A / "msg_a03.json"
    from_json = IMPORTER.parse(json_file.read_bytes(), FileContext(path=json_file)).requests
    twin = next(r for r in from_db if r["attributes"]["message_id"] == "msg_a03")
    assert twin["event_id"] == from_json[0]["event_id"] == stable_id("opencode-message", "msg_a03")
    cols = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "session_id")
    assert {k: twin[k] for k in cols} == {k: from_json[0][k] for k in cols}


def test_a_half_written_file_is_named_and_the_rest_imports(
    home: Path, cli: Callable[..., tuple[int, str, str]], lake: Lake
) -> None:
    code, out, err = cli("import", "opencode", str(home))
    assert code == 3  # the documented status of skipped records
    assert "msg_c07.json:1: invalid JSON" in err
    assert "17 requests" in out
    con = lake.connect(["requests"])
    n, cost = con.execute("SELECT count(*), sum(cost_usd) FROM requests WHERE agent = 'opencode'").fetchone()
    assert n == 16  # the copy of msg_a03 counted once
    # OpenCode's own costs, summed by hand over the 17 messages with rows
    assert cost == pytest.approx(
        0.0579
        + 0.0142
        + 0.0087
        + 0.0198
        + 0.0113
        + 0.0029
        + 0.0228
        + 0.0082
        + 0.0006
        + 0.1311
        + 0.0575
        + 0.0873
        + 0.0145
        + 0.0403
    )


def test_a_database_that_is_not_one_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "opencode.db"
    bad.write_bytes(b"not sqlite at all" * 10)
    parsed = IMPORTER.parse(bad.read_bytes(), FileContext(path=bad))
    assert not parsed.requests and "not an OpenCode database" in parsed.errors[0].message


def test_default_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPENCODE_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "opencode"
    monkeypatch.setenv("OPENCODE_DATA_DIR", str(tmp_path / "oc"))
    assert data_dir() == tmp_path / "oc"
    assert IMPORTER.default_paths() == []  # nothing there yet
    (tmp_path / "oc" / "storage" / "message").mkdir(parents=True)
    assert IMPORTER.default_paths() == [tmp_path / "oc"]


def test_rows_still_in_the_write_ahead_log_are_read(tmp_path: Path) -> None:
    """OpenCode keeps its database in WAL mode: a message not yet checkpointed is only in
    ``opencode.db-wal`` while OpenCode runs (here: the connection stays open)."""
    import json

    db = tmp_path / "opencode.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, data TEXT)")
    record = {"role": "assistant", "modelID": "m", "providerID": "p", "time": {"created": 1767312000000}}
    record["tokens"] = {"input": 5, "output": 1, "cache": {"read": 7, "write": 0}}
    con.execute("INSERT INTO message VALUES ('m1', 's1', ?)", (json.dumps(record),))
    con.commit()
    try:
        assert (tmp_path / "opencode.db-wal").stat().st_size > 0
        got = IMPORTER.parse(db.read_bytes(), FileContext(path=db)).requests
        assert [(r["session_id"], r["cache_read_tokens"]) for r in got] == [("s1", 7)]
        # the log is a file of its own to a refresh (new rows may change only it), read with its database
        wal = tmp_path / "opencode.db-wal"
        assert IMPORTER.discover(tmp_path) == [db, wal]
        again = IMPORTER.parse(wal.read_bytes(), FileContext(path=wal)).requests
        assert [r["event_id"] for r in again] == [r["event_id"] for r in got]
    finally:
        con.close()
