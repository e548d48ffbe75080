"""KV bytes per token and tier sizing: the exact oracles of docs/sizing-formulas.md#reference-numbers, the
CLI."""

from __future__ import annotations

import json
import math
import re
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from traceflow.errors import TraceflowError, UsageError
from traceflow.kv import geometry, models, sizing
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]


# --------------------------------------------------------------------------- §7.1 KV bytes per token


@pytest.mark.parametrize(
    ("model", "dtype", "expected"),
    [
        ("MiniMax-M2", "fp8", 126_976),
        ("MiniMax-M2", "bf16", 253_952),
        ("Llama-3.1-8B", "bf16", 131_072),
        ("Llama-3.1-70B", "bf16", 327_680),
        ("Llama-3.1-405B", "bf16", 516_096),
        ("Qwen3-8B", "bf16", 147_456),
        ("Qwen3-32B", "bf16", 262_144),
        ("Qwen3-235B-A22B", "bf16", 192_512),
        ("DeepSeek-V3", "bf16", 70_272),
        ("DeepSeek-V3", "fp8", 35_136),
        ("DeepSeek-V3.2", "fp8_ds_mla", 48_068),
        ("GLM-4.5", "bf16", 376_832),
        ("gpt-oss-120b", "bf16", 36_864),
        ("Qwen3-Next-80B-A3B", "bf16", 24_576),
    ],
)
def test_kv_bytes_per_token_oracles(model: str, dtype: str, expected: int) -> None:
    assert models.find_model(model).kv(dtype).per_token_bytes == expected


def test_minimax_m2_fp8_is_124_kib() -> None:
    assert models.find_model("minimax-m2").kv("fp8").per_token_bytes == 124 * 1024


def test_glm_head_dim_key_wins_over_hidden_over_heads() -> None:
    """LMCache's calculator derives 5120/96 = 53.3 and reports 156,981 B: 2.4x too little."""
    kv = models.find_model("GLM-4.6").kv("bf16")
    assert kv.head_dim == 128
    assert kv.per_token_bytes == 376_832
    lmcache_bug = 2 * 92 * 8 * (5120 / 96) * 2  # hidden_size / num_attention_heads as head size
    assert kv.per_token_bytes / lmcache_bug == pytest.approx(2.4, abs=0.01)


def test_gpt_oss_sliding_window_capped_and_uncapped() -> None:
    spec = models.find_model("openai/gpt-oss-120b")
    capped = spec.kv("bf16")
    assert (capped.per_token_bytes, capped.per_session_bytes) == (36_864, 4_718_592)
    assert spec.kv("bf16", swa_capped=False).per_token_bytes == 73_728


def test_qwen3_next_hybrid_state() -> None:
    kv = models.find_model("Qwen3-Next-80B-A3B").kv("bf16")
    assert (kv.per_token_bytes, kv.per_session_bytes) == (24_576, 77_266_944)
    assert (kv.full_layers, kv.state_layers) == (12, 36)


@pytest.mark.parametrize(
    ("model", "gib_per_1000_tokens"), [("Qwen3-8B", 0.1373), ("Qwen3-32B", 0.2441), ("Llama-3.1-70B", 0.3052)]
)
def test_lmcache_faq_gib_per_thousand_tokens(model: str, gib_per_1000_tokens: float) -> None:
    per_token = models.find_model(model).kv("bf16").per_token_bytes
    assert round(per_token * 1000 / 2**30, 4) == gib_per_1000_tokens


def test_mla_ignores_num_key_value_heads_and_counts_mtp() -> None:
    spec = models.find_model("deepseek-r1")
    assert spec.config["num_key_value_heads"] == 128
    assert spec.kv("bf16", mtp=True).per_token_bytes == 62 * 576 * 2


def test_every_catalogue_model_is_listed_with_positive_sizes() -> None:
    rows = models.catalogue_rows()
    assert len(rows) >= 24
    for row in rows:
        assert row["kv_bytes_per_token_bf16"] > 0
        assert row["kv_bytes_per_token_fp8"] * 2 == row["kv_bytes_per_token_bf16"] or row["arch"] == "mla"


def test_config_json_file_gives_the_same_answer(tmp_path: Path) -> None:
    cfg = {
        "architectures": ["MiniMaxM2ForCausalLM"],
        "text_config": {
            "num_hidden_layers": 62,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_size": 3072,
            "num_attention_heads": 48,
        },
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    name, kv = models.resolve(None, path, "fp8")
    assert kv.per_token_bytes == 126_976
    assert name == tmp_path.name


def test_unknown_model_and_dtype_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="did you mean"):
        models.find_model("MiniMax-M3")
    with pytest.raises(UsageError, match="dtype"):
        geometry.dtype_bytes("fp7")


