"""Codebuff importer on tests/data/agent-logs/codebuff (sources: tests/data/SOURCES.md); numbers read
off the fixture by hand."""

from __future__ import annotations

from pathlib import Path

from traceflow.importers.base import FileContext
from traceflow.importers.codebuff import IMPORTER

FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "codebuff" / "manicode"


def test_assistant_usage_rows_and_session_names() -> None:
    path = FIXTURE / "projects" / "web-shop" / "chats" / "2026-03-18T14-20-05.123Z" / "chat-messages.json"
    got = IMPORTER.parse(path.read_bytes(), FileContext(path=path)).requests
    assert [r["attributes"]["message_id"] for r in got] == ["msg-a1", "msg-a2", "msg-a3", "msg-a4"]
    r = got[1]  # input 3, output 219, write 1904, read 16210, 2.1 credits
    assert (r["cold_input_tokens"], r["cache_read_tokens"], r["cache_write_tokens"], r["output_tokens"]) == (
        3,
        16210,
        1904,
        219,
    )
    assert r["attributes"]["credits"] == 2.1 and r["reasoning_tokens"] is None
    assert r["session_id"] == "manicode/web-shop/2026-03-18T14-20-05.123Z"
    assert got[2]["model"] == "claude-haiku-4-5-20251001"


def test_a_half_written_chat_is_an_error() -> None:
    path = FIXTURE / "projects" / "api" / "chats" / "2026-03-19T09-00-00.000Z" / "chat-messages.json"
    parsed = IMPORTER.parse(path.read_bytes(), FileContext(path=path))
    assert not parsed.requests and "invalid JSON" in parsed.errors[0].message
