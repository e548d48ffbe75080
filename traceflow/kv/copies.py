"""Host <-> GPU KV copies: the rate per copy size (a measured curve) and the copies a serving stack makes.

Pure but for :func:`load_copy_curve` (reads a file). A restore's (or an offload's) cost is

    seconds = bytes per GPU / rate(bytes per copy)

where ``rate`` is interpolated (log-log, clamped at the ends) from a curve measured with one copy per
size on one stream, and ``bytes per copy`` follows from the stack's copy unit (docs/sizing.md, "Copy
granularity"): tokens per copy (block or chunk), per layer or all layers fused, K and V apart or
together, and the tensor-parallel split (each GPU copies its own KV heads).

The shipped curve :data:`H200_PCIE5` is this project's measurement on an NVIDIA H200 on PCIe Gen5
(pinned memory, ``copy_(non_blocking=True)``, 1 GiB per figure; ``tests/data/gpu_h200_probe.jsonl``).
A user replaces it with their own GPU's: a JSON-lines file in the same format (lines with
``"kind": "copy"``, ``chunk_bytes``, ``h2d_GBps``, ``d2h_GBps``), ``copy_curve`` in a ``--serving`` file.

Which copies the stacks make (their public sources, docs/sizing.md cites file and commit):

* ``vllm-offload``: vLLM's offloading connector (``vllm/v1/kv_offload/worker/cpu_gpu.py``) calls
  ``swap_blocks`` per layer, for K and V apart when the layer's cache is ``(2, num_blocks, ...)``
  (FlashAttention's layout), one copy per GPU block of ``block_size`` tokens (16 by default).
* ``lmcache``: LMCache's vLLM GPU connector (``lmcache/v1/gpu_connector/gpu_connectors.py``) moves one
  memory object per 256-token chunk holding every layer's K and V (format ``KV_2LTD``) with one
  ``multi_layer_kv_transfer`` per chunk. ASSUMPTION: that kernel, reading pinned memory, runs at the
  rate of one copy of the chunk's size.
* ``lmcache-layerwise``: LMCache with ``use_layerwise``: one copy per layer of a 256-token chunk, K and
  V together.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from traceflow.errors import UsageError
from traceflow.kv.geometry import KVSize


@dataclass(frozen=True)
class CopyCurve:
    """Copy rate by bytes per copy: ``(bytes, host→GPU bytes/s, GPU→host bytes/s)`` rising in bytes."""

    name: str
    points: tuple[tuple[float, float, float], ...]

    def rate(self, nbytes: float, direction: str = "h2d") -> float:
        """Bytes/s of copies of ``nbytes`` each, interpolated linearly in log(bytes), log(rate).

        >>> f"{H200_PCIE5.rate(8192) / 1e9:.2f}"
        '0.81'
        """
        col = 1 if direction == "h2d" else 2
        pts = self.points
        if nbytes <= pts[0][0]:
            return pts[0][col]
        for lo, hi in itertools.pairwise(pts):
            if nbytes <= hi[0]:
                f = math.log(nbytes / lo[0]) / math.log(hi[0] / lo[0])
                return math.exp(math.log(lo[col]) + f * (math.log(hi[col]) - math.log(lo[col])))
        return pts[-1][col]


#: Measured (this project, 2026-12-04): NVIDIA H200, PCIe Gen5, pinned host memory, one stream,
#: median of 3 after a warm-up (tests/data/gpu_h200_probe.jsonl, lines "kind": "copy").
H200_PCIE5 = CopyCurve(
    "h200-pcie5",
    (
        (4096, 0.42e9, 0.52e9),
        (16384, 1.55e9, 2.16e9),
        (65536, 7.58e9, 7.43e9),
        (262144, 30.66e9, 34.39e9),
        (1048576, 48.86e9, 49.91e9),
        (4194304, 52.29e9, 53.83e9),
        (16777216, 54.75e9, 54.93e9),
        (67108864, 55.25e9, 55.11e9),
        (1073741824, 55.32e9, 55.20e9),
    ),
)

CURVES: dict[str, CopyCurve] = {H200_PCIE5.name: H200_PCIE5}


def load_copy_curve(name_or_path: str) -> CopyCurve:
    """A shipped curve by name, or a JSON-lines file of ``{"kind": "copy", "chunk_bytes", "h2d_GBps",
    "d2h_GBps"}`` lines (the probe's format; other lines are skipped)."""
    if name_or_path in CURVES:
        return CURVES[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise UsageError(
            f"copy_curve {name_or_path!r}: no such curve or file; curves: {', '.join(CURVES)}, or a "
            'JSON-lines file of {"kind": "copy", "chunk_bytes": N, "h2d_GBps": X, "d2h_GBps": Y}'
        )
    pts: list[tuple[float, float, float]] = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"copy_curve {path}:{i}: not JSON ({e})") from None
        if row.get("kind") != "copy":
            continue
        try:
            b, h2d, d2h = float(row["chunk_bytes"]), float(row["h2d_GBps"]), float(row["d2h_GBps"])
        except (KeyError, TypeError, ValueError):
            raise UsageError(
                f"copy_curve {path}:{i}: a copy line needs chunk_bytes, h2d_GBps and d2h_GBps (numbers)"
            ) from None
        if b <= 0 or h2d <= 0 or d2h <= 0:
            raise UsageError(f"copy_curve {path}:{i}: sizes and rates must be positive")
        pts.append((b, h2d * 1e9, d2h * 1e9))
    if not pts:
        raise UsageError(f'copy_curve {path}: no line with "kind": "copy"')
    pts.sort()
    return CopyCurve(str(path), tuple(pts))


@dataclass(frozen=True)
class CopyUnit:
    """What one copy of a stack holds: ``tokens`` per copy, one layer or all (``per_layer``), K and V
    apart (two copies) or together (``kv_apart``)."""

    name: str
    tokens: int
    per_layer: bool
    kv_apart: bool

    def bytes_per_copy(self, kv: KVSize, tp: int = 1) -> float:
        """Bytes of one copy on one GPU: ``tokens × per_token_bytes / tp``, over the layers when per
        layer, halved when K and V go apart (MLA has one latent: not halved).

        MiniMax-M2 FP8 at TP 4, vLLM's 16-token blocks: 4 KiB, LMCache's 256-token chunk: 7.75 MiB.

        >>> from traceflow.kv.models import find_model
        >>> kv = find_model("MiniMax-M2").kv("fp8")
        >>> STACKS["vllm-offload"].bytes_per_copy(kv, 4), STACKS["lmcache"].bytes_per_copy(kv, 4) / 2**20
        (4096.0, 7.75)
        """
        per_gpu = self.tokens * kv.per_token_bytes / _kv_split(kv, tp)
        layers = kv.full_layers or 1
        if self.per_layer:
            per_gpu /= layers
        if self.kv_apart and kv.arch != "mla":
            per_gpu /= 2
        return per_gpu


def _kv_split(kv: KVSize, tp: int) -> int:
    """GPUs the KV heads are split over (a head is not split; MLA's latent is replicated)."""
    if kv.arch == "mla" or tp <= 1:
        return 1
    return min(tp, kv.kv_heads) if kv.kv_heads else tp


STACKS: dict[str, CopyUnit] = {
    "vllm-offload": CopyUnit("vllm-offload", 16, per_layer=True, kv_apart=True),
    "lmcache": CopyUnit("lmcache", 256, per_layer=False, kv_apart=False),
    "lmcache-layerwise": CopyUnit("lmcache-layerwise", 256, per_layer=True, kv_apart=False),
}


def find_stack(name: str) -> CopyUnit:
    try:
        return STACKS[name]
    except KeyError:
        raise UsageError(f"copy_stack {name!r}: unknown; stacks: {', '.join(STACKS)}") from None


def copy_rate_per_gpu(
    kv: KVSize, unit: CopyUnit, tp: int, curve: CopyCurve = H200_PCIE5, direction: str = "h2d"
) -> float:
    """Bytes/s one GPU restores (``h2d``) or offloads (``d2h``) at, copying ``unit`` by ``unit``.

    >>> from traceflow.kv.models import find_model
    >>> kv = find_model("MiniMax-M2").kv("fp8")
    >>> [round(copy_rate_per_gpu(kv, STACKS[s], 4) / 1e9, 2) for s in STACKS]
    [0.42, 53.45, 15.24]
    """
    return curve.rate(unit.bytes_per_copy(kv, tp), direction)


def transfer_seconds(
    tokens: int, kv: KVSize, unit: CopyUnit, tp: int, curve: CopyCurve = H200_PCIE5, direction: str = "h2d"
) -> float:
    """Seconds to move ``tokens`` tokens of KV between host and ``tp`` GPUs (in parallel, one link each)."""
    per_gpu = tokens * kv.per_token_bytes / _kv_split(kv, tp)
    return per_gpu / copy_rate_per_gpu(kv, unit, tp, curve, direction)