# ------------------------------------------------------------------------------ §7.2 sizing arithmetic


def test_footprint_of_an_hour_at_4200_tokens_per_second() -> None:
    assert sizing.footprint_tokens(4_200, 3_600) == 15_120_000
    b = sizing.footprint_bytes(4_200, 3_600, 126_976)
    assert b == pytest.approx(1.91988e12, rel=1e-5)
    assert b / 2**40 == pytest.approx(1.746, abs=5e-4)


@pytest.mark.parametrize(
    ("capacity", "b", "seconds"),
    [(80e9, 126_976, 150.0), (80e9, 253_952, 75.0), (1e12, 126_976, 1_875.0), (1e12, 253_952, 937.5)],
)
def test_how_long_a_tier_holds(capacity: float, b: int, seconds: float) -> None:
    assert sizing.hold_seconds(capacity, 4_200, b) == pytest.approx(seconds, rel=1e-3)


def test_dwpd_oracles() -> None:
    assert sizing.dwpd(1.9e9, 8, 12.8e12, "raid10") == pytest.approx(3.20625, rel=1e-12)
    assert sizing.dwpd(1.9e9, 8, 12.8e12, "RAID0") == pytest.approx(1.603125, rel=1e-12)
    assert sizing.dwpd(4_200 * 126_976, 8, 12.8e12, "raid10") == pytest.approx(0.8999, abs=1e-4)
    assert sizing.dwpd(1e9, 8, 12.8e12, "raid5") == pytest.approx(1e9 * 86_400 * 8 / 7 / (8 * 12.8e12))


def test_rated_endurance() -> None:
    assert sizing.rated_tbw_bytes(12.8e12, 3, 5) / 1e12 == pytest.approx(70_080)
    assert sizing.years_to_rated_endurance(3.20625, 3, 5) == pytest.approx(5 * 3 / 3.20625)


def test_prefill_flops_oracles() -> None:
    assert sizing.prefill_flops(70.6e9, 80, 64, 128, 128, 8_192) == pytest.approx(1.2447e15, rel=1e-4)
    saved = sizing.recompute_avoided_flops(70.6e9, 80, 64, 128, 128, 120_000)
    assert saved == pytest.approx(3.5818e16, rel=1e-4)
    full = sizing.prefill_flops(70.6e9, 80, 64, 128, 128, 128_000)
    incremental = sizing.prefill_flops(70.6e9, 80, 64, 128, 128, 8_000, 120_000)
    assert full - incremental == pytest.approx(saved, rel=1e-9)


def test_ttft_reproduces_the_seed_resume_times() -> None:
    b, tokens = 126_976, 128_000
    # the formula with the rates behind the seed's resume times (the defaults are measurements instead)
    assert sizing.ttft_seconds([0], [1.0], tokens, b, prefill_rate=9_209) == pytest.approx(13.9, abs=0.01)
    assert sizing.ttft_seconds([tokens], [5.08e9], 0, b) == pytest.approx(3.2, abs=0.01)
    assert sizing.ttft_seconds([tokens], [20.3e9], 0, b) == pytest.approx(0.8, abs=0.01)
    assert sizing.ttft_seconds([tokens], [math.inf], 0, b) == 0.0


def test_tier_specs() -> None:
    assert sizing.parse_tier("dram=512GiB").capacity_bytes == 512 * 2**30
    assert sizing.parse_tier("dram=inf").capacity_bytes == math.inf
    tier = sizing.parse_tier("ssd=100TB:read=7GB/s:latency=0.1ms:ttl=1h")
    assert (tier.kind, tier.read_bytes_per_s, tier.latency_s, tier.ttl_s) == ("ssd", 7e9, 1e-4, 3_600)
    assert sizing.parse_tier("ssd=1TB:latency=0").latency_s == 0.0
    with pytest.raises(UsageError, match="kind"):
        sizing.parse_tier("fastthing=1TB")
    with pytest.raises(UsageError, match="--tier dram 'lots' is not a size"):
        sizing.parse_tier("dram=lots")
    with pytest.raises(UsageError, match="read '7Gbps' is not a bandwidth"):
        sizing.parse_tier("ssd=1TB:read=7Gbps")


