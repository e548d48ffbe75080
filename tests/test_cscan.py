"""The compiled transcript scanner (``traceflow._cscan``) gives exactly what the Python loop gives.

Every test parses the same bytes twice, with the scanner and with it switched off, and compares the
frames, the errors and the carried state (the helpers of ``test_claude_code_fastpath``). The
scanner declines any line it is not sure of; the fuzzing here aims at those edges: escapes in keys
and values, duplicate keys, invalid UTF-8, surrogates, big and odd numbers, deep nesting, spaced
JSON, truncated lines, and lines of every record type.

``.ci/run`` sets ``TRACEFLOW_REQUIRE_NATIVE=1``: there a missing build fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_claude_code_fastpath import _mutate, _outcome, _random_files, _same
from traceflow import native
from traceflow.importers import claude_code, claude_code_lines, claude_code_rows
from traceflow.importers.run import _is_json, run_import
from traceflow.store.lake import Lake

if not native.available():
    if os.environ.get("TRACEFLOW_REQUIRE_NATIVE") == "1":
        raise RuntimeError("traceflow._cscan was not built; install a C compiler and reinstall traceflow")
    pytest.skip("traceflow._cscan is not built (no C compiler at install)", allow_module_level=True)


def _both(files: list[tuple[str, bytes]], cuts: dict[str, list[int]], monkeypatch: Any) -> Any:
    compiled = _outcome(files, cuts)
    with monkeypatch.context() as m:
        m.setattr(claude_code, "native_scanner", lambda: None)
        python = _outcome(files, cuts)
    _same(compiled, python)
    return compiled


def test_switch_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert native.enabled() and native.claude_scanner() is not None
    monkeypatch.setenv("TRACEFLOW_NATIVE", "0")
    assert not native.enabled() and native.claude_scanner() is None


def test_real_transcripts(testdata: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = sorted((testdata / "claude-code-otlp").glob("*/transcripts/**/*.jsonl"))
    files = [
        (str(f), f.read_bytes()) for f in [*paths, testdata / "agent-examples" / "claude-transcript.jsonl"]
    ]
    frames, errors, _ = _both(files, {}, monkeypatch)
    assert frames["requests"].height >= 20 and frames["events"].height >= 20
    assert errors == []


def test_generated_corpus_imports_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole import (worker processes, lake files) of a generated corpus, scanner on and off."""
    import subprocess
    import sys

    corpus = tmp_path / "corpus"
    gen = Path(__file__).parent.parent / "benchmarks" / "gen_claude_corpus.py"
    subprocess.run(
        [sys.executable, str(gen), "--out", str(corpus), "--size-mb", "3", "--seed", "11"],
        check=True,
        capture_output=True,
    )
    rows = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("TRACEFLOW_NATIVE", mode)
        lake = Lake(tmp_path / f"lake{mode}")
        summary = run_import(lake, claude_code.IMPORTER, [corpus / "projects"], jobs=1)
        assert summary.skipped == 0
        con = lake.connect()
        rows[mode] = {
            t: sorted(con.sql(f"SELECT * EXCLUDE (ingested_at) FROM {t}").fetchall(), key=repr)
            for t in ("requests", "events")
        }
        con.close()
    assert len(rows["1"]["requests"]) > 100
    assert rows["1"] == rows["0"]


# -- fuzzing at the JSON text level ---------------------------------------------------------------

_KEYS = [b'"type"', b'"message"', b'"usage"', b'"input_tokens"', b'"model"', b'"sessionId"', b'"timestamp"']


