"""The serving model beside a GPU's measured copy and prefill rows (``bench_serving.py --measured-gpu``).

Pure. Input: the lines of a probe file (``tests/data/gpu_h200_probe.jsonl``, format in docs/sizing.md):
``{"kind": "copy", "chunk_bytes", "copies", "h2d_GBps"}`` and ``{"kind": "prefill", "new", "cached",
"seconds"}``. Each copy row is predicted from the preset's copy curve (:mod:`traceflow.kv.copies`), each
prefill row from FLOPs and the probe kernel's memory traffic (:mod:`traceflow.kv.prefill`), at the
preset's one efficiency factor (``prefill_flops_per_gpu = efficiency × peak``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from traceflow.kv.copies import load_copy_curve
from traceflow.kv.prefill import LLAMA3_8B, DenseShape, prefill_seconds
from traceflow.kv.serving import ServingSpec


def compare_measured(
    lines: Sequence[Mapping[str, Any]], spec: ServingSpec, shape: DenseShape = LLAMA3_8B
) -> list[dict[str, Any]]:
    """One object per copy and prefill row: ``kind``, the row's inputs, ``measured_s``, ``predicted_s``."""
    curve = load_copy_curve(spec.copy_curve)
    out: list[dict[str, Any]] = []
    for row in lines:
        if row.get("kind") == "copy":
            b, n = int(row["chunk_bytes"]), int(row["copies"])
            moved = b * n
            out.append(
                {
                    "kind": "copy",
                    "chunk_bytes": b,
                    "copies": n,
                    "measured_s": moved / (float(row["h2d_GBps"]) * 1e9),
                    "predicted_s": moved / curve.rate(b, "h2d"),
                }
            )
        elif row.get("kind") == "prefill":
            new, cached = int(row["new"]), int(row["cached"])
            pred = prefill_seconds(
                shape, new, cached, spec.prefill_flops_per_gpu, spec.hbm_bytes_per_s, kernel="masked"
            )
            out.append(
                {
                    "kind": "prefill",
                    "new": new,
                    "cached": cached,
                    "measured_s": float(row["seconds"]),
                    "predicted_s": pred,
                }
            )
    return out
