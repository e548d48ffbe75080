"""Fleet simulation (``traceflow.kv.fleet``, ``simulate --instances N``): routing, merging, the shared tier,
and the same numbers serially, in processes and as Spark tasks."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from traceflow.kv import fleet
from traceflow.kv import simulate as sim
from traceflow.kv.geometry import KVSize
from traceflow.kv.sizing import Tier
from traceflow.kv.synthetic import agentic_coding_trace
from traceflow.kv.trace import BlockTrace

Cli = Callable[..., tuple[int, str, str]]
ONE = KVSize(per_token_bytes=1)  # 1 byte per token: tier bytes = tokens
INF = math.inf


def tiers(*blocks: float, block_size: int) -> tuple[Tier, ...]:
    return tuple(Tier(f"t{i}", c * block_size, "dram", 20e9, 1e-4) for i, c in enumerate(blocks))


def config(*blocks: float, block_size: int = 512, **kw: Any) -> sim.SimConfig:
    return sim.SimConfig(tiers(*blocks, block_size=block_size), ONE, **kw)


@pytest.fixture(scope="module")
def agentic() -> BlockTrace:
    return agentic_coding_trace(1_800.0, 3)


def without_scope(report: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in report.items() if k not in ("instances", "router", "shared_tier", "imbalance")}
    out.pop("per_instance", None)
    out["tiers"] = [{k: v for k, v in t.items() if k != "scope"} for t in report["tiers"]]
    return out


def same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


# ------------------------------------------------------------------------------------------ routing


def test_session_hash_is_a_stable_hash_of_the_session_mod_n(agentic: BlockTrace) -> None:
    assign = fleet.route(agentic, 5, "session-hash")
    assert agentic.session is not None
    for r in range(0, agentic.n_requests, 97):
        digest = hashlib.blake2b(agentic.session[r].encode(), digest_size=8).digest()
        assert assign[r] == int.from_bytes(digest, "little") % 5
    by_session: dict[str, set[int]] = {}
    for s, i in zip(agentic.session, assign.tolist(), strict=True):
        by_session.setdefault(s, set()).add(i)
    assert all(len(v) == 1 for v in by_session.values())  # every session on one instance
    assert len(set(assign.tolist())) == 5


def test_session_hash_without_sessions_hashes_the_root_block() -> None:
    trace = BlockTrace.from_requests([0, 1, 2], [8, 8, 8], [[7, 8], [7, 9], [5]], 4)
    assign = fleet.route(trace, 3, "session-hash").tolist()
    expect = [
        int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little") % 3
        for k in ("block:7", "block:7", "block:5")
    ]
    assert assign == expect


def test_prefix_router_follows_the_longest_remembered_prefix_else_the_least_loaded(lru_engine: str) -> None:
    # worked by hand: r0 -> 0 (nothing known, all idle); r1 -> 1 (least loaded: 0 has 8 tokens);
    # r2 shares [1, 2] with r0 -> 0; r3 shares [10] with r1 -> 1; r4 knows nothing: loads are
    # 0: 8 + 12 = 20, 1: 8 + 8 = 16 -> 1; r5 matches [1, 2, 3] (last routed to 0) -> 0;
    # r6 = [10, 12]: block 10 last went to 1 (r3) -> 1
    trace = BlockTrace.from_requests(
        range(7),
        [8, 8, 12, 8, 4, 16, 8],
        [[1, 2], [10, 11], [1, 2, 3], [10, 12], [20], [1, 2, 3, 4], [10, 12]],
        4,
    )
    assert fleet.route(trace, 2, "prefix").tolist() == [0, 1, 0, 1, 1, 0, 1]
    # a shared root (block 1 in every request) keeps everything on the instance that first had it
    shared = BlockTrace.from_requests(range(4), [8] * 4, [[1, 2], [1, 3], [1, 4], [1, 5]], 4)
    assert fleet.route(shared, 3, "prefix").tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("instances", [2, 3, 5])
def test_compiled_prefix_router_routes_as_the_python_one(
    agentic: BlockTrace, instances: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceflow import native

    if not native.jit_enabled():
        pytest.skip("numba kernels off (not installed, or TRACEFLOW_NATIVE=0)")
    rng = np.random.default_rng(instances)
    chains = [rng.integers(0, 40, rng.integers(0, 6)).tolist() for _ in range(400)]
    tokens = rng.integers(1, 100, 400).tolist()
    small = BlockTrace.from_requests(range(400), tokens, chains, 4)
    sparse = BlockTrace.from_requests(range(400), tokens, [[b * 10**12 - 7 for b in c] for c in chains], 4)
    traces = (agentic, small, sparse)  # sparse: ids far apart and negative, relabelled before the kernel
    compiled = [fleet.route(t, instances, "prefix") for t in traces]
    monkeypatch.setenv("TRACEFLOW_NATIVE", "0")
    assert not native.jit_enabled()
    python = [fleet.route(t, instances, "prefix") for t in traces]
    assert compiled[1].tolist() == compiled[2].tolist()  # the same chains under other names
    for c, p in zip(compiled, python, strict=True):
        assert c.tolist() == p.tolist()
    assert len(set(compiled[0].tolist())) == instances  # every instance got work


def test_bad_fleet_options_are_usage_errors(agentic: BlockTrace) -> None:
    from traceflow.errors import UsageError

    with pytest.raises(UsageError, match="at least 1"):
        fleet.route(agentic, 0)
    with pytest.raises(UsageError, match="session-hash, prefix"):
        fleet.route(agentic, 2, "round-robin")
    with pytest.raises(UsageError, match="name no --tier uses"):
        fleet.simulate_fleet(agentic, config(10), 2, shared=Tier("t0", 1e9, "object", 1e9))


# ------------------------------------------------------------------------------------------ merging


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"policy": "prefix-lru"},
        {"inclusive": True},
        {"policy": "ttl", "ttl_s": 300.0},
        {"overlap": True},
    ],
)
def test_one_instance_gives_the_single_instance_report(agentic: BlockTrace, kw: dict[str, Any]) -> None:
    cfg = config(400, 2_000, **kw)
    single = sim.simulate(agentic, cfg).as_dict()
    one = fleet.simulate_fleet(agentic, cfg, 1).as_dict()
    assert same(without_scope(one), single)
    assert one["per_instance"][0]["requests"] == agentic.n_requests


@pytest.mark.parametrize("router", fleet.ROUTERS)
def test_instances_account_for_every_request_and_token(agentic: BlockTrace, router: str) -> None:
    res = fleet.simulate_fleet(agentic, config(300, 1_000), 4, router)
    rep = res.as_dict()
    rows = rep["per_instance"]
    assert sum(r["requests"] for r in rows) == rep["requests"] == agentic.n_requests
    assert sum(r["input_tokens"] for r in rows) == rep["input_tokens"] == int(agentic.input_tokens.sum())
    assert sum(r["hit_tokens"] for r in rows) == rep["hit_tokens"]
    # per request: hits from every tier plus recompute is the prompt
    assert np.array_equal(res.hit_tokens.sum(axis=1) + res.recomputed_tokens, agentic.input_tokens)
    assert rep["hit_tokens"] + rep["recomputed_tokens"] == rep["input_tokens"]
    routed = np.bincount(res.assignment, weights=agentic.input_tokens, minlength=4)
    assert rep["imbalance"] == pytest.approx(routed.max() / routed.mean())
    assert [r["input_tokens"] for r in rows] == routed.astype(int).tolist()
    # tier rows are fleet totals: capacity is 4 instances' worth
    assert rep["tiers"][0]["capacity_blocks"] == 4 * 300


def test_infinite_tiers_and_session_hash_lose_nothing_when_sessions_share_no_blocks(
    agentic: BlockTrace,
) -> None:
    # the agentic workload without a system prompt: no block is in two sessions
    assert agentic.session is not None
    owner: dict[int, str] = {}
    for r in range(agentic.n_requests):
        for b in agentic.blocks[agentic.offsets[r] : agentic.offsets[r + 1]].tolist():
            assert owner.setdefault(b, agentic.session[r]) == agentic.session[r]
    cfg = sim.SimConfig((Tier("dram", INF, "dram", 20e9),), ONE)
    single = sim.simulate(agentic, cfg)
    for n in (2, 3, 7):
        res = fleet.simulate_fleet(agentic, cfg, n, "session-hash")
        assert np.array_equal(res.hit_tokens, single.hit_tokens)


def test_prefix_routing_keeps_a_shared_root_that_session_hash_computes_on_every_instance() -> None:
    trace = agentic_coding_trace(1_800.0, 4, system_tokens=4_096)  # 8 blocks every session shares
    cfg = sim.SimConfig((Tier("dram", INF, "dram", 20e9),), ONE)
    hashed = fleet.simulate_fleet(trace, cfg, 4, "session-hash").as_dict()
    prefix = fleet.simulate_fleet(trace, cfg, 4, "prefix").as_dict()
    single = sim.simulate(trace, cfg).as_dict()
    assert prefix["hit_tokens"] >= hashed["hit_tokens"]
    # session-hash computes the 8 shared blocks once per instance that gets a session, not once
    used = sum(1 for r in hashed["per_instance"] if r["requests"])
    assert single["hit_tokens"] - hashed["hit_tokens"] == (used - 1) * 8 * 512


# ------------------------------------------------------------------------------------------ shared tier


def round_robin_session() -> BlockTrace:
    """One growing conversation whose requests carry different session ids (so session-hash spreads it)."""
    hashes = [list(range(k + 1)) for k in range(12)]
    return BlockTrace.from_requests(
        [float(k) for k in range(12)],
        [4 * (k + 1) for k in range(12)],
        hashes,
        4,
        [f"x{k}" for k in range(12)],
    )


def test_a_shared_tier_of_size_zero_or_absent_changes_nothing(agentic: BlockTrace) -> None:
    cfg = config(300, 1_000)
    plain = fleet.simulate_fleet(agentic, cfg, 3).as_dict()
    zero = fleet.simulate_fleet(agentic, cfg, 3, shared=Tier("obj", 0, "object", 1e9, 0.01)).as_dict()
    assert zero["tiers"][-1]["name"] == "obj" and zero["tiers"][-1]["hit_tokens"] == 0
    for key, value in plain.items():
        if key in ("shared_tier", "per_minute", "tiers", "per_instance", "object_hit_blocks"):
            continue
        if key == "worst_resumed" and value is not None:
            assert zero[key]["hit_tokens"].pop("obj") == 0
        assert same(zero[key], value), key
    assert same(zero["tiers"][:-1], plain["tiers"])
    assert zero["object_hit_blocks"] == plain["object_hit_blocks"]


def test_a_huge_shared_tier_recovers_the_reuse_across_instances() -> None:
    trace = round_robin_session()
    cfg = config(INF, block_size=4)
    single = sim.simulate(trace, cfg).as_dict()
    spread = fleet.simulate_fleet(trace, cfg, 3, "session-hash")
    assert len(set(spread.assignment.tolist())) == 3
    shared = fleet.simulate_fleet(trace, cfg, 3, "session-hash", Tier("obj", INF, "object", 1e9, 0.01))
    rep = shared.as_dict()
    assert spread.as_dict()["hit_tokens"] < single["hit_tokens"]
    assert rep["hit_tokens"] == single["hit_tokens"]  # every block seen anywhere before is in some tier
    assert rep["tiers"][-1]["scope"] == "shared" and rep["tiers"][-1]["hit_tokens"] > 0
    # the shared store is written once per distinct block (12 full blocks of 4 tokens, 1 B per token)
    assert rep["tiers"][-1]["written_bytes"] == 12 * 4


def test_shared_hits_enter_the_ttft_model() -> None:
    # r0 on one instance computes [0]; r1 (same blocks + one more) on another: block 0 from the
    # shared store (4 tokens at 1e9 B/s + 10 ms), block 1 recomputed at the prefill rate
    trace = BlockTrace.from_requests([0.0, 1.0], [4, 8], [[0], [0, 1]], 4, ["a", "c"])
    assign = fleet.route(trace, 2, "session-hash").tolist()
    assert assign[0] != assign[1]
    cfg = config(10, block_size=4, prefill_rate=1_000.0)
    res = fleet.simulate_fleet(trace, cfg, 2, shared=Tier("obj", INF, "object", 1e9, 0.01))
    assert res.hit_tokens.tolist() == [[0, 0], [0, 4]]
    assert res.ttft_s[1] == pytest.approx(4 / 1e9 + 0.01 + 4 / 1_000.0)
    assert res.ttft_s[0] == pytest.approx(4 / 1_000.0)


# ------------------------------------------------------------------------------------------ where it runs


def test_processes_give_the_serial_numbers(agentic: BlockTrace) -> None:
    cfg = config(200, 800)
    shared = Tier("obj", 5_000 * 512, "object", 1e9, 0.01)
    serial = fleet.simulate_fleet(agentic, cfg, 3, "prefix", shared).as_dict()
    procs = fleet.simulate_fleet(agentic, cfg, 3, "prefix", shared, fleet.process_map(2)).as_dict()
    assert same(procs, serial)


@pytest.mark.spark
def test_spark_tasks_give_the_serial_numbers(spark: Any, agentic: BlockTrace) -> None:
    from traceflow.engines.spark import map_tasks

    cfg = config(200, 800)
    serial = fleet.simulate_fleet(agentic, cfg, 3, "session-hash").as_dict()
    on_spark = fleet.simulate_fleet(
        agentic, cfg, 3, "session-hash", mapper=lambda fn, items: map_tasks(fn, items, "local[2]")
    ).as_dict()
    assert same(on_spark, serial)


# ------------------------------------------------------------------------------------------ CLI


def test_simulate_instances_cli(cli: Cli) -> None:
    args = ["simulate", "--workload", "agentic-coding", "--duration", "10m", "--kv-model", "MiniMax-M2"]
    code, out, err = cli(
        *args,
        "--instances",
        "2",
        "--router",
        "prefix",
        "--shared-tier",
        "obj=10TB:kind=object",
        "--format",
        "json",
        data=False,
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["instances"] == 2 and report["router"] == "prefix" and report["shared_tier"] == "obj"
    assert [t["scope"] for t in report["tiers"]] == ["per-instance", "shared"]
    assert len(report["per_instance"]) == 2
    code, single, err = cli(*args, "--format", "json", data=False)
    assert code == 0, err
    assert "instances" not in json.loads(single)  # one instance, no shared tier: the plain simulation
    code, out, err = cli(*args, "--instances", "2", "--jobs", "2", data=False)
    assert code == 0, err
    assert "peak_resident_bytes" in out and "imbalance" in out and "instance " in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--instances", "0"], "--instances 0"),
        (["--instances", "2", "--router", "random"], "session-hash, prefix"),
        (["--instances", "2", "--serving", "rtx-pro-6000x4"], "--serving simulates one box"),
        (["--instances", "2", "--engine", "duckdb"], "local (processes) or spark"),
        (["--instances", "2", "--jobs", "0"], "--jobs 0"),
        (["--instances", "2", "--spark-remote", "spark://h:7077"], "needs --engine spark"),
    ],
)
def test_simulate_fleet_usage_errors(cli: Cli, extra: list[str], message: str) -> None:
    code, _, err = cli(
        "simulate",
        "--workload",
        "agentic-coding",
        "--duration",
        "5m",
        "--kv-model",
        "MiniMax-M2",
        *extra,
        data=False,
    )
    assert code == 2
    assert message in err
