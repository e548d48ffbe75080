"""The serving model (``simulate --serving``): truths that do not come from the code under test."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceflow.cli.app import app, register_all
from traceflow.errors import UsageError
from traceflow.kv.scheduler import run
from traceflow.kv.serving import PRESETS, load_serving
from traceflow.kv.synthetic import agentic_coding_trace, agentic_coding_turns

# The worked example at reduced duration: 20 minutes, on a box with less VRAM for KV
# (memory_utilization 0.72 instead of 0.9) so that the working set outgrows VRAM within the run.
DURATION_S = 1_200.0


@pytest.fixture(scope="module")
def turns():  # type: ignore[no-untyped-def]
    return agentic_coding_turns(DURATION_S, 0)


@pytest.fixture(scope="module")
def reports(turns):  # type: ignore[no-untyped-def]
    out = {}
    for name in ("rtx-pro-6000x4", "rtx-pro-6000x4+dram", "rtx-pro-6000x4+flash"):
        spec = replace(PRESETS[name], memory_utilization=0.72)
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
    assert dram["tiers"][0]["bytes_written"] > 0


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
        "staging_resident_bytes",
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
        load_serving("h100x8")
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
