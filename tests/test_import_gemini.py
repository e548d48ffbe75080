"""Gemini CLI chat-recording importer: fixture rows, growing files, rewrites, bad lines, properties.

Expected numbers come from tests/data/agent-examples/README.md (gemini-chat.jsonl, packaged in
traceflow/examples), not from the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES
from traceflow.importers.base import FileContext
from traceflow.importers.gemini import IMPORTER, GeminiImporter
from traceflow.rows import Parsed, Row, iso_micros, stable_id

FIXTURE = EXAMPLES / "gemini-chat.jsonl"
SESSION = "c1d2e3f4-0000-4000-8000-000000000003"
TOKENS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def fixture_lines() -> list[bytes]:
    if not FIXTURE.exists():
        pytest.fail(f"fixture missing: {FIXTURE}")
    return [ln for ln in FIXTURE.read_bytes().split(b"\n") if ln.strip()]


def join(lines: list[bytes]) -> bytes:
    return b"".join(ln + b"\n" for ln in lines)


def parse(data: bytes, path: Path = FIXTURE) -> Parsed:
    return IMPORTER.parse(data, FileContext(path=path))


def us(ts: str) -> int:
    return iso_micros(ts)


def rec(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj)


def meta(session: str = "s-1", kind: str = "main") -> bytes:
    return rec(
        {
            "sessionId": session,
            "projectHash": "p",
            "startTime": "2026-01-01T00:00:00Z",
            "lastUpdated": "2026-01-01T00:00:00Z",
            "kind": kind,
        }
    )


def user(mid: str, sec: int, text: str = "hi") -> dict[str, Any]:
    return {
        "id": mid,
        "timestamp": f"2026-01-01T00:00:{sec:02d}Z",
        "type": "user",
        "content": [{"text": text}],
    }


def gemini(
    mid: str, sec: int, tokens: dict[str, int] | None, model: str = "gemini-2.5-pro"
) -> dict[str, Any]:
    return {
        "id": mid,
        "timestamp": f"2026-01-01T00:00:{sec:02d}Z",
        "type": "gemini",
        "content": [{"text": "ok"}],
        "model": model,
        "tokens": tokens,
    }


def tok(inp: int, cached: int, out: int, thoughts: int = 0, tool: int = 0) -> dict[str, int]:
    return {
        "input": inp,
        "output": out,
        "cached": cached,
        "thoughts": thoughts,
        "tool": tool,
        "total": inp + out + thoughts + tool,
    }


def by_msg(rows: list[Row]) -> dict[str, Row]:
    return {r["attributes"]["message_id"]: r for r in rows}


# ------------------------------------------------------------------------------------------------
# The fixture gives exactly the README's rows
# ------------------------------------------------------------------------------------------------


def test_fixture_gives_the_readme_rows() -> None:
    fixture_lines()
    parsed = parse(FIXTURE.read_bytes())
    assert parsed.errors == []
    assert len(parsed.requests) == 1  # m2 written twice: last write (with tokens) wins
    r = parsed.requests[0]
    assert (r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"], r["reasoning_tokens"]) == (
        7250,
        40960,
        902,
        590,
    )
    assert r["cache_write_tokens"] == 0
    assert r.get("cache_write_5m_tokens") is None and r.get("cache_write_1h_tokens") is None
    assert r["model"] == "gemini-2.5-pro"
    assert r["session_id"] == SESSION
    assert r["parent_session_id"] is None
    assert r["prompt_id"] == "m1"
    assert r["ended_at"] == us("2026-08-29T09:20:02.000Z")
    assert r["source"] == "gemini-jsonl" and r["agent"] == "gemini-cli"
    assert r["event_id"] == stable_id("gemini-message", SESSION, "m2")
    assert r["seq"] == 3  # where m2 first appeared
    assert r["attributes"]["project_hash"] == "3f2a9c"
    assert "superseded" not in r["attributes"]


def test_fixture_user_prompt_event() -> None:
    parsed = parse(join(fixture_lines()))
    assert len(parsed.events) == 1
    e = parsed.events[0]
    assert (e["name"], e["timestamp"], e["prompt_id"], e["session_id"], e["seq"]) == (
        "user_prompt",
        us("2026-08-29T09:20:00.000Z"),
        "m1",
        SESSION,
        2,
    )
    assert e["event_id"] == stable_id("gemini-message", SESSION, "m1")


def test_growing_file_imports_converge_to_the_whole_file_rows() -> None:
    """Every prefix of the file is what an import of the growing file sees; the lake keeps one row
    per event_id (the most complete, then the newest) and must end with the whole file's rows."""
    lines = fixture_lines()
    whole = parse(join(lines))
    kept: dict[str, Row] = {}
    for k in range(1, len(lines) + 1):
        part = parse(join(lines[:k]))
        assert part.errors == []
        for r in part.requests:
            cur = kept.get(r["event_id"])
            if cur is None or sum(r[t] for t in TOKENS) >= sum(cur[t] for t in TOKENS):
                kept[r["event_id"]] = r
    assert list(kept.values()) == whole.requests
    # while m2 still has tokens: null there is no request row yet
    assert parse(join(lines[:3])).requests == []


