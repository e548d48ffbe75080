"""The Claude Code corpus generator behind the ccusage benchmark (benchmarks/gen_claude_corpus.py).

Generates ~2 MB twice with a fixed seed and checks determinism, the on-disk layout, the per-content-block
duplication of assistant lines, ccusage's null-key rule, and that ``expected.json`` equals an independent
recount from the files (dedup by message.id + requestId keeping the largest output).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_generator

SEED = 5  # at 2 MB: sub-agents, sessions on both sides of 2.1.97, synthetic errors and the 0-total quirk
SIZE_MB = 2.0
CCUSAGE_NON_NULL = (  # noqa: SIM905
    "id cwd model speed costUSD version sessionId requestId isApiErrorMessage "
    "cache_read_input_tokens cache_creation_input_tokens"
).split()


gen = corpus_generator()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _lines(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for p in sorted((root / "projects").rglob("*.jsonl")):
        for raw in p.read_bytes().splitlines():
            if raw.strip():
                out.append((p, json.loads(raw)))
    return out


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    a = tmp_path_factory.mktemp("corpus_a")
    b = tmp_path_factory.mktemp("corpus_b")
    exp = gen.generate_corpus(a, SIZE_MB, SEED)
    gen.generate_corpus(b, SIZE_MB, SEED)
    return a, b, exp


def test_same_seed_gives_identical_bytes(corpora: tuple[Path, Path, dict[str, Any]], tmp_path: Path) -> None:
    a, b, _ = corpora
    fa, fb = _files(a), _files(b)
    assert fa.keys() == fb.keys()
    assert fa == fb
    other = gen.generate_corpus(tmp_path / "other", SIZE_MB, SEED + 1)
    assert other != json.loads((a / "expected.json").read_text())


def test_size_and_refuses_a_non_empty_target(corpora: tuple[Path, Path, dict[str, Any]]) -> None:
    a, _, exp = corpora
    size = sum(p.stat().st_size for p in (a / "projects").rglob("*.jsonl"))
    assert size == exp["corpus"]["bytes"]
    assert size >= SIZE_MB * 2**20
    with pytest.raises(FileExistsError):
        gen.generate_corpus(a, SIZE_MB, SEED)


def test_layout(corpora: tuple[Path, Path, dict[str, Any]]) -> None:
    a, _, exp = corpora
    uuid_re = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
    sessions = sorted((a / "projects").glob("*/*.jsonl"))
    subagents = sorted((a / "projects").glob("*/*/subagents/agent-*.jsonl"))
    assert len(sessions) == exp["corpus"]["sessions"] > 1
    assert len(subagents) == exp["corpus"]["subagent_files"] >= 1
    assert len(sessions) + len(subagents) == len(list((a / "projects").rglob("*.jsonl")))
    for p in sessions:
        assert uuid_re.match(p.stem)
        assert re.fullmatch(r"[A-Za-z0-9-]+", p.parent.name)  # cwd with non-alphanumerics replaced
        for raw in p.read_bytes().splitlines():
            d = json.loads(raw)
            if "sessionId" in d:
                assert d["sessionId"] == p.stem
            if d["type"] in ("user", "assistant", "system"):
                assert d["isSidechain"] is False
                assert gen.project_dir_name(d["cwd"]) == p.parent.name
    for p in subagents:
        agent_id = p.stem.removeprefix("agent-")
        session_dir = p.parent.parent
        assert (session_dir.parent / f"{session_dir.name}.jsonl").exists()  # the parent session's file
        assert p.with_suffix(".meta.json").exists()
        for raw in p.read_bytes().splitlines():
            d = json.loads(raw)
            assert d["isSidechain"] is True
            assert d["agentId"] == agent_id
            assert d["sessionId"] == session_dir.name
    types = {d["type"] for _, d in _lines(a)}
    assert {"user", "assistant", "system", "file-history-snapshot"} <= types


def test_block_lines_share_ids_and_repeat_usage(corpora: tuple[Path, Path, dict[str, Any]]) -> None:
    a, _, _ = corpora
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    synthetic = 0
    for _, d in _lines(a):
        if d["type"] != "assistant":
            continue
        if d.get("isApiErrorMessage"):
            synthetic += 1
            assert d["message"]["model"] == "<synthetic>"
            assert all(v == 0 for k, v in d["message"]["usage"].items() if k.endswith("tokens"))
            continue
        assert len(d["message"]["content"]) == 1  # one line per content block
        groups[d["message"]["id"]].append(d)
    assert synthetic >= 1
    multi = [g for g in groups.values() if len(g) > 1]
    assert multi, "no request with several block lines"
    seen_old = seen_new = False
    for copies in groups.values():
        assert len({c["requestId"] for c in copies}) == 1
        assert len({c["timestamp"][:10] for c in copies}) == 1  # one UTC day per request
        assert [c["timestamp"] for c in copies] == sorted(c["timestamp"] for c in copies)
        usages = [c["message"]["usage"] for c in copies]
        same_input = {
            (
                u["input_tokens"],
                u["cache_read_input_tokens"],
                u["cache_creation_input_tokens"],
                u["cache_creation"]["ephemeral_5m_input_tokens"],
                u["cache_creation"]["ephemeral_1h_input_tokens"],
            )
            for u in usages
        }
        assert len(same_input) == 1
        outs = [u["output_tokens"] for u in usages]
        if gen.vtuple(copies[0]["version"]) >= (2, 1, 97):
            assert len(set(outs)) == 1
            seen_new = True
        elif len(copies) > 1:
            seen_old = True
            assert all(1 <= o <= outs[-1] and o <= 30 for o in outs[:-1])  # streaming placeholders
            assert all(c["message"]["stop_reason"] is None for c in copies[:-1])
            assert copies[-1]["message"]["stop_reason"] in ("end_turn", "tool_use")
    assert seen_old and seen_new


def test_lines_pass_ccusage_null_filter(corpora: tuple[Path, Path, dict[str, Any]]) -> None:
    """ccusage drops a line carrying ``"usage":{`` when any of its key fields is JSON null."""
    a, _, _ = corpora
    for p in (a / "projects").rglob("*.jsonl"):
        for raw in p.read_bytes().splitlines():
            if b'"usage":{' not in raw or b'"type":"assistant"' not in raw:
                continue
            for key in CCUSAGE_NON_NULL:
                assert f'"{key}":null'.encode() not in raw, (p, key)
            d = json.loads(raw)
            assert "costUSD" not in d
            for key in ("cwd", "version", "sessionId", "timestamp"):
                assert d[key]
            assert d["message"]["id"] and d["message"]["model"]
            if not d.get("isApiErrorMessage"):
                assert d["requestId"] and d["message"]["usage"]["speed"] == "standard"


def test_expected_matches_an_independent_recount(corpora: tuple[Path, Path, dict[str, Any]]) -> None:
    a, _, exp = corpora
    assert json.loads((a / "expected.json").read_text()) == exp
    kept: dict[tuple[str, str | None], dict[str, Any]] = {}
    for _, d in _lines(a):
        if d["type"] != "assistant" or d.get("isApiErrorMessage"):
            continue
        key = (d["message"]["id"], d.get("requestId"))
        old = kept.get(key)
        if old is None or d["message"]["usage"]["output_tokens"] > old["message"]["usage"]["output_tokens"]:
            kept[key] = d
    days: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for d in kept.values():
        u = d["message"]["usage"]
        cc = u.get("cache_creation")
        write = (
            cc["ephemeral_5m_input_tokens"] + cc["ephemeral_1h_input_tokens"]
            if cc
            else u["cache_creation_input_tokens"]
        )
        row = days[d["timestamp"][:10]]
        row["requests"] += 1
        row["cold_input_tokens"] += u["input_tokens"]
        row["cache_read_tokens"] += u["cache_read_input_tokens"]
        row["cache_write_tokens"] += write
        row["output_tokens"] += u["output_tokens"]
    keys = ["requests", "cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"]
    recount = {day: {k: r[k] for k in keys} for day, r in sorted(days.items())}
    expected = {r["day"]: {k: r[k] for k in keys} for r in exp["days"]}
    assert recount == expected
    assert (
        sum(r["requests"] for r in recount.values()) == exp["corpus"]["requests"] == exp["totals"]["requests"]
    )
    # the < 2.1.152 quirk (0 total beside a non-zero breakdown) is present, so the breakdown matters
    assert exp["corpus"]["requests_with_zero_cache_creation_total"] >= 1
    assert exp["corpus"]["requests_trigger_on_other_day"] == 0
