"""Kimi importer on tests/data/agent-logs/kimi (sources: tests/data/SOURCES.md); numbers read off the
fixture by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traceflow.importers.base import FileContext
from traceflow.importers.kimi import IMPORTER

FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "kimi"
OLD = "5e0c8a2b-1d3f-4e5a-9b7c-8d6e5f4a3b21"
NEW = "c2a1b3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"


def rows(path: Path) -> list[dict[str, Any]]:
    return IMPORTER.parse(path.read_bytes(), FileContext(path=path)).requests


def test_kimi_cli_status_updates_take_the_configured_model() -> None:
    (path,) = (FIXTURE / "sessions").rglob(f"{OLD}/wire.jsonl")
    got = rows(path)
    assert len(got) == 3  # the StatusUpdate without token_usage gives no row
    r = got[1]  # input_other 612, output 410, cache read 9216
    assert (r["cold_input_tokens"], r["cache_read_tokens"], r["cache_write_tokens"], r["output_tokens"]) == (
        612,
        9216,
        0,
        410,
    )
    assert r["model"] == "kimi-k2-turbo-preview" and r["session_id"] == OLD and r["parent_session_id"] is None
    assert r["ended_at"] == 1773655211_500000  # 1773655200.0 + 11.5 s
    assert r["attributes"]["message_id"] == "chatcmpl-a2"


def test_kimi_code_turn_records_and_sub_agents() -> None:
    main = rows(next((FIXTURE / "sessions").rglob("main/wire.jsonl")))
    assert [r["cold_input_tokens"] for r in main] == [10410, 744]  # session records are running totals
    assert main[0]["model"] == "kimi-k2.6" and main[0]["session_id"] == NEW
    path = next((FIXTURE / "sessions").rglob("coder-2/wire.jsonl"))
    parsed = IMPORTER.parse(path.read_bytes(), FileContext(path=path))
    assert [(r["session_id"], r["parent_session_id"]) for r in parsed.requests] == [("agent-coder-2", NEW)]
    assert parsed.errors and parsed.errors[0].line == 4  # the truncated last line
