"""GitHub Copilot CLI importer on tests/data/agent-logs/copilot (sources: tests/data/SOURCES.md);
numbers read off the fixture by hand."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceflow.importers.base import FileContext
from traceflow.importers.copilot import IMPORTER
from traceflow.store.lake import Lake

FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "copilot" / "session-state"
S1 = "0d6f3a1e-8b2c-4e7d-9f10-2a3b4c5d6e7f"
S2 = "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d"


def rows(session: str) -> dict[tuple[str, str], dict[str, Any]]:
    path = FIXTURE / session / "events.jsonl"
    got = IMPORTER.parse(path.read_bytes(), FileContext(path=path)).requests
    return {(r["attributes"]["shutdown_id"], r["model"]): r for r in got}


def test_one_row_per_shutdown_and_model_standing_for_its_requests() -> None:
    got = rows(S1)
    assert set(got) == {("0d6f-0008", "claude-sonnet-4.5"), ("0d6f-0008", "gpt-5-mini")}
    r = got["0d6f-0008", "claude-sonnet-4.5"]  # input 61840 includes read 48120 and write 9150
    assert (r["cold_input_tokens"], r["cache_read_tokens"], r["cache_write_tokens"]) == (4570, 48120, 9150)
    assert (r["output_tokens"], r["reasoning_tokens"]) == (2210, 420)  # reasoning is part of output
    assert r["attributes"]["aggregate_requests"] == 6 and r["attributes"]["premium_requests"] == 6
    assert r["session_id"] == S1 and r["agent_version"] == "0.0.354" and r.get("started_at") is None


def test_resumed_session_and_gemini_thoughts() -> None:
    got = rows(S2)
    # two processes, two shutdowns; the all-zero claude row of the second one is skipped
    assert set(got) == {("5a4b-0003", "claude-sonnet-4.5"), ("5a4b-0006", "gemini-2.5-pro")}
    g = got["5a4b-0006", "gemini-2.5-pro"]
    assert (g["output_tokens"], g["reasoning_tokens"]) == (940 + 1210, 1210)  # thoughts apart from output
    assert g["cold_input_tokens"] == 18230 - 8192


def test_import_and_the_session_still_running(cli: Callable[..., tuple[int, str, str]], lake: Lake) -> None:
    code, _, err = cli("import", "copilot", str(FIXTURE.parent))
    assert code == 3 and "events.jsonl:3: invalid JSON" in err  # the truncated line of the third session
    n = lake.connect(["requests"]).execute("SELECT count(*) FROM requests WHERE agent = 'copilot'").fetchone()
    assert n == (4,)