def test_prices_override_and_reject_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"date": "2027-01", "dram_usd_per_gb": 5}))
    prices = sizing.Prices.load(path)
    assert (prices.date, prices.dram_usd_per_gb, prices.ssd_usd_per_tb) == ("2027-01", 5.0, 250.0)
    cost = sizing.tier_cost_per_month(sizing.parse_tier("dram=1TB"), prices)
    assert cost == pytest.approx(1_000 * 5 / 36)
    path.write_text(json.dumps({"dram": 5}))
    with pytest.raises(UsageError, match="unknown price key"):
        sizing.Prices.load(path)
    path.write_text("[5]")
    with pytest.raises(UsageError, match="holds a list; write one object of prices"):
        sizing.Prices.load(path)
    path.write_bytes(b'{"date": "\xe9t\xe9"}')
    with pytest.raises(UsageError, match="is not UTF-8 text"):
        sizing.Prices.load(path)
    with pytest.raises(UsageError, match="is a directory"):
        sizing.Prices.load(tmp_path)


# ---------------------------------------------------------------------------------- §8 default prices

REPO = Path(__file__).resolve().parents[1]

#: The default planning prices as docs/sizing.md's ``traceflow size`` table publishes them
#: (docs/sizing-formulas.md
#: §8): the golden values, written here, not read from the code or the packaged file.
PUBLISHED_PRICES: dict[str, str | float] = {
    "date": "2026-02",
    "source": "planning assumptions (TrendForce-cited press, AWS list prices; docs/sizing-formulas.md)",
    "dram_usd_per_gb": 10.0,
    "ssd_usd_per_tb": 250.0,
    "hdd_usd_per_tb": 20.0,
    "object_usd_per_gb_month": 0.023,
    "gpu_usd_per_hour": 3.0,
    "gpu_hbm_gb": 80.0,
    "amortization_months": 36.0,
    "power_usd_per_month": 0.0,
}


