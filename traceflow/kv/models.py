"""The shipped model catalogue (KV_TIER_SIZING.md §2) and the lookup behind ``--model`` / ``--config``.

Each entry holds the ``config.json`` keys the formulas in :mod:`traceflow.kv.geometry` read, so a
catalogue model and ``--config`` go through the same code.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceflow.errors import UsageError
from traceflow.kv.geometry import KVSize, kv_size, load_config


@dataclass(frozen=True)
class ModelSpec:
    """A catalogue entry: the config keys the formulas read, where they come from, and other names."""

    name: str
    config: Mapping[str, Any]
    aliases: tuple[str, ...] = ()
    source: str = ""
    note: str = ""
    default_dtype: str = "bf16"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def kv(self, dtype: str | None = None, **kw: Any) -> KVSize:
        return kv_size(self.config, dtype or self.default_dtype, **kw)


_AIC = "ai-dynamo/aiconfigurator model_configs (HF config.json copies, 2026-08-21)"
_HF = "HF config.json (values as quoted in KV_TIER_SIZING.md §2)"


def _gqa(layers: int, kv: int, hidden: int, heads: int, hd: int | None = None, **more: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "hidden_size": hidden,
        "num_attention_heads": heads,
    }
    if hd is not None:
        cfg["head_dim"] = hd
    cfg.update(more)
    return cfg


def _mla(layers: int, heads: int, **more: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "num_hidden_layers": layers,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "hidden_size": 7168,
    }
    cfg.update(more)
    return cfg


_GPT_OSS_TYPES = ["sliding_attention", "full_attention"]

#: The shipped catalogue (KV_TIER_SIZING.md §2). Keys are the config.json keys the formulas read.
CATALOGUE: tuple[ModelSpec, ...] = (
    ModelSpec("Llama-3.1-8B", _gqa(32, 8, 4096, 32), ("llama-3.1-8b-instruct", "llama3.1-8b"), _HF),
    ModelSpec(
        "Llama-3.1-70B",
        _gqa(80, 8, 8192, 64),
        ("llama-3.3-70b", "llama-3.1-70b-instruct", "llama-3.3-70b-instruct", "llama3-70b"),
        _AIC,
    ),
    ModelSpec("Llama-3.1-405B", _gqa(126, 8, 16384, 128), ("llama-3.1-405b-instruct",), _HF),
    ModelSpec("Qwen3-8B", _gqa(36, 8, 4096, 32, 128), (), _HF),
    ModelSpec("Qwen3-32B", _gqa(64, 8, 5120, 64, 128), (), _AIC),
    ModelSpec("Qwen3-30B-A3B", _gqa(48, 4, 2048, 32, 128), (), _AIC),
    ModelSpec("Qwen3-235B-A22B", _gqa(94, 4, 4096, 64, 128), ("qwen3-vl-235b-a22b",), _AIC),
    ModelSpec(
        "Qwen3-Coder-480B-A35B",
        _gqa(62, 8, 6144, 96, 128),
        ("qwen3-coder",),
        _HF,
        "same KV geometry as MiniMax-M2",
    ),
    ModelSpec(
        "DeepSeek-V3",
        _mla(61, 128, num_nextn_predict_layers=1),
        ("deepseek-r1", "deepseek-v3.1", "deepseek-v3-0324"),
        _AIC,
        "+1 layer with MTP (--mtp)",
    ),
    ModelSpec(
        "DeepSeek-V3.2",
        _mla(61, 128, num_nextn_predict_layers=1, index_head_dim=128, index_n_heads=64),
        ("deepseek-v3.2-exp",),
        _HF,
        "DSA indexer key 132 B/layer; fp8_ds_mla = 656 B/layer",
    ),
    ModelSpec(
        "Kimi-K2-Instruct",
        _mla(61, 64, num_nextn_predict_layers=0),
        ("kimi-k2", "kimi-k2-thinking", "kimi-k2.5"),
        _AIC,
    ),
    ModelSpec(
        "GLM-5", _mla(78, 64, hidden_size=6144, qk_nope_head_dim=192, v_head_dim=256), ("glm-5-fp8",), _AIC
    ),
    ModelSpec(
        "gpt-oss-120b",
        _gqa(36, 8, 2880, 64, 64, sliding_window=128, layer_types=_GPT_OSS_TYPES * 18),
        ("openai/gpt-oss-120b",),
        _AIC,
        "SWA layers capped at 128 tokens (per-session constant)",
    ),
    ModelSpec(
        "gpt-oss-20b",
        _gqa(24, 8, 2880, 64, 64, sliding_window=128, layer_types=_GPT_OSS_TYPES * 12),
        ("openai/gpt-oss-20b",),
        _AIC,
    ),
    ModelSpec(
        "MiniMax-M2",
        _gqa(62, 8, 3072, 48, 128),
        ("minimax-m2.5", "minimax-m2.7", "minimax-m2.1"),
        _AIC,
        "seed model: 124 KiB/token at FP8",
        default_dtype="fp8",
    ),
    ModelSpec(
        "GLM-4.5",
        _gqa(92, 8, 5120, 96, 128, num_nextn_predict_layers=1),
        ("glm-4.6", "glm-4.7"),
        _AIC,
        "+1 MTP layer with --mtp; LMCache's calculator undercounts it 2.4x",
    ),
    ModelSpec(
        "Mistral-Large-Instruct-2407",
        _gqa(88, 8, 12288, 96),
        ("mistral-large-2407", "mistral-large-2"),
        "LMCache docs modelconfig.json",
    ),
    ModelSpec("Mixtral-8x22B", _gqa(56, 8, 6144, 48), ("mixtral-8x22b-instruct",), _HF),
    ModelSpec(
        "Qwen3-Next-80B-A3B",
        _gqa(
            48,
            2,
            2048,
            16,
            256,
            full_attention_interval=4,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=128,
            linear_num_key_heads=16,
            linear_num_value_heads=32,
            linear_value_head_dim=128,
            torch_dtype="bfloat16",
        ),
        ("qwen3-next", "qwen3-next-80b-a3b-instruct", "qwen3-next-80b-a3b-thinking"),
        _AIC,
        "GatedDeltaNet 3:1; recurrent state fp32",
    ),
    ModelSpec(
        "Qwen3.5-397B-A17B",
        {
            "text_config": _gqa(
                60,
                2,
                4096,
                32,
                256,
                full_attention_interval=4,
                linear_conv_kernel_dim=4,
                linear_key_head_dim=128,
                linear_num_key_heads=16,
                linear_num_value_heads=64,
                linear_value_head_dim=128,
                dtype="bfloat16",
                mtp_num_hidden_layers=1,
            )
        },
        ("qwen3.5",),
        _AIC,
        "GatedDeltaNet 3:1; recurrent state fp32",
    ),
    ModelSpec(
        "Nemotron-H-56B",
        {
            "num_hidden_layers": 118,
            "num_key_value_heads": 8,
            "num_attention_heads": 64,
            "hidden_size": 8192,
            "attention_head_dim": 128,
            "hybrid_override_pattern": "M-M-M-M*-" * 10 + "M-" * 14,
            "mamba_num_heads": 256,
            "mamba_head_dim": 64,
            "ssm_state_size": 256,
            "n_groups": 8,
            "conv_kernel": 4,
            "torch_dtype": "bfloat16",
        },
        ("nemotron-h-56b-base-8k",),
        "aiconfigurator tests (layer counts: 54 Mamba2, 10 attention)",
        "Mamba2 state in bf16",
    ),
    ModelSpec(
        "Nemotron-3-Nano-30B-A3B",
        {
            "num_hidden_layers": 52,
            "num_key_value_heads": 2,
            "num_attention_heads": 32,
            "hidden_size": 2688,
            "head_dim": 128,
            "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
            "mamba_num_heads": 64,
            "mamba_head_dim": 64,
            "ssm_state_size": 128,
            "n_groups": 8,
            "conv_kernel": 4,
            "mamba_ssm_cache_dtype": "float32",
            "torch_dtype": "bfloat16",
        },
        ("nemotron-3-nano", "nvidia-nemotron-3-nano-30b-a3b"),
        "HF config.json (mamba_ssm_cache_dtype float32)",
        "config asks for an fp32 SSM cache (KV_TIER_SIZING §2 counted it as bf16: 25.0 MB)",
    ),
    ModelSpec(
        "MiniMax-M1",
        {
            "num_hidden_layers": 80,
            "num_key_value_heads": 8,
            "num_attention_heads": 64,
            "head_dim": 128,
            "hidden_size": 6144,
            "attn_type_list": ([0] * 7 + [1]) * 10,
        },
        ("minimax-text-01",),
        "third-party config copies",
        "lightning attention 7:1; state fp32 assumed",
    ),
    ModelSpec(
        "Jamba-1.5-Mini",
        {
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "num_attention_heads": 32,
            "hidden_size": 4096,
            "attn_layer_period": 8,
            "attn_layer_offset": 4,
            "mamba_d_state": 16,
            "mamba_d_conv": 4,
            "mamba_expand": 2,
            "torch_dtype": "bfloat16",
        },
        ("jamba-v0.1",),
        "third-party config copies",
        "Mamba1 7:1",
    ),
)


def _norm(name: str) -> str:
    return name.strip().lower().rsplit("/", 1)[-1].replace("_", "-")


def find_model(name: str) -> ModelSpec:
    """The catalogue entry called ``name`` (case-insensitive; aliases and ``org/name`` accepted)."""
    want = _norm(name)
    for spec in CATALOGUE:
        if want in {_norm(spec.name), *(_norm(a) for a in spec.aliases)}:
            return spec
    names = [s.name for s in CATALOGUE]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UsageError(
        f"unknown model {name!r}{hint}; `traceflow models` lists the catalogue, or pass --config config.json"
    )


def resolve(
    model: str | None,
    config: str | Path | None,
    dtype: str | None = None,
    *,
    swa_capped: bool = True,
    mtp: bool = False,
    state_dtype: str | None = None,
) -> tuple[str, KVSize]:
    """The model's display name and KV size from ``--model`` or ``--config`` (and ``--dtype``)."""
    if config is not None:
        cfg = load_config(config)
        name = model or str(cfg.get("_name_or_path") or Path(config).parent.name or "config")
        return name, kv_size(cfg, dtype or "bf16", swa_capped=swa_capped, mtp=mtp, state_dtype=state_dtype)
    if model is None:
        raise UsageError("give --model NAME (see `traceflow models`) or --config config.json")
    spec = find_model(model)
    return spec.name, spec.kv(dtype, swa_capped=swa_capped, mtp=mtp, state_dtype=state_dtype)


def catalogue_rows() -> list[dict[str, Any]]:
    """One row per catalogue model for ``traceflow models`` (stable keys)."""
    rows = []
    for spec in CATALOGUE:
        bf16, fp8 = spec.kv("bf16"), spec.kv("fp8")
        rows.append(
            {
                "model": spec.name,
                "arch": bf16.arch,
                "full_layers": bf16.full_layers,
                "sliding_layers": bf16.sliding_layers,
                "state_layers": bf16.state_layers,
                "kv_heads": bf16.kv_heads,
                "head_dim": bf16.head_dim,
                "kv_bytes_per_token_bf16": bf16.per_token_bytes,
                "kv_bytes_per_token_fp8": fp8.per_token_bytes,
                "per_session_bytes_bf16": bf16.per_session_bytes,
                "aliases": ", ".join(spec.aliases),
                "note": spec.note,
            }
        )
    return rows
