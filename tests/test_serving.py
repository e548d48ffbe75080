"""The serving model (``simulate --serving``): truths that do not come from the code under test."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from traceflow.cli.app import app, register_all
from traceflow.errors import UsageError
from traceflow.kv.scheduler import run
from traceflow.kv.serving import PRESETS, OffloadTier, ServingSpec, load_serving, tier_read_seconds_per_byte
from traceflow.kv.synthetic import PUBLISHED_RUN, SessionTurns, agentic_coding_trace, agentic_coding_turns
from traceflow.kv.trace import BlockTrace

# The worked example at reduced duration: 20 minutes, on a box with less VRAM for KV
# (memory_utilization 0.68 instead of 0.9) so that the working set outgrows VRAM within the run.
DURATION_S = 1_200.0


@pytest.fixture(scope="module")
def turns():  # type: ignore[no-untyped-def]
    return agentic_coding_turns(DURATION_S, 0)


@pytest.fixture(scope="module")
def reports(turns):  # type: ignore[no-untyped-def]
    out = {}
    for name in ("rtx-pro-6000x4", "rtx-pro-6000x4+dram", "rtx-pro-6000x4+flash"):
        spec = replace(PRESETS[name], memory_utilization=0.68)
        out[name] = run(spec, turns, keep_requests=True)
    return out


def test_vram_for_kv_is_the_spec_sheet_arithmetic() -> None:
    spec = PRESETS["rtx-pro-6000x4"]
    # 96 GiB GDDR7 per GPU × 0.9 (vLLM) − 229 B params × 1 B (FP8) / 4 GPUs − 4 GiB reserve
    per_gpu = 96 * 2**30 * 0.9 - 229e9 / 4 - 4 * 2**30
    assert spec.kv_bytes_per_gpu == pytest.approx(per_gpu)
    assert spec.kv_bytes == pytest.approx(4 * per_gpu)
    assert spec.kv().per_token_bytes == 2 * 62 * 8 * 128  # MiniMax-M2 FP8: 124 KiB
    summary = spec.summary()
    assert summary["kv_tokens"] == int(4 * per_gpu // 126_976)


def test_turns_keep_the_trace_unchanged() -> None:
    a = agentic_coding_trace(600.0, 3)
    b = agentic_coding_turns(600.0, 3).trace
    assert (a.blocks == b.blocks).all() and (a.time_s == b.time_s).all()


def test_tokens_are_conserved(reports) -> None:  # type: ignore[no-untyped-def]
    for r in reports.values():
        assert r["input_tokens_served"] == r["cached_tokens"] + r["computed_tokens"]
        assert r["loaded_tokens"] <= r["cached_tokens"]
        per_minute = sum((m["input_tok_s"] + m["output_tok_s"]) * 60 for m in r["per_minute"])
        assert per_minute == pytest.approx(r["tokens_total"])
        assert r["requests_served"] <= r["requests_offered"]
    assert reports["rtx-pro-6000x4"]["loaded_tokens"] == 0  # nothing to load from without a tier


def test_ttft_is_at_least_queueing_plus_the_pure_prefill_time(reports) -> None:  # type: ignore[no-untyped-def]
    spec = PRESETS["rtx-pro-6000x4"]
    rate = 4 * spec.prefill_flops_per_gpu
    for r in reports.values():
        q = r["requests"]
        checked = 0
        for arr, adm, ttft, cached, n_in in zip(
            q["arrival_s"], q["admitted_s"], q["ttft_s"], q["cached_tokens"], q["input_tokens"], strict=True
        ):
            if math.isnan(ttft):
                continue
            n, p = n_in - cached, cached
            # linear 2·N_active per token + causal attention 2·L·heads·(128+128)·(n·p + n²/2)
            flops = 2 * 10e9 * n + 2 * 62 * 48 * 256 * (n * p + n * n / 2)
            assert ttft >= (adm - arr) + flops / rate - 1e-9
            checked += 1
        assert checked > 100


def test_dram_beats_gpu_only_once_the_working_set_exceeds_vram(reports) -> None:  # type: ignore[no-untyped-def]
    gpu, dram = reports["rtx-pro-6000x4"], reports["rtx-pro-6000x4+dram"]
    full = gpu["gpu_full_at_s"]
    assert full is not None and full < DURATION_S - 300  # the reduced run does cross VRAM
    after = lambda r: sum(m["throughput_tok_s"] for m in r["per_minute"] if m["start_s"] >= full)  # noqa: E731
    assert after(dram) >= after(gpu)
    before = lambda r: [m["throughput_tok_s"] for m in r["per_minute"] if m["start_s"] + 60 <= full]  # noqa: E731
    assert before(dram) == pytest.approx(before(gpu), rel=0.01)  # identical until VRAM is full
    assert dram["tiers"][0]["written_bytes"] > 0


def test_report_keys(reports) -> None:  # type: ignore[no-untyped-def]
    r = reports["rtx-pro-6000x4+flash"]
    for key in (
        "throughput_peak_tok_s",
        "throughput_post_crossover_tok_s",
        "resumed_ttft_p50_s",
        "resumed_ttft_max_s",
        "crossover_s",
        "per_minute",
    ):
        assert key in r
    m = r["per_minute"][5]
    for key in (
        "throughput_tok_s",
        "output_tok_s",
        "ttft_p50_s",
        "ttft_p99_s",
        "queue_length",
        "gpu_resident_bytes",
        "flash_resident_bytes",
        "flash_read_bytes_per_s",
        "flash_write_bytes_per_s",
    ):
        assert key in m


def test_file_format_and_cli(tmp_path: Path) -> None:
    box = tmp_path / "box.json"
    box.write_text(
        json.dumps(
            {
                "preset": "rtx-pro-6000x4",
                "gpus": 8,
                "gpu_memory": "80GB",
                "tiers": [{"name": "dram", "kind": "dram", "capacity": "1TB"}],
            }
        )
    )
    spec = load_serving(str(box))
    assert spec.gpus == 8 and spec.gpu_memory_bytes == 80e9 and spec.tiers[0].capacity_bytes == 1e12
    toml = tmp_path / "box.toml"
    toml.write_text('preset = "rtx-pro-6000x4"\nmemory_utilization = 0.85\n')
    assert load_serving(str(toml)).memory_utilization == 0.85
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu": 4}')
    with pytest.raises(UsageError, match="unknown key 'gpu'"):
        load_serving(str(bad))
    with pytest.raises(UsageError, match="no such preset"):
        load_serving("a100x8")  # h100xN, h200xN, b200xN are presets (issue 35)
    register_all()
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            "--workload",
            "agentic-coding",
            "--duration",
            "5m",
            "--serving",
            str(box),
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["serving"]["gpus"] == 8 and out["requests_served"] > 0


# --------------------------------------------------------------------------------- issue 23: the regime

BLOCK = 512 * 2 * 62 * 8 * 128  # one 512-token block of MiniMax-M2 FP8 KV


def _tiny_box(pool_blocks: int) -> ServingSpec:
    """One GPU whose KV pool holds exactly ``pool_blocks`` blocks (weights 1 GB, nothing reserved)."""
    spec = replace(
        PRESETS["rtx-pro-6000x4"],
        gpus=1,
        total_params=1e9,
        active_params=1e9,
        experts=0,
        activation_reserve_bytes=0.0,
        memory_utilization=1.0,
        gpu_memory_bytes=1e9 + pool_blocks * BLOCK + BLOCK / 2,
    )
    assert int(spec.kv_bytes // BLOCK) == pool_blocks
    return spec


def _turns(requests: list[list[int]], times: list[float]) -> SessionTurns:
    """One single-turn session per request; ``requests`` are block-id lists of full 512-token blocks."""
    counts = [len(r) for r in requests]
    trace = BlockTrace(
        np.asarray(times, dtype=np.float64),
        np.asarray([512 * c for c in counts], dtype=np.int64),
        np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        np.asarray([b for r in requests for b in r], dtype=np.int64),
        512,
        tuple(f"s{i}" for i in range(len(requests))),
    )
    n = len(requests)
    return SessionTurns(
        trace,
        np.ones(n, dtype=np.int64),
        np.zeros(n),
        np.zeros(n, dtype=np.bool_),
        np.arange(n, dtype=np.int64),
    )


def test_a_shared_prefix_is_counted_once_in_the_pool() -> None:
    # two requests at t=0 share 8 of their 10 blocks: 12 distinct context blocks + 2 answer blocks = 14
    # fit a 16-block pool together (counting the shared blocks twice, 22, would hold the second back)
    shared = list(range(8))
    turns = _turns([[*shared, 100, 101], [*shared, 200, 201], [300]], [0.0, 0.0, 50.0])
    r = run(_tiny_box(16), turns, keep_requests=True)
    assert r["requests"]["admitted_s"][:2] == [0.0, 0.0]
    assert r["requests_rejected"] == 0


def test_a_request_larger_than_the_whole_pool_is_rejected_not_run() -> None:
    # 20 context blocks + 1 answer block can never fit a 16-block pool, even alone
    # (the run lasts until the last arrival, at 60 s)
    turns = _turns([list(range(20)), [100, 101], [300]], [0.0, 0.5, 60.0])
    r = run(_tiny_box(16), turns, keep_requests=True)
    assert r["requests_rejected"] == 1
    assert math.isnan(r["requests"]["ttft_s"][0]) and not math.isnan(r["requests"]["ttft_s"][1])
    assert r["requests_served"] == 1 and r["served_share"] == pytest.approx(1 / 3)


def test_a_flash_hit_pays_each_ranks_serial_chunk_reads_before_the_copy() -> None:
    # A (blocks 0-9) runs, then B (100-109) pushes A's first 5 blocks out of the 16-block pool; C asks
    # for A's blocks again: 0-4 come from the flash tier, 5-9 from the GPU. With one rank reading its
    # chunk files at 1 GB/s, C's first token comes 5 blocks / 1 GB/s later than with the read free.
    # (a fourth request at 100 s keeps the run going past C: a run lasts until its last arrival)
    turns = _turns([list(range(10)), list(range(100, 110)), list(range(10)), [300]], [0.0, 20.0, 40.0, 100.0])

    def ttft_c(stream: float) -> float:
        tier = OffloadTier("flash", "ssd", 1e15, stream_read_bytes_per_s=stream)
        r = run(replace(_tiny_box(16), tiers=(tier,)), turns, keep_requests=True)
        assert r["loaded_tokens"] == 5 * 512
        return float(r["requests"]["ttft_s"][2])

    assert ttft_c(1e9) - ttft_c(math.inf) == pytest.approx(5 * BLOCK / 1e9)
    # four ranks read their shards at once; the array's read ceiling caps them together
    t = OffloadTier("flash", "ssd", 1e15, read_bytes_per_s=6e9, stream_read_bytes_per_s=2e9)
    assert tier_read_seconds_per_byte(t, 4) == 1 / 6e9 and tier_read_seconds_per_byte(t, 2) == 1 / 4e9
    assert tier_read_seconds_per_byte(OffloadTier("dram", "dram", 1e12), 4) == 0.0


def test_a_tier_file_takes_stream_read(tmp_path: Path) -> None:
    box = tmp_path / "box.json"
    tier = {"name": "flash", "kind": "ssd", "capacity": "10TB", "read": "20GB/s", "stream_read": "1.5GB/s"}
    box.write_text(json.dumps({"preset": "rtx-pro-6000x4", "tiers": [tier]}))
    assert load_serving(str(box)).tiers[0].stream_read_bytes_per_s == 1.5e9


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"gpus": 4.5}, "gpus = 4.5 must be a whole number"),
        ({"max_num_seqs": 0}, "max_num_seqs = 0 must be at least 1"),
        ({"max_num_seqs": -3}, "max_num_seqs = -3 must be at least 1"),
        ({"memory_utilization": 1.2}, r"memory_utilization = 1.2 must be in \(0, 1\]"),
    ],
)
def test_serving_file_refuses_impossible_settings(
    tmp_path: Path, setting: dict[str, float], message: str, cli: Any
) -> None:
    box = tmp_path / "box.json"
    box.write_text(json.dumps({"preset": "rtx-pro-6000x4", **setting}))
    with pytest.raises(UsageError, match=message):
        load_serving(str(box))
    code, _, err = cli(
        "simulate", "--workload", "agentic-coding", "--duration", "2m", "--serving", str(box), data=False
    )
    assert code == 2 and re.search(message, err)


def test_a_refused_serving_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    box = tmp_path / "box.json"
    box.write_text(json.dumps({"preset": "rtx-pro-6000x4", "gpus": 4.5}))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceflow",
            "simulate",
            "--workload",
            "agentic-coding",
            "--duration",
            "2m",
            "--serving",
            str(box),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceflow: error:") and "gpus = 4.5" in lines[0], (
        res.stderr
    )


def test_a_file_without_preset_must_give_both_rates(tmp_path: Path) -> None:
    box = tmp_path / "box.json"
    box.write_text(json.dumps({"gpus": 4}))
    with pytest.raises(UsageError, match="give prefill_flops_per_gpu and kv_load_bandwidth_per_gpu"):
        load_serving(str(box))
    box.write_text(
        json.dumps({"gpus": 4, "prefill_flops_per_gpu": 1e14, "kv_load_bandwidth_per_gpu": "20GB/s"})
    )
    spec = load_serving(str(box))
    assert spec.prefill_flops_per_gpu == 1e14 and spec.kv_load_bytes_per_s_per_gpu == 20e9


def test_presets_size_dram_in_gib_and_count_the_flash_ram_once() -> None:
    dram = PRESETS["rtx-pro-6000x4+dram"].tiers
    assert [t.capacity_bytes for t in dram] == [512 * 2**30]  # LMCache's max_local_cpu_size is in GiB
    flash = PRESETS["rtx-pro-6000x4+flash"].tiers
    # the 64 GB of RAM is the flash tier's write staging, not also a cache tier of its own
    assert [t.kind for t in flash] == ["ssd"]
    assert flash[0].staging_bytes == 64 * 2**30
    assert flash[0].capacity_bytes == 8 * 12.8e12 / 2  # RAID10 of 8 × 12.8 TB


def test_preset_copy_rate_is_the_published_pcie5_figure() -> None:
    # 50 GB/s one way (vLLM's offloading connector, H100, PCIe 5.0) × LMCache's 22.1 / 25.07 (L20)
    assert PRESETS["rtx-pro-6000x4"].kv_load_bytes_per_s_per_gpu == pytest.approx(44.1e9, rel=0.01)


def test_the_published_runs_sessions_end_at_the_cap_and_eleven_resume() -> None:
    t = agentic_coding_turns(7_200.0, 0, **PUBLISHED_RUN)
    assert int(t.resumed.sum()) == 11  # the published cohort: 11 resumes in the window
    fast = {**PUBLISHED_RUN, "think_s": 30.0}  # short thinks: sessions reach the cap within the run
    ends = agentic_coding_turns(7_200.0, 0, **fast)
    ctx = ends.trace.input_tokens
    assert int(ctx.max()) <= 65_536
    last = {int(s): int(c) for s, c in zip(ends.session, ctx, strict=True)}
    for s in np.unique(ends.session):
        mine = ctx[ends.session == s]
        assert (np.diff(mine) > 0).all()  # monotone: no compaction restarts a session
    assert max(last.values()) > 60_000  # some sessions did get to the cap, and stopped there
    compact = agentic_coding_turns(7_200.0, 0, **{**fast, "at_cap": "compact"})
    assert compact.trace.n_requests > ends.trace.n_requests  # compaction keeps sessions going
    assert int(compact.trace.input_tokens.max()) <= 65_536


def test_the_reference_workload_is_unchanged_by_default() -> None:
    # the serial model's worked example (docs/sizing.md): 28,481 requests in 2 h of seed 0, a quarter pausing
    t = agentic_coding_turns(7_200.0, 0)
    assert t.trace.n_requests == 28_481
    assert int(t.resumed.sum()) > 40


def test_worst_resumed_wait_includes_the_queue(reports) -> None:  # type: ignore[no-untyped-def]
    for r in reports.values():
        q = r["requests"]
        waits = [
            ttft - (adm - arr)
            for arr, adm, ttft in zip(q["arrival_s"], q["admitted_s"], q["ttft_s"], strict=True)
            if not math.isnan(ttft)
        ]
        assert min(waits) >= 0  # TTFT = queue + load + prefill ≥ its service part
        if r["resumed_ttft_max_s"] is not None:
            assert r["resumed_worst_wait_s"] >= r["resumed_ttft_max_s"] >= r["resumed_service_max_s"]
        assert r["requests_served"] == round(r["served_share"] * r["requests_offered"])


def _bench() -> Any:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_serving.py"
    spec = importlib.util.spec_from_file_location("bench_serving", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_serving_table_is_the_benchmarks_output() -> None:
    bench = _bench()
    root = Path(__file__).resolve().parents[1]
    saved = json.loads((root / "benchmarks" / "serving_figures.json").read_text())
    assert saved["seeds"] == [0, 1, 2] and saved["duration"] == "2h"
    assert all(len(v) == 3 for v in saved["figures"].values())  # every figure over three seeds
    readme = (root / "docs" / "sizing.md").read_text(encoding="utf-8")
    assert bench.readme_table(readme) == "\n".join(bench.render(saved["figures"]))


def test_bench_spread_and_tolerance_are_median_and_range() -> None:
    bench = _bench()
    assert bench.spread([3.0, 1.0, 2.0]) == "2.00 [1.00–3.00]"
    assert bench.within([12_000.0, 20_000.0, 15_000.0], 12_000) is True  # median 15,000: +25 %
    assert bench.within([16_000.0, 16_000.0, 1.0], 12_000) is False  # median 16,000: +33 %


def test_step_overhead_is_added_once_per_step() -> None:
    from traceflow.kv.scheduler import step_seconds

    box = PRESETS["rtx-pro-6000x4"]
    bare = replace(box, step_overhead_s=0.0)
    for chunks, decoders in (([], [30_000]), ([(8_192, 0)], []), ([(1_024, 30_000)], [5_000] * 8)):
        assert step_seconds(box, chunks, decoders) - step_seconds(bare, chunks, decoders) == pytest.approx(
            box.step_overhead_s
        )


def test_the_presets_step_overhead_is_aiconfigurators_measured_decode_step() -> None:
    pytest.importorskip("aiconfigurator_core")  # traceflow[measured]
    lines = _bench().measured_steps()
    implied = next(ln for ln in lines if "step overhead implied" in ln)
    ms = float(implied.split("=")[1].split("ms")[0])
    assert ms == pytest.approx(PRESETS["rtx-pro-6000x4"].step_overhead_s * 1e3, abs=0.05)
