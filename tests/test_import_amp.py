"""Amp importer on tests/data/agent-logs/amp (sources: tests/data/SOURCES.md); numbers read off the
fixture by hand."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from traceflow.importers.amp import IMPORTER, data_dir
from traceflow.importers.base import FileContext
from traceflow.store.lake import Lake

FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "amp"
T1 = "T-3f1b2c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"  # messages' usage
T2 = "T-7a8b9c0d-1e2f-4a3b-9c4d-5e6f7a8b9c0d"  # usage ledger


def rows(tid: str) -> list[dict[str, Any]]:
    path = FIXTURE / "threads" / f"{tid}.json"
    return IMPORTER.parse(path.read_bytes(), FileContext(path=path)).requests


def test_message_usage_is_anthropics_split() -> None:
    got = rows(T1)
    assert len(got) == 4  # messages 1, 2, 4, 5; 6 has no token, 7 no model
    r = got[1]  # message 2: input 3, output 144, write 1210, read 18220
    assert (r["cold_input_tokens"], r["cache_read_tokens"], r["cache_write_tokens"], r["output_tokens"]) == (
        3,
        18220,
        1210,
        144,
    )
    assert (
        r["reasoning_tokens"] is None and r["session_id"] == T1 and r["model"] == "claude-sonnet-4-5-20250929"
    )
    assert len({x["event_id"] for x in got}) == 4


def test_ledger_events_take_the_cache_from_their_message() -> None:
    got = rows(T2)
    assert [r["attributes"]["ledger_event"] for r in got] == ["ev-1", "ev-2", "ev-3", "ev-4"]
    assert (got[1]["cache_read_tokens"], got[1]["cache_write_tokens"]) == (15210, 900)
    assert got[1]["attributes"]["credits"] == 2.9
    # ev-4 names message 9, which has no usage: read and write unknown, not zero
    assert got[3]["cache_read_tokens"] is None and got[3]["cache_write_tokens"] is None
    assert got[3]["cold_input_tokens"] == 310


def test_import_names_the_broken_file(
    cli: Callable[..., tuple[int, str, str]], lake: Lake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, _, err = cli("import", "amp", str(FIXTURE))
    assert code == 3 and "00000000dead.json:1: invalid JSON" in err
    n = lake.connect(["requests"]).execute("SELECT count(*) FROM requests WHERE agent = 'amp'").fetchone()
    assert n == (4 + 4 + 2,)
    monkeypatch.setenv("AMP_DATA_DIR", str(tmp_path / "amp"))
    assert data_dir() == tmp_path / "amp" and IMPORTER.default_paths() == []