# ------------------------------------------------------------------------------------------------
# Rewrites: last write wins, $set.messages checkpoints, $rewindTo
# ------------------------------------------------------------------------------------------------


def test_last_write_wins_and_null_tokens_do_not_erase() -> None:
    lines = [
        meta(),
        rec(user("u1", 1)),
        rec(gemini("g1", 2, tok(100, 0, 5))),
        rec(gemini("g1", 2, tok(120, 20, 7, 3))),  # rewritten with final usage
        rec({**gemini("g1", 2, None), "toolCalls": [{"id": "c1"}]}),  # a later write without tokens
    ]
    rows = parse(join(lines)).requests
    assert [(r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"]) for r in rows] == [
        (100, 20, 10)
    ]
    assert rows[0]["attributes"]["tool_calls"] == 1


def test_rewind_keeps_the_spent_tokens_but_marks_them() -> None:
    lines = [
        meta(),
        rec(user("u1", 1)),
        rec(gemini("g1", 2, tok(100, 0, 5))),
        rec(user("u2", 3)),
        rec(gemini("g2", 4, tok(200, 100, 6))),
        rec({"$rewindTo": "u2"}),
        rec(user("u3", 5)),
        rec(gemini("g3", 6, tok(210, 100, 7))),
    ]
    parsed = parse(join(lines))
    rows = by_msg(parsed.requests)
    assert list(rows) == ["g1", "g2", "g3"]
    assert rows["g2"]["attributes"]["superseded"] == "rewind"
    assert "superseded" not in rows["g1"]["attributes"] and "superseded" not in rows["g3"]["attributes"]
    assert [rows[m]["prompt_id"] for m in ("g1", "g2", "g3")] == ["u1", "u2", "u3"]
    events = {e["attributes"]["message_id"]: e for e in parsed.events}
    assert events["u2"]["attributes"]["superseded"] == "rewind"


def test_checkpoint_replaces_messages() -> None:
    lines = [
        meta(),
        rec(user("u1", 1)),
        rec(gemini("g1", 2, tok(100, 0, 5))),
        rec(user("u2", 3)),
        rec(gemini("g2", 4, None)),
        # a checkpoint (history rewritten, e.g. compressed): g1 gone, a summary added, g2 carries tokens
        rec(
            {
                "$set": {
                    "lastUpdated": "2026-01-01T00:00:09Z",
                    "messages": [user("sum", 0, "summary"), user("u2", 3), gemini("g2", 4, tok(50, 40, 2))],
                }
            }
        ),
        rec(gemini("g3", 8, tok(60, 50, 1))),
    ]
    parsed = parse(join(lines))
    rows = by_msg(parsed.requests)
    assert parsed.errors == []
    assert rows["g1"]["attributes"]["superseded"] == "checkpoint"
    assert (rows["g2"]["cold_input_tokens"], rows["g2"]["cache_read_tokens"]) == (10, 40)
    assert "superseded" not in rows["g2"]["attributes"] and rows["g2"]["prompt_id"] == "u2"
    assert rows["g3"]["prompt_id"] == "u2"
    assert rows["g2"]["seq"] == 5  # first appearance, not the checkpoint line
    # the summary turn that only exists inside the checkpoint is not a user prompt
    assert [e["attributes"]["message_id"] for e in parsed.events] == ["u1", "u2"]


def test_metadata_only_set_changes_nothing() -> None:
    lines = fixture_lines()
    without = [ln for ln in lines if not ln.startswith(b'{"$set"')]
    assert parse(join(without)).requests == parse(join(lines)).requests


# ------------------------------------------------------------------------------------------------
# Sessions, sub-agents, legacy files, discovery
# ------------------------------------------------------------------------------------------------


def test_subagent_file_sets_parent_session(tmp_path: Path) -> None:
    path = tmp_path / "tmp" / "abc" / "chats" / "parent-session-1" / "child-1.jsonl"
    data = join([meta("child-1", "subagent"), rec(user("t", 1, "task")), rec(gemini("g", 2, tok(10, 0, 1)))])
    parsed = parse(data, path=path)
    assert [(r["session_id"], r["parent_session_id"]) for r in parsed.requests + parsed.events] == [
        ("child-1", "parent-session-1"),
        ("child-1", "parent-session-1"),
    ]
    assert parsed.requests[0]["attributes"]["kind"] == "subagent"
    main = parse(data, path=tmp_path / "tmp" / "abc" / "chats" / "session-2026-01-01T00-00-child-1.jsonl")
    assert main.requests[0]["parent_session_id"] is None


def test_legacy_json_conversation_record(tmp_path: Path) -> None:
    doc = {
        "sessionId": "legacy-1",
        "projectHash": "p",
        "startTime": "2026-01-01T00:00:00Z",
        "lastUpdated": "2026-01-01T00:00:09Z",
        "messages": [user("u1", 1), gemini("g1", 2, tok(300, 200, 10, 4))],
    }
    path = tmp_path / "chats" / "session-2026-01-01T00-00-legacy-1.json"
    parsed = parse(orjson.dumps(doc, option=orjson.OPT_INDENT_2), path=path)
    assert parsed.errors == []
    [r] = parsed.requests
    assert (r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"], r["reasoning_tokens"]) == (
        100,
        200,
        14,
        4,
    )
    assert r["event_id"] == stable_id("gemini-message", "legacy-1", "g1")
    assert r["prompt_id"] == "u1"


def test_discover_and_default_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chats = tmp_path / "tmp" / "hash1" / "chats"
    (chats / "parent-1").mkdir(parents=True)
    main = chats / "session-2026-01-01T00-00-aaaaaaaa.jsonl"
    sub = chats / "parent-1" / "child.jsonl"
    legacy = chats / "session-2025-01-01T00-00-bbbbbbbb.json"
    migrated = chats / "session-2025-02-01T00-00-cccccccc.json"
    for p in (main, sub, legacy, migrated, migrated.with_suffix(".jsonl")):
        p.write_bytes(b"")
    (tmp_path / "tmp" / "hash1" / "logs.json").write_bytes(b"")
    (tmp_path / "tmp" / "hash1" / "other.jsonl").write_bytes(b"")
    monkeypatch.setenv("GEMINI_DIR", str(tmp_path))
    imp = GeminiImporter()
    assert imp.default_paths() == [tmp_path / "tmp"]
    assert imp.discover(tmp_path / "tmp") == sorted([main, sub, legacy, migrated.with_suffix(".jsonl")])
    assert imp.discover(main) == [main]
    assert imp.name == "gemini" and imp.whole_file is True


# ------------------------------------------------------------------------------------------------
# Bad data
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [b"{oops", b'"a string"', b'{"id": "mx", "type": "gemini"}', b'{"$rewindTo": 5}', b'{"$set": []}'],
)
@pytest.mark.parametrize("at", [1, 2, 3, 4, 5])
def test_malformed_line_is_reported_and_the_rest_imports(bad: bytes, at: int) -> None:
    lines = fixture_lines()
    broken = [*lines[:at], bad, *lines[at:]]
    parsed = parse(join(broken))
    assert [(e.path, e.line) for e in parsed.errors] == [(str(FIXTURE), at + 1)]
    whole = parse(join(lines))
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seq"} for r in rows]  # noqa: E731
    assert strip(parsed.requests) == strip(whole.requests)
    assert strip(parsed.events) == strip(whole.events)


