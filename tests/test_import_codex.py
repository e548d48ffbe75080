"""Codex rollout importer: fixture rows, incremental imports, fork replay, bad lines, properties.

Expected numbers come from tests/data/agent-examples/README.md (codex-rollout.jsonl, packaged in
traceflow/examples), not from the code.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES
from traceflow.importers.base import FileContext
from traceflow.importers.codex import IMPORTER, CodexImporter
from traceflow.rows import Parsed, Row, iso_micros, stable_id

FIXTURE = EXAMPLES / "codex-rollout.jsonl"
SESSION = "019a9776-0a34-7842-8627-112b63d66e90"
TOKENS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def fixture_lines() -> list[bytes]:
    if not FIXTURE.exists():
        pytest.fail(f"fixture missing: {FIXTURE}")
    return [ln for ln in FIXTURE.read_bytes().split(b"\n") if ln.strip()]


def parse(
    data: bytes, path: Path = FIXTURE, first_line: int = 1, state: dict[str, Any] | None = None
) -> Parsed:
    return IMPORTER.parse(
        data, FileContext(path=path, first_line=first_line, state=state if state is not None else {})
    )


def parse_in_chunks(lines: list[bytes], cuts: list[int], path: Path = FIXTURE) -> Parsed:
    """Parse ``lines`` in pieces split before each index in ``cuts``, carrying the state as the
    importer driver would (through a JSON round trip: it is persisted between imports)."""
    out = Parsed()
    state: dict[str, Any] = {}
    bounds = [0, *sorted(set(cuts)), len(lines)]
    for a, b in itertools.pairwise(bounds):
        if a == b:
            continue
        chunk = b"".join(ln + b"\n" for ln in lines[a:b])
        out.extend(IMPORTER.parse(chunk, FileContext(path=path, first_line=a + 1, state=state)))
        state = orjson.loads(orjson.dumps(state))  # must survive serialisation
    return out


def join(lines: list[bytes]) -> bytes:
    return b"".join(ln + b"\n" for ln in lines)


def dedup(rows: list[Row]) -> dict[str, Row]:
    """The lake's view: one row per event_id (most complete copy)."""
    best: dict[str, Row] = {}
    for r in rows:
        cur = best.get(r["event_id"])
        if cur is None or sum(r[k] for k in TOKENS) > sum(cur[k] for k in TOKENS):
            best[r["event_id"]] = r
    return best


def totals(rows: list[Row] | Any) -> dict[str, int]:
    rows = list(rows)
    return {k: sum(r[k] for r in rows) for k in (*TOKENS, "reasoning_tokens")}


def us(ts: str) -> int:
    return iso_micros(ts)


# ------------------------------------------------------------------------------------------------
# The fixture gives exactly the README's rows
# ------------------------------------------------------------------------------------------------


