"""The Claude Code transcript parser (msgspec structs), on real and on fuzzed transcripts.

The real captured transcripts' request rows are checked against rows computed independently here
with plain ``json``; fuzzed files (real lines with odd values, cut short, invalid escapes or UTF-8)
must import without crashing, every line either read or reported. The import's worker-process path
must agree with the in-process one.
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

from tests.conftest import EXAMPLES, TESTDATA
from traceflow.importers import claude_code, claude_code_frames
from traceflow.importers import run as importing
from traceflow.importers.base import FileContext, finish
from traceflow.importers.run import run_import, table_frames
from traceflow.rows import Parsed
from traceflow.schema import EVENTS, REQUESTS, polars_type
from traceflow.store.lake import Lake, frame_from_rows

CLAUDE = claude_code.IMPORTER


def _parse(
    files: list[tuple[str, bytes]], cuts: dict[str, list[int]]
) -> tuple[dict[str, Any], list[Any], Any]:
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
    return frames, merged.errors, states


def _real_files() -> list[Path]:
    files = sorted((TESTDATA / "claude-code-otlp").glob("*/transcripts/**/*.jsonl"))
    return [*files, EXAMPLES / "claude-transcript.jsonl"]


def _real_lines() -> list[bytes]:
    return [ln for f in _real_files() for ln in f.read_bytes().splitlines()]


def _expected_requests(files: list[Path]) -> dict[str, tuple[int, ...]]:
    """Per request id: the four token kinds, the 5m / 1h split and the reasoning tokens of the most
    complete copy, computed with plain ``json`` (the importer's rules, written out again)."""
    best: dict[str, tuple[int, tuple[int, ...]]] = {}
    for f in files:
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            msg = rec.get("message") or {}
            usage = msg.get("usage")
            if rec.get("type") != "assistant" or usage is None:
                continue
            if msg.get("model") == "<synthetic>" or rec.get("isApiErrorMessage"):
                continue
            split = usage.get("cache_creation")
            w5 = w1 = None
            write = usage.get("cache_creation_input_tokens") or 0
            if split is not None:
                w5 = split.get("ephemeral_5m_input_tokens") or 0
                w1 = split.get("ephemeral_1h_input_tokens") or 0
                write = write or w5 + w1  # the total, else (0) the breakdown's sum
            kinds = (
                usage.get("input_tokens") or 0,
                usage.get("cache_read_input_tokens") or 0,
                write,
                usage.get("output_tokens") or 0,
            )
            key = rec.get("requestId") or msg["id"]
            total = sum(kinds)
            if key not in best or total >= best[key][0]:
                thinking = (usage.get("output_tokens_details") or {}).get("thinking_tokens")
                best[key] = (total, (*kinds, w5, w1, thinking))
    return {k: v for k, (_, v) in best.items()}


def test_real_transcripts_give_the_rows_plain_json_gives(testdata: Path) -> None:
    files = _real_files()
    frames, errors, _ = _parse([(str(f), f.read_bytes()) for f in files], {})
    assert errors == []
    requests = frames["requests"]
    assert requests.height >= 20 and frames["events"].height >= 20
    cols = [
        "cold_input_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "output_tokens",
        "cache_write_5m_tokens",
        "cache_write_1h_tokens",
        "reasoning_tokens",
    ]
    got = {r[0]: tuple(r[1:]) for r in requests.select("request_id", *cols).iter_rows()}
    assert got == _expected_requests(files)
    assert requests.schema == pl.Schema(
        {c: polars_type(t) for c, t in REQUESTS.columns.items() if c != "ingested_at"}
    )
    names = frames["events"]["name"].value_counts().sort("name").rows()
    want: dict[str, int] = {}
    for f in files:
        exited = False  # a cost-state line: the process exited; the next prompt is a restart
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            kind, content = rec.get("type"), (rec.get("message") or {}).get("content")
            if kind == "cost-state":
                exited = True
            elif (
                kind == "user"
                and not rec.get("isMeta")
                and not (isinstance(content, list) and any(b.get("type") == "tool_result" for b in content))
            ):
                want["user_prompt"] = want.get("user_prompt", 0) + 1
                if exited and "subagents" not in f.parts:
                    want["session_restart"] = want.get("session_restart", 0) + 1
                exited = False
            elif kind == "system" and rec.get("subtype") in ("turn_duration", "compact_boundary"):
                name = "turn_duration" if rec["subtype"] == "turn_duration" else "compaction"
                want[name] = want.get(name, 0) + 1
            elif kind == "assistant" and (
                rec["message"].get("model") == "<synthetic>" or rec.get("isApiErrorMessage")
            ):
                want["api_error"] = want.get("api_error", 0) + 1
    assert dict(names) == want


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


def _mutate_bytes(rng: random.Random, line: bytes) -> bytes:
    """A line broken at the byte level: an invalid escape, invalid UTF-8, a stray byte."""
    at = rng.randrange(0, len(line) + 1)
    return line[:at] + rng.choice([b"\\q", b"\xff", b"\xc3", b"\\ud800", b"\x00", b"}", b'"']) + line[at:]


def _check_fuzzed(files: list[tuple[str, bytes]], cuts: dict[str, list[int]]) -> None:
    """The import does not crash; every line plain ``json`` refuses (or that is not an object) is
    reported with its path and number; no reported line gives a row or an event."""
    frames, errors, states = _parse(files, cuts)
    reported = {(e.path, e.line) for e in errors}
    for e in errors:
        assert str(e).startswith(f"{e.path}:{e.line}: ") and e.message
    for path, data in files:
        for no, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.decode())
            except (UnicodeDecodeError, ValueError):
                rec = None
            if not isinstance(rec, dict):
                assert (path, no) in reported, (path, no, line[:200])
    for table in ("requests", "events"):
        if table in frames:
            rows = frames[table].select("attributes", "seq").rows()
            made = {(json.loads(a)["file"], n) for a, n in rows}
            assert not made & reported
    json.dumps(states)  # the carried state stays JSON


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzzed_records_import_or_are_reported(seed: int) -> None:
    rng = random.Random(seed)
    change = rng.choice([_mutate, _mutate_bytes])
    files, cuts = _random_files(rng, seed, change, ["s{i}.jsonl", "sub/agent-a{i}.jsonl"])
    _check_fuzzed(files, cuts)


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