def _mutate_text(rng: random.Random, line: bytes) -> bytes:
    """The same record with its JSON text changed in a way a JSON parser may read differently."""
    r = rng.randrange(17)
    if r == 0:  # a key written with an escape: the same key to a JSON parser
        key = rng.choice(_KEYS)
        return line.replace(key, key[:2] + b"\\u00" + b"%02x" % key[2] + key[3:], 1)
    if r == 1:  # a duplicate key (last wins in orjson)
        i = line.find(b"{")
        return (
            line[: i + 1]
            + rng.choice([b'"type":"user",', b'"sessionId":"dup",', b'"usage":null,'])
            + line[i + 1 :]
        )
    if r == 2:  # invalid UTF-8 inside a string
        i = line.find(b'":"')
        return (
            line
            if i < 0
            else line[: i + 3]
            + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe0\x80\x80"])
            + line[i + 3 :]
        )
    if r == 3:  # a lone or paired surrogate escape
        i = line.find(b'":"')
        esc = rng.choice([b"\\ud800", b"\\udfff", b"\\ud83d\\ude00", b"\\u00e9", b"\\u0000"])
        return line if i < 0 else line[: i + 3] + esc + line[i + 3 :]
    if r == 4:  # a raw control character in a string
        i = line.find(b'":"')
        return line if i < 0 else line[: i + 3] + bytes([rng.randrange(0, 32)]) + line[i + 3 :]
    if r == 5:  # numbers: big, negative, fractional, exponents, leading zeros
        num = rng.choice(
            [b"123456789012345678901", b"-0", b"1.0", b"1e2", b"0.5e-3", b"01", b"-", b"1E400", b"9" * 18]
        )
        return line.replace(b'"input_tokens":', b'"input_tokens":' + num + b',"x":', 1)
    if r == 6:  # deep nesting in an ignored value
        depth = rng.choice([10, 300, 1100])
        return line.replace(b"{", b'{"deep":' + b"[" * depth + b"]" * depth + b",", 1)
    if r == 7:  # whitespace between tokens, CR at the end
        return line.replace(
            b'":', rng.choice([b'" :', b'":\t', b'":\n'.replace(b"\n", b" ")]), 3
        ) + rng.choice([b"", b"\r", b" "])
    if r == 8:  # trailing garbage or a trailing comma
        return line + rng.choice([b"x", b",", b"}", b" 1"])
    if r == 9:  # an escape in a value the row keeps
        for key in (b'"cwd":"', b'"model":"', b'"requestId":"', b'"version":"', b'"gitBranch":"'):
            if key in line:
                return line.replace(
                    key, key + rng.choice([b'a\\"b', b"\\\\", b"\\n", b"\\/", b"\\u20ac", b"\\x"]), 1
                )
        return line
    if r == 10:  # non-ASCII text in values
        return line.replace(b'"cwd":"', '"cwd":"/home/jürgen/项目/'.encode(), 1)
    if r == 11:  # truncated
        return line[: rng.randrange(1, max(2, len(line)))]
    if r == 12:  # an empty key, an empty object, an empty array
        return line.replace(b"{", rng.choice([b'{"":{},', b'{"e":[],', b'{"n":[1,[2,{}]],']), 1)
    if r == 13:  # literals, bad literals
        return line.replace(b"{", rng.choice([b'{"a":true,', b'{"a":nul,', b'{"a":tru,', b'{"a":falsey,']), 1)
    if r == 14:  # a top-level value that is not an object
        return rng.choice([b'["usage","type"]', b'"usage"', b"42", b"null"])
    if r == 15:  # the markers inside a string
        return line.replace(b"{", b'{"note":"\\"type\\":\\"user\\" \\"usage\\"",', 1)
    if not _is_json(line):
        return line
    return json.dumps(orjson.loads(line), ensure_ascii=rng.random() < 0.5).encode()


def _change(rng: random.Random, line: bytes) -> bytes:
    """A change to the JSON text (mostly) or to a value (see ``test_claude_code_fastpath``)."""
    return _mutate_text(rng, line) if rng.random() < 0.6 else _mutate(rng, line)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzzed_transcripts(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["s{i}.jsonl", "sub/agent-a{i}.jsonl", "sub/agent-.jsonl"]
    files, cuts = _random_files(random.Random(seed), seed, _change, names)
    _both(files, cuts, monkeypatch)


# -- the scanner itself -----------------------------------------------------------------------------

_ASSISTANT = (
    b'{"parentUuid":"p","isSidechain":false,"cwd":"/w","sessionId":"s1","version":"2.1.100",'
    b'"gitBranch":"main","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",'
    b'"content":[{"type":"text","text":"hi \\"there\\" \\u00e9"}],"stop_reason":"end_turn",'
    b'"usage":{"input_tokens":3,"cache_creation_input_tokens":10,"cache_read_input_tokens":200,'
    b'"cache_creation":{"ephemeral_5m_input_tokens":4,"ephemeral_1h_input_tokens":6},"output_tokens":7,'
    b'"service_tier":"standard"}},"requestId":"req_1","type":"assistant","uuid":"u1",'
    b'"timestamp":"2026-01-01T00:00:01.000Z"}'
)
_TOOL_RESULT = (
    b'{"parentUuid":"u1","type":"user","message":{"role":"user","content":[{"type":"tool_result",'
    b'"content":"x"}]},"promptId":"pr_9","sessionId":"s1","timestamp":"2026-01-01T00:00:02.000Z"}'
)
_PROMPT = (
    b'{"type":"user","message":{"role":"user","content":"do it"},"uuid":"u0",'
    b'"timestamp":"2026-01-01T00:00:00Z"}'
)


def _scan(data: bytes, **state: Any) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    acc, _, out = _scan_events(data, **state)
    return acc, out


def _scan_events(
    data: bytes, **state: Any
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], tuple[Any, ...]]:
    scan = native.claude_scanner()
    assert scan is not None
    acc: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    out = scan(
        data, 0, 0, claude_code_lines.COMPACT.native, state.get("file_agent"), state.get("session_id"),
        state.get("prompt_id"), state.get("last_user_ts"), state.get("prev_was_user", False), acc, events,
    )  # fmt: skip
    return acc, events, out


