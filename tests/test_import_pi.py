"""pi importer on tests/data/agent-logs/pi (sources: tests/data/SOURCES.md); numbers read off the
fixture by hand."""

from __future__ import annotations

from pathlib import Path

from traceflow.importers.base import FileContext
from traceflow.importers.pi import IMPORTER

FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "pi"


def test_assistant_messages_with_usage() -> None:
    (path,) = FIXTURE.rglob("*_0b8e5a4c-3d2f-4e1a-9b8c-7d6e5f4a3b20.jsonl")
    got = IMPORTER.parse(path.read_bytes(), FileContext(path=path)).requests
    assert len(got) == 2  # the tool result, the model change and the all-zero reply give none
    r = got[1]  # input 3, output 610, cacheRead 11820, cacheWrite 1430, cost 0.0180
    assert (r["cold_input_tokens"], r["cache_read_tokens"], r["cache_write_tokens"], r["output_tokens"]) == (
        3,
        11820,
        1430,
        610,
    )
    assert r["cost_usd"] == 0.018 and r["model"] == "claude-sonnet-4-5"
    assert r["session_id"] == "0b8e5a4c-3d2f-4e1a-9b8c-7d6e5f4a3b20"
    assert r["attributes"]["project"] == "--home-dev-notes--" and r["attributes"]["provider"] == "anthropic"


def test_a_truncated_line_is_an_error() -> None:
    (path,) = FIXTURE.rglob("*_6c5d4e3f-2a1b-4c0d-9e8f-7a6b5c4d3e21.jsonl")
    parsed = IMPORTER.parse(path.read_bytes(), FileContext(path=path))
    assert len(parsed.requests) == 2 and parsed.errors[0].line == 5
