"""Copy granularity and prefill against the measured H200 rows (tests/data/gpu_h200_probe.jsonl)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.conftest import TESTDATA
from traceflow.errors import UsageError
from traceflow.kv.copies import H200_PCIE5, STACKS, copy_rate_per_gpu, load_copy_curve, transfer_seconds
from traceflow.kv.measured import compare_measured
from traceflow.kv.models import find_model
from traceflow.kv.serving import PRESETS, spec_from_mapping

PROBE = TESTDATA / "gpu_h200_probe.jsonl"


def probe() -> list[dict[str, object]]:
    return [json.loads(line) for line in PROBE.read_text().splitlines() if line.strip()]


def test_every_copy_row_is_reproduced_by_the_curve() -> None:
    rows = compare_measured(probe(), PRESETS["h200"])
    copies = [r for r in rows if r["kind"] == "copy"]
    assert len(copies) == 9
    for r, line in zip(copies, [x for x in probe() if x["kind"] == "copy"], strict=True):
        by_hand = int(line["chunk_bytes"]) * int(line["copies"]) / (float(line["h2d_GBps"]) * 1e9)
        assert r["measured_s"] == pytest.approx(by_hand)
        assert r["predicted_s"] == pytest.approx(by_hand, rel=1e-9)


def test_every_prefill_row_within_25_percent() -> None:
    rows = [r for r in compare_measured(probe(), PRESETS["h200"]) if r["kind"] == "prefill"]
    assert len(rows) == 10
    for r in rows:
        assert abs(r["predicted_s"] / r["measured_s"] - 1) <= 0.25, r


def test_the_one_efficiency_factor_is_the_no_prefix_rows_median() -> None:
    # by hand: Llama-3-8B linear weights per layer (QKV 4096x6144, O 4096x4096, gated MLP 3x4096x14336)
    linear = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    effs = []
    for line in probe():
        if line["kind"] == "prefill" and line["cached"] == 0:
            n = int(line["new"])
            flops = 2 * linear * n + 2 * 32 * 32 * 256 * n * n / 2
            effs.append(flops / float(line["seconds"]) / 989e12)
    spec = PRESETS["h200"]
    assert spec.prefill_flops_per_gpu / spec.gpu_peak_flops == pytest.approx(
        statistics.median(effs), abs=0.01
    )


def test_copy_sizes_of_the_stacks_by_hand() -> None:
    kv = find_model("MiniMax-M2").kv("fp8")  # 62 layers x 8 KV heads x 128, 1 byte
    # vLLM offload: 16 tokens x 2 heads per GPU (TP 4) x 128 x 1 B, K apart from V
    assert STACKS["vllm-offload"].bytes_per_copy(kv, 4) == 16 * 2 * 128
    # LMCache: a 256-token chunk of every layer, K and V: 256 x 62 x 2 x 2 x 128
    assert STACKS["lmcache"].bytes_per_copy(kv, 4) == 256 * 62 * 2 * 2 * 128
    assert copy_rate_per_gpu(kv, STACKS["vllm-offload"], 4) == pytest.approx(0.42e9)
    # a 32k-token restore on 4 GPUs: 4 KiB copies vs whole chunks differ by more than 10x
    slow = transfer_seconds(32_768, kv, STACKS["vllm-offload"], 4)
    fast = transfer_seconds(32_768, kv, STACKS["lmcache"], 4)
    assert slow == pytest.approx(32_768 * 126_976 / 4 / 0.42e9)
    assert slow / fast > 10


def test_rate_interpolates_between_measured_points_and_clamps() -> None:
    assert H200_PCIE5.rate(1024) == 0.42e9
    assert H200_PCIE5.rate(2**31) == 55.32e9
    mid = H200_PCIE5.rate(32768)  # between 16 KiB (1.55) and 64 KiB (7.58): log-log midpoint
    assert mid == pytest.approx((1.55e9 * 7.58e9) ** 0.5)
    sizes = [2**k for k in range(10, 32)]
    rates = [H200_PCIE5.rate(s) for s in sizes]
    assert rates == sorted(rates)


def test_a_user_curve_file_replaces_the_shipped_one(tmp_path: Path) -> None:
    assert load_copy_curve(str(PROBE)).points == H200_PCIE5.points
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"kind": "copy", "chunk_bytes": 4096, "h2d_GBps": 4.0, "d2h_GBps": 4.0}\n')
    spec = spec_from_mapping({"preset": "h200", "copy_curve": str(mine)})
    assert spec.kv_load_rate_per_gpu() == 4e9


def test_bad_curve_and_stack_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "copy", "chunk_bytes": 4096}\n')
    with pytest.raises(UsageError, match="h2d_GBps"):
        load_copy_curve(str(bad))
    with pytest.raises(UsageError, match="stacks: vllm-offload"):
        spec_from_mapping({"preset": "h200", "copy_stack": "nccl"})
