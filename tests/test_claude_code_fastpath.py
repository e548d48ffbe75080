"""The Claude Code importer's fast paths give exactly what its general paths give.

``claude_code_rows.fast_block`` / ``claude_code_frames.requests_frame_fast`` / ``events_frame``
handle the usual records; anything else goes through ``block`` / ``requests_frame`` /
``frame_from_rows``. Here both are run on the same lines (the fast ones switched off by
monkeypatching) and must agree on every column, every error and the carried state. The import's
worker-process path must agree with the in-process one.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import TESTDATA
from traceflow.importers import claude_code, claude_code_frames, claude_code_lines
from traceflow.importers import run as importing
from traceflow.importers.base import FileContext, finish
from traceflow.importers.run import run_import, table_frames
from traceflow.rows import Parsed
from traceflow.schema import EVENTS
from traceflow.store.lake import Lake, frame_from_rows

CLAUDE = claude_code.IMPORTER

_EXAMPLES = TESTDATA


def _parse(
    files: list[tuple[str, bytes]], cuts: dict[str, list[int]]
) -> tuple[dict[str, Any], list[str], Any]:
    """Parse ``files`` (each cut into pieces at ``cuts``) as an import batch would; frames, errors, states."""
    merged = Parsed()
    states = {}
    for path, data in files:
        state: dict[str, Any] = {}
        line, prev = 1, 0
        for cut in [*cuts.get(path, []), len(data)]:
            piece = data[prev:cut]
            prev = cut
            if not piece:
                continue
            ctx = FileContext(path=Path(path), first_line=line, state=state)
            merged.extend(CLAUDE.parse(piece, ctx))
            assert ctx.next_line == line + piece.count(b"\n")
            line = ctx.next_line
        states[path] = dict(state)
    finish(CLAUDE, merged)
    frames = {t: f.drop("ingested_at") for t, f in table_frames(merged).items()}
    return frames, [str(e) for e in merged.errors], states


def _outcome(files: list[tuple[str, bytes]], cuts: dict[str, list[int]]) -> Any:
    try:
        return _parse(files, cuts)
    except Exception as e:  # the general path raises on some odd values; the fast one must too
        return ("raised", type(e).__name__)


def _same(fast: Any, general: Any) -> None:
    if general[0] == "raised" or fast[0] == "raised":
        assert fast[0] == general[0] == "raised"
        return
    (ff, fe, fs), (gf, ge, gs) = fast, general
    assert fe == ge
    assert fs == gs
    assert ff.keys() == gf.keys()
    for table in ff:
        a = ff[table].sort(ff[table].columns, nulls_last=True)
        b = gf[table].sort(gf[table].columns, nulls_last=True)
        assert a.schema == b.schema, table
        assert a.equals(b), table


def _compare(files: list[tuple[str, bytes]], cuts: dict[str, list[int]], monkeypatch: Any) -> Any:
    fast = _outcome(files, cuts)
    with monkeypatch.context() as m:
        m.setattr(claude_code_lines, "fast_block", lambda *a: None)
        m.setattr(claude_code, "native_scanner", lambda: None)  # the compiled scanner's rows are fast ones
        m.setattr(claude_code, "events_frame", lambda rows: frame_from_rows(EVENTS, rows))
        general = _outcome(files, cuts)
    _same(fast, general)
    return fast


def _real_lines() -> list[bytes]:
    files = sorted((_EXAMPLES / "claude-code-otlp").glob("*/transcripts/**/*.jsonl"))
    files.append(_EXAMPLES / "agent-examples" / "claude-transcript.jsonl")
    return [ln for f in files for ln in f.read_bytes().splitlines()]


def test_real_transcripts_fast_equals_general(testdata: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = sorted((testdata / "claude-code-otlp").glob("*/transcripts/**/*.jsonl"))
    files = [
        (str(f), f.read_bytes()) for f in [*paths, testdata / "agent-examples" / "claude-transcript.jsonl"]
    ]
    frames, errors, _ = _compare(files, {}, monkeypatch)
    assert frames["requests"].height >= 20 and frames["events"].height >= 20
    assert errors == []


_ODD: list[Any] = [None, "", "12", "3.5", "abc", 1.5, True, False, -3, 0, 7, 2**61, 2**63 + 5, [], {}]


def _odd(rng: random.Random, *extra: Any) -> Any:
    """One odd value, a fresh copy (a shared ``{}`` put in two places would make a cycle)."""
    return copy.deepcopy(rng.choice([*_ODD, *extra]))


def _mutate(rng: random.Random, line: bytes) -> bytes:
    """A transcript line with a few values changed to odd ones (or cut short, or replaced)."""
    r = rng.random()
    if r < 0.05:
        return line[: rng.randrange(1, max(2, len(line)))]
    if r < 0.07:
        return b"not json at all"
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    if not isinstance(rec, dict):
        return line
    for _ in range(rng.randint(1, 3)):
        msg = rec.get("message") if isinstance(rec.get("message"), dict) else None
        usage = msg.get("usage") if msg is not None and isinstance(msg.get("usage"), dict) else None
        c = rng.random()
        if usage is not None and c < 0.4:
            key = rng.choice(
                [
                    "input_tokens",
                    "output_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                    "cache_creation",
                    "output_tokens_details",
                    "speed",
                ]
            )
            if key == "cache_creation" and rng.random() < 0.5:
                usage[key] = {
                    "ephemeral_5m_input_tokens": _odd(rng),
                    "ephemeral_1h_input_tokens": _odd(rng),
                }
            elif key == "output_tokens_details":
                usage[key] = {"thinking_tokens": _odd(rng)}
            elif rng.random() < 0.2:
                usage.pop(key, None)
            else:
                usage[key] = _odd(rng)
        elif msg is not None and c < 0.55:
            key = rng.choice(["id", "model", "stop_reason", "usage"])
            msg[key] = _odd(rng, "<synthetic>")
        else:
            key = rng.choice(
                [
                    *("sessionId", "timestamp", "requestId", "agentId", "isSidechain", "costUSD"),
                    *("isApiErrorMessage", "message", "promptId", "type", "isMeta", "version", "uuid"),
                ]
            )
            if rng.random() < 0.3:
                rec.pop(key, None)
            else:
                rec[key] = _odd(rng, "assistant", "user", "2026-01-01T00:00:00Z")
    return json.dumps(rec).encode() if rng.random() < 0.2 else orjson.dumps(rec)


def _random_files(
    rng: random.Random, seed: int, change: Callable[[random.Random, bytes], bytes], names: list[str]
) -> tuple[list[tuple[str, bytes]], dict[str, list[int]]]:
    """One to three files of runs of real transcript lines, some changed by ``change``, some cut
    into pieces at line ends (as a growing file is read by several imports)."""
    lines = _real_lines()
    files = []
    cuts: dict[str, list[int]] = {}
    for i in range(rng.randint(1, 3)):
        n = rng.randint(1, 40)
        start = rng.randrange(0, len(lines) - n)
        rate = rng.choice([0.0, 0.1, 0.4])
        chunk = [change(rng, ln) if rng.random() < rate else ln for ln in lines[start : start + n]]
        data = b"\n".join(chunk) + (b"\n" if rng.random() < 0.8 else b"")
        path = f"/p/{seed}/" + rng.choice(names).format(i=i)
        files.append((path, data))
        ends = [k + 1 for k, b in enumerate(data) if b == 10][:-1]
        if ends and rng.random() < 0.4:
            cuts[path] = sorted(rng.sample(ends, min(len(ends), rng.randint(1, 3))))
    return files, cuts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_odd_records_fast_equals_general(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    files, cuts = _random_files(random.Random(seed), seed, _mutate, ["s{i}.jsonl", "sub/agent-a{i}.jsonl"])
    _compare(files, cuts, monkeypatch)


def _tables(lake: Lake) -> dict[str, list[tuple[Any, ...]]]:
    """Every row written (not the deduplicated views: which of a request's rows from two batches
    they show depends on which batch finished last), less ``ingested_at``."""
    con = duckdb.connect()
    out = {}
    for table in ("requests", "events"):
        rows = con.execute(
            "SELECT * EXCLUDE (ingested_at) FROM read_parquet(?, hive_partitioning = false)",
            [lake.glob(table)],
        ).fetchall()
        out[table] = sorted(rows, key=repr)
    return out


def test_worker_processes_give_what_one_process_gives(
    testdata: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "logs"
    for i, f in enumerate(sorted((testdata / "claude-code-otlp").glob("*/transcripts"))):
        dest = src / f"run{i}"
        dest.mkdir(parents=True)
        for g in f.rglob("*.jsonl"):
            target = dest / g.relative_to(f)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(g.read_bytes())
    # Small batches, so that there are several (the same ones in both runs: a request whose lines
    # span two batches gets a row from each, and the batches decide which started_at wins).
    monkeypatch.setattr(importing, "_BATCH_BYTES", 64 << 10)
    one = Lake(tmp_path / "one")
    run_import(one, CLAUDE, [src], jobs=1)
    monkeypatch.setattr(importing, "_PARALLEL_MIN_BYTES", 0)
    pools: list[str] = []
    get_context = multiprocessing.get_context

    def spy(method: str) -> Any:
        pools.append(method)
        return get_context(method)

    monkeypatch.setattr(multiprocessing, "get_context", spy)
    many = Lake(tmp_path / "many")
    summary = run_import(many, CLAUDE, [src], jobs=2)
    assert pools and summary.rows["requests"] > 0
    assert _tables(one) == _tables(many)
    # One file per table and day, as in-process.
    for table in ("requests", "events"):
        assert sorted(p.parent.name for p in one.files(table)) == sorted(
            p.parent.name for p in many.files(table)
        )
    state = [orjson.loads(importing._state_path(x, CLAUDE).read_bytes()) for x in (one, many)]
    assert state[0] == state[1]
    assert run_import(many, CLAUDE, [src], jobs=2).files_read == 0
    # Flushing after every batch (as a huge import does) changes the files, not the rows.
    monkeypatch.setattr(importing, "_FLUSH_ROWS", 1)
    flushed = Lake(tmp_path / "flushed")
    run_import(flushed, CLAUDE, [src], jobs=2)
    assert _tables(one) == _tables(flushed)
    assert len(flushed.files("requests")) > len(one.files("requests"))


def test_plan_resolves_paths_as_path_resolve(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    for name in ("a.jsonl", "sub/b.jsonl"):
        (real / name).write_bytes(b"{}\n")
    os.symlink(real, tmp_path / "linked")
    os.symlink(real / "a.jsonl", tmp_path / "file-link.jsonl")
    files = [
        real / "a.jsonl",
        tmp_path / "linked" / "sub" / "b.jsonl",
        tmp_path / "file-link.jsonl",
        Path(os.path.relpath(real / "a.jsonl")),
    ]
    plans = importing.plan(CLAUDE, files, {})
    assert [p.path for p in plans] == [str(f.resolve()) for f in files]
    assert all(p.head == "" and p.start == 0 for p in plans)  # hashed by the reader
    result = importing._parse_batch(CLAUDE.name, plans)
    assert {r["head"] for r in result.records.values()} == {importing._head(real / "a.jsonl", 3)}


def test_events_frame_equals_frame_from_rows(testdata: Path) -> None:
    data = (testdata / "agent-examples" / "claude-transcript.jsonl").read_bytes()
    parsed = CLAUDE.parse(data, FileContext(path=Path("/x/s.jsonl")))
    assert parsed.events
    fast = claude_code_frames.events_frame(parsed.events).drop("ingested_at")
    general = frame_from_rows(EVENTS, parsed.events).drop("ingested_at")
    assert fast.schema == general.schema
    assert fast.equals(general)
    odd = [dict(parsed.events[0], request_id=5)]  # not text: the general path decides
    assert (
        claude_code_frames.events_frame(odd)
        .drop("ingested_at")
        .equals(frame_from_rows(EVENTS, odd).drop("ingested_at"))
    )
    assert isinstance(fast, pl.DataFrame)


def test_discover_lists_what_rglob_lists(tmp_path: Path) -> None:
    p = tmp_path / "p"
    (p / "s" / "subagents").mkdir(parents=True)
    (p / "dir.jsonl").mkdir()
    for name in (
        "a.jsonl",
        ".hidden.jsonl",
        ".jsonl",
        "s/subagents/agent-1.jsonl",
        "dir.jsonl/in.jsonl",
        "x.txt",
    ):
        (p / name).write_text("{}\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.jsonl").write_text("{}\n")
    os.symlink(p / "a.jsonl", p / "link.jsonl")
    os.symlink(tmp_path / "nowhere", p / "dangling.jsonl")
    os.symlink(p / "loop.jsonl", p / "loop.jsonl")
    os.symlink(p / "s", p / "linkdir")  # not entered, as rglob does not
    os.symlink(other, p / "ext")
    for root in (tmp_path, p, p / "linkdir", Path(os.path.relpath(p))):
        assert CLAUDE.discover(root) == sorted(x for x in root.rglob("*.jsonl") if x.is_file())
    assert len(CLAUDE.discover(tmp_path)) == 7