def test_docs_publish_the_default_prices() -> None:
    readme = (REPO / "docs" / "sizing.md").read_text(encoding="utf-8")
    section = readme.split("## `traceflow size`", 1)[1].split("\n## ", 1)[0]
    table = section.split("| key | default | what it prices |", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", table, flags=re.M))
    published = {k: (v if k in ("date", "source") else float(v)) for k, v in rows.items()}
    assert published == PUBLISHED_PRICES


def test_packaged_prices_file_gives_every_field_with_the_published_values() -> None:
    raw = json.loads(sizing.PRICES_FILE.read_text(encoding="utf-8"))
    assert list(raw) == [f.name for f in fields(sizing.Prices)]
    assert raw == PUBLISHED_PRICES
    assert asdict(sizing.Prices.default()) == PUBLISHED_PRICES
    assert sizing.Prices.load(None) == sizing.Prices.default()
    assert sizing.Prices.default() is sizing.Prices.default()  # read once


def test_packaged_prices_are_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "prices.json" in pyproject["tool"]["setuptools"]["package-data"]["traceflow.kv"]
    assert sizing.PRICES_FILE.parent == Path(sizing.__file__).parent


def test_a_copy_of_the_packaged_file_is_a_prices_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    shutil.copy(sizing.PRICES_FILE, path)
    assert sizing.Prices.load(path) == sizing.Prices.default()
    edited = json.loads(path.read_text(encoding="utf-8")) | {"date": "2026-09", "ssd_usd_per_tb": 300}
    path.write_text(json.dumps(edited, ensure_ascii=False), encoding="utf-8")
    assert asdict(sizing.Prices.load(path)) == PUBLISHED_PRICES | {"date": "2026-09", "ssd_usd_per_tb": 300.0}


def test_packaged_prices_missing_a_key_fail_naming_the_file_and_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "prices.json"
    broken.write_text(json.dumps({k: v for k, v in PUBLISHED_PRICES.items() if k != "gpu_hbm_gb"}))
    monkeypatch.setattr(sizing, "PRICES_FILE", broken)
    with pytest.raises(TraceflowError, match=rf"{re.escape(str(broken))}: .*\['gpu_hbm_gb'\]"):
        sizing.Prices.default()
    with pytest.raises(TraceflowError, match="gpu_hbm_gb"):
        sizing.Prices.load(None)


# ------------------------------------------------------------------------------------------------ CLI


def test_models_command_lists_the_catalogue(cli: Cli) -> None:
    code, out, _ = cli("models", "--format", "json", data=False)
    assert code == 0
    rows = {r["model"]: r for r in json.loads(out)}
    assert rows["MiniMax-M2"]["kv_bytes_per_token_fp8"] == 126_976
    assert rows["Qwen3-Next-80B-A3B"]["per_session_bytes_bf16"] == 77_266_944


def test_size_json_keys_and_seed_numbers(cli: Cli) -> None:
    code, out, err = cli(
        "size",
        "--kv-model",
        "MiniMax-M2",
        "--rate",
        "4200",
        "--ttl",
        "1h",
        "--tier",
        "gpu=80GB",
        "--tier",
        "dram=1TB",
        "--format",
        "json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["kv_bytes_per_token"] == 126_976
    assert report["footprint_bytes"] == pytest.approx(1.91988e12, rel=1e-5)
    assert report["dwpd"] == pytest.approx(0.8999, abs=1e-4)
    assert [round(t["hold_s"]) for t in report["tiers"]] == [150, 1875]
    assert report["years_to_rated_endurance"] == pytest.approx(5 * 3 / report["dwpd"])
    assert report["cost_usd_per_million_tokens"] > 0


def test_size_ssd_write_rate_override(cli: Cli) -> None:
    code, out, _ = cli(
        "size",
        "--kv-model",
        "MiniMax-M2",
        "--rate",
        "4200",
        "--ssd-write-rate",
        "1.9GB/s",
        "--raid",
        "raid0",
        "--format",
        "json",
    )
    assert code == 0
    assert json.loads(out)["dwpd"] == pytest.approx(1.603125)


def test_size_measures_the_rate_from_the_lake(cli: Cli, lake: Lake) -> None:
    t0 = 1_785_585_600_000_000
    lake.append(
        "requests",
        [
            {
                "event_id": f"r{i}",
                "source": "test",
                "model": "MiniMax-M2",
                "session_id": "s",
                "started_at": t0 + i * 10_000_000,
                "cold_input_tokens": 100,
                "cache_read_tokens": 5_000,
                "cache_write_tokens": 300,
                "output_tokens": 50,
            }
            for i in range(11)
        ],
    )
    code, out, err = cli("size", "--model", "MiniMax-M2", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["rate_tok_s"] == pytest.approx(11 * 450 / 100)
    assert report["input_rate_tok_s"] == pytest.approx(11 * 5_400 / 100)
    assert report["rate_source"].startswith("measured")


def test_size_without_a_model_is_a_usage_error(cli: Cli) -> None:
    code, _, err = cli("size", "--rate", "10")
    assert code == 2
    assert "--kv-model" in err


def test_size_and_the_report_assume_one_ssd_array(cli: Cli, lake: Lake) -> None:
    """One set of SSD defaults (``sizing.DEFAULT_SSD``): `size` without SSD options and the report's note."""
    import polars as pl

    from traceflow.dashboards.render import _notes
    from traceflow.dashboards.report_data import dwpd_frame

    ssd = sizing.DEFAULT_SSD
    code, out, err = cli("size", "--kv-model", "MiniMax-M2", "--rate", "4200", "-f", "json", data=False)
    assert code == 0, err
    got = json.loads(out)
    assert got["ssd_drives"] == ssd.drives and got["rated_dwpd"] == ssd.rated_dwpd
    assert got["ssd_usable_bytes"] == sizing.usable_bytes(ssd.raid, ssd.drives, ssd.drive_bytes)
    lake.append(
        "requests",
        [{"event_id": "a", "source": "t", "started_at": 1785585600_000000, "cache_write_tokens": 1000}],
    )
    frame = dwpd_frame(lake.connect(["requests"]), "true", [], 126_976, "UTC")
    assert frame["rated_dwpd"].to_list() == [ssd.rated_dwpd]
    assert frame["dwpd"][0] == pytest.approx(
        sizing.dwpd(1000 * 126_976 / 60, ssd.drives, ssd.drive_bytes, ssd.raid, ssd.waf)
    )

    class Data:
        kv_bytes_per_token = 126_976.0
        resolution_s = 60.0
        series_since = None
        capacity = True  # the SSD note belongs to the capacity part (report --capacity)

    note = next(n for n in _notes(Data(), True, "UTC") if "SSD" in n)  # type: ignore[arg-type]
    assert f"{ssd.drives} drives of {ssd.drive_bytes / 1e12:g} TB in {ssd.raid}" in note
    assert f"rated {ssd.rated_dwpd:g} DWPD" in note
    assert isinstance(frame, pl.DataFrame)


def test_size_prices_file_overrides_only_its_keys(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"date": "2026-09", "dram_usd_per_gb": 12, "ssd_usd_per_tb": 300}))
    args = ("size", "--kv-model", "MiniMax-M2", "--rate", "4200", "--tier", "dram=1TB", "--format", "json")
    code, out, err = cli(*args, "--prices", str(path))
    assert code == 0, err
    report = json.loads(out)
    changed = {"date": "2026-09", "dram_usd_per_gb": 12.0, "ssd_usd_per_tb": 300.0}
    assert report["prices"] == PUBLISHED_PRICES | changed
    assert report["tiers"][0]["cost_usd_per_month"] == pytest.approx(1_000 * 12 / 36)
    code, out, err = cli(*args)
    assert code == 0, err
    assert json.loads(out)["prices"] == PUBLISHED_PRICES
