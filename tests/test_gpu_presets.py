"""GPU presets ``h100xN``, ``h200xN``, ``b200xN`` serving the model ``--kv-model`` names (issue 35).

Expected values are computed here from the datasheet figures and the model cards written below
(docs/sizing.md gives the sources), not read from the presets."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.test_serving_lake import _fill
from traceflow.errors import UsageError
from traceflow.kv.scheduler import step_seconds
from traceflow.kv.serving import find_preset, serve_model
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
# per GPU: memory bytes, dense BF16 FLOP/s (datasheets; sparsity figures halved)
DATASHEET = {"h100": (80e9, 989e12), "h200": (141e9, 989e12), "b200": (180e9, 2.25e15)}
MFU = 0.67  # the one efficiency factor, measured on the H200 (docs/sizing.md)
LLAMA_70B = 70.6e9  # parameters (model card); BF16 weights


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200"])
def test_a_gpu_preset_serves_the_named_model(gpu: str) -> None:
    memory, peak = DATASHEET[gpu]
    spec = serve_model(find_preset(f"{gpu}x8"), "Llama-3.1-70B")
    assert (spec.gpus, spec.model, spec.kv_dtype) == (8, "Llama-3.1-70B", "bf16")
    # vLLM's accounting, by hand: memory x 0.9 - weights / 8 - 4 GiB of activations, per GPU
    assert spec.kv_bytes == pytest.approx(8 * (memory * 0.9 - LLAMA_70B * 2 / 8 - 4 * 2**30))
    assert spec.prefill_flops_per_gpu == pytest.approx(MFU * peak)
    # an 8,192-token prefill: 2 x 70.6e9 x 8,192 + 2 x 80 layers x 64 heads x 256 x 8,192^2 / 2
    # = 1.2447e15 FLOPs (docs/sizing-formulas.md's oracle), on 8 GPUs at MFU x peak
    flops = 2 * LLAMA_70B * 8192 + 2 * 80 * 64 * 256 * 8192**2 / 2
    assert flops == pytest.approx(1.2447e15, rel=1e-4)
    assert step_seconds(spec, [(8192, 0)], []) == pytest.approx(flops / (8 * MFU * peak), rel=1e-9)


def test_host_links_scale_with_the_gpus() -> None:
    one, eight = find_preset("h100x1"), find_preset("h100x8")
    # one PCIe link per GPU: the box restores at N links' rate; each link's rate is the copy curve's at
    # the stack's copy size, which shrinks as tensor parallelism splits the KV heads (64 → 8 KiB here)
    assert eight.kv_load_rate() == pytest.approx(8 * eight.kv_load_rate_per_gpu())
    assert 7 * one.kv_load_rate() < eight.kv_load_rate() < 8 * one.kv_load_rate()


def test_an_fp8_model_uses_the_fp8_peak() -> None:
    spec = serve_model(find_preset("b200x4"), "MiniMax-M2")
    assert spec.weight_bytes_per_param == 1.0 and spec.kv_dtype == "fp8"
    assert spec.prefill_flops_per_gpu == pytest.approx(MFU * 4.5e15)
    assert (spec.total_params, spec.active_params, spec.experts, spec.experts_per_token) == (
        229e9,
        10e9,
        256,
        8,
    )


def test_models_and_boxes_that_cannot_be_served_are_refused() -> None:
    with pytest.raises(UsageError, match="no parameter counts"):
        serve_model(find_preset("h200x8"), "DeepSeek-V3")
    with pytest.raises(UsageError, match="serves its own model"):
        serve_model(find_preset("rtx-pro-6000x4"), "Llama-3.1-70B")
    with pytest.raises(UsageError, match="b200xN"):
        find_preset("a100x8")


def test_the_done_when_command(cli: Cli, lake: Lake) -> None:
    _fill(lake)
    args = ("simulate", "--serving", "h200x8", "--kv-model", "Llama-3.1-70B")
    code, out, err = cli(*args, "--until", "2026-11-30", "--format", "json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["requests_offered"] == 12 and rep["serving"]["model"] == "Llama-3.1-70B"
    assert rep["serving"]["kv_bytes_per_token"] == 327_680
    code, out, err = cli(*args, "--until", "2026-11-30", "--rate-scale", "10", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["requests_offered"] == 120
    for extra, message in (
        (("--config", "x.json"), "--config"),
        (("--mtp",), "--mtp"),
        (("--kv-model", "DeepSeek-V3"), "no parameter counts"),
    ):
        code, _, err = cli("simulate", "--serving", "h200x8", *extra)
        assert code == 2 and message in err, (extra, err)
    code, _, err = cli("simulate", "--serving", "rtx-pro-6000x4", "--dtype", "bf16")
    assert code == 2 and "--dtype" in err
    code, _, err = cli("simulate", "--serving", "rtx-pro-6000x4", "--kv-model", "Llama-3.1-70B")
    assert code == 2 and "GPU preset" in err
