"""Seed 001's published tier benchmark beside traceflow's serving model (docs/sizing.md, "Worked example:
the published box").

Runs the agentic-coding workload (2 h) on the three presets for each seed (0, 1, 2 by default) and prints
the published figures beside the model's median [min–max] over the seeds, then the per-minute TTFT
checks. ``--readme`` prints the table exactly as docs/sizing.md carries it (tests/test_serving.py checks
that the two agree). ``python benchmarks/bench_serving.py [--duration 2h] [--seeds 0,1,2] [--json F]``.

Source of every published figure: Solidigm / Dell, the KV-offload tier benchmark on a Dell PowerEdge
XE7740 (4 × RTX PRO 6000 Blackwell, vLLM 0.22.0 + LMCache 0.5.0, MiniMax-M2.7 FP8).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from traceflow.kv.measured import compare_measured
from traceflow.kv.scheduler import run, step_seconds
from traceflow.kv.serving import PRESETS, OffloadTier, ServingSpec
from traceflow.kv.synthetic import PUBLISHED_RUN, agentic_coding_turns
from traceflow.output import to_json
from traceflow.units import parse_duration

BOXES = {"GPU only": "rtx-pro-6000x4", "DRAM": "rtx-pro-6000x4+dram", "flash": "rtx-pro-6000x4+flash"}

Reports = dict[str, dict[str, Any]]


def plateau(r: Reports) -> float | None:
    """The GPU-only plateau: its mean throughput after minute 40."""
    return r["GPU only"]["throughput_after_40min_tok_s"]


def _over_plateau(box: str) -> Callable[[Reports], float | None]:
    def f(r: Reports) -> float | None:
        base = plateau(r)
        return r[box]["throughput_peak_tok_s"] / base if base else None

    return f


def _get(box: str, key: str) -> Callable[[Reports], float | None]:
    return lambda r: r[box][key]


#: (figure, published, published value, from the reports, calibrated?) — the eight figures of issue 23
FIGURES: list[tuple[str, str, float, Callable[[Reports], float | None], bool]] = [
    ("GPU-only plateau, mean after minute 40 (tok/s)", "~12,000", 12_000, plateau, True),
    ("DRAM best 5-min throughput / GPU-only plateau", "2.9x", 2.9, _over_plateau("DRAM"), False),
    ("flash best 5-min throughput / GPU-only plateau", "2.2x", 2.2, _over_plateau("flash"), False),
    (
        "DRAM mean throughput after minute 80 (tok/s)",
        "~17,000",
        17_000,
        _get("DRAM", "throughput_after_80min_tok_s"),
        False,
    ),
    (
        "flash mean throughput after minute 80 (tok/s)",
        "~30,000",
        30_000,
        _get("flash", "throughput_after_80min_tok_s"),
        False,
    ),
    (
        "worst resumed TTFT incl. queueing, GPU only (s)",
        "13.9",
        13.9,
        _get("GPU only", "resumed_worst_wait_s"),
        False,
    ),
    ("worst resumed TTFT incl. queueing, DRAM (s)", "0.8", 0.8, _get("DRAM", "resumed_worst_wait_s"), False),
    (
        "worst resumed TTFT incl. queueing, flash (s)",
        "3.2",
        3.2,
        _get("flash", "resumed_worst_wait_s"),
        False,
    ),
]

#: Further figures, shown for context (not among the eight)
EXTRA: list[tuple[str, str, Callable[[Reports], float | None]]] = [
    ("DRAM tier full at (min)", "~45", lambda r: (r["DRAM"]["crossover_s"] or 0) / 60 or None),
    ("served / offered requests, GPU only", "", lambda r: r["GPU only"]["served_share"]),
    ("served / offered requests, DRAM", "", lambda r: r["DRAM"]["served_share"]),
    ("served / offered requests, flash", "", lambda r: r["flash"]["served_share"]),
    ("DRAM output peak (tok/s)", "~300", _get("DRAM", "output_peak_tok_s")),
    ("flash peak write (GB/s)", "4.1", lambda r: r["flash"]["tiers"][0]["peak_write_bytes_per_s"] / 1e9),
    ("flash peak read (GB/s)", "1.1", lambda r: r["flash"]["tiers"][0]["peak_read_bytes_per_s"] / 1e9),
    ("flash mean write (GB/s)", "1.9", lambda r: r["flash"]["tiers"][0]["mean_write_bytes_per_s"] / 1e9),
]


def run_seed(
    duration_s: float,
    seed: int,
    workload: dict[str, Any] | None = None,
    boxes: dict[str, ServingSpec] | None = None,
) -> Reports:
    turns = agentic_coding_turns(duration_s, seed, **{**PUBLISHED_RUN, **(workload or {})})
    specs = boxes or {label: PRESETS[preset] for label, preset in BOXES.items()}
    return {label: run(spec, turns) for label, spec in specs.items()}


def _boxes(**changes: Any) -> dict[str, ServingSpec]:
    return {label: replace(PRESETS[preset], **changes) for label, preset in BOXES.items()}


def _old_flash() -> dict[str, ServingSpec]:
    """The flash preset before issue 23: its 64 GB of RAM also a cache tier above the flash."""
    boxes = _boxes()
    flash = boxes["flash"]
    boxes["flash"] = replace(flash, tiers=(OffloadTier("staging", "dram", 64e9), *flash.tiers))
    return boxes


def _free_chunk_reads() -> dict[str, ServingSpec]:
    """The flash preset before 2026-12-05: a hit read at the array's ceiling, no per-rank chunk reads."""
    boxes = _boxes()
    flash = boxes["flash"]
    free = tuple(replace(t, stream_read_bytes_per_s=math.inf) for t in flash.tiers)
    boxes["flash"] = replace(flash, tiers=free)
    return boxes