def test_scanner_row_is_fast_block_row() -> None:
    acc, (pos, no, session, prompt, last_ts, prev, stopped) = _scan(
        _TOOL_RESULT + b"\n" + _ASSISTANT + b"\n", prompt_id="old"
    )
    assert not stopped and pos == len(_TOOL_RESULT) + len(_ASSISTANT) + 2 and no == 2
    st: dict[str, Any] = {"prompt_id": "pr_9"}
    expected = claude_code_rows.fast_block(orjson.loads(_ASSISTANT), 2, None, st, "2026-01-01T00:00:02.000Z")
    assert acc == [expected]
    assert (session, prompt, last_ts, prev) == ("s1", "pr_9", "2026-01-01T00:00:02.000Z", False)


@pytest.mark.parametrize(
    "line",
    [
        _PROMPT.replace(b"00:00:00Z", b"00:00:00+02:00"),  # a prompt with a timestamp of another form
        _PROMPT.replace(b"2026-01-01", b"2026-02-30"),  # no such day: Python reports it
        _ASSISTANT.replace(b'"claude-x"', b'"<synthetic>"'),  # an API error
        _ASSISTANT.replace(b'"input_tokens":3', b'"input_tokens":3.0'),  # not an int
        _ASSISTANT.replace(b'"sessionId"', b'"session\\u0049d"'),  # an escaped key
        _ASSISTANT.replace(b'{"parentUuid"', b'{"sessionId":"s0","parentUuid"'),  # a duplicate key
        _ASSISTANT[:-1],  # truncated
        b'{"type":"system","subtype":"turn_duration","durationMs":5.1.2}',  # float() would raise
        b'{"no_type":1}',  # no record type
    ],
)
def test_scanner_leaves_unsure_lines_to_python(line: bytes) -> None:
    first = _TOOL_RESULT + b"\n"
    acc, (pos, no, *_, stopped) = _scan(first + line + b"\n" + _ASSISTANT + b"\n")
    assert stopped and pos == len(first) and no == 1 and acc == []


def test_scanner_skips_ignored_record_types() -> None:
    data = b'{"type":"file-history-snapshot","x":"\\"usage\\""}\n\n{"type":"summary"}\n' + _ASSISTANT
    acc, (pos, no, *_, stopped) = _scan(data)
    assert not stopped and pos >= len(data) and no == 4 and len(acc) == 1 and acc[0][0] == 4


def test_scanner_reads_prompts_and_system_events() -> None:
    data = (
        _PROMPT
        + b"\n"
        + b'{"type":"system","subtype":"turn_duration","durationMs":1234.5,"sessionId":"s2",'
        + b'"timestamp":"2026-01-01T00:00:09.123456Z","version":"2.1.9"}\n'
        + b'{"type":"system","subtype":"compact_boundary",'
        + b'"compactMetadata":{"trigger":"auto","preTokens":150000},'
        + b'"timestamp":"2024-02-29T23:59:59Z"}\n'
        + b'{"type":"system","subtype":"informational","content":"x"}\n'
    )
    acc, events, (_, no, session, prompt, last_ts, prev, stopped) = _scan_events(data, session_id="s0")
    assert not stopped and no == 4 and acc == []
    assert [e[:3] for e in events] == [
        (0, 1, 1767225600000000),  # 2026-01-01T00:00:00Z
        (1, 2, 1767225609123456),
        (2, 3, 1709251199000000),  # a leap day
    ]
    assert events[0][3:] == ("s0", None, "u0", None, "u0", None, None)  # the prompt id falls back to uuid
    assert events[1][3:9] == ("s2", None, "u0", "2.1.9", "1234.5", None)
    assert events[2][7:9] == ("150000", "auto")
    assert (session, prompt, last_ts, prev) == ("s2", "u0", "2026-01-01T00:00:00Z", True)


_STAMP = st.builds(
    lambda y, mo, d, h, mi, s, frac, z: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{z}",
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 24),
    st.integers(0, 60),
    st.integers(0, 60),
    st.sampled_from(["", ".5", ".123", ".123456", ".1234567", ".000"]),
    st.sampled_from(["Z", "", "+00:00", "z"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stamp=_STAMP)
def test_timestamps_read_as_python_reads_them(stamp: str, monkeypatch: pytest.MonkeyPatch) -> None:
    line = _PROMPT.replace(b"2026-01-01T00:00:00Z", stamp.encode())
    system = b'{"type":"system","subtype":"turn_duration","durationMs":3,"timestamp":"%s"}' % stamp.encode()
    files = [("/p/t.jsonl", line + b"\n" + _ASSISTANT + b"\n"), ("/p/u.jsonl", system + b"\n")]
    _both(files, {}, monkeypatch)
