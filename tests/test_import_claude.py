"""The Claude Code transcript importer, on hand-built and on real captured transcripts."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

CLAUDE = get("claude-code")
KINDS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def rows(lake: Lake, sql: str) -> list[dict[str, object]]:
    con = lake.connect()
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def totals(lake: Lake) -> tuple[int, ...]:
    (row,) = (
        lake.connect()
        .execute(
            "SELECT count(*), "
            + ", ".join(f"coalesce(sum({k}), 0)::BIGINT" for k in KINDS)
            + " FROM requests"
        )
        .fetchall()
    )
    return tuple(int(v) for v in row)


def test_hand_built_transcript_gives_the_documented_rows(lake: Lake) -> None:
    # Expected values: tests/data/agent-examples/README.md, "claude-transcript.jsonl" (traceflow/examples).
    run_import(lake, CLAUDE, [EXAMPLES / "claude-transcript.jsonl"])
    got = rows(
        lake,
        "SELECT request_id, cold_input_tokens, cache_read_tokens, cache_write_tokens, "
        "cache_write_5m_tokens, cache_write_1h_tokens, output_tokens FROM requests ORDER BY request_id",
    )
    assert [tuple(r.values()) for r in got] == [
        ("req_011AAA", 2, 15030, 1200, 1200, 0, 260),  # 3 block lines, placeholder output on the first two
        ("req_011BBB", 4, 16230, 310, 310, 0, 45),
        ("req_011CCC", 6, 0, 16600, 16600, 0, 30),  # cold re-prefill after a 7.5 min gap
    ]
    prompts = rows(lake, "SELECT request_id, prompt_id FROM requests ORDER BY request_id")
    assert prompts[0]["prompt_id"] == prompts[1]["prompt_id"] == "550e8400-e29b-41d4-a716-446655440000"
    assert prompts[2]["prompt_id"] != prompts[0]["prompt_id"]
    # The inter-turn gap tests/data/agent-examples/README.md states: the third request starts 441 s after
    # the second ended.
    (gap,) = lake.connect().execute(
        "SELECT epoch(max(started_at) FILTER (WHERE request_id = 'req_011CCC')) - "
        "epoch(max(ended_at) FILTER (WHERE request_id = 'req_011BBB')) FROM requests"
    ).fetchone() or (None,)
    assert gap == 441
    names = {r["name"] for r in rows(lake, "SELECT name FROM events")}
    assert {"user_prompt", "turn_duration"} <= names


def _fake_api_usage(k: int) -> dict[str, int]:
    """What the probe's fake Anthropic API returned for its k-th request (tests/fake_anthropic.py)."""
    step = 100 * (k - 1)
    return {
        "cold_input_tokens": 11 + step,
        "output_tokens": 22 + step,
        "cache_write_tokens": 333 + step,
        "cache_write_5m_tokens": 300 + step,
        "cache_write_1h_tokens": 33,
        "cache_read_tokens": 4444 + step,
    }


def test_real_claude_code_transcripts_match_the_fake_api(testdata: Path, lake: Lake) -> None:
    runs = ["json-full", "json-extras"]
    for run in runs:
        run_import(lake, CLAUDE, [testdata / "claude-code-otlp" / run / "transcripts"])
    got = rows(lake, "SELECT * FROM requests ORDER BY request_id")
    assert len(got) >= 20
    for row in got:
        k = (int(row["cold_input_tokens"]) - 11) // 100 + 1  # type: ignore[call-overload]
        want = _fake_api_usage(k)
        if row["cache_read_tokens"] and int(row["cache_read_tokens"]) > 2_000_000:  # type: ignore[call-overload]
            want["cache_read_tokens"] += 2_000_000  # the HUGE_USAGE marker
        assert {key: row[key] for key in want} == want, row["request_id"]
        assert row["request_id"] == f"req_fake{k:04d}"
        assert row["agent"] == "claude-code"
        assert row["model"] == "claude-opus-5-5"
    # Each request id appears once although every response was written as several block lines.
    assert len({r["request_id"] for r in got}) == len(got)


