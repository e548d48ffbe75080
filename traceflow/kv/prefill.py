"""Prefill time from FLOPs that grow with context, and the attention kernel's memory traffic.

Pure. For a dense decoder of ``layers`` layers (hidden ``h``, ``heads`` query heads and ``kv_heads``
KV heads of ``head_dim``, MLP width ``ffn``), ``new`` tokens after ``cached`` cached ones
(docs/sizing.md, "Prefill that grows with context")::

    linear    = 2 × linear_params × new
    attention = 2 × layers × heads × 2·head_dim × (new × cached + new² / 2)      (causal)
    fused     = (linear + attention) / (efficiency × peak)

``fused`` is a flash-style kernel with a causal offset (what vLLM runs). ``masked`` is the measured
probe's kernel for rows with a cached prefix: PyTorch SDPA with an explicit boolean mask, which runs
the memory-efficient kernel over the full ``new × (cached + new)`` score matrix and, per 64-query tile
and head, streams the whole K and V (GQA expanded to every query head) from memory, after a
``cat`` and a ``repeat_interleave`` of the cache; that traffic at the HBM rate is added to the FLOP
time (not overlapped)::

    masked = linear / (efficiency × peak)
             + layers × [2·heads·2·head_dim·new·(cached+new) / (efficiency × peak)
                         + ((new/64)·(cached+new)·heads·head_dim·2·dtype + (cached+new)·expand) / hbm]
"""

from __future__ import annotations

from dataclasses import dataclass

#: Query rows per tile of PyTorch's memory-efficient attention kernel (the probe's masked path).
QUERY_TILE = 64


@dataclass(frozen=True)
class DenseShape:
    """A dense decoder's shape (no embedding or LM head: the measured probe has neither)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    head_dim: int = 0
    dtype_bytes: int = 2

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def linear_params(self) -> int:
        """QKV, output projection and a gated MLP per layer.

        >>> LLAMA3_8B.linear_params
        6979321856
        """
        h, hd = self.hidden, self.hd
        per_layer = h * (self.heads + 2 * self.kv_heads) * hd + self.heads * hd * h + 3 * h * self.ffn
        return self.layers * per_layer


#: The measured probe's shape (Llama-3-8B: 32 layers, 4096 hidden, 32 heads, 8 KV heads, MLP 14,336).
LLAMA3_8B = DenseShape(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336)


def prefill_flops(shape: DenseShape, new: int, cached: int = 0, causal: bool = True) -> float:
    """Linear + attention FLOPs; ``causal=False`` counts the full ``new × (cached + new)`` scores."""
    att = new * cached + (new * new / 2 if causal else new * new)
    return 2.0 * shape.linear_params * new + 2.0 * shape.layers * shape.heads * 2 * shape.hd * att


def prefill_seconds(
    shape: DenseShape,
    new: int,
    cached: int,
    flops_per_s: float,
    hbm_bytes_per_s: float = 0.0,
    kernel: str = "fused",
) -> float:
    """Seconds to prefill ``new`` tokens after ``cached`` at ``flops_per_s`` (efficiency × peak).

    >>> round(prefill_seconds(LLAMA3_8B, 32_768, 0, 0.67 * 989e12), 3)
    1.115
    """
    if kernel == "fused" or cached == 0:
        return prefill_flops(shape, new, cached) / flops_per_s
    if kernel != "masked":
        raise ValueError(f"kernel {kernel!r}: use fused or masked")
    ctx = cached + new
    d = shape.dtype_bytes
    att_flops = 2.0 * shape.heads * 2 * shape.hd * new * ctx
    stream = (new / QUERY_TILE) * ctx * shape.heads * shape.hd * 2 * d  # K and V per query tile
    kv_row = shape.kv_heads * shape.hd * d  # one token's K (or V) per layer, before GQA expansion
    expand = ctx * (2 * 2 * kv_row + 2 * (kv_row + shape.heads * shape.hd * d))  # cat + repeat_interleave
    per_layer = att_flops / flops_per_s + (stream + expand) / hbm_bytes_per_s
    return 2.0 * shape.linear_params * new / flops_per_s + shape.layers * per_layer
