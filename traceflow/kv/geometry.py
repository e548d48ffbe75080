"""KV-cache geometry: bytes per token (and per session) of a model, from its Hugging Face ``config.json``.

Pure functions (no I/O except :func:`load_config`); formulas in docs/sizing-formulas.md#kv-bytes-per-token:

* standard / grouped-query attention: ``2 (K and V) × L_full × kv_heads × head_dim × dtype_bytes``
* latent attention (DeepSeek-style MLA): ``L × (kv_lora_rank + qk_rope_head_dim) × dtype_bytes`` (no ×2),
  656 B/layer with ``fp8_ds_mla``, plus a 132 B/layer fp8 indexer key for DSA models (``index_head_dim``)
* sliding-window layers: at most ``W`` tokens each, so by default they are a per-session constant
  ``2 × L_swa × kv_heads × head_dim × dtype_bytes × W`` (``swa_capped=False`` counts them per token)
* hybrids: only attention layers count per token; every linear / SSM layer adds a constant per-session
  state (GatedDeltaNet, Mamba2, Mamba1, lightning attention; shapes as vLLM allocates them)

The catalogue (:mod:`traceflow.kv.models`) holds the config keys each formula reads (copied from the
models' ``config.json``), so a catalogue model and ``--config`` go through the same code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceflow.errors import UsageError
from traceflow.paths import read_text

#: Bytes per element of each dtype name (``--dtype``); ``fp8_ds_mla`` is vLLM's packed MLA fp8 cache.
DTYPE_BYTES: dict[str, int] = {
    "fp32": 4,
    "float32": 4,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "fp8_ds_mla": 1,
}

#: Bytes per token per layer of the MLA cache with ``kv_cache_dtype=fp8_ds_mla``:
#: 512 fp8 latent + 16 B of scales + 64 bf16 rope elements (vLLM ``MLAAttentionSpec``).
FP8_DS_MLA_LAYER_BYTES = 656


def dtype_bytes(name: str) -> int:
    """Bytes per element of a dtype name.

    >>> dtype_bytes("bf16"), dtype_bytes("FP8")
    (2, 1)
    """
    key = name.strip().lower()
    if key not in DTYPE_BYTES:
        raise UsageError(f"unknown dtype {name!r}; use one of: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class KVSize:
    """What one model's KV cache costs: bytes per cached token, plus a constant per session.

    ``per_session_bytes`` is the sliding-window KV (capped at the window) plus the recurrent state of
    linear / SSM layers; a resumed session must load it once, whatever its length.
    """

    per_token_bytes: int
    per_session_bytes: int = 0
    arch: str = "gqa"
    full_layers: int = 0
    sliding_layers: int = 0
    state_layers: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    dtype: str = "bf16"

    def bytes_for(self, tokens: int, sessions: int = 1) -> int:
        """Bytes to hold ``tokens`` tokens of KV spread over ``sessions`` sessions.

        >>> KVSize(per_token_bytes=131_072).bytes_for(1000)
        131072000
        """
        return self.per_token_bytes * tokens + self.per_session_bytes * sessions


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of a config (multimodal wrappers nest it in ``text_config``/``llm_config``)."""
    for key in ("text_config", "llm_config", "language_config"):
        inner = cfg.get(key)
        if isinstance(inner, Mapping) and inner.get("num_hidden_layers"):
            return inner
    return cfg