def test_subagent_transcript_links_to_its_parent(testdata: Path, lake: Lake) -> None:
    run_import(lake, CLAUDE, [testdata / "claude-code-otlp" / "json-full" / "transcripts"])
    sub = rows(lake, "SELECT * FROM requests WHERE parent_session_id IS NOT NULL ORDER BY request_id")
    assert [r["request_id"] for r in sub] == ["req_fake0020", "req_fake0021"]
    for r in sub:
        assert r["parent_session_id"] == "969233c2-33f6-4f26-b58e-4b556d8d2085"
        assert r["session_id"] == "agent-a1212a14a2634aa30"
        # The sub-agent inherits the prompt of the turn that spawned it.
        assert r["prompt_id"] == "a6da9044-e352-446d-8946-3b54842e4394"
    per_session = rows(
        lake,
        "SELECT coalesce(parent_session_id, session_id) s, count(*) n FROM requests "
        "WHERE coalesce(parent_session_id, session_id) = '969233c2-33f6-4f26-b58e-4b556d8d2085' GROUP BY s",
    )
    assert per_session[0]["n"] == 4


def test_reimport_adds_nothing(testdata: Path, lake: Lake) -> None:
    src = testdata / "claude-code-otlp" / "json-full" / "transcripts"
    first = run_import(lake, CLAUDE, [src])
    before = totals(lake)
    files_before = len(lake.files("requests"))
    second = run_import(lake, CLAUDE, [src])
    assert first.rows["requests"] > 0
    assert second.files_read == 0 and second.rows["requests"] == 0
    assert totals(lake) == before
    assert len(lake.files("requests")) == files_before


def test_growing_file_imports_only_new_requests(lake: Lake, tmp_path: Path) -> None:
    src = (EXAMPLES / "claude-transcript.jsonl").read_bytes()
    lines = src.splitlines(keepends=True)
    target = tmp_path / "logs" / "s.jsonl"
    target.parent.mkdir()
    # First import sees the file cut in the middle of a line (as when Claude Code is still writing).
    cut = len(b"".join(lines[:5])) + 40
    target.write_bytes(src[:cut])
    run_import(lake, CLAUDE, [target])
    target.write_bytes(src)
    second = run_import(lake, CLAUDE, [target])
    assert second.files_read == 1
    assert second.bytes_read == len(src) - len(b"".join(lines[:5]))
    assert totals(lake) == (3, 12, 31260, 18110, 335)


def test_malformed_lines_are_reported_and_skipped(
    lake: Lake, tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    lines = (EXAMPLES / "claude-transcript.jsonl").read_text().splitlines()
    lines.insert(3, '{"type":"assistant","message":{"usage": {broken')
    lines.insert(6, "not json at all")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    code, out, err = cli("import", "claude-code", str(bad))
    assert code == 3
    assert f"{bad}:4:" in err and f"{bad}:7:" in err
    assert "2 record(s) skipped" in out
    assert totals(lake) == (3, 12, 31260, 18110, 335)


def test_every_kind_of_malformed_line_is_reported_with_its_place(
    lake: Lake, tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    good = (EXAMPLES / "claude-transcript.jsonl").read_bytes().splitlines()
    assistant = next(ln for ln in good if b'"type":"assistant"' in ln)
    user = json.loads(next(ln for ln in good if b'"type":"user"' in ln))
    wrong_type = json.loads(assistant)
    wrong_type["message"]["usage"]["input_tokens"] = "12"
    too_big = json.loads(assistant)
    too_big["message"]["usage"]["output_tokens"] = 2**63
    bad = {
        "truncated": assistant[: len(assistant) // 2],
        "invalid escape": json.dumps({**user, "promptId": "p-bad"}).encode()[:-1]
        + b', "extra": "bad \\q escape"}',
        "invalid UTF-8": json.dumps({**user, "promptId": "p-utf8"})
        .encode()
        .replace(b"}", b', "x": "\xff"}', 1),
        "wrong type": json.dumps(wrong_type).encode(),
        "out of range": json.dumps(too_big).encode(),
        "not an object": b"[1, 2, 3]",
        "bad timestamp": json.dumps({**user, "timestamp": "yesterday"}).encode(),
    }
    lines = [good[0], *bad.values(), *good[1:]]
    target = tmp_path / "bad.jsonl"
    target.write_bytes(b"\n".join(lines) + b"\n")
    code, out, err = cli("import", "claude-code", str(target))
    assert code == 3
    for no, what in enumerate(bad, 2):
        assert f"{target}:{no}: " in err, what
    assert f"{target}:1:" not in err and f"{target}:{len(bad) + 2}:" not in err
    assert f"{len(bad)} record(s) skipped" in out
    assert "invalid JSON" in err and "invalid UTF-8" in err and "not a JSON object" in err
    assert "$.message.usage.input_tokens" in err and "$.timestamp" in err
    assert totals(lake) == (3, 12, 31260, 18110, 335)
    prompts = rows(lake, "SELECT prompt_id FROM events WHERE name = 'user_prompt'")
    assert {"p-bad", "p-utf8"}.isdisjoint(r["prompt_id"] for r in prompts)


def test_missing_path_is_a_clear_error(cli: Callable[..., tuple[int, str, str]]) -> None:
    code, _, err = cli("import", "claude-code", "/no/such/dir")
    assert code == 2
    assert "/no/such/dir does not exist" in err


def test_default_location_follows_claude_config_dir(lake: Lake, tmp_path: Path, monkeypatch: object) -> None:
    home = tmp_path / "claude-home"
    proj = home / "projects" / "-home-u-proj"
    proj.mkdir(parents=True)
    shutil.copy(EXAMPLES / "claude-transcript.jsonl", proj / "s.jsonl")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home))  # type: ignore[attr-defined]
    summary = run_import(lake, CLAUDE)
    assert summary.rows["requests"] == 3


# -- properties -------------------------------------------------------------------------------

_EXAMPLE = EXAMPLES / "claude-transcript.jsonl"


def _assistant_lines() -> list[str]:
    return [ln for ln in _EXAMPLE.read_text().splitlines() if '"type":"assistant"' in ln]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), splits=st.integers(1, 4))
