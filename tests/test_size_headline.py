"""``traceflow size``: one headline reconciling rate × TTL, the working-set peak and the LRU sweep,
and HBM you own not billed unless ``--rent-hbm`` (issue 35). Expected values worked out by hand."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.test_serving_lake import _fill
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
B = 327_680  # Llama-3.1-70B BF16 KV bytes per token: 2 x 80 x 8 x 128 x 2


def test_the_headline_is_the_working_set_peak(cli: Cli, lake: Lake) -> None:
    # 3 sessions of 4 turns a minute apart (contexts 2k, 4k, 6k, 8k), a 4th a day later
    _fill(lake)
    code, out, err = cli("size", "--kv-model", "Llama-3.1-70B", "--ttl", "5m", "--format", "json")
    assert code == 0, err
    rep = json.loads(out)
    h = rep["headline"]
    assert h["basis"] == "working_set_peak"
    # within 5 minutes of each other, the 3 sessions all hold their last 8,000-token context
    assert h["working_set_peak_bytes"] == pytest.approx(3 * 8_000 * B, rel=0.01)
    assert h["capacity_bytes"] == h["working_set_peak_bytes"]
    # rate x TTL is the report's footprint at the TTL, named as the lower bound it is
    assert h["rate_x_ttl_bytes"] == rep["footprints"][0]["footprint_bytes"]
    assert h["input_rate_x_ttl_bytes"] == rep["footprints"][0]["footprint_upper_bytes"]
    assert h["rate_x_ttl_bytes"] < h["working_set_peak_bytes"]
    # LRU cross-check: 512-token blocks; the cache needs at least one session's chain to hit anything
    assert 16 * 512 * B <= h["lru_capacity_bytes"] <= 4 * 16 * 512 * B
    code, out, err = cli("size", "--kv-model", "Llama-3.1-70B", "--ttl", "5m")
    assert code == 0, err
    assert out.splitlines()[0].startswith("7.86 GB of KV for a 5m TTL: the working-set peak")
    assert "rate × TTL" in out.splitlines()[0] and "LRU cache" in out.splitlines()[0]


def test_a_given_rate_gives_the_lower_bound_and_says_so(cli: Cli) -> None:
    code, out, err = cli("size", "--kv-model", "Llama-3.1-70B", "--rate", "1000", "--ttl", "5m",
                         "--format", "json", data=False)  # fmt: skip
    assert code == 0, err
    h = json.loads(out)["headline"]
    assert h["basis"] == "rate_x_ttl" and h["working_set_peak_bytes"] is None
    assert h["capacity_bytes"] == pytest.approx(1000 * 300 * B)  # by hand
    assert "at least" in h["headline"]


def test_hbm_is_not_rent_unless_asked(cli: Cli) -> None:
    args = ("size", "--kv-model", "Llama-3.1-70B", "--rate", "1000", "--tier", "gpu=80GB", "--tier",
            "dram=1TB", "--format", "json")  # fmt: skip
    code, out, err = cli(*args, data=False)
    assert code == 0, err
    owned = json.loads(out)
    gpu, dram = owned["tiers"]
    assert gpu["cost_usd_per_month"] == 0 and "not billed" in gpu["cost_basis"]
    assert dram["cost_usd_per_month"] == pytest.approx(1_000 * 10 / 36)  # $10/GB over 36 months
    assert owned["cost_usd_per_month"] == pytest.approx(dram["cost_usd_per_month"])
    code, out, err = cli(*args, "--rent-hbm", data=False)
    assert code == 0, err
    rented = json.loads(out)
    # $3 per GPU-hour x 730 h, the whole 80 GB of one GPU's HBM
    assert rented["tiers"][0]["cost_usd_per_month"] == pytest.approx(3 * 730 * 80 / 80)
    assert rented["hbm_billed"] is True


def test_a_selection_of_two_clocks_still_sizes_and_says_why(cli: Cli, lake: Lake) -> None:
    _fill(lake)
    lake.append(
        "requests",
        [
            {
                "event_id": "m0",
                "source": "mooncake",
                "seq": 0,
                "started_at": 1_000_000,
                "cold_input_tokens": 512,
            }
        ],
    )
    code, out, err = cli("size", "--kv-model", "Llama-3.1-70B", "--ttl", "5m", "--format", "json")
    assert code == 0, err
    h = json.loads(out)["headline"]
    assert (
        h["basis"] == "rate_x_ttl"
        and "could not be measured" in h["headline"]
        and "--source" in h["headline"]
    )