def test_bad_token_value_is_reported() -> None:
    lines = [meta(), rec(user("u1", 1)), rec(gemini("g1", 2, {"input": "many", "output": 1}))]
    lines.append(rec(gemini("g2", 3, tok(10, 0, 1))))
    parsed = parse(join(lines))
    assert [e.line for e in parsed.errors] == [3]
    assert [r["attributes"]["message_id"] for r in parsed.requests] == ["g2"]


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------

_usage = st.fixed_dictionaries(
    {
        "input": st.integers(0, 2_000_000),
        "cached": st.integers(0, 2_500_000),  # may exceed input (proxies): read is clamped
        "output": st.integers(0, 100_000),
        "thoughts": st.integers(0, 100_000),
        "tool": st.integers(0, 10_000),
    }
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_usage, min_size=1, max_size=6))
def test_property_row_tokens_match_the_source(usages: list[dict[str, int]]) -> None:
    lines = [meta(), rec(user("u", 0))]
    for i, u in enumerate(usages):
        lines.append(
            rec(gemini(f"g{i}", i + 1, tok(u["input"], u["cached"], u["output"], u["thoughts"], u["tool"])))
        )
    rows = by_msg(parse(join(lines)).requests)
    for i, u in enumerate(usages):
        if not (u["input"] or u["cached"] or u["output"] or u["thoughts"]):
            assert f"g{i}" not in rows
            continue
        r = rows[f"g{i}"]
        assert all(r[k] >= 0 for k in (*TOKENS, "reasoning_tokens"))
        # promptTokenCount (incl. cache) + candidates + thoughts; tool-use prompt tokens kept aside
        assert sum(r[k] for k in TOKENS) == u["input"] + u["output"] + u["thoughts"]
        assert r["cache_read_tokens"] == min(u["cached"], u["input"])
        assert r["reasoning_tokens"] == u["thoughts"] <= r["output_tokens"]
        assert r["cache_write_tokens"] == 0
        assert r["attributes"].get("tool_tokens", 0) == u["tool"]


def test_rows_fit_the_lake_schema() -> None:
    from traceflow.schema import EVENTS, REQUESTS
    from traceflow.store.lake import frame_from_rows

    parsed = parse(join(fixture_lines()))
    assert frame_from_rows(REQUESTS, parsed.requests).height == len(parsed.requests) > 0
    assert frame_from_rows(EVENTS, parsed.events).height == len(parsed.events) > 0
