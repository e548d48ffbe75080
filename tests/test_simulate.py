"""Cache simulation: the §7.4 micro-oracle, equivalences, libCacheSim agreement, properties, the CLI."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import libcachesim
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceflow import native
from traceflow.kv import engines
from traceflow.kv import simulate as sim
from traceflow.kv.geometry import KVSize
from traceflow.kv.lru import lru_hits, lru_level, lru_level_numpy, prev_next, stack_distances
from traceflow.kv.sizing import Tier, parse_tier
from traceflow.kv.synthetic import agentic_coding_trace
from traceflow.kv.trace import BlockTrace, chains_from_counts, read_mooncake
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
ONE = KVSize(per_token_bytes=1)  # 1 byte per token: tier bytes = tokens
MOONCAKE = "mooncake_conversation_trace.jsonl"


def tiers(*blocks: int, block_size: int = 512) -> tuple[Tier, ...]:
    return tuple(Tier(f"t{i}", c * block_size, "dram", 20e9) for i, c in enumerate(blocks))


def run(trace: BlockTrace, *caps: int, **kw: object) -> dict[str, object]:
    return sim.simulate(trace, sim.SimConfig(tiers(*caps, block_size=trace.block_size), ONE, **kw)).as_dict()  # type: ignore[arg-type]


def lru_reference(accesses: list[int], capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for x in accesses:
        if x in cache:
            hits += 1
            cache.move_to_end(x)
        else:
            cache[x] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def random_trace(seed: int, requests: int = 60, sessions: int = 6, block_size: int = 4) -> BlockTrace:
    """Sessions whose prompts grow (shared prefixes), with a common first block and some resets."""
    rng = np.random.default_rng(seed)
    times, tokens, hashes = [], [], []
    length = [0] * sessions
    chain = list(range(sessions))
    next_chain = sessions
    for r in range(requests):
        s = int(rng.integers(sessions))
        if rng.random() < 0.1:
            chain[s], next_chain, length[s] = next_chain, next_chain + 1, 0
        length[s] += int(rng.integers(1, 3 * block_size))
        n = -(-length[s] // block_size)
        ids = [0] + [chain[s] * 1000 + k for k in range(1, n)]
        if length[s] % block_size:
            ids[-1] = -(r + 1)  # partial last block: its own id
        times.append(float(r))
        tokens.append(length[s])
        hashes.append(ids)
    return BlockTrace.from_requests(times, tokens, hashes, block_size)


# ------------------------------------------------------------------------------------ §7.4 oracle


def micro_trace() -> BlockTrace:
    a, b, c, d = 1, 2, 3, 4
    return BlockTrace.from_requests(
        [0, 1, 2, 3], [8, 12, 16, 16], [[a, b], [a, b, c], [a, b, c, d], [a, b, c, d]], 4
    )


def hit_tokens_per_turn(policy: str, **kw: object) -> list[int]:
    cfg = sim.SimConfig(tiers(3, block_size=4), ONE, policy=policy, **kw)  # type: ignore[arg-type]
    hits: list[int] = sim.simulate(micro_trace(), cfg).hit_tokens.sum(axis=1).tolist()
    return hits


def test_micro_oracle_strict_prefix_lru() -> None:
    assert hit_tokens_per_turn("lru") == [0, 8, 12, 0]
    assert hit_tokens_per_turn("lru", engine="reference") == [0, 8, 12, 0]


def test_micro_oracle_lru_object_hits_and_final_state() -> None:
    report = run(micro_trace(), 3, engine="reference")
    # turn 4: A misses (0 prefix hit) and re-inserting A..D evicts B, C before they are reached
    assert report["object_hit_blocks"] == 5
    h = engines._Hierarchy([3], inclusive=False, promote=True, admit_orphans=True)
    trace = micro_trace()
    for r in range(trace.n_requests):
        lo, hi = int(trace.offsets[r]), int(trace.offsets[r + 1])
        h.lru_request(trace.blocks[lo:hi].tolist(), [4] * (hi - lo), [0] * (hi - lo))
    assert sorted(h.tiers[0]) == [2, 3, 4]  # B, C, D resident again


def test_micro_oracle_tail_first_eviction() -> None:
    assert hit_tokens_per_turn("prefix-lru") == [0, 8, 12, 8]  # turn 3 evicts C to admit D
    assert hit_tokens_per_turn("prefix-lru", admit_orphans=False) == [0, 8, 12, 12]  # D is not admitted


# ------------------------------------------------------------------------------ equivalences


def test_exclusive_tiers_behave_like_one_lru_of_the_summed_capacity(testdata: Path) -> None:
    trace = read_mooncake(testdata / MOONCAKE)
    three = run(trace, 2_000, 8_000, 20_000)
    one = run(trace, 30_000)
    assert three["hit_blocks"] == one["hit_blocks"]
    assert three["recomputed_tokens"] == one["recomputed_tokens"]
    split = [t["hit_blocks"] for t in three["tiers"]]  # type: ignore[attr-defined]
    h = [lru_hits(trace.blocks, c) for c in (2_000, 10_000, 30_000)]
    assert split == [h[0], h[1] - h[0], h[2] - h[1]]


def test_inclusive_tiers_serve_distances_between_their_capacities(testdata: Path) -> None:
    trace = read_mooncake(testdata / MOONCAKE)
    report = run(trace, 2_000, 10_000, inclusive=True)
    split = [t["hit_blocks"] for t in report["tiers"]]  # type: ignore[attr-defined]
    h1, h2 = lru_hits(trace.blocks, 2_000), lru_hits(trace.blocks, 10_000)
    assert split == [h1, h2 - h1]


def test_ttl_and_lru_of_the_same_mean_residency_hit_alike(testdata: Path) -> None:
    trace = read_mooncake(testdata / MOONCAKE)
    ttl = run(trace, 1, policy="ttl", ttl_s=300.0)
    mean_blocks = ttl["tiers"][0]["mean_resident_bytes"] / 512  # type: ignore[index]
    # docs/sizing-formulas.md#the-tier-model: TTL 300 s ≈ LRU of ~20,000 blocks
    assert 15_000 < mean_blocks < 25_000
    lru = run(trace, round(mean_blocks))
    assert abs(ttl["hit_ratio"] - lru["hit_ratio"]) < 0.01  # type: ignore[operator]
    assert abs(ttl["token_hit_ratio"] - lru["token_hit_ratio"]) < 0.01  # type: ignore[operator]


def test_infinite_cache_matches_the_published_mooncake_ceiling(testdata: Path) -> None:
    trace = read_mooncake(testdata / MOONCAKE)
    assert (trace.n_requests, trace.n_blocks) == (12_031, 288_500)
    report = sim.simulate(trace, sim.SimConfig((parse_tier("ssd=inf"),), ONE)).as_dict()
    assert report["misses"] == 182_790  # unique blocks
    assert report["hit_ratio"] == pytest.approx(0.366, abs=5e-4)
    assert report["token_hit_ratio"] == pytest.approx(0.374, abs=5e-4)


# ---------------------------------------------------------------------------------- libCacheSim


def libcachesim_hits(blocks: np.ndarray, capacity: int, path: Path) -> int:
    """Hits of libCacheSim's LRU on the block trace written as an oracleGeneral binary file."""
    rec = np.zeros(len(blocks), dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    rec["t"] = np.arange(len(blocks)) // 1000
    rec["id"] = blocks
    rec["size"] = 1
    rec["next"] = -1
    rec.tofile(path)
    reader = libcachesim.TraceReader(str(path), libcachesim.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = libcachesim.LRU(cache_size=capacity, hashpower=20).process_trace(reader)
    return round((1 - float(miss_ratio)) * len(blocks))


@pytest.mark.parametrize("capacity", [1, 500, 5_000, 20_000, 60_000])
def test_lru_hits_equal_libcachesim_on_the_mooncake_block_trace(
    testdata: Path, tmp_path: Path, capacity: int, lru_engine: str
) -> None:
    trace = read_mooncake(testdata / MOONCAKE)
    ours = run(trace, capacity)
    theirs = libcachesim_hits(trace.blocks, capacity, tmp_path / "trace.oracleGeneral")
    assert ours["object_hit_blocks"] == theirs
    assert ours["hit_blocks"] == theirs  # true prefix hashes: no hit follows a miss (§5.3)
    assert lru_hits(trace.blocks, capacity) == theirs


def test_lru_hits_equal_libcachesim_on_a_random_trace(tmp_path: Path, lru_engine: str) -> None:
    rng = np.random.default_rng(7)
    blocks = (rng.zipf(1.3, 200_000) % 50_000).astype(np.int64)
    for capacity in (10, 1_000, 10_000):
        expected = libcachesim_hits(blocks, capacity, tmp_path / "z.bin")
        assert lru_hits(blocks, capacity) == expected
        assert lru_hits(blocks * 1_000_003 - 10**12, capacity) == expected  # sparse ids: renumbered


# ------------------------------------------------------------------------------ engines agree


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    caps=st.lists(st.integers(0, 40), min_size=1, max_size=3),
    inclusive=st.booleans(),
)
def test_fast_lru_equals_the_reference_engine(seed: int, caps: list[int], inclusive: bool) -> None:
    trace = random_trace(seed)
    fast = sim.simulate(trace, sim.SimConfig(tiers(*caps, block_size=4), ONE, inclusive=inclusive))
    ref = sim.simulate(
        trace, sim.SimConfig(tiers(*caps, block_size=4), ONE, inclusive=inclusive, engine="reference")
    )
    assert fast.output.served.tolist() == ref.output.served.tolist()
    assert fast.output.written_tokens.tolist() == ref.output.written_tokens.tolist()
    assert fast.as_dict()["ttft_p99_s"] == ref.as_dict()["ttft_p99_s"]


@settings(max_examples=80, deadline=None)
@given(accesses=st.lists(st.integers(0, 25), max_size=300), capacity=st.integers(0, 30))
def test_lru_core_and_stack_distances_equal_an_ordered_dict_lru(accesses: list[int], capacity: int) -> None:
    expected = lru_reference(accesses, capacity)
    assert lru_hits(accesses, capacity) == expected
    assert int((stack_distances(accesses) <= capacity).sum()) == expected


@settings(max_examples=80, deadline=None)
@given(
    accesses=st.lists(st.integers(-3, 40), max_size=400),
    capacity=st.integers(0, 45),
    spread=st.sampled_from([1, 7, 2**40]),
)
def test_compiled_lru_equals_the_numpy_path_and_an_ordered_dict_lru(
    accesses: list[int], capacity: int, spread: int
) -> None:
    if not native.jit_enabled():
        pytest.skip("numba kernels off (not installed, or TRACEFLOW_NATIVE=0)")
    blocks = np.asarray(accesses, dtype=np.int64) * spread
    expected = lru_reference(accesses, capacity)
    assert lru_hits(blocks, capacity) == expected
    prev, nxt = prev_next(blocks)
    compiled, reference = lru_level(prev, nxt, capacity), lru_level_numpy(prev, nxt, capacity)
    assert [a.tolist() for a in compiled] == [a.tolist() for a in reference]
    assert len(blocks) - len(compiled[0]) == expected


def test_sweep_matches_single_capacity_runs(testdata: Path) -> None:
    trace = read_mooncake(testdata / MOONCAKE)
    caps = [100, 2_000, 20_000, 100_000]
    rows = sim.sweep(trace, caps, 512)
    assert [r["hit_blocks"] for r in rows] == [lru_hits(trace.blocks, c) for c in caps]
    assert [r["prefix_hit_blocks"] for r in rows] == [run(trace, c)["hit_blocks"] for c in caps]


# ---------------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), small=st.integers(0, 60), extra=st.integers(0, 60))
def test_more_capacity_never_lowers_the_lru_hit_ratio(seed: int, small: int, extra: int) -> None:
    trace = random_trace(seed)
    a, b = run(trace, small), run(trace, small + extra)
    assert a["hit_ratio"] <= b["hit_ratio"]  # type: ignore[operator]
    assert a["token_hit_ratio"] <= b["token_hit_ratio"]  # type: ignore[operator]
    assert lru_hits(trace.blocks, small) <= lru_hits(trace.blocks, small + extra)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    caps=st.lists(st.integers(0, 30), min_size=1, max_size=3),
    policy=st.sampled_from(["lru", "prefix-lru", "ttl"]),
    inclusive=st.booleans(),
    promote=st.booleans(),
)
def test_bytes_read_and_recomputed_tokens_account_for_every_token(
    seed: int, caps: list[int], policy: str, inclusive: bool, promote: bool
) -> None:
    trace = random_trace(seed)
    b = 3  # bytes per token
    tier_list = tuple(Tier(f"t{i}", c * 4 * b, "dram", 1e9, ttl_s=5.0 * (i + 1)) for i, c in enumerate(caps))
    result = sim.simulate(
        trace,
        sim.SimConfig(
            tier_list, KVSize(per_token_bytes=b), policy=policy, inclusive=inclusive, promote=promote
        ),
    )
    report = result.as_dict()
    per_request = result.hit_tokens.sum(axis=1) + result.recomputed_tokens
    assert per_request.tolist() == trace.input_tokens.tolist()
    assert report["read_bytes"] + report["recomputed_tokens"] * b == report["input_tokens"] * b
    assert sum(t["read_bytes"] for t in report["tiers"]) == report["read_bytes"]
    assert report["hit_blocks"] + report["misses"] == trace.n_blocks
    assert min(result.recomputed_tokens) >= 0