#: One assumption changed back at a time (to its value before issue 23): name, workload, boxes
VARIANTS: list[tuple[str, dict[str, Any], Callable[[], dict[str, ServingSpec]]]] = [
    ("this model", {}, _boxes),
    ("sessions compact at the cap and never end", {"at_cap": "compact"}, _boxes),
    ("think time 30 s", {"think_s": 30.0}, _boxes),
    ("returning cohort a quarter of the sessions (~75)", {"cohort_sessions": 75}, _boxes),
    ("KV load 1.6 GB/s per GPU (the old fit)", {}, lambda: _boxes(kv_load_bytes_per_s_per_gpu=1.6e9)),
    (
        "DRAM tier 512e9 bytes",
        {},
        lambda: {
            **_boxes(),
            "DRAM": replace(PRESETS["rtx-pro-6000x4+dram"], tiers=(OffloadTier("dram", "dram", 512e9),)),
        },
    ),
    ("flash box's 64 GB RAM also a cache tier", {}, _old_flash),
    ("no step overhead (the roofline alone)", {}, lambda: _boxes(step_overhead_s=0.0)),
    ("flash chunk-file reads free (no stream_read)", {}, _free_chunk_reads),
]


def assumptions(duration_s: float, seeds: list[int]) -> list[str]:
    """The eight figures (medians over ``seeds``) with one assumption changed back at a time."""
    head = [
        "| variant | plateau | DRAM/plat. | flash/plat. | DRAM >80 | flash >80 | worst resume G / D / F (s) "
        "| DRAM full (min) | DRAM p50 > 1 s (min) | served G / D / F |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = []
    for name, workload, boxes in VARIANTS:
        runs = [run_seed(duration_s, seed, workload, boxes()) for seed in seeds]
        med = [_median([get(r) for r in runs]) for _, _, _, get, _ in FIGURES]
        full = _median([(r["DRAM"]["crossover_s"] or math.nan) / 60 for r in runs])
        over = _median([_first_over(r["DRAM"], 1.0) for r in runs])
        served = " / ".join(_fmt(_median([r[b]["served_share"] for r in runs])) for b in BOXES)
        rows.append(
            f"| {name} | {_fmt(med[0])} | {_fmt(med[1])} | {_fmt(med[2])} | {_fmt(med[3])} | {_fmt(med[4])} "
            f"| {_fmt(med[5])} / {_fmt(med[6])} / {_fmt(med[7])} | {_fmt(full)} | {_fmt(over)} | {served} |"
        )
        print(rows[-1], flush=True)
    return head + rows


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else None


def _first_over(report: dict[str, Any], limit: float) -> float | None:
    """The first minute whose TTFT p50 (queue included) passes ``limit`` seconds."""
    return next((float(m["minute"]) for m in report["per_minute"] if (m["ttft_p50_s"] or 0.0) > limit), None)


def _fmt(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def spread(values: list[float | None]) -> str:
    """``median [min–max]`` of the seeds' values."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "n/a"
    if len(vals) == 1:
        return _fmt(vals[0])
    return f"{_fmt(statistics.median(vals))} [{_fmt(min(vals))}–{_fmt(max(vals))}]"


def within(values: list[float | None], published: float, tol: float = 0.30) -> bool:
    vals = [v for v in values if v is not None]
    return bool(vals) and abs(statistics.median(vals) - published) <= tol * published


def figure_values(runs: list[Reports]) -> dict[str, list[float | None]]:
    """Each of the eight figures, one value per run (seed)."""
    return {name: [get(r) for r in runs] for name, _, _, get, _ in FIGURES}


def render(values: dict[str, list[float | None]]) -> list[str]:
    """The docs table (docs/sizing.md): the eight figures, published beside the model's median [range] over
    the seeds."""
    lines = [
        "| figure | published | traceflow, median [range] over seeds 0, 1, 2 | within 30 % |",
        "|---|---:|---:|:---:|",
    ]
    for name, shown, value, _, calibrated in FIGURES:
        vals = values[name]
        mark = "calibrated" if calibrated else ("yes" if within(vals, value) else "no")
        lines.append(f"| {name} | {shown} | {spread(vals)} | {mark} |")
    return lines


def table(runs: list[Reports]) -> list[str]:
    return render(figure_values(runs))


def ttft_checks(runs: list[Reports]) -> list[str]:
    """Per seed: the worst per-minute TTFT p50 (queue included) in minutes 3–9 of every box, and the
    first minute the DRAM box's p50 passes 1 s."""
    out = []
    for seed, r in enumerate(runs):
        early = {
            box: max((m["ttft_p50_s"] or 0.0) for m in rep["per_minute"][3:10]) for box, rep in r.items()
        }
        over = [m["minute"] for m in r["DRAM"]["per_minute"] if (m["ttft_p50_s"] or 0.0) > 1.0]
        out.append(
            f"run {seed}: worst minute-3–9 TTFT p50 "
            + ", ".join(f"{b} {v:.2f} s" for b, v in early.items())
            + f"; DRAM p50 first > 1 s at minute {over[0] if over else 'never'}"
        )
    return out


#: Steps compared with aiconfigurator: (label, prefill chunks (new, before), decoders' contexts)
STEPS: list[tuple[str, list[tuple[int, int]], list[int]]] = [
    ("prefill 8,192 new tokens, no prefix", [(8_192, 0)], []),
    ("prefill 8,192 new tokens after 24,000", [(8_192, 24_000)], []),
    ("prefill 1,024 new tokens after 30,000 (a hit turn)", [(1_024, 30_000)], []),
    ("decode 1 request at 30,000 tokens", [], [30_000]),
    ("decode 8 requests at 30,000 tokens", [], [30_000] * 8),
    ("decode 32 requests at 30,000 tokens", [], [30_000] * 32),
    ("decode 64 requests at 30,000 tokens", [], [30_000] * 64),
]


def measured_steps(
    system: str = "rtx_pro_6000_server", backend: str = "trtllm", version: str = "1.3.0rc20"
) -> list[str]:
    """The preset's step times beside aiconfigurator-core's measured database (``traceflow[measured]``):
    MiniMax-M2.7 at TP 4 on ``system`` under ``backend`` (its database has MiniMax under TensorRT-LLM for
    this system; vLLM's lacks a GEMM shape it needs)."""
    try:
        from aiconfigurator_core.sdk import config
        from aiconfigurator_core.sdk.models import get_model
        from aiconfigurator_core.sdk.perf_database import get_database
        from aiconfigurator_core.sdk.rust_engine_step import (
            estimate_decode_step_latency_with_rust,
            estimate_mixed_step_latency_with_rust,
        )
    except ImportError:
        return ["aiconfigurator-core is not installed: pip install 'traceflow[measured]'"]
    db = get_database(system, backend, version)
    model = get_model(
        "MiniMaxAI/MiniMax-M2.7", config.ModelConfig(tp_size=4, moe_tp_size=4, moe_ep_size=1), backend
    )
    spec = PRESETS["rtx-pro-6000x4"]
    lines = [
        f"| step (MiniMax-M2.7 FP8, TP 4) | traceflow preset (ms) | aiconfigurator {system} {backend} "
        f"{version} (ms) |",
        "|---|---:|---:|",
    ]
    for label, chunks, decoders in STEPS:
        ours = step_seconds(spec, chunks, decoders) * 1e3
        if chunks:
            ((new, before),) = chunks
            theirs = estimate_mixed_step_latency_with_rust(
                model, db, ctx_tokens=new, gen_tokens=0, isl=new + before, osl=200, prefix=before
            )
        else:
            theirs = estimate_decode_step_latency_with_rust(
                model, db, gen_tokens=len(decoders), isl=decoders[0], osl=200
            )
        lines.append(f"| {label} | {ours:,.1f} | {theirs:,.1f} |")
    roofline = step_seconds(replace(spec, step_overhead_s=0.0), [], [30_000]) * 1e3
    single = estimate_decode_step_latency_with_rust(model, db, gen_tokens=1, isl=30_000, osl=200)
    lines.append(
        f"\nstep overhead implied by one decode step: {single:.1f} - {roofline:.1f} = "
        f"{single - roofline:.1f} ms "
        f"(the presets' step_overhead_s: {spec.step_overhead_s * 1e3:.1f} ms)"
    )
    return lines


MARK_START, MARK_END = "<!-- serving-table -->", "<!-- /serving-table -->"


def readme_table(text: str) -> str:
    """The table between the markers of a page (docs/sizing.md)."""
    return text.split(MARK_START, 1)[1].split(MARK_END, 1)[0].strip()


def write_readme(path: str, lines: list[str]) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    head, rest = text.split(MARK_START, 1)
    tail = rest.split(MARK_END, 1)[1]
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + MARK_START + "\n" + "\n".join(lines) + "\n" + MARK_END + tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", default="2h")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--json", help="write every report here")
    ap.add_argument("--from-json", help="read the reports of an earlier --json run instead of running")
    ap.add_argument(
        "--figures", help="write the eight figures per seed here (benchmarks/serving_figures.json)"
    )
    ap.add_argument(
        "--measured-gpu",
        nargs="?",
        const="tests/data/gpu_h200_probe.jsonl",
        metavar="PROBE",
        help="print the h200 preset beside the measured copy and prefill rows (JSON list) and stop",
    )
    ap.add_argument("--readme", action="store_true", help="print only the table of docs/sizing.md")
    ap.add_argument(
        "--write-readme",
        help="put the table into this page (docs/sizing.md) between its serving-table markers",
    )
    ap.add_argument(
        "--assumptions", action="store_true", help="the figures with one assumption undone at a time"
    )
    ap.add_argument(
        "--aiconfigurator", action="store_true", help="the preset's step times beside aiconfigurator-core's"
    )
    args = ap.parse_args()
    if args.measured_gpu:
        with open(args.measured_gpu) as f:
            probe = [json.loads(line) for line in f if line.strip()]
        print(json.dumps(compare_measured(probe, PRESETS["h200"]), indent=1))
        return
    duration = parse_duration(args.duration, "--duration")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.assumptions:
        print("\n".join(assumptions(duration, seeds)))
        return
    if args.aiconfigurator:
        print("\n".join(measured_steps()))
        return
    runs = []
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        seeds = [int(k) for k in saved]
        runs = list(saved.values())
    for seed in [] if args.from_json else seeds:
        t0 = time.perf_counter()
        runs.append(run_seed(duration, seed))
        if not args.readme:
            print(f"seed {seed}: {time.perf_counter() - t0:.1f} s")
    if args.figures:
        with open(args.figures, "w") as f:
            json.dump(
                {"duration": args.duration, "seeds": seeds, "figures": figure_values(runs)}, f, indent=1
            )
            f.write("\n")
    print("\n".join(table(runs)))
    if args.write_readme:
        write_readme(args.write_readme, table(runs))
    if args.readme:
        return
    print("\n| further figure | published | traceflow |\n|---|---:|---:|")
    for name, shown, get in EXTRA:
        print(f"| {name} | {shown} | {spread([get(r) for r in runs])} |")
    print("\n| resumed TTFT median incl. queueing (s) | published | traceflow |\n|---|---:|---:|")
    for box, pub in (("GPU only", "1.4"), ("DRAM", "0.6"), ("flash", "0.8")):
        print(f"| {box} | {pub} | {spread([r[box]['resumed_ttft_p50_s'] for r in runs])} |")
    print()
    print("\n".join(ttft_checks(runs)))
    if args.json:
        with open(args.json, "w") as f:
            f.write(to_json({str(s): r for s, r in zip(seeds, runs, strict=True)}))


if __name__ == "__main__":
    main()