def test_default_jobs_is_one_process_without_a_free_cpu(
    testdata: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 9.0, 9.0))  # one CPU free
    assert importing.default_jobs() == 4
    monkeypatch.setattr(os, "getloadavg", lambda: (3.1, 0.0, 0.0))
    assert importing.default_jobs() == 1

    def no_load_average() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", no_load_average)
    assert importing.default_jobs() == 4
    # A large import (several batches) on a busy machine starts no worker process, and imports the
    # same rows as --jobs 1.
    src = tmp_path / "logs"
    for f in sorted((testdata / "claude-code-otlp").glob("*/transcripts/**/*.jsonl")):
        target = src / f.relative_to(testdata)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    monkeypatch.setattr(importing, "_BATCH_BYTES", 64 << 10)
    monkeypatch.setattr(importing, "_PARALLEL_MIN_BYTES", 0)
    one = Lake(tmp_path / "one")
    run_import(one, CLAUDE, [src], jobs=1)
    monkeypatch.setattr(os, "getloadavg", lambda: (12.0, 12.0, 12.0))
    pools: list[str] = []
    get_context = multiprocessing.get_context

    def spy(method: str) -> Any:
        pools.append(method)
        return get_context(method)

    monkeypatch.setattr(multiprocessing, "get_context", spy)
    busy = Lake(tmp_path / "busy")
    assert run_import(busy, CLAUDE, [src]).rows["requests"] > 0
    assert pools == []
    assert _tables(one) == _tables(busy)


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


def test_events_frame_equals_frame_from_rows() -> None:
    data = (EXAMPLES / "claude-transcript.jsonl").read_bytes()
    parsed = CLAUDE.parse(data, FileContext(path=Path("/x/s.jsonl")))
    assert parsed.events
    fast = claude_code_frames.events_frame(parsed.events).drop("ingested_at")
    general = frame_from_rows(EVENTS, parsed.events).drop("ingested_at")
    assert fast.schema == general.schema
    assert fast.equals(general)
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