def test_any_interleaving_or_duplication_gives_the_same_totals(
    seed: int, splits: int, tmp_path_factory: object
) -> None:
    rng = random.Random(seed)
    lines = _assistant_lines()
    shuffled = [ln for ln in lines for _ in range(rng.randint(1, 3))]
    rng.shuffle(shuffled)
    base = tmp_path_factory.mktemp("prop")  # type: ignore[attr-defined]
    lake = Lake(base / "data")
    # Spread the lines over several files and several imports, as sessions and re-imports would.
    chunks = [shuffled[i::splits] for i in range(splits)]
    for i, chunk in enumerate(chunks):
        f = base / f"part{i}.jsonl"
        f.write_text("\n".join(chunk) + "\n")
        run_import(lake, CLAUDE, [f])
    assert totals(lake) == (3, 12, 31260, 18110, 335)
    run_import(lake, CLAUDE, [base])  # re-import of everything: idempotent
    assert totals(lake) == (3, 12, 31260, 18110, 335)


@settings(max_examples=30, deadline=None)
@given(
    usage=st.lists(
        st.tuples(*(st.integers(0, 10**7) for _ in range(4)), st.integers(0, 10**6), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_the_four_kinds_sum_to_total_tokens(usage: list[tuple[int, int, int, int, int, bool]]) -> None:
    import tempfile

    lines = []
    for i, (cold, read, write, out, w1, split) in enumerate(usage):
        u: dict[str, object] = {
            "input_tokens": cold,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": out,
        }
        if split:
            u["cache_creation"] = {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": w1}
        lines.append(
            json.dumps(
                {
                    "type": "assistant",
                    "sessionId": "s",
                    "requestId": f"r{i}",
                    "timestamp": f"2026-01-01T00:00:{i:02d}Z",
                    "message": {"id": f"m{i}", "model": "m", "usage": u},
                }
            )
        )
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "s.jsonl"
        f.write_text("\n".join(lines) + "\n")
        lake = Lake(Path(d) / "data")
        run_import(lake, CLAUDE, [f])
        for row in rows(lake, "SELECT * FROM requests"):
            kinds = sum(int(row[k]) for k in KINDS)  # type: ignore[call-overload]
            assert row["total_tokens"] == kinds
            assert row["context_tokens"] == kinds - int(row["output_tokens"])  # type: ignore[call-overload]
        # the total where it is not 0, else the 5m + 1h breakdown (the 5m part is w here, so 0)
        expected_write = sum(w if w or not split else w + w1 for _, _, w, _, w1, split in usage)
        (got,) = lake.connect().execute(
            "SELECT sum(cache_write_tokens)::BIGINT FROM requests"
        ).fetchone() or (0,)
        assert got == expected_write
