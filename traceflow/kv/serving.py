"""A serving box for ``traceflow simulate --serving``: GPUs, the model, the scheduler's limits, offload tiers.

Pure but for :func:`load_serving` (reads a JSON or TOML file). Every number is either from a published
specification or measurement (its source in a comment), an ASSUMPTION named as such, or the one calibrated
effective rate ``prefill_flops_per_gpu`` (the other calibrated constant of ``simulate`` is the workload's
think time); :mod:`traceflow.kv.scheduler` runs it. A file without ``preset`` must give
``prefill_flops_per_gpu`` and ``kv_load_bandwidth_per_gpu``: there are no silent defaults.

VRAM for KV is computed, not guessed (vLLM's accounting)::

    kv_bytes_per_gpu = gpu_memory × memory_utilization − weights / gpus − activation_reserve
    kv_bytes         = gpus × kv_bytes_per_gpu            (tensor parallelism shards the KV heads)

File format (JSON or TOML; sizes and bandwidths as numbers of bytes or strings such as ``"96GiB"``,
``"114GB/s"``; a ``preset`` key starts from a shipped preset and overrides what the file gives)::

    {"preset": "rtx-pro-6000x4",                       # optional
     "gpus": 4, "gpu_memory": "96GiB", "hbm_bandwidth": "1792GB/s", "gpu_peak_flops": 1.0e15,
     "memory_utilization": 0.9, "activation_reserve": "4GiB",
     "model": "MiniMax-M2", "kv_dtype": "fp8", "total_params": 229e9, "active_params": 10e9,
     "experts": 256, "experts_per_token": 8, "weight_bytes_per_param": 1,
     "max_num_batched_tokens": 8192, "max_num_seqs": 256,
     "prefill_flops_per_gpu": 1.45e14, "kv_load_bandwidth_per_gpu": "44GB/s",   # required without preset
     "tiers": [{"name": "dram", "kind": "dram", "capacity": "512GiB"},
               {"name": "flash", "kind": "ssd", "capacity": "51.2TB", "read": "114GB/s",
                "write": "57GB/s", "staging": "64GB", "stream_read": "2GB/s"}]}
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from traceflow.errors import UsageError
from traceflow.kv.geometry import KVSize
from traceflow.kv.models import find_model
from traceflow.units import parse_bandwidth, parse_size


@dataclass(frozen=True)
class OffloadTier:
    """A KV offload tier below the GPUs (LMCache-style, write-through, LRU).

    ``read`` / ``write``: the medium's bandwidth (bytes/s, ``inf`` = not the bottleneck; reads then
    run at the box's KV load rate). ``staging``: RAM that buffers writes to a slow medium; a store that
    would overflow it is dropped, as LMCache skips a store it cannot buffer.

    ``stream_read``: bytes/s of one rank's serial file reads (``inf``: not modelled). LMCache's disk
    backend keeps one file per 256-token chunk per rank and reads a request's chunks one after another,
    each with one buffered ``readinto`` into pinned memory, before the copy to the GPU
    (``lmcache/v1/storage_backend/local_disk_backend.py``, ``batched_async_load_bytes_from_disk`` and
    ``read_file``; docs/sizing.md cites the commit). The ranks read at once, so a hit's read takes
    ``bytes / min(gpus × stream_read, read)`` (the array's ``read`` ceiling shared by the ranks).
    """

    name: str
    kind: str
    capacity_bytes: float
    read_bytes_per_s: float = math.inf
    write_bytes_per_s: float = math.inf
    staging_bytes: float = math.inf
    stream_read_bytes_per_s: float = math.inf


def tier_read_seconds_per_byte(tier: OffloadTier, gpus: int) -> float:
    """Seconds per byte (of the whole box's load) to read a hit out of ``tier`` before the copy: the
    ranks' serial file reads in parallel (``gpus × stream_read``) under the medium's ``read`` ceiling;
    0 for a tier with neither (RAM: the copy reads it directly).

    >>> t = OffloadTier("flash", "ssd", 1e12, read_bytes_per_s=114e9, stream_read_bytes_per_s=2e9)
    >>> [round(1 / tier_read_seconds_per_byte(t, n) / 1e9, 1) for n in (4, 64)]
    [8.0, 114.0]
    """
    rate = min(gpus * tier.stream_read_bytes_per_s, tier.read_bytes_per_s)
    return 1.0 / rate if math.isfinite(rate) else 0.0


@dataclass(frozen=True)
class ServingSpec:
    """GPUs, model, scheduler limits, offload tiers and the two calibrated rates."""

    name: str = "custom"
    gpus: int = 4
    gpu_memory_bytes: float = 96 * 2**30
    hbm_bytes_per_s: float = 1.792e12
    gpu_peak_flops: float = 1.0e15
    memory_utilization: float = 0.9
    activation_reserve_bytes: float = 4 * 2**30
    model: str = "MiniMax-M2"
    kv_dtype: str = "fp8"
    total_params: float = 229e9
    active_params: float = 10e9
    experts: int = 256
    experts_per_token: int = 8
    weight_bytes_per_param: float = 1.0
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    step_overhead_s: float = 0.0
    # no defaults: a file gives them or takes them from a preset (``spec_from_mapping`` refuses NaN)
    prefill_flops_per_gpu: float = math.nan  # effective prefill FLOP/s per GPU (the presets: CALIBRATED)
    kv_load_bytes_per_s_per_gpu: float = math.nan  # offload tier → GPU copy rate per GPU (published)
    tiers: tuple[OffloadTier, ...] = field(default_factory=tuple)
    calibration: str = ""
    # copy granularity (traceflow.kv.copies): when ``copy_stack`` is set, the load rate per GPU is the
    # curve's rate at the stack's bytes per copy, not ``kv_load_bytes_per_s_per_gpu``
    copy_stack: str = ""
    copy_curve: str = "h200-pcie5"
    #: The GPU of a GPU preset (``h100``, ``h200``, ``b200`` × N, :data:`GPUS`): such a box serves the
    #: model ``--kv-model`` names (:func:`serve_model`); empty for a fixed box.
    gpu: str = ""

    def kv_load_rate_per_gpu(self) -> float:
        """Offload tier → GPU bytes/s per GPU: from the copy curve at the stack's copy size when
        ``copy_stack`` is set, else ``kv_load_bytes_per_s_per_gpu``."""
        if not self.copy_stack:
            return self.kv_load_bytes_per_s_per_gpu
        from traceflow.kv.copies import copy_rate_per_gpu, find_stack, load_copy_curve

        return copy_rate_per_gpu(
            self.kv(), find_stack(self.copy_stack), self.gpus, load_copy_curve(self.copy_curve)
        )

    def kv_load_rate(self) -> float:
        """Offload tier → GPUs bytes/s of the box: each GPU restores over its own host link, so the
        per-GPU rate times the GPUs (tensor parallel: every GPU loads its shard at once)."""
        return self.gpus * self.kv_load_rate_per_gpu()

    # --------------------------------------------------------------------------------- derived
    def kv(self) -> KVSize:
        return find_model(self.model).kv(self.kv_dtype)

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.weight_bytes_per_param

    @property
    def kv_bytes_per_gpu(self) -> float:
        """``gpu_memory × memory_utilization − weights / gpus − activation_reserve``.

        >>> f"{ServingSpec().kv_bytes_per_gpu / 1e9:.2f}"
        '31.23'
        """
        return (
            self.gpu_memory_bytes * self.memory_utilization
            - self.weight_bytes / self.gpus
            - self.activation_reserve_bytes
        )

    @property
    def kv_bytes(self) -> float:
        return self.gpus * self.kv_bytes_per_gpu

    @property
    def expert_params(self) -> float:
        """Parameters in routed experts: ``dense + E = total`` and ``dense + E·k/experts = active``."""
        if self.experts <= 0 or self.experts_per_token >= self.experts:
            return 0.0
        share = self.experts_per_token / self.experts
        return (self.total_params - self.active_params) / (1 - share)

    def weight_bytes_touched_per_gpu(self, tokens: int) -> float:
        """Weight bytes one GPU reads in a step of ``tokens`` tokens (each token routes to k experts)."""
        experts = self.expert_params
        dense = self.total_params - experts
        frac = 1.0 - (1.0 - self.experts_per_token / self.experts) ** max(tokens, 1) if experts else 0.0
        return (dense + experts * frac) * self.weight_bytes_per_param / self.gpus

    def summary(self) -> dict[str, Any]:
        kv = self.kv()
        return {
            "name": self.name,
            "gpus": self.gpus,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "hbm_bytes_per_s": self.hbm_bytes_per_s,
            "gpu_peak_flops": self.gpu_peak_flops,
            "memory_utilization": self.memory_utilization,
            "activation_reserve_bytes": self.activation_reserve_bytes,
            "model": self.model,
            "kv_dtype": self.kv_dtype,
            "kv_bytes_per_token": kv.per_token_bytes,
            "weight_bytes": self.weight_bytes,
            "kv_bytes_per_gpu": self.kv_bytes_per_gpu,
            "kv_bytes": self.kv_bytes,
            "kv_tokens": int(self.kv_bytes // kv.per_token_bytes),
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "prefill_flops_per_gpu": self.prefill_flops_per_gpu,
            "prefill_mfu": self.prefill_flops_per_gpu / self.gpu_peak_flops,
            "kv_load_bytes_per_s_per_gpu": self.kv_load_rate_per_gpu(),
            "kv_load_bytes_per_s": self.kv_load_rate(),
            "gpu": self.gpu or None,
            "copy_stack": self.copy_stack or None,
            "calibration": self.calibration,
            "tiers": [
                {
                    "name": t.name,
                    "kind": t.kind,
                    "capacity_bytes": t.capacity_bytes,
                    "read_bytes_per_s": None if math.isinf(t.read_bytes_per_s) else t.read_bytes_per_s,
                    "write_bytes_per_s": None if math.isinf(t.write_bytes_per_s) else t.write_bytes_per_s,
                    "staging_bytes": None if math.isinf(t.staging_bytes) else t.staging_bytes,
                    "stream_read_bytes_per_s": None
                    if math.isinf(t.stream_read_bytes_per_s)
                    else t.stream_read_bytes_per_s,
                }
                for t in self.tiers
            ],
        }


# ------------------------------------------------------------------------------------------ presets

#: The presets' one calibrated rate (printed in the report and docs/sizing.md); the other calibrated constant
#: of ``simulate`` is the workload's think time (:data:`traceflow.kv.synthetic.THINK_S`). Both are solved
#: by ``benchmarks/calibrate_serving.py``.
CALIBRATION = (
    "prefill_flops_per_gpu from the published GPU-only plateau (12,000 tok/s, mean after minute 40); "
    "the workload's mean think time (125.3 s) from the published DRAM peak (2.9 x that plateau)"
)

#: Host→GPU copy rate per GPU for KV loads, bytes/s. Published measurements: LMCache's pinned-DRAM L1
#: loads ran at 22.1 GB/s against a raw H2D copy of 25.07 GB/s on an NVIDIA L20, PCIe 4.0 x16
#: (LMCache issue #4626, "Add `lmcache bench l1`", 2026-08); vLLM's offloading connector moved about
#: 50 GB/s one way on H100, PCIe 5.0 x16 (vLLM blog, "Inside vLLM's new KV offloading connector").
#: The RTX PRO 6000 Server Edition sits on PCIe 5.0 x16 like the H100, the serving stack is LMCache:
#: 50 GB/s × (22.1 / 25.07) = 44 GB/s.
KV_LOAD_PCIE5_LMCACHE = 50e9 * 22.1 / 25.07

#: Fixed time per engine step of the presets, seconds: what a roofline of FLOPs and bytes misses (kernel
#: launches, tensor-parallel all-reduces over PCIe, MoE routing). Measured, not fitted: aiconfigurator-core
#: 0.12.0's database times one decode step of MiniMax-M2.7 FP8 at TP 4 on ``rtx_pro_6000_server``
#: (TensorRT-LLM 1.3.0rc20, 1 request at 30,000 tokens) at 25.3 ms, the roofline at 1.9 ms; the difference.
#: ``python benchmarks/bench_serving.py --aiconfigurator`` prints both (``traceflow[measured]``).
STEP_OVERHEAD_S = 0.0234

#: Effective prefill FLOP/s per GPU of the presets. CALIBRATED: ``benchmarks/calibrate_serving.py`` solves
#: it so that the GPU-only preset's mean throughput after minute 40 is the published 12,000 tok/s.
PREFILL_FLOPS_PER_GPU = 1.2346e14

_BOX = ServingSpec(
    name="rtx-pro-6000x4",
    gpus=4,  # 4 × NVIDIA RTX PRO 6000 Blackwell Server Edition
    gpu_memory_bytes=96 * 2**30,  # 96 GB GDDR7 (3 GB modules × 32: binary gigabytes)
    hbm_bytes_per_s=1.792e12,  # 1,792 GB/s memory bandwidth (NVIDIA spec sheet)
    gpu_peak_flops=1.0e15,  # ≈ dense FP8 tensor throughput (spec sheet lists 2× with sparsity)
    memory_utilization=0.9,  # vLLM's default gpu_memory_utilization
    activation_reserve_bytes=4 * 2**30,  # ASSUMPTION: vLLM's profiled activations + CUDA graphs
    model="MiniMax-M2",  # MiniMax-M2.7 has M2's geometry: 62 layers × 8 KV heads × 128, 124 KiB/token FP8
    kv_dtype="fp8",
    total_params=229e9,  # MiniMax-M2 model card: 229 B total, 10 B active, 256 experts, top-8
    active_params=10e9,
    experts=256,
    experts_per_token=8,
    weight_bytes_per_param=1.0,  # FP8 checkpoint
    max_num_batched_tokens=8192,  # vLLM's chunked-prefill token budget per step
    max_num_seqs=256,  # vLLM's default
    step_overhead_s=STEP_OVERHEAD_S,  # measured (aiconfigurator-core), see above
    prefill_flops_per_gpu=PREFILL_FLOPS_PER_GPU,  # CALIBRATED (benchmarks/calibrate_serving.py)
    kv_load_bytes_per_s_per_gpu=KV_LOAD_PCIE5_LMCACHE,  # published copy rates, see above
    calibration=CALIBRATION,
)

#: One rank's serial chunk-file reads from the flash tier, bytes/s. LMCache 0.5's disk backend stores one
#: file per 256-token chunk per rank (7.75 MiB for MiniMax-M2 FP8 at TP 4) and reads a request's chunks
#: one after another, each with one buffered ``open(path, "rb").readinto(buffer)`` into pinned memory, the
#: copy to the GPU after it (``lmcache/v1/storage_backend/local_disk_backend.py``: ``read_file``,
#: ``batched_async_load_bytes_from_disk``). ASSUMPTION, not published: one such reader moves about 2 GB/s
#: (the article gives only the array's many-stream fio ceiling, 114 GB/s; this project's 2-core machine
#: measured the same call on 7.75 MiB files at 1.5–2.0 GB/s from the page cache and 0.3–0.8 GB/s from its
#: virtual disk). ``benchmarks/README.md`` shows the eight figures at 1, 2, 4 and 8 GB/s.
FLASH_STREAM_READ = 2e9

# LMCache's max_local_cpu_size is in GiB: the published "512 GB" is 512 GiB
DRAM_512 = OffloadTier("dram", "dram", 512 * 2**30)
# The flash box's 64 GB of RAM is LMCache's staging buffer in front of the disk backend, counted once: as
# the write staging of the flash tier, not as a cache tier of its own (the article: its results "reflect
# the drive service rather than host memory").
FLASH_RAID10 = OffloadTier(
    "flash",
    "ssd",
    8 * 12.8e12 / 2,  # 8 × 12.8 TB NVMe in RAID10: half is usable
    read_bytes_per_s=114e9,  # the array's read ceiling measured with fio (the source article)
    write_bytes_per_s=57e9,  # ASSUMPTION: RAID10 writes every byte twice → half the read ceiling
    staging_bytes=64 * 2**30,  # the 64 GB RAM staging buffer (LMCache sizes it in GiB)
    stream_read_bytes_per_s=FLASH_STREAM_READ,  # ASSUMPTION: one rank's serial chunk-file reads, see above
)

#: NVIDIA H200 SXM: dense BF16 tensor peak, FLOP/s (NVIDIA H200 datasheet: 1,979 TFLOPS with sparsity).
H200_PEAK_BF16 = 989e12
#: The one efficiency factor of the measured comparison (``bench_serving.py --measured-gpu``): achieved
#: over peak FLOP/s of the measured 8B-shaped prefill without a cached prefix. FITTED: the median of the
#: four such rows of tests/data/gpu_h200_probe.jsonl (0.652, 0.677, 0.668, 0.672); the rows with a
#: cached prefix are predicted, not fitted.
H200_PREFILL_MFU = 0.67

H200 = ServingSpec(
    name="h200",
    gpus=1,
    gpu_memory_bytes=141e9,  # 141 GB HBM3e (NVIDIA H200 datasheet)
    hbm_bytes_per_s=4.8e12,  # 4.8 TB/s (datasheet)
    gpu_peak_flops=H200_PEAK_BF16,
    model="Llama-3.1-8B",  # the measured shape: 32 layers, 4096 hidden, 32 heads, 8 KV heads
    kv_dtype="bf16",
    total_params=8.03e9,
    active_params=8.03e9,
    experts=0,
    experts_per_token=0,
    weight_bytes_per_param=2.0,
    step_overhead_s=0.0,
    prefill_flops_per_gpu=H200_PREFILL_MFU * H200_PEAK_BF16,  # one efficiency factor, see above
    kv_load_bytes_per_s_per_gpu=55.32e9,  # the curve's largest copy; used only without copy_stack
    copy_stack="lmcache",
    copy_curve="h200-pcie5",
    calibration="prefill efficiency 0.67 of the BF16 peak, from the measured 8B prefill without prefix",
    gpu="h200",
)


@dataclass(frozen=True)
class Gpu:
    """One GPU's published figures (per GPU, SXM, dense tensor FLOP/s: the sparsity figures halved)."""

    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    peak_bf16: float
    peak_fp8: float
    source: str

    def peak(self, weight_bytes_per_param: float) -> float:
        """The dense tensor peak for the weights' precision: FP8 (1 byte) or BF16 (2 bytes)."""
        return self.peak_fp8 if weight_bytes_per_param <= 1 else self.peak_bf16


#: The GPU presets' table. Prefill FLOP/s per GPU = :data:`H200_PREFILL_MFU` (measured on the H200) ×
#: the peak for the weights' precision: an ASSUMPTION that the efficiency carries to the H100 and B200.
#: Host links: all three restore KV over PCIe 5.0 x16 per GPU (the HGX B200's host CPUs are Gen5), at
#: the H200's measured copy curve (``h200-pcie5``), one link per GPU: the load rate scales with N.
GPUS: dict[str, Gpu] = {
    "h100": Gpu(
        "h100", 80e9, 3.35e12, 989e12, 1979e12,
        "NVIDIA H100 datasheet (SXM5): 80 GB HBM3, 3.35 TB/s; BF16 1,979 and FP8 3,958 TFLOPS with sparsity",
    ),
    "h200": Gpu(
        "h200", 141e9, 4.8e12, H200_PEAK_BF16, 2 * H200_PEAK_BF16,
        "NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s; BF16 1,979 and FP8 3,958 TFLOPS with sparsity",
    ),
    "b200": Gpu(
        "b200", 180e9, 8e12, 2.25e15, 4.5e15,
        "NVIDIA DGX/HGX B200 datasheet: 1,440 GB HBM3e and 64 TB/s over 8 GPUs (180 GB, 8 TB/s each); "
        "BF16 4.5 and FP8 9 PFLOPS per GPU with sparsity (HGX, 1,000 W)",
    ),
}  # fmt: skip


def gpu_preset(gpu: str, count: int) -> ServingSpec:
    """``<gpu>x<count>``: the measured H200 preset's model (Llama-3.1-8B BF16, the probe's shape) on
    ``count`` of ``gpu``, tensor parallel; :func:`serve_model` puts another model on it."""
    g = GPUS[gpu]
    if gpu == "h200":  # the measured preset itself
        return replace(H200, name="h200" if count == 1 else f"h200x{count}", gpus=count)
    return replace(
        H200,
        name=f"{gpu}x{count}",
        gpus=count,
        gpu_memory_bytes=g.memory_bytes,
        hbm_bytes_per_s=g.hbm_bytes_per_s,
        gpu_peak_flops=g.peak(H200.weight_bytes_per_param),
        prefill_flops_per_gpu=H200_PREFILL_MFU * g.peak(H200.weight_bytes_per_param),
        gpu=gpu,
        calibration=f"prefill: efficiency {H200_PREFILL_MFU} (measured on the H200) x the {gpu} "
        f"datasheet peak; {g.source}",
    )


def serve_model(spec: ServingSpec, model: str, dtype: str | None = None) -> ServingSpec:
    """A GPU preset serving ``model`` (a catalogue name with ``[model.params]``): its parameters, experts
    and weights precision (the model's default dtype, FP8 → 1 byte per parameter), KV at ``dtype``
    (default the model's), prefill FLOP/s from that precision's peak."""
    if not spec.gpu:
        raise UsageError(
            f"--kv-model {model}: the box {spec.name} serves its own model ({spec.model}); a GPU preset "
            f"({', '.join(f'{g}xN' for g in GPUS)}) serves the model you name"
        )
    m = find_model(model)
    if not m.params:
        have = ", ".join(s.name for s in _models_with_params())
        raise UsageError(
            f"--kv-model {m.name}: the catalogue has no parameter counts for it (needed for FLOPs and "
            f'weights); models with them: {have}; or give a --serving file with "preset", "model", '
            '"total_params" and "active_params"'
        )
    wbytes = 1.0 if m.default_dtype.startswith("fp8") else 2.0
    g = GPUS[spec.gpu]
    p = m.params
    return replace(
        spec,
        model=m.name,
        kv_dtype=dtype or m.default_dtype,
        total_params=float(p["total"]),
        active_params=float(p["active"]),
        experts=int(p.get("experts", 0)),
        experts_per_token=int(p.get("experts_per_token", 0)),
        weight_bytes_per_param=wbytes,
        gpu_peak_flops=g.peak(wbytes),
        prefill_flops_per_gpu=H200_PREFILL_MFU * g.peak(wbytes),
    )


def _models_with_params() -> list[Any]:
    from traceflow.kv.models import CATALOGUE

    return [s for s in CATALOGUE if s.params]


PRESETS: dict[str, ServingSpec] = {
    "h200": H200,
    "rtx-pro-6000x4": _BOX,
    "rtx-pro-6000x4+dram": replace(_BOX, name="rtx-pro-6000x4+dram", tiers=(DRAM_512,)),
    "rtx-pro-6000x4+flash": replace(_BOX, name="rtx-pro-6000x4+flash", tiers=(FLASH_RAID10,)),
}

_SIZE_KEYS = {"gpu_memory": "gpu_memory_bytes", "activation_reserve": "activation_reserve_bytes"}
_BW_KEYS = {"hbm_bandwidth": "hbm_bytes_per_s", "kv_load_bandwidth_per_gpu": "kv_load_bytes_per_s_per_gpu"}


def _tier(d: Mapping[str, Any], where: str) -> OffloadTier:
    unknown = set(d) - {"name", "kind", "capacity", "read", "write", "staging", "stream_read"}
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {sorted(unknown)}; use name, kind, capacity, read, write, staging, "
            "stream_read"
        )
    if "name" not in d or "capacity" not in d:
        raise UsageError(
            f"{where}: a tier needs at least a name and a capacity, e.g. "
            '{"name": "dram", "capacity": "512GB"}'
        )

    def size(key: str) -> float:
        v = d.get(key, math.inf)
        return (
            float(v) if isinstance(v, int | float) else parse_size(str(v), f"{where} {key}", unlimited=True)
        )

    def bw(key: str) -> float:
        v = d.get(key, math.inf)
        if isinstance(v, int | float):
            return float(v)
        return (
            math.inf if str(v).lower() in ("inf", "unlimited") else parse_bandwidth(str(v), f"{where} {key}")
        )

    return OffloadTier(
        str(d["name"]),
        str(d.get("kind", "dram")),
        size("capacity"),
        bw("read"),
        bw("write"),
        size("staging"),
        bw("stream_read"),
    )


def spec_from_mapping(d: Mapping[str, Any], where: str = "--serving") -> ServingSpec:
    """A :class:`ServingSpec` from the documented file keys (see the module docs)."""
    base = find_preset(str(d["preset"])) if "preset" in d else ServingSpec()
    names = {f.name for f in fields(ServingSpec)} - {"tiers", "gpu"}  # gpu: from a preset only
    changes: dict[str, Any] = {}
    for key, value in d.items():
        if key == "preset":
            continue
        if key == "tiers":
            if not isinstance(value, list):
                raise UsageError(f"{where}: tiers must be a list of tables")
            changes["tiers"] = tuple(_tier(t, f"{where} tiers[{i}]") for i, t in enumerate(value))
        elif key in _SIZE_KEYS:
            changes[_SIZE_KEYS[key]] = (
                float(value) if isinstance(value, int | float) else parse_size(str(value), f"{where} {key}")
            )
        elif key in _BW_KEYS:
            changes[_BW_KEYS[key]] = (
                float(value)
                if isinstance(value, int | float)
                else parse_bandwidth(str(value), f"{where} {key}")
            )
        elif key in names:
            kind = type(getattr(base, key))
            if kind is int and (
                isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer()
            ):
                raise UsageError(f"{where}: {key} = {value!r} must be a whole number")
            try:
                changes[key] = kind(value)
            except (TypeError, ValueError):
                raise UsageError(f"{where}: {key} = {value!r} is not a {kind.__name__}") from None
        else:
            raise UsageError(
                f"{where}: unknown key {key!r}; the keys are listed in docs/sizing.md, `simulate --serving`"
            )
    spec = replace(base, **changes)
    check_spec(spec, where)
    find_model(spec.model)  # a clear error for an unknown model
    return spec


def check_spec(spec: ServingSpec, where: str = "--serving") -> None:
    """One clear error for a box that cannot be simulated (limits, rates, VRAM)."""
    missing = [
        k
        for k, v in (
            ("prefill_flops_per_gpu", spec.prefill_flops_per_gpu),
            ("kv_load_bandwidth_per_gpu", spec.kv_load_bytes_per_s_per_gpu),
        )
        if not (v > 0 and math.isfinite(v))
    ]
    if missing:
        raise UsageError(
            f"{where}: give {' and '.join(missing)} (positive numbers), or start from a preset with "
            f'"preset": "rtx-pro-6000x4"'
        )
    if spec.gpus < 1:
        raise UsageError(f"{where}: gpus = {spec.gpus} must be at least 1")
    if spec.copy_stack:
        from traceflow.kv.copies import find_stack, load_copy_curve

        find_stack(spec.copy_stack)
        load_copy_curve(spec.copy_curve)
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if getattr(spec, key) < 1:
            raise UsageError(f"{where}: {key} = {getattr(spec, key)} must be at least 1")
    if not 0 < spec.memory_utilization <= 1:
        raise UsageError(
            f"{where}: memory_utilization = {spec.memory_utilization:g} must be in (0, 1] (vLLM's "
            "gpu_memory_utilization, a share of each GPU's memory)"
        )
    if spec.kv_bytes_per_gpu <= 0:
        raise UsageError(
            f"{where}: no VRAM left for KV ({spec.kv_bytes_per_gpu / 1e9:.1f} GB per GPU): "
            "add GPUs, raise memory_utilization or lower activation_reserve"
        )


def find_preset(name: str) -> ServingSpec:
    """A preset by name; ``h200xN`` is the ``h200`` preset on N GPUs (tensor parallel: the KV pool and
    the prefill FLOP/s scale with N, and each GPU restores over its own PCIe link)."""
    base, _, count = name.partition("x")
    if base in GPUS and ((count.isdigit() and int(count) >= 1) or name == base):
        return gpu_preset(base, int(count or 1))
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(
            f"--serving {name!r}: no such preset or file; presets: {', '.join(PRESETS)}, "
            f"{', '.join(f'{g}xN' for g in GPUS)}"
        ) from None


def load_serving(name_or_path: str) -> ServingSpec:
    """A preset by name, or a JSON / TOML file in the documented format."""
    path = Path(name_or_path)
    if not path.is_file():
        return find_preset(name_or_path)
    text = path.read_bytes()
    try:
        data = tomllib.loads(text.decode()) if path.suffix.lower() == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(
            f"--serving {path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'} ({e})"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"--serving {path}: expected a table/object of settings")
    return spec_from_mapping(data, f"--serving {path}")