def test_state_of_an_older_import_carries_over() -> None:
    """Before the msgspec parser, the carried time of the last user line was an ISO string."""
    line = (
        b'{"type":"assistant","sessionId":"s","requestId":"r1","timestamp":"2026-01-01T00:00:05Z",'
        b'"message":{"id":"m1","model":"m","usage":{"input_tokens":1,"output_tokens":2}}}\n'
    )
    state: dict[str, Any] = {"last_user_ts": "2026-01-01T00:00:01.000Z", "prev_was_user": True}
    parsed = CLAUDE.parse(line, FileContext(path=Path("/x/s.jsonl"), first_line=7, state=state))
    finish(CLAUDE, parsed)
    (frame,) = parsed.frames["requests"]
    assert frame["started_at"].dt.epoch("s").to_list() == [1767225601]
    assert frame["seq"].to_list() == [7]
    assert state["last_user_ts"] == 1767225601000000 and state["prev_was_user"] is False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzzed_files_compressed_and_with_long_lines_read_whole_or_are_refused(
    seed: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The fuzzed files of :func:`test_fuzzed_records_import_or_are_reported`, some with a line made
    long, written plain, gzip (members split anywhere) or Zstandard (frames split anywhere), read in
    small steps under a small line limit (issue 33): a file with a line past the limit is refused naming
    it; any other reads back whole, in pieces cut at line ends, which import or are reported."""
    import gzip

    import zstandard

    from traceflow.importers.run import FilePlan, _chunks
    from traceflow.paths import InputTooLarge

    rng = random.Random(seed)
    change = rng.choice([_mutate, _mutate_bytes])
    files, _ = _random_files(rng, seed, change, ["s{i}.jsonl"])
    folder = tmp_path_factory.mktemp("fuzz")
    limit = rng.choice([300, 2000, 20_000])
    step = rng.choice([64, 1000, 1 << 20])
    cuts: dict[str, list[int]] = {}
    read: list[tuple[str, bytes]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEFLOW_MAX_LINE_BYTES", str(limit))
        mp.setattr(importing, "_CHUNK_BYTES", step)
        for n, (_, data) in enumerate(files):
            if rng.random() < 0.3:  # one line made long (a pasted image's size, here scaled down)
                lines = data.split(b"\n")
                at = rng.randrange(len(lines))
                lines[at] = b'{"type":"user","pad":"' + b"x" * rng.randint(200, 30_000) + b'"}'
                data = b"\n".join(lines)
            kind = rng.choice(["plain", "gz", "zst"])
            cut = rng.randint(0, len(data))
            if kind == "gz":
                blob = gzip.compress(data[:cut]) + gzip.compress(data[cut:])
            elif kind == "zst":
                c = zstandard.ZstdCompressor()
                blob = c.compress(data[:cut]) + c.compress(data[cut:])
            else:
                blob = data
            path = folder / f"s{n}.jsonl{'' if kind == 'plain' else '.' + kind}"
            path.write_bytes(blob)
            plan = FilePlan(str(path), 0, 1, {}, len(blob), 0, "", min(len(blob), 4096))
            lines = data.split(b"\n")
            longest = max(len(ln) + (1 if i < len(lines) - 1 else 0) for i, ln in enumerate(lines))
            if longest > limit:
                with pytest.raises(InputTooLarge, match="TRACEFLOW_MAX_LINE_BYTES") as info:
                    list(_chunks(plan, False))
                assert str(path) in str(info.value)
                continue
            pieces = [piece for piece, _ in _chunks(plan, False)]
            assert b"".join(pieces) == data
            assert all(p.endswith(b"\n") for p in pieces[:-1])
            ends = [sum(len(p) for p in pieces[: i + 1]) for i in range(len(pieces) - 1)]
            read.append((str(path), data))
            cuts[str(path)] = ends
    if read:
        _check_fuzzed(read, cuts)