# ------------------------------------------------------------------------- TTFT, resumes, traces


def test_ttft_per_request_follows_the_documented_model() -> None:
    trace = BlockTrace.from_requests([0, 1_000], [1_024, 2_048], [[1, 2], [1, 2, 3, 4]], 512)
    tier_list = (parse_tier("dram=1TB:read=1000B/s:latency=0.5s"),)
    result = sim.simulate(
        trace, sim.SimConfig(tier_list, KVSize(per_token_bytes=2), prefill_rate=100.0, resume_after_s=900.0)
    )
    # request 1: 2,048 tokens recomputed;
    # request 2: 1,024 tokens loaded at 1,000 B/s + latency, 1,024 computed
    assert result.ttft_s.tolist() == pytest.approx([10.24, 1_024 * 2 / 1_000 + 0.5 + 10.24])
    report = result.as_dict()
    assert report["resumed_requests"] == 1
    assert report["worst_resumed"]["idle_s"] == 1_000
    assert report["worst_resumed"]["ttft_s"] == pytest.approx(result.ttft_s[1])


def test_per_session_state_is_loaded_with_a_hit() -> None:
    trace = BlockTrace.from_requests([0, 1], [512, 512], [[1], [1]], 512)
    cfg = sim.SimConfig(
        (parse_tier("dram=1TB:read=1000B/s"),), KVSize(per_token_bytes=1, per_session_bytes=4_000)
    )
    assert sim.simulate(trace, cfg).ttft_s[1] == pytest.approx(0.512 + 4.0)