def _first(c: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        v = c.get(k)
        if v is not None:
            return v
    return None


def num_layers(c: Mapping[str, Any]) -> int:
    n = _first(c, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    if not isinstance(n, int) or n <= 0:
        raise UsageError(
            "config has no num_hidden_layers; is it a Hugging Face config.json of a decoder LLM?"
        )
    return n


def kv_heads(c: Mapping[str, Any]) -> int:
    """KV heads: ``num_key_value_heads``, Falcon's ``n_head_kv``, 1 for ``multi_query``, else all heads."""
    n = _first(c, "num_key_value_heads", "n_head_kv")
    if n is None and c.get("multi_query"):
        n = 1
    if n is None:
        n = _first(c, "num_attention_heads", "n_head")
    if not isinstance(n, int) or n <= 0:
        raise UsageError("config has neither num_key_value_heads nor num_attention_heads")
    return n


def head_dim(c: Mapping[str, Any]) -> int:
    """``head_dim`` when present (never ``hidden/heads`` then: Qwen3, GLM-4.5, gpt-oss differ), else derived.

    >>> head_dim({"hidden_size": 5120, "num_attention_heads": 96, "head_dim": 128})
    128
    >>> head_dim({"hidden_size": 8192, "num_attention_heads": 64})
    128
    """
    hd = _first(c, "head_dim", "attention_head_dim", "hidden_size_per_head")
    if hd is None:
        hidden = _first(c, "hidden_size", "n_embd", "d_model")
        heads = _first(c, "num_attention_heads", "n_head")
        if not hidden or not heads:
            raise UsageError("config has no head_dim and no hidden_size/num_attention_heads to derive it")
        hd = int(hidden) // int(heads)
    return int(hd)


def layer_kinds(c: Mapping[str, Any]) -> list[str]:
    """One kind per layer: ``full``, ``sliding``, ``gdn``, ``mamba2``, ``mamba1``, ``lightning`` or ``none``.

    Read as vLLM does: ``layers_block_type``, ``attn_type_list``, ``layer_types``, Nemotron-H's
    ``hybrid_override_pattern``, Jamba's ``attn_layer_period``/``attn_layer_offset``,
    ``full_attention_interval``; otherwise every layer is full attention (all sliding when the config
    has a ``sliding_window`` that is not switched off).

    >>> layer_kinds({"num_hidden_layers": 4, "full_attention_interval": 4})
    ['gdn', 'gdn', 'gdn', 'full']
    """
    n = num_layers(c)
    if isinstance(c.get("layers_block_type"), Sequence) and not isinstance(c.get("layers_block_type"), str):
        mamba = "mamba2" if c.get("mamba_num_heads") else "mamba1"
        return ["full" if str(t).startswith("attention") else mamba for t in c["layers_block_type"]]
    if isinstance(c.get("attn_type_list"), Sequence):
        return ["full" if int(t) == 1 else "lightning" for t in c["attn_type_list"]]
    if isinstance(c.get("layer_types"), Sequence) and not isinstance(c.get("layer_types"), str):
        kinds = []
        for t in c["layer_types"]:
            t = str(t)
            if t in ("full_attention", "attention", "global_attention"):
                kinds.append("full")
            elif "sliding" in t or t == "local_attention":
                kinds.append("sliding")
            elif t in ("linear_attention",):
                kinds.append("gdn")
            elif "mamba" in t:
                kinds.append("mamba2" if c.get("mamba_num_heads") else "mamba1")
            else:
                kinds.append("none")
        return kinds
    pattern = c.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return [{"M": "mamba2", "*": "full"}.get(ch, "none") for ch in pattern]
    if c.get("attn_layer_period"):
        period, offset = int(c["attn_layer_period"]), int(c.get("attn_layer_offset", 0))
        return ["full" if i % period == offset else "mamba1" for i in range(n)]
    if c.get("full_attention_interval"):
        every = int(c["full_attention_interval"])
        return ["full" if (i + 1) % every == 0 else "gdn" for i in range(n)]
    window = c.get("sliding_window")
    if isinstance(window, int) and window > 0 and c.get("use_sliding_window", True) is not False:
        return ["sliding"] * n
    return ["full"] * n


def _model_dtype(c: Mapping[str, Any]) -> str:
    name = str(_first(c, "torch_dtype", "dtype") or "bfloat16")
    return name if name.lower() in DTYPE_BYTES else "bfloat16"


def state_bytes(c: Mapping[str, Any], kind: str, state_dtype: str | None = None) -> int:
    """Constant per-session bytes of one linear/SSM layer (vLLM ``MambaStateShapeCalculator`` shapes).

    Conv state in the model dtype; the recurrent state in ``mamba_ssm_cache_dtype`` when the config
    sets it, fp32 for GatedDeltaNet and lightning attention (ASSUMPTION,
    docs/sizing-formulas.md#kv-bytes-per-token), else the model dtype. ``state_dtype`` overrides both.
    """
    conv_b = dtype_bytes(state_dtype or _model_dtype(c))
    if kind == "gdn":
        kd, nk = int(c["linear_key_head_dim"]), int(c["linear_num_key_heads"])
        vd, nv = int(c["linear_value_head_dim"]), int(c["linear_num_value_heads"])
        conv = (kd * nk * 2 + vd * nv) * (int(c.get("linear_conv_kernel_dim", 4)) - 1)
        ssm_b = dtype_bytes(state_dtype or str(c.get("mamba_ssm_cache_dtype") or "fp32"))
        return conv * conv_b + nv * vd * kd * ssm_b
    if kind == "mamba2":
        heads, hd = int(c["mamba_num_heads"]), int(c["mamba_head_dim"])
        d_state, groups = int(c["ssm_state_size"]), int(c.get("n_groups", 1))
        conv = (heads * hd + 2 * groups * d_state) * (int(c.get("conv_kernel", 4)) - 1)
        ssm_b = dtype_bytes(state_dtype or str(c.get("mamba_ssm_cache_dtype") or _model_dtype(c)))
        return conv * conv_b + heads * hd * d_state * ssm_b
    if kind == "mamba1":
        inner = int(c.get("mamba_expand", 2)) * int(c["hidden_size"])
        conv = inner * (int(c.get("mamba_d_conv", 4)) - 1)
        ssm_b = dtype_bytes(state_dtype or str(c.get("mamba_ssm_cache_dtype") or _model_dtype(c)))
        return conv * conv_b + inner * int(c.get("mamba_d_state", 16)) * ssm_b
    if kind == "lightning":
        heads, hd = int(_first(c, "num_attention_heads", "n_head")), head_dim(c)
        return heads * hd * hd * dtype_bytes(state_dtype or "fp32")
    return 0


def kv_size(
    cfg: Mapping[str, Any],
    dtype: str = "bf16",
    *,
    swa_capped: bool = True,
    mtp: bool = False,
    state_dtype: str | None = None,
) -> KVSize:
    """KV bytes per token (and per session) of a model config at a KV-cache dtype.

    >>> kv_size({"num_hidden_layers": 62, "num_key_value_heads": 8, "head_dim": 128}, "fp8").per_token_bytes
    126976
    >>> kv_size({"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64}).per_token_bytes
    70272
    """
    c = text_config(cfg)
    b = dtype_bytes(dtype)
    n = num_layers(c)
    extra = int(_first(c, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0) if mtp else 0
    if c.get("kv_lora_rank"):
        layers = n + extra
        index = c.get("index_head_dim")
        # DSA models (an indexer) store fp8 MLA as vLLM's packed fp8_ds_mla page.
        if dtype.lower() == "fp8_ds_mla" or (index and dtype.lower().startswith("fp8")):
            per_layer = FP8_DS_MLA_LAYER_BYTES
        else:
            per_layer = (int(c["kv_lora_rank"]) + int(c.get("qk_rope_head_dim") or 0)) * b
        if index:
            per_layer += int(index) + int(index) // 128 * 4  # fp8 indexer key + UE8M0 scale
        return KVSize(
            per_token_bytes=layers * per_layer,
            arch="mla",
            full_layers=layers,
            kv_heads=1,
            head_dim=int(c["kv_lora_rank"]) + int(c.get("qk_rope_head_dim") or 0),
            dtype=dtype,
        )
    kinds = layer_kinds(c) + ["full"] * extra
    kvh, hd = kv_heads(c), head_dim(c)
    full = kinds.count("full")
    sliding = kinds.count("sliding")
    per_layer_token = 2 * kvh * hd * b  # K and V
    per_token = full * per_layer_token
    per_session = 0
    if sliding:
        window = c.get("sliding_window")
        if swa_capped and isinstance(window, int) and window > 0:
            per_session += sliding * per_layer_token * window
        else:
            per_token += sliding * per_layer_token
    state_layers = 0
    for kind in ("gdn", "mamba2", "mamba1", "lightning"):
        count = kinds.count(kind)
        if count:
            state_layers += count
            per_session += count * state_bytes(c, kind, state_dtype)
    arch = (
        "hybrid"
        if state_layers
        else ("gqa+swa" if sliding else ("mha" if kvh == c.get("num_attention_heads") else "gqa"))
    )
    return KVSize(
        per_token_bytes=per_token,
        per_session_bytes=per_session,
        arch=arch,
        full_layers=full,
        sliding_layers=sliding,
        state_layers=state_layers,
        kv_heads=kvh,
        head_dim=hd,
        dtype=dtype,
    )


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a Hugging Face ``config.json``."""
    p = Path(path)
    try:
        data = json.loads(read_text(p, "--config", "a Hugging Face config.json"))
    except json.JSONDecodeError as e:
        raise UsageError(f"--config {p} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {p} is not a JSON object")
    return data
