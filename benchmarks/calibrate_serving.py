"""Solve the two calibrated constants of ``traceflow simulate`` from named published figures.

``python benchmarks/calibrate_serving.py [--seeds 0,1,2] [--duration 2h]``

The constants (everything else in the serving model is a published specification or measurement, or a
named ASSUMPTION; the serial model's prefill rate is derived from constant 1):

1. ``traceflow.kv.serving.PREFILL_FLOPS_PER_GPU``: the effective prefill FLOP/s per GPU of the presets,
   solved so that the GPU-only preset's mean throughput after minute 40 (median over the seeds) is the
   published GPU-only plateau, about 12,000 tok/s.
2. ``traceflow.kv.synthetic.THINK_S``: the workload's mean think/tool time (the article gives none),
   solved so that the DRAM preset's best 5-minute throughput over that plateau (median over the seeds) is
   the published 2.9×.

Source of both figures: Solidigm / Dell, the KV-offload tier benchmark on a Dell PowerEdge XE7740
(4 × RTX PRO 6000 Blackwell, vLLM 0.22.0 + LMCache 0.5.0, MiniMax-M2.7 FP8), "Throughput under load".
The two interact (the offered load moves the plateau a little), so they are solved in turn, twice, each by
the secant method on a log scale, starting from the shipped values (a rerun that reproduces them stops at
once: a residual within 3 %, about the seed-to-seed noise of these medians, counts as solved). Prints
every step and the residuals at the end.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from dataclasses import replace

from traceflow.kv.scheduler import run
from traceflow.kv.serving import PREFILL_FLOPS_PER_GPU, PRESETS
from traceflow.kv.synthetic import PUBLISHED_RUN, THINK_S, agentic_coding_turns
from traceflow.units import parse_duration

PLATEAU_TOK_S = 12_000.0  # published: the GPU-only baseline levels off at about 12,000 tok/s
DRAM_OVER_PLATEAU = 2.9  # published: DRAM tier up to 2.9x the baseline (+188 %)


def figures(prefill: float, think: float, seeds: list[int], duration_s: float) -> tuple[float, float]:
    """(GPU-only plateau, DRAM best 5 min / plateau), medians over ``seeds``."""
    plateaus, ratios = [], []
    for seed in seeds:
        turns = agentic_coding_turns(duration_s, seed, **{**PUBLISHED_RUN, "think_s": think})
        gpu = run(replace(PRESETS["rtx-pro-6000x4"], prefill_flops_per_gpu=prefill), turns)
        dram = run(replace(PRESETS["rtx-pro-6000x4+dram"], prefill_flops_per_gpu=prefill), turns)
        base = gpu["throughput_after_40min_tok_s"] or math.nan
        plateaus.append(base)
        ratios.append(dram["throughput_peak_tok_s"] / base)
    return statistics.median(plateaus), statistics.median(ratios)


def secant(f: Callable[[float], float], x0: float, x1: float, steps: int = 4, tol: float = 0.03) -> float:
    """The point with the smallest |relative residual| ``f`` seen by the secant method in log x (the
    residual is a median over seeds of a noisy figure, so the last step is not always the best)."""
    seen = {x0: f(x0)}
    if abs(seen[x0]) <= tol:
        return x0
    seen[x1] = f(x1)
    a, b = math.log(x0), math.log(x1)
    fa, fb = seen[x0], seen[x1]
    for _ in range(steps):
        if abs(fb) <= tol or fb == fa:
            break
        a, b = b, b - fb * (b - a) / (fb - fa)
        b = min(max(b, a - 1.0), a + 1.0)  # at most a factor e per step
        fa, fb = fb, f(math.exp(b))
        seen[math.exp(b)] = fb
    return min(seen, key=lambda x: abs(seen[x]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--duration", default="2h")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    dur = parse_duration(args.duration, "--duration")
    prefill, think = PREFILL_FLOPS_PER_GPU, THINK_S
    print(f"start: prefill_flops_per_gpu {prefill:.4g}, think_s {think:.4g}")
    for rnd in range(args.rounds):

        def think_residual(t: float, rnd: int = rnd, prefill: float = prefill) -> float:
            p, r = figures(prefill, t, seeds, dur)
            print(f"  round {rnd}: think_s {t:7.2f} -> plateau {p:8,.0f}, DRAM/plateau {r:.3f}")
            return r / DRAM_OVER_PLATEAU - 1  # a longer think time lowers the DRAM peak

        think = secant(think_residual, think, think * 1.15)

        def prefill_residual(x: float, rnd: int = rnd, think: float = think) -> float:
            p, r = figures(x, think, seeds, dur)
            print(f"  round {rnd}: prefill {x:.4g} -> plateau {p:8,.0f}, DRAM/plateau {r:.3f}")
            return p / PLATEAU_TOK_S - 1

        prefill = secant(prefill_residual, prefill, prefill * 0.9)
    p, r = figures(prefill, think, seeds, dur)
    print(
        f"\nsolved: PREFILL_FLOPS_PER_GPU = {prefill:.3g}  (MFU {prefill / 1e15:.1%} of 1 PFLOP/s dense FP8)"
    )
    print(f"        THINK_S = {think:.3g} s")
    print("residuals (median over seeds " + ",".join(map(str, seeds)) + "):")
    print(f"  GPU-only plateau      {p:8,.0f} tok/s vs {PLATEAU_TOK_S:,.0f}: {p / PLATEAU_TOK_S - 1:+.1%}")
    print(f"  DRAM peak / plateau   {r:8.3f}       vs {DRAM_OVER_PLATEAU}: {r / DRAM_OVER_PLATEAU - 1:+.1%}")
    print(f"shipped values: PREFILL_FLOPS_PER_GPU = {PREFILL_FLOPS_PER_GPU:.3g}, THINK_S = {THINK_S:.3g}")


if __name__ == "__main__":
    main()
