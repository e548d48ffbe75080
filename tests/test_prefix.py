"""Prefix structure from token counts (traceflow.replay.prefix).

The ground-truth test drops the true prefix hashes of the real Claude Code sessions in
``tests/data/weka_cc_traces``, derives ids from token counts and timing alone, and compares hit
ratios computed by a small LRU written here (independent of traceflow's simulator).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.replay.hash_ids import check_hash_ids
from traceflow.replay.prefix import PrefixOptions, derive
from traceflow.replay.requests import load_requests
from traceflow.store.lake import Lake

US = 1_000_000


def frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """A load_requests-shaped frame from terse rows (t in seconds)."""
    schema: dict[str, Any] = {
        "session_id": pl.String,
        "parent_session_id": pl.String,
        "model": pl.String,
        "user_id": pl.String,
        "t_us": pl.Int64,
        "end_us": pl.Int64,
        "ctx": pl.Int64,
        "out": pl.Int64,
        "read": pl.Int64,
        "measured": pl.Boolean,
        "hash_ids": pl.List(pl.Int64),
        "src_block": pl.Int32,
        "scope": pl.String,
    }
    full = []
    for r in rows:
        t = int(r.get("t", 0) * US)
        full.append(
            {
                "session_id": r.get("s"),
                "parent_session_id": r.get("parent"),
                "model": r.get("model", "m"),
                "user_id": r.get("user"),
                "t_us": t,
                "end_us": t + int(r.get("dur", 1) * US),
                "ctx": r["ctx"],
                "out": r.get("out", 10),
                "read": r.get("read"),
                "measured": r.get("read") is not None,
                "hash_ids": r.get("ids"),
                "src_block": r.get("bs"),
                "scope": r.get("scope"),
            }
        )
    return pl.DataFrame(full, schema=schema).sort("t_us", maintain_order=True)


def ids_of(rows: Sequence[dict[str, Any]], block: int = 512) -> list[list[int]]:
    return derive(frame(rows), PrefixOptions(block_size=block)).lists()


def common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# -- the rules ------------------------------------------------------------------------------------


def test_append_only_growth_shares_full_blocks_and_partial_blocks_get_own_ids() -> None:
    r = ids_of(
        [{"s": "a", "t": 0, "ctx": 1000}, {"s": "a", "t": 10, "ctx": 1600}, {"s": "a", "t": 20, "ctx": 2600}]
    )
    assert [len(x) for x in r] == [2, 4, 6]  # ceil(ctx / 512)
    assert r[1][:1] == r[0][:1] and r[1][1] != r[0][1]  # block 1 was partial (488 tokens) in r0
    assert r[2][:3] == r[1][:3] and r[2][3] != r[1][3]
    assert len(set(r[0] + r[1] + r[2])) == 2 + 3 + 3  # one id per distinct block
    assert check_hash_ids([1000, 1600, 2600], r, 512) == []


def test_exact_multiple_has_no_partial_block_and_a_retry_reuses_its_partial_id() -> None:
    r = ids_of(
        [{"s": "a", "t": 0, "ctx": 1024}, {"s": "a", "t": 5, "ctx": 1300}, {"s": "a", "t": 9, "ctx": 1300}]
    )
    assert len(r[0]) == 2 and r[1][:2] == r[0]
    assert r[2] == r[1]  # same context in the same chain: the same prompt


def test_compaction_keeps_only_the_base_prefix() -> None:
    rows: list[dict[str, Any]] = [
        {"s": "a", "t": 0, "ctx": 5000},
        {"s": "a", "t": 10, "ctx": 40_000},
        {"s": "a", "t": 20, "ctx": 41_000},
        {"s": "a", "t": 30, "ctx": 12_000},  # compaction
        {"s": "a", "t": 40, "ctx": 13_000},
    ]
    r = ids_of(rows)
    assert common(r[3], r[2]) == 5000 // 512  # the smallest start of a chain: system + tools + prompt
    assert common(r[4], r[3]) == 12_000 // 512
    assert check_hash_ids([x["ctx"] for x in rows], r, 512) == []


def test_measured_read_sets_the_prefix_after_a_compaction_and_detects_breaks() -> None:
    rows = [
        {"s": "a", "t": 0, "ctx": 20_000, "read": 0},
        {"s": "a", "t": 10, "ctx": 60_000, "read": 20_000},
        {"s": "a", "t": 20, "ctx": 30_000, "read": 16_384},  # compaction: 16k (system + tools) read
        {"s": "a", "t": 30, "ctx": 31_000, "read": 8_192},  # grew, but only 8k read within the TTL
        {"s": "a", "t": 1000, "ctx": 32_000, "read": 0},  # cache expired: not a break
    ]
    r = ids_of(rows)
    assert common(r[2], r[1]) == 32
    assert common(r[3], r[2]) == 16
    assert common(r[4], r[3]) == 31_000 // 512


def test_measured_reads_are_ignored_when_asked() -> None:
    rows = [{"s": "a", "t": 0, "ctx": 20_000, "read": 0}, {"s": "a", "t": 10, "ctx": 21_000, "read": 0}]
    plan = derive(frame(rows), PrefixOptions(use_measured=False))
    a, b = plan.lists()
    assert common(a, b) == 20_000 // 512


def test_streams_are_per_model_and_sub_agents_share_only_a_sibling_base() -> None:
    rows = [
        {"s": "p", "t": 0, "ctx": 17_000, "model": "opus"},
        {"s": "p", "t": 1, "ctx": 3_000, "model": "haiku"},  # side request: not a compaction
        {"s": "p", "t": 10, "ctx": 19_000, "model": "opus"},
        {"s": "p/a1", "parent": "p", "t": 20, "ctx": 10_200, "model": "haiku"},
        {"s": "p/a2", "parent": "p", "t": 21, "ctx": 10_150, "model": "haiku"},
        {"s": "p/a1", "parent": "p", "t": 30, "ctx": 12_000, "model": "haiku"},
    ]
    r = ids_of(rows)
    assert common(r[2], r[0]) == 17_000 // 512  # the opus chain continued across the haiku call
    assert common(r[1], r[0]) == 0
    assert common(r[3], r[4]) == 10_150 // 512  # siblings: the smallest first context
    assert common(r[3], r[0]) == 0 and common(r[4], r[2]) == 0  # nothing shared with the parent
    assert common(r[5], r[3]) == 10_200 // 512


def test_sessions_share_nothing_unless_a_measured_first_read_proves_it() -> None:
    plain = ids_of([{"s": "x", "t": 0, "ctx": 20_000}, {"s": "y", "t": 5, "ctx": 20_000}])
    assert common(plain[0], plain[1]) == 0
    rows = [
        {"s": "x", "t": 0, "ctx": 20_000, "read": 0, "user": "u"},
        {"s": "y", "t": 5, "ctx": 25_000, "read": 15_000, "user": "u"},
        {"s": "z", "t": 6, "ctx": 25_000, "read": 24_000, "user": "u"},  # a resumed session
        {"s": "w", "t": 7, "ctx": 25_000, "read": 15_000, "user": "other"},
    ]
    r = ids_of(rows)
    assert common(r[1], r[0]) == 15_000 // 512
    assert common(r[2], r[0]) == 15_000 // 512  # capped at the user's smallest first read
    assert common(r[3], r[0]) == 0


def test_requests_without_session_are_streams_of_their_own() -> None:
    r = ids_of([{"t": 0, "ctx": 4096}, {"t": 1, "ctx": 4096}])
    assert len(r[0]) == 8 and not set(r[0]) & set(r[1])


def test_source_ids_are_kept_verbatim_at_their_block_size_and_floor_tails_get_ids() -> None:
    moon = [
        {"t": 0, "ctx": 1100, "ids": [7, 8, 9], "bs": 512, "scope": "f1"},
        {"t": 1, "ctx": 1024, "ids": [7, 8], "bs": 512, "scope": "f1"},
    ]
    assert ids_of(moon) == [[7, 8, 9], [7, 8]]
    kv = [
        {"s": "k", "t": 0, "ctx": 130, "ids": [1, 2], "bs": 64, "scope": "kv"},  # floor rule: 2 of 3
        {"s": "k", "t": 1, "ctx": 200, "ids": [1, 2, 3], "bs": 64, "scope": "kv"},
    ]
    r = ids_of(kv, block=64)
    assert r[0][:2] == [1, 2] and r[1][:3] == [1, 2, 3] and len(r[0]) == 3 and len(r[1]) == 4
    assert r[0][2] not in r[1]
    assert check_hash_ids([130, 200], r, 64) == []


def test_second_scope_is_rebased_and_an_id_at_two_sizes_is_split() -> None:
    rows = [
        {"t": 0, "ctx": 600, "ids": [0, 1], "bs": 512, "scope": "a"},
        {"t": 1, "ctx": 600, "ids": [0, 1], "bs": 512, "scope": "b"},
    ]
    r = ids_of(rows)
    assert r[0] == [0, 1] and not set(r[0]) & set(r[1])
    bad = [
        {"t": 0, "ctx": 100, "ids": [5], "bs": 512, "scope": "a"},  # id 5 at 100 tokens ...
        {"t": 1, "ctx": 600, "ids": [5, 6], "bs": 512, "scope": "a"},  # ... and at 512 tokens
    ]
    r = ids_of(bad)
    assert r[0][0] != r[1][0]
    assert check_hash_ids([100, 600], r, 512) == []


def test_kept_and_derived_requests_use_separate_id_ranges() -> None:
    rows = [
        {"t": 0, "ctx": 1100, "ids": [7, 8, 9], "bs": 512, "scope": "f1"},
        {"s": "a", "t": 1, "ctx": 2000},
        {"s": "a", "t": 2, "ctx": 3000},
    ]
    plan = derive(frame(rows), PrefixOptions())
    r = plan.lists()
    assert r[0] == [7, 8, 9] and not set(r[0]) & set(r[1] + r[2])
    assert min(r[1] + r[2]) >= 10 and max(r[1] + r[2]) < plan.next_id
    assert check_hash_ids([1100, 2000, 3000], r, 512) == []
    _, ids32 = plan.ids(0, 3, np.int32)
    assert ids32.dtype == np.int32 and ids32.tolist() == [x for ids in r for x in ids]
    assert derive(frame(rows)[:0]).lists() == []


def test_reblocking_source_ids_to_another_block_size() -> None:
    # 64-token prefix ids; A and B share 10 blocks (640 tokens), then differ
    a = list(range(1, 21))
    b = list(range(1, 11)) + list(range(100, 110))
    rows = [
        {"t": 0, "ctx": 20 * 64, "ids": a, "bs": 64, "scope": "s"},
        {"t": 1, "ctx": 20 * 64, "ids": b, "bs": 64, "scope": "s"},
    ]
    for block, shared in ((128, 5), (256, 2), (512, 1), (96, 6), (32, 20)):
        r = ids_of(rows, block)
        assert [len(x) for x in r] == [-(-1280 // block)] * 2
        assert common(r[0], r[1]) == shared, block
        assert check_hash_ids([1280, 1280], r, block) == []


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4),  # session
            st.integers(1, 9000),  # context
            st.booleans(),  # sub-agent
            st.sampled_from(["m1", "m2"]),
        ),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([64, 100, 512]),
)
def test_any_traffic_gets_valid_prefix_ids(reqs: list[tuple[int, int, bool, str]], block: int) -> None:
    rows: list[dict[str, Any]] = [
        {
            "s": f"s{s}/sub" if sub else f"s{s}",
            "parent": f"s{s}" if sub else None,
            "t": i,
            "ctx": c,
            "model": m,
        }
        for i, (s, c, sub, m) in enumerate(reqs)
    ]
    r = ids_of(rows, block)
    assert check_hash_ids([x["ctx"] for x in rows], r, block) == []


# -- ground truth: the real Claude Code sessions ---------------------------------------------------

TRUE_BLOCK = 64


def lru_hit_ratio(
    requests: Sequence[tuple[int, Sequence[Hashable]]], block: int, capacity_blocks: int | None
) -> float:
    """Token-weighted prefix hit ratio of an LRU of ``capacity_blocks`` (None: infinite) blocks.

    A request hits the leading run of its blocks that are resident (a partial last block counts its
    size); then all its blocks are touched in order (most recent last)."""
    cache: OrderedDict[Hashable, None] = OrderedDict()
    hit = total = 0
    for tokens, blocks in requests:
        total += tokens
        k = 0
        for b in blocks:
            if b not in cache:
                break
            k += 1
        hit += min(k * block, tokens)
        for b in blocks:
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = None
                if capacity_blocks is not None and len(cache) > capacity_blocks:
                    cache.popitem(last=False)
    return hit / total


def infinite_hit_ratio(requests: Sequence[tuple[int, Sequence[Hashable]]], block: int) -> float:
    seen: set[Hashable] = set()
    hit = total = 0
    for tokens, blocks in requests:
        total += tokens
        k = 0
        for b in blocks:
            if b not in seen:
                break
            k += 1
        hit += min(k * block, tokens)
        seen.update(blocks)
    return hit / total


def true_blocks(trace: Sequence[tuple[int, list[int], str]], block: int) -> list[tuple[int, list[Hashable]]]:
    """The true 64-token prefix ids at ``block`` (a multiple of 64), ceil rule: a new block is the
    prefix up to its last 64-token id (ids are scoped per trace file); a partial block, or a tail
    the floor rule left unhashed, is a block of its own (a negative number here)."""
    m = block // TRUE_BLOCK
    scopes: dict[str, int] = {}
    out: list[tuple[int, list[Hashable]]] = []
    for i, (tokens, ids, scope) in enumerate(trace):
        base = scopes.setdefault(scope, len(scopes)) << 32
        blocks: list[Hashable]
        if m == 1:
            blocks = [base + x for x in ids[: tokens // block]]
            if len(blocks) * block < tokens:
                blocks.append(-(i * 100_000 + len(blocks) + 1))
            out.append((tokens, blocks))
            continue
        blocks = []
        for j in range(-(-tokens // block)):
            full = (j + 1) * block <= tokens and (j + 1) * m <= len(ids)
            blocks.append(base + ids[(j + 1) * m - 1] if full else -(i * 100_000 + j + 1))
        out.append((tokens, blocks))
    return out


@pytest.fixture(scope="module")
def weka(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    from conftest import TESTDATA

    src = TESTDATA / "weka_cc_traces"
    if not src.is_dir():
        pytest.fail(f"{src} is missing")
    lake = Lake(tmp_path_factory.mktemp("weka") / "data")
    summary = run_import(lake, get("kvcache-tester"), [src])
    assert summary.skipped == 0
    return load_requests(lake.connect(["requests"]))


@pytest.mark.realdata
def test_derivation_matches_the_true_prefix_hashes_of_real_sessions(
    weka: pl.DataFrame, capsys: pytest.CaptureFixture[str]
) -> None:
    assert weka.height == 2014 and weka["session_id"].n_unique() == 64
    truth = list(zip(weka["ctx"].to_list(), weka["hash_ids"].to_list(), weka["scope"].to_list(), strict=True))
    # counts and timing only: no ids, and no cache reads (the importer derived those from the ids)
    blind = weka.with_columns(
        pl.lit(None, pl.List(pl.Int64)).alias("hash_ids"),
        pl.lit(None, pl.Int64).alias("read"),
        pl.lit(False).alias("measured"),
    )
    figures: dict[str, tuple[float, float]] = {}
    for block in (64, 512):
        derived = derive(blind, PrefixOptions(block_size=block)).lists()
        ours = list(zip(weka["ctx"].to_list(), derived, strict=True))
        if block == 512:  # (validity at any block size: test_any_traffic_gets_valid_prefix_ids)
            assert check_hash_ids([t for t, _ in ours], derived, block) == []
        real = true_blocks(truth, block)
        figures[f"infinite@{block}"] = (infinite_hit_ratio(real, block), infinite_hit_ratio(ours, block))
        if block == 512:
            for tokens in (256 * 1024, 1024 * 1024, 4 * 1024 * 1024):
                cap = tokens // block
                figures[f"lru{tokens // 1024}k@{block}"] = (
                    lru_hit_ratio(real, block, cap),
                    lru_hit_ratio(ours, block, cap),
                )
    with capsys.disabled():
        print("\nprefix hit ratio, true vs derived (pp):")
        for name, (a, b) in figures.items():
            print(f"  {name:>14}: {a * 100:6.2f} % vs {b * 100:6.2f} %  ({(b - a) * 100:+.2f} pp)")
    for name, (a, b) in figures.items():
        assert abs(a - b) <= 0.02, (name, a, b)
    # the figures are meaningful: the 256k LRU is far below the infinite cache
    assert figures["lru256k@512"][0] < figures["infinite@512"][0] - 0.2


@pytest.mark.realdata
def test_kept_ids_of_the_real_sessions_reproduce_their_hit_ratio(weka: pl.DataFrame) -> None:
    truth = list(zip(weka["ctx"].to_list(), weka["hash_ids"].to_list(), weka["scope"].to_list(), strict=True))
    for block in (512,):  # re-blocked from the source's 64 (kept verbatim at 64: test_replay)
        kept = derive(weka, PrefixOptions(block_size=block)).lists()
        assert check_hash_ids(weka["ctx"].to_list(), kept, block) == []
        ours = list(zip(weka["ctx"].to_list(), kept, strict=True))
        assert infinite_hit_ratio(ours, block) == pytest.approx(
            infinite_hit_ratio(true_blocks(truth, block), block), abs=1e-12
        )


# -- Mooncake: import and re-export ---------------------------------------------------------------


@pytest.mark.realdata
@pytest.mark.parametrize("name", ["mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl"])
def test_mooncake_traces_reexport_with_identical_hash_ids(name: str, tmp_path: Path) -> None:
    from conftest import TESTDATA

    from traceflow.replay.export import export

    src = TESTDATA / name
    lake = Lake(tmp_path / "data")
    assert run_import(lake, get("mooncake"), [src]).skipped == 0
    out = tmp_path / "re.jsonl"
    export(lake.connect(["requests"]), None, "mooncake", out)
    orig = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    again = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(again) == len(orig)
    t0 = orig[0]["timestamp"]
    for a, b in zip(orig, again, strict=True):
        assert b["hash_ids"] == a["hash_ids"]
        assert (b["input_length"], b["output_length"], b["timestamp"]) == (
            a["input_length"],
            a["output_length"],
            a["timestamp"] - t0,
        )
    lengths = [r["input_length"] for r in again]
    assert check_hash_ids(lengths, [r["hash_ids"] for r in again], 512) == []


@pytest.mark.realdata
def test_two_mooncake_traces_in_one_export_keep_separate_id_spaces(tmp_path: Path) -> None:
    from conftest import TESTDATA

    from traceflow.replay.export import export

    files = [TESTDATA / "mooncake_conversation_trace.jsonl", TESTDATA / "mooncake_synthetic_trace.jsonl"]
    lake = Lake(tmp_path / "data")
    run_import(lake, get("mooncake"), files)
    con = lake.connect(["requests"])
    out = tmp_path / "both.jsonl"
    manifest = export(con, None, "mooncake", out)
    assert manifest["counts"]["source_scopes_kept_verbatim"] == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12_031 + 3_993
    # which file a row came from: the lake's order is the export's order
    scopes = load_requests(con)["scope"].to_list()
    by_scope: dict[str, set[int]] = {}
    for scope, row in zip(scopes, rows, strict=True):
        by_scope.setdefault(scope, set()).update(row["hash_ids"])
    a, b = by_scope.values()
    assert not a & b
    assert check_hash_ids([r["input_length"] for r in rows], [r["hash_ids"] for r in rows], 512) == []