def test_per_minute_shows_residency_filling(testdata: Path) -> None:
    trace = read_mooncake(testdata / MOONCAKE)
    report = run(trace, 5_000, 20_000)
    rows = report["per_minute"]
    assert len(rows) == 59  # type: ignore[arg-type]
    assert rows[-1]["t1_resident_bytes"] == 20_000 * 512  # type: ignore[index]
    assert sum(r["requests"] for r in rows) == trace.n_requests  # type: ignore[attr-defined]


def test_agentic_coding_trace_is_seeded_and_shaped_like_design_4() -> None:
    a = agentic_coding_trace(1_800, seed=3)
    b = agentic_coding_trace(1_800, seed=3)
    assert np.array_equal(a.blocks, b.blocks) and np.array_equal(a.time_s, b.time_s)
    assert int(a.input_tokens.max()) <= 65_536
    assert len(a.blocks) == int(np.sum(-(-a.input_tokens // 512)))
    assert 40 < len(set(a.session or ())) < 110  # λ = 2.5 sessions per minute over 30 minutes


def test_chains_from_counts_reuse_a_growing_session() -> None:
    trace = chains_from_counts([0, 1, 2, 3], ["s", "s", "s", "t"], [1_000, 1_600, 400, 1_000], 512)
    report = sim.simulate(trace, sim.SimConfig((parse_tier("dram=1TB"),), ONE)).as_dict()
    # request 2 reuses request 1's full block; request 3 shrank (compaction): a new chain
    assert report["hit_tokens"] == 512


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.sampled_from("abcd"), st.integers(0, 3_000)), max_size=60),
    st.sampled_from([16, 512]),
)
def test_chains_from_counts_follow_the_chain_rule(
    requests: list[tuple[int, str, int]], block_size: int
) -> None:
    """Each request's blocks, in time order (ties as given), by the rule written out here: a
    session's chain continues while its context does not shrink; full block k of a chain has one id,
    numbered by first use; a partial last block has an id of its own (-1 - the request's index)."""
    times = [float(t) for t, _, _ in requests]
    trace = chains_from_counts(times, [s for _, s, _ in requests], [c for *_, c in requests], block_size)
    order = sorted(range(len(requests)), key=lambda i: times[i])
    chain: dict[str, int] = {}
    last: dict[str, int] = {}
    ids: dict[tuple[int, int], int] = {}
    started = 0
    expected = []
    for i in order:
        _, s, c = requests[i]
        if s not in chain or c < last[s]:
            chain[s], started = started, started + 1
        last[s] = c
        blocks = [ids.setdefault((chain[s], k), len(ids)) for k in range(c // block_size)]
        expected.append(blocks + ([-1 - i] if c % block_size else []))
    got = [trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist() for r in range(len(order))]
    assert got == expected
    assert trace.session == tuple(requests[i][1] for i in order)


def test_prefix_lru_keeps_shared_roots_longer_than_lru(testdata: Path) -> None:
    trace = read_mooncake(testdata / MOONCAKE)
    lru, plru = run(trace, 5_000), run(trace, 5_000, policy="prefix-lru")
    assert plru["hit_blocks"] > lru["hit_blocks"]  # type: ignore[operator]


# ------------------------------------------------------------------------------------------- CLI


def test_simulate_cli_json_keys(cli: Cli, testdata: Path) -> None:
    code, out, err = cli(
        "simulate",
        "--trace",
        str(testdata / MOONCAKE),
        "--kv-model",
        "MiniMax-M2",
        "--tier",
        "gpu=80GB",
        "--tier",
        "dram=512GB",
        "--sweep",
        "--format",
        "json",
    )
    assert code == 0, err
    report = json.loads(out)
    for key in (
        "hit_blocks",
        "misses",
        "recomputed_tokens",
        "ttft_p50_s",
        "ttft_p99_s",
        "worst_resumed",
        "per_minute",
        "sweep",
    ):
        assert key in report
    assert [t["name"] for t in report["tiers"]] == ["gpu", "dram"]
    for tier in report["tiers"]:
        assert {"hit_blocks", "hit_ratio", "hit_tokens", "read_bytes", "written_bytes"} <= tier.keys()
    assert report["tiers"][0]["capacity_blocks"] == 80_000_000_000 // (512 * 126_976)


def test_simulate_from_the_lake_equals_the_trace_file(cli: Cli, lake: Lake, testdata: Path) -> None:
    trace = read_mooncake(testdata / MOONCAKE).head(2_000)
    lake.append(
        "requests",
        [
            {
                "event_id": f"m{r}",
                "source": "mooncake",
                "seq": r,
                "started_at": int(trace.time_s[r] * 1e6),
                "cold_input_tokens": int(trace.input_tokens[r]),
                "block_size": 512,
                "hash_ids": trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist(),
                "attributes": {"hash_scope": "mooncake:test"},
            }
            for r in range(trace.n_requests)
        ],
    )
    code, out, err = cli("simulate", "--kv-model", "Llama-3.1-8B", "--tier", "dram=64GB", "--format", "json")
    assert code == 0, err
    from_lake = json.loads(out)
    direct = sim.simulate(trace, sim.SimConfig((parse_tier("dram=64GB"),), KVSize(per_token_bytes=131_072)))
    assert from_lake["hit_blocks"] == direct.as_dict()["hit_blocks"]
    assert from_lake["requests"] == 2_000


def test_simulate_workload_table_output(cli: Cli) -> None:
    code, out, err = cli(
        "simulate",
        "--workload",
        "agentic-coding",
        "--duration",
        "10m",
        "--kv-model",
        "MiniMax-M2",
        "--tier",
        "gpu=80GB",
        "--policy",
        "prefix-lru",
        "--per-minute",
        data=False,
    )
    assert code == 0, err
    assert "recomputed_tokens" in out and "prefill_throughput_tok_s" in out


def test_simulate_ttl_needs_a_ttl(cli: Cli, testdata: Path) -> None:
    code, _, err = cli(
        "simulate",
        "--trace",
        str(testdata / MOONCAKE),
        "--kv-model",
        "MiniMax-M2",
        "--policy",
        "ttl",
        "--tier",
        "dram=inf",
    )
    assert code == 2
    assert "ttl" in err


def test_infinite_tier_capacity_is_reported_as_null() -> None:
    report = run(micro_trace(), 1, policy="ttl", ttl_s=math.inf)
    assert report["hit_tokens"] == 8 + 12 + 16


def test_serial_defaults_are_measurements_and_a_derivation_not_fits() -> None:
    from traceflow.kv import sizing
    from traceflow.kv.serving import PRESETS

    box = PRESETS["rtx-pro-6000x4"]
    # the preset's prefill FLOP/s over MiniMax-M2's FLOPs for a 65,536-token prompt (62 layers, 48 heads)
    per_prompt = sizing.prefill_flops(10e9, 62, 48, 128, 128, 65_536, 0)
    assert (
        pytest.approx(4 * box.prefill_flops_per_gpu * 65_536 / per_prompt, abs=1)
        == sizing.DEFAULT_PREFILL_RATE
    )
    assert sizing.DEFAULT_READ_BW["dram"] == box.kv_load_bytes_per_s_per_gpu  # one PCIe 5.0 link
    assert sizing.DEFAULT_READ_BW["ssd"] == 114e9 / 8  # one drive of the 8-drive array's fio ceiling