def test_fixture_gives_the_readme_rows() -> None:
    fixture_lines()  # fails when the fixture is missing
    parsed = parse(FIXTURE.read_bytes())
    assert parsed.errors == []
    rows = parsed.requests
    assert len(rows) == 2  # info:null skipped, the 18:15:19.990 re-emit counted once
    got = [
        (r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"], r["reasoning_tokens"])
        for r in rows
    ]
    assert got == [(12043, 2432, 216, 128), (1073, 13952, 84, 22)]
    for r in rows:
        assert r["model"] == "gpt-5.5"
        assert r["session_id"] == SESSION
        assert r["parent_session_id"] is None
        assert r["prompt_id"] == "turn-1"
        assert r["source"] == "codex-jsonl"
        assert r["agent"] == "codex"
        assert r["agent_version"] == "0.150.1"
        assert r["cache_write_tokens"] == 0
        assert r.get("cache_write_5m_tokens") is None and r.get("cache_write_1h_tokens") is None
        assert isinstance(r["attributes"], dict)
        assert r["attributes"]["cwd"] == "/repo"
        assert r["attributes"]["originator"] == "codex_cli_rs"
    assert [r["ended_at"] for r in rows] == [us("2026-07-03T18:15:19.978Z"), us("2026-07-03T18:15:25.000Z")]
    assert [r["seq"] for r in rows] == [7, 9]
    # README session total check: cold 13116, read 16384, output 300
    t = totals(rows)
    assert (t["cold_input_tokens"], t["cache_read_tokens"], t["output_tokens"]) == (13116, 16384, 300)
    assert len({r["event_id"] for r in rows}) == 2


def test_fixture_events() -> None:
    parsed = parse(join(fixture_lines()))
    assert [(e["name"], e["timestamp"], e["prompt_id"], e["seq"]) for e in parsed.events] == [
        ("user_prompt", us("2026-07-03T18:15:01.200Z"), "turn-1", 4)
    ]
    ev = parsed.events[0]
    assert ev["session_id"] == SESSION and ev["source"] == "codex-jsonl" and ev["agent"] == "codex"
    assert ev["attributes"]["prompt_length"] == len("add a Dockerfile")


def test_reimport_gives_identical_ids() -> None:
    data = join(fixture_lines())
    a, b = parse(data), parse(data, path=Path("/elsewhere/archived_sessions/copy.jsonl"))
    assert [r["event_id"] for r in a.requests] == [r["event_id"] for r in b.requests]
    assert [e["event_id"] for e in a.events] == [e["event_id"] for e in b.events]


# ------------------------------------------------------------------------------------------------
# A growing file imported in pieces gives the same rows
# ------------------------------------------------------------------------------------------------


def test_split_at_every_line_boundary_gives_same_rows() -> None:
    lines = fixture_lines()
    whole = parse(join(lines))
    for cut in range(len(lines) + 1):
        parts = parse_in_chunks(lines, [cut])
        assert parts.requests == whole.requests, cut
        assert parts.events == whole.events, cut
        assert parts.errors == []


def test_every_line_separately_gives_same_rows() -> None:
    lines = fixture_lines()
    whole = parse(join(lines))
    parts = parse_in_chunks(lines, list(range(len(lines))))
    assert parts.requests == whole.requests
    assert parts.events == whole.events


def test_state_is_json_serialisable() -> None:
    state: dict[str, Any] = {}
    parse(join(fixture_lines()), state=state)
    assert state
    assert orjson.loads(orjson.dumps(state)) == state


# ------------------------------------------------------------------------------------------------
# Forks and sub-agents replay the parent's history
# ------------------------------------------------------------------------------------------------

CHILD = "019a9777-1111-7000-8000-00000000c41d"


def _line(ts: str, typ: str, payload: dict[str, Any]) -> bytes:
    return orjson.dumps({"timestamp": ts, "type": typ, "payload": payload})


def _token_count(ts: str, total: tuple[int, int, int, int], last: tuple[int, int, int, int]) -> bytes:
    def usage(t: tuple[int, int, int, int]) -> dict[str, int]:
        return {
            "input_tokens": t[0],
            "cached_input_tokens": t[1],
            "output_tokens": t[2],
            "reasoning_output_tokens": t[3],
            "total_tokens": t[0] + t[2],
        }

    info = {
        "total_token_usage": usage(total),
        "last_token_usage": usage(last),
        "model_context_window": 258400,
    }
    return _line(ts, "event_msg", {"type": "token_count", "info": info, "rate_limits": None})


def _restamp(line: bytes, ts: str) -> bytes:
    obj = orjson.loads(line)
    obj["timestamp"] = ts
    return orjson.dumps(obj)


def child_rollout(*, fresh_timestamps: bool, replay_parent_meta: bool, how: str = "fork") -> list[bytes]:
    """A forked / spawned child: its own session_meta, the parent's lines replayed, then its own turn.

    Codex writes the replay at spawn time (a sub-second burst), so ``fresh_timestamps`` gives every
    replayed line a new timestamp; the child's counter continues from the parent's total.
    """
    parent = fixture_lines()
    meta: dict[str, Any] = {
        "id": CHILD,
        "timestamp": "2026-07-03T18:20:00.000Z",
        "cwd": "/repo",
        "originator": "codex_cli_rs",
        "cli_version": "0.150.1",
        "model_provider": "openai",
    }
    if how == "fork":
        meta["source"] = "cli"
        meta["forked_from_id"] = SESSION
    else:
        meta["source"] = {"subagent": {"thread_spawn": {"parent_thread_id": SESSION, "depth": 1}}}
    out = [_line("2026-07-03T18:20:00.000Z", "session_meta", meta)]
    replay = parent if replay_parent_meta else parent[1:]
    for i, ln in enumerate(replay):
        out.append(_restamp(ln, f"2026-07-03T18:20:00.{i + 1:03d}Z") if fresh_timestamps else ln)
    out += [
        _line("2026-07-03T18:20:01.000Z", "turn_context", {"cwd": "/repo", "model": "gpt-5.5"}),
        _line("2026-07-03T18:20:01.100Z", "event_msg", {"type": "task_started", "turn_id": "turn-c1"}),
        _line("2026-07-03T18:20:01.200Z", "event_msg", {"type": "user_message", "message": "review it"}),
        # own request: input 31000 (30000 cached), output 40 (10 reasoning) on top of the parent's totals
        _token_count(
            "2026-07-03T18:20:05.000Z",
            (29500 + 31000, 16384 + 30000, 300 + 40, 150 + 10),
            (31000, 30000, 40, 10),
        ),
    ]
    return out


CHILD_OWN = {
    "cold_input_tokens": 1000,
    "cache_read_tokens": 30000,
    "cache_write_tokens": 0,
    "output_tokens": 40,
}
PARENT = {
    "cold_input_tokens": 13116,
    "cache_read_tokens": 16384,
    "cache_write_tokens": 0,
    "output_tokens": 300,
}


@pytest.mark.parametrize("fresh", [True, False], ids=["replay-restamped", "replay-original-ts"])
@pytest.mark.parametrize("meta", [True, False], ids=["with-parent-meta", "without-parent-meta"])
@pytest.mark.parametrize("how", ["fork", "subagent"])
def test_fork_replay_adds_no_tokens_after_dedup(fresh: bool, meta: bool, how: str) -> None:
    parent = parse(join(fixture_lines()))
    child_lines = child_rollout(fresh_timestamps=fresh, replay_parent_meta=meta, how=how)
    child = parse(join(child_lines), path=Path(f"/x/rollout-2026-07-03T18-20-00-{CHILD}.jsonl"))
    assert child.errors == []
    assert {r["session_id"] for r in child.requests} == {CHILD}
    assert {r["parent_session_id"] for r in child.requests} == {SESSION}
    merged = dedup(parent.requests + child.requests)
    got = totals(merged.values())
    want = {k: PARENT[k] + CHILD_OWN[k] for k in TOKENS}
    assert {k: got[k] for k in TOKENS} == want
    assert got["reasoning_tokens"] == 150 + 10
    # the child's own request is attributed to its own turn
    own = [r for r in child.requests if r["prompt_id"] == "turn-c1"]
    assert [(r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"]) for r in own] == [
        (1000, 30000, 40)
    ]
    # replayed user prompts dedup against the parent's as well
    assert len({e["event_id"] for e in parent.events + child.events}) == 2


def test_fork_replay_dedups_when_child_is_imported_in_pieces() -> None:
    child_lines = child_rollout(fresh_timestamps=True, replay_parent_meta=False)
    whole = parse(join(child_lines))
    for cut in range(len(child_lines) + 1):
        assert parse_in_chunks(child_lines, [cut]).requests == whole.requests


def test_seeded_child_without_replay_counts_only_its_own_usage() -> None:
    """A child whose counter was seeded from the parent but whose file holds no replayed token_count."""
    lines = [
        ln
        for ln in child_rollout(fresh_timestamps=True, replay_parent_meta=False)
        if b"token_count" not in ln
    ]
    lines.append(
        _token_count(
            "2026-07-03T18:20:05.000Z",
            (29500 + 31000, 16384 + 30000, 300 + 40, 150 + 10),
            (31000, 30000, 40, 10),
        )
    )
    rows = parse(join(lines)).requests
    assert [
        (r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"], r["reasoning_tokens"])
        for r in rows
    ] == [(1000, 30000, 40, 10)]


def test_parent_ids_from_session_meta() -> None:
    fork = parse(join(child_rollout(fresh_timestamps=True, replay_parent_meta=False, how="fork")))
    sub = parse(join(child_rollout(fresh_timestamps=True, replay_parent_meta=False, how="subagent")))
    assert {r["parent_session_id"] for r in fork.requests + fork.events} == {SESSION}
    assert {r["parent_session_id"] for r in sub.requests + sub.events} == {SESSION}


# ------------------------------------------------------------------------------------------------
# Bad data
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", [b"{not json", b"[1, 2]", b'{"timestamp": "x", "type": "event_msg", "payload": 3}']
)
@pytest.mark.parametrize("at", [0, 3, 6, 9])
def test_malformed_line_is_reported_and_the_rest_imports(bad: bytes, at: int) -> None:
    lines = fixture_lines()
    broken = [*lines[:at], bad, *lines[at:]]
    parsed = parse(join(broken))
    assert [(e.line, e.path) for e in parsed.errors] == [(at + 1, str(FIXTURE))]
    whole = parse(join(lines))
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seq"} for r in rows]  # noqa: E731
    assert strip(parsed.requests) == strip(whole.requests)
    assert strip(parsed.events) == strip(whole.events)


def test_line_numbers_count_from_first_line_and_blank_lines() -> None:
    lines = fixture_lines()
    data = join(lines[:2]) + b"\n" + b"garbage\n" + join(lines[2:])
    parsed = parse(data, first_line=101)
    assert [e.line for e in parsed.errors] == [101 + 3]
    assert [r["seq"] for r in parsed.requests] == [101 + 8, 101 + 10]


def test_bad_token_numbers_are_reported_and_the_tokens_land_in_the_next_row() -> None:
    lines = fixture_lines()
    obj = orjson.loads(lines[6])
    obj["payload"]["info"]["total_token_usage"]["input_tokens"] = "lots"
    lines[6] = orjson.dumps(obj)
    parsed = parse(join(lines))
    assert [e.line for e in parsed.errors] == [7]
    assert "input_tokens" in parsed.errors[0].message
    t = totals(parsed.requests)
    assert (t["cold_input_tokens"], t["cache_read_tokens"], t["output_tokens"]) == (13116, 16384, 300)


def test_token_count_without_timestamp_is_an_error() -> None:
    lines = fixture_lines()
    obj = orjson.loads(lines[8])
    del obj["timestamp"]
    lines[8] = orjson.dumps(obj)
    parsed = parse(join(lines))
    assert [e.line for e in parsed.errors] == [9]
    assert len(parsed.requests) == 1


# ------------------------------------------------------------------------------------------------
# Other accounting rules
# ------------------------------------------------------------------------------------------------


def _session(extra: list[bytes]) -> list[bytes]:
    return [
        _line("2026-01-01T00:00:00Z", "session_meta", {"id": "s-1", "cli_version": "0.160.0"}),
        _line("2026-01-01T00:00:00Z", "turn_context", {"model": "gpt-5.4"}),
        *extra,
    ]


def test_cache_write_and_clamping() -> None:
    def tc(ts: str, total: dict[str, int]) -> bytes:
        return _line(ts, "event_msg", {"type": "token_count", "info": {"total_token_usage": total}})

    rows = parse(
        join(
            _session(
                [
                    tc(
                        "2026-01-01T00:00:01Z",
                        {
                            "input_tokens": 1000,
                            "cached_input_tokens": 200,
                            "cache_write_input_tokens": 300,
                            "output_tokens": 50,
                        },
                    ),
                    # proxies sometimes report cached > input: read is clamped to input
                    tc(
                        "2026-01-01T00:00:02Z",
                        {
                            "input_tokens": 1100,
                            "cached_input_tokens": 500,
                            "cache_write_input_tokens": 300,
                            "output_tokens": 60,
                        },
                    ),
                ]
            )
        )
    ).requests
    assert [
        (r["cold_input_tokens"], r["cache_read_tokens"], r["cache_write_tokens"], r["output_tokens"])
        for r in rows
    ] == [
        (500, 200, 300, 50),
        (0, 100, 0, 10),
    ]
    assert rows[0]["model"] == "gpt-5.4"
    assert rows[0]["reasoning_tokens"] == 0


def test_counter_reset_uses_last_token_usage() -> None:
    rows = parse(
        join(
            _session(
                [
                    _token_count("2026-01-01T00:00:01Z", (1000, 0, 10, 0), (1000, 0, 10, 0)),
                    _token_count("2026-01-01T00:00:02Z", (300, 100, 5, 1), (300, 100, 5, 1)),  # went down
                    _token_count("2026-01-01T00:00:03Z", (700, 400, 9, 2), (400, 300, 4, 1)),
                ]
            )
        )
    ).requests
    assert [(r["cold_input_tokens"], r["cache_read_tokens"], r["output_tokens"]) for r in rows] == [
        (1000, 0, 10),
        (200, 100, 5),
        (100, 300, 4),
    ]


def test_model_changes_follow_turn_context_and_prompt_falls_back_to_user_message() -> None:
    lines = _session(
        [
            _line("2026-01-01T00:00:01Z", "event_msg", {"type": "user_message", "message": "hi"}),
            _token_count("2026-01-01T00:00:02Z", (100, 0, 1, 0), (100, 0, 1, 0)),
            _line("2026-01-01T00:00:03Z", "turn_context", {"model": "gpt-5.5-mini"}),
            _line("2026-01-01T00:00:04Z", "event_msg", {"type": "user_message", "message": "again"}),
            _token_count("2026-01-01T00:00:05Z", (250, 100, 3, 0), (150, 100, 2, 0)),
            _line("2026-01-01T00:00:06Z", "event_msg", {"type": "context_compacted"}),
            _line("2026-01-01T00:00:07Z", "event_msg", {"type": "turn_aborted", "reason": "interrupted"}),
        ]
    )
    parsed = parse(join(lines))
    assert [r["model"] for r in parsed.requests] == ["gpt-5.4", "gpt-5.5-mini"]
    prompts = [e for e in parsed.events if e["name"] == "user_prompt"]
    assert [r["prompt_id"] for r in parsed.requests] == [p["prompt_id"] for p in prompts]
    assert prompts[0]["prompt_id"] != prompts[1]["prompt_id"]
    assert [e["name"] for e in parsed.events] == ["user_prompt", "user_prompt", "compaction", "turn_aborted"]
    assert parsed.events[-1]["attributes"]["reason"] == "interrupted"
    assert all(r["agent_version"] == "0.160.0" for r in parsed.requests + parsed.events)


def test_session_id_falls_back_to_the_file_name() -> None:
    lines = fixture_lines()[1:]  # no session_meta
    path = Path(f"/x/sessions/2026/07/03/rollout-2026-07-03T18-15-00-{SESSION}.jsonl")
    rows = parse(join(lines), path=path).requests
    assert {r["session_id"] for r in rows} == {SESSION}


def test_request_ids_are_session_independent_replay_keys() -> None:
    rows = parse(join(fixture_lines())).requests
    assert rows[0]["event_id"] == stable_id(
        "codex-usage", "turn-1", "gpt-5.5", 14475, 2432, 216, 128, 14691, None
    )


# ------------------------------------------------------------------------------------------------
# Discovery
# ------------------------------------------------------------------------------------------------


def test_discover_and_default_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    day = tmp_path / "sessions" / "2026" / "07" / "03"
    day.mkdir(parents=True)
    (tmp_path / "archived_sessions").mkdir()
    a = day / "rollout-2026-07-03T18-15-00-b.jsonl"
    b = day / "rollout-2026-07-03T18-10-00-a.jsonl"
    for p in (a, b):
        p.write_bytes(b"")
    (day / "notes.jsonl").write_bytes(b"")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path))
    imp = CodexImporter()
    assert imp.default_paths() == [tmp_path / "sessions", tmp_path / "archived_sessions"]
    assert imp.discover(tmp_path / "sessions") == sorted([a, b])
    assert imp.discover(a) == [a]
    assert imp.name == "codex" and imp.whole_file is False


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------

_step = st.tuples(
    st.integers(0, 50_000),  # Δinput
    st.integers(0, 60_000),  # Δcached (may exceed Δinput: clamped)
    st.integers(0, 5_000),  # Δoutput
    st.integers(0, 5_000),  # Δreasoning (part of output)
    st.integers(0, 3),  # re-emits of the same total
)


def _rollout(
    steps: list[tuple[int, int, int, int, int]],
) -> tuple[list[bytes], list[tuple[int, int, int, int]]]:
    lines = _session([])
    total = (0, 0, 0, 0)
    deltas = []
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    n = 0
    for d_in, d_cached, d_out, d_reason, repeats in steps:
        d_out = max(d_out, d_reason)
        total = (total[0] + d_in, total[1] + d_cached, total[2] + d_out, total[3] + d_reason)
        deltas.append((d_in, d_cached, d_out, d_reason))
        for _ in range(1 + repeats):
            n += 1
            ts = (t0 + dt.timedelta(milliseconds=n)).isoformat().replace("+00:00", "Z")
            lines.append(_token_count(ts, total, (d_in, d_cached, d_out, d_reason)))
    return lines, deltas


@settings(max_examples=150, deadline=None)
@given(st.lists(_step, max_size=12))
def test_property_row_tokens_match_the_source_deltas(steps: list[tuple[int, int, int, int, int]]) -> None:
    lines, deltas = _rollout(steps)
    rows = parse(join(lines)).requests
    expected = [d for d in deltas if any(d)]
    assert len(rows) == len(expected)
    for r, (d_in, d_cached, d_out, d_reason) in zip(rows, expected, strict=True):
        assert all(r[k] >= 0 for k in (*TOKENS, "reasoning_tokens"))
        assert sum(r[k] for k in TOKENS) == d_in + d_out  # input incl. cache, plus output incl. reasoning
        assert r["cold_input_tokens"] + r["cache_read_tokens"] + r["cache_write_tokens"] == d_in
        assert r["cache_read_tokens"] == min(d_cached, d_in)
        assert r["reasoning_tokens"] == d_reason <= r["output_tokens"]
    assert len({r["event_id"] for r in rows}) == len(rows)


@settings(max_examples=100, deadline=None)
@given(st.lists(_step, max_size=8), st.lists(st.integers(0, 40), max_size=4))
def test_property_any_split_gives_the_same_rows(
    steps: list[tuple[int, int, int, int, int]], cuts: list[int]
) -> None:
    lines, _ = _rollout(steps)
    whole = parse(join(lines))
    split = parse_in_chunks(lines, [c for c in cuts if c <= len(lines)])
    assert split.requests == whole.requests


def test_empty_chunk_leaves_state_unchanged() -> None:
    state: dict[str, Any] = {}
    lines = fixture_lines()
    parse(join(lines[:5]), state=state)
    snapshot = copy.deepcopy(state)
    parse(b"", first_line=6, state=state)
    assert state == snapshot


def test_rows_fit_the_lake_schema() -> None:
    from traceflow.schema import EVENTS, REQUESTS
    from traceflow.store.lake import frame_from_rows

    parsed = parse(join(fixture_lines()))
    assert frame_from_rows(REQUESTS, parsed.requests).height == len(parsed.requests) > 0
    assert frame_from_rows(EVENTS, parsed.events).height == len(parsed.events) > 0
