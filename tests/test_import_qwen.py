"""Qwen Code importer on tests/data/agent-logs/qwen (sources: tests/data/SOURCES.md).

Expected numbers are read off the fixture's lines by hand, not from the code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from traceflow.importers.base import FileContext
from traceflow.importers.qwen import IMPORTER, data_dir
from traceflow.store.lake import Lake

FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "qwen"
S1 = "4c1e2a7b-6f0d-4e55-9a0b-2d3c4e5f6a71"
S2 = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c62"
S3 = "e2f3a4b5-c6d7-48e9-a0b1-c2d3e4f5a6b3"


def parse(path: Path, data: bytes | None = None, state: dict[str, Any] | None = None) -> Any:
    return IMPORTER.parse(
        path.read_bytes() if data is None else data,
        FileContext(path=path, state={} if state is None else state),
    )


def chat(session: str) -> Path:
    return next(FIXTURE.rglob(f"{session}.jsonl"))


def by_uuid(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["attributes"]["uuid"][-2:]: r for r in rows}


def test_token_kinds() -> None:
    rows = by_uuid(parse(chat(S1)).requests)
    r = rows["04"]  # prompt 17311 with 14784 cached, 388 candidates
    assert (r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"]) == (17311 - 14784, 14784, 388)
    assert r["cache_write_tokens"] is None  # Qwen records no cache write: unknown, not zero
    assert r["reasoning_tokens"] == 0 and r["ended_at"] is not None
    s3 = by_uuid(parse(chat(S3)).requests)
    assert (s3["02"]["output_tokens"], s3["02"]["reasoning_tokens"]) == (402 + 1288, 1288)
    assert s3["02"]["model"] == "qwen3-max" and s3["05"]["model"] == "qwen3-coder-plus"


def test_sub_agent_prompt_and_skipped_records() -> None:
    rows = by_uuid(parse(chat(S1)).requests)
    assert set(rows) == {"02", "04", "05", "06", "07"}  # 09 has no usageMetadata
    assert rows["05"]["session_id"] == "agent-explore-7f3c" and rows["05"]["parent_session_id"] == S1
    assert rows["02"]["session_id"] == S1 and rows["02"]["parent_session_id"] is None
    assert rows["07"]["prompt_id"] == "p1" and rows["05"]["prompt_id"] == "p1"
    parsed = parse(chat(S3))
    assert len(parsed.requests) == 3  # the all-zero usage gives no row
    assert parsed.errors and parsed.errors[0].line == 6  # the half-written last line


def test_a_branch_copy_has_the_original_id() -> None:
    original = by_uuid(parse(chat(S1)).requests)["02"]
    copy = next(r for r in parse(chat(S2)).requests if r["attributes"].get("forked_from") == S1)
    assert copy["event_id"] == original["event_id"] and copy["session_id"] == S2


def test_growing_file_keeps_its_prompt_across_imports() -> None:
    path = chat(S1)
    lines = path.read_bytes().splitlines(keepends=True)
    state: dict[str, Any] = {}
    first = parse(path, b"".join(lines[:2]), state)
    rest = IMPORTER.parse(b"".join(lines[2:]), FileContext(path=path, first_line=3, state=state))
    assert [r["prompt_id"] for r in first.requests + rest.requests] == ["p1"] * 5


def test_import_and_default_location(
    cli: Callable[..., tuple[int, str, str]], lake: Lake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, _, err = cli("import", "qwen", str(FIXTURE))
    assert code == 3 and ".jsonl:6: invalid JSON" in err
    n = (
        lake.connect(["requests"])
        .execute("SELECT count(*) FROM requests WHERE agent = 'qwen-code'")
        .fetchone()
    )
    assert n == (5 + 1 + 3,)  # the /branch copy counts once
    monkeypatch.setenv("QWEN_DATA_DIR", str(tmp_path / "q"))
    assert data_dir() == tmp_path / "q" and IMPORTER.default_paths() == []
    (tmp_path / "q" / "projects").mkdir(parents=True)
    assert IMPORTER.default_paths() == [tmp_path / "q" / "projects"]
