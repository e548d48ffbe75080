"""Solve the two calibrated constants of ``traceflow simulate`` from named published figures.

``python benchmarks/calibrate_serving.py [--start neutral|shipped|P,T] [--seeds 0,1,2] [--duration 2h]``
``[--rounds N] [--json]``

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

Both figures move with both constants (near the solution the DRAM ratio moves more with the prefill
rate than with the think time), so they are solved together, by Newton's method on the logs with a
Jacobian measured each round, until both residuals are within :data:`AIM` (the tolerance) at
one point or the ``--rounds`` run out; solved when both are within :data:`TOLERANCE`. The start is
``--start neutral`` (:data:`NEUTRAL`: round figures, not the shipped values), ``shipped``, or
``P,T`` (prefill FLOP/s per GPU, think seconds: ``--start 2e14,60``). With ``--json`` the last line is one
JSON object: ``prefill_flops_per_gpu``, ``think_s``, ``residuals`` (``plateau``, ``dram_ratio``),
``solved``, ``tolerance``, ``rounds``, ``start``, ``workload_inputs`` (each labelled published, assumed or
fitted). It prints
every workload input with what it is (:data:`WORKLOAD_INPUTS`: published, assumed or fitted), every
step, and the residuals at the end; it says "solved" only when both are within the tolerance, and
otherwise says it did not solve and exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from traceflow.kv.scheduler import run
from traceflow.kv.serving import PREFILL_FLOPS_PER_GPU, PRESETS
from traceflow.kv.synthetic import PUBLISHED_RUN, THINK_S, agentic_coding_turns
from traceflow.units import parse_duration

PLATEAU_TOK_S = 12_000.0  # published: the GPU-only baseline levels off at about 12,000 tok/s
DRAM_OVER_PLATEAU = 2.9  # published: DRAM tier up to 2.9x the baseline (+188 %)
#: The largest |relative residual| that counts as solved (1 %: issue 35).
TOLERANCE = 0.01
#: What the solver aims at (it goes on while a residual is larger, and the rounds last): the tolerance
#: itself. The figures are medians over three seeds of discrete runs, noisy at about 1 % (issue 35's run:
#: 2.833 x at 1.25e14 / 118 s, 2.872 x at 1.257e14 / 117.8 s); stepping on below the noise made Newton's
#: steps wander off (to 1.33e14 / 69.5 s), so it stops at the first point within the tolerance.
AIM = TOLERANCE
#: The neutral start: round figures, neither the shipped values nor derived from them (10 % of the
#: 1 PFLOP/s dense FP8 peak; a minute of think time).
NEUTRAL = (1.0e14, 60.0)
#: Every input of the workload the calibration runs (``agentic_coding_turns`` with ``PUBLISHED_RUN``),
#: what it is: "published" (the article), "assumed" (an ASSUMPTION of traceflow.kv.synthetic) or
#: "fitted" (solved here), and why.
WORKLOAD_INPUTS: dict[str, tuple[str, str]] = {
    "sessions_per_min": ("published", "sessions arrive as a Poisson process at 2.5 a minute"),
    "cap_tokens": ("published", "context grows toward a 64k-token cap"),
    "at_cap": ("assumed", "a session ends at the cap (the article says only that contexts grow toward it)"),
    "cohort_sessions": ("published", "11 sessions of the returning cohort resume in the window"),
    "pause_s": ("published", "the cohort pauses about 15 minutes (the 14-16 min spread: assumed)"),
    "pause_after_turns": ("published", "after about 20 turns (the 18-22 spread: assumed)"),
    "cohort_share": ("assumed", "25 % of sessions; unused when cohort_sessions is given"),
    "think_s": ("fitted", "mean think/tool time, solved here from the DRAM peak (the article gives none)"),
    "turn_tokens": (
        "published",
        "tool results 250-600 tokens or file reads 1,500-3,500, answers 40-200 or code blocks 400-900, "
        "±100 jitter (the 15 % shares of the larger kinds: assumed)",
    ),
    "initial_tokens": ("assumed", "2,000-4,000 tokens of initial context"),
    "system_tokens": ("assumed", "no prefix shared between sessions"),
    "decode_tok_s": ("assumed", "an answer streams at 50 tok/s before the think time starts"),
    "block_size": ("assumed", "512-token KV blocks (traceflow's default block)"),
    "compacted_tokens": ("assumed", "unused: sessions end at the cap"),
}


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


def residuals(plateau: float, ratio: float) -> tuple[float, float]:
    """The relative residuals of (plateau, DRAM ratio) against the published figures."""
    return plateau / PLATEAU_TOK_S - 1, ratio / DRAM_OVER_PLATEAU - 1


@dataclass(frozen=True)
class Solution:
    """Where :func:`solve` stopped: the constants, the figures there and whether both residuals are
    within the tolerance."""

    prefill: float
    think: float
    plateau: float
    ratio: float
    rounds: int
    tol: float

    @property
    def residuals(self) -> tuple[float, float]:
        return residuals(self.plateau, self.ratio)

    @property
    def solved(self) -> bool:
        return all(abs(r) <= self.tol for r in self.residuals)


def solve(
    measure: Callable[[float, float], tuple[float, float]],
    prefill: float,
    think: float,
    *,
    rounds: int = 8,
    tol: float = TOLERANCE,
    aim: float = AIM,
    log: Callable[[str], None] = print,
) -> Solution:
    """Solve (prefill, think) from a start by Newton's method on both at once, in logs: each round
    measures the Jacobian by steps of 10 % in each constant and steps to where the log residuals would
    be zero (at most a factor e per constant), until both residuals are within ``aim`` or after
    ``rounds`` rounds; the point with the smallest largest residual seen, solved when that is within
    ``tol``. ``measure(prefill, think)``
    gives (plateau, DRAM ratio).

    Both at once, because the two figures move with both constants (near the solution the DRAM ratio
    moves more with the prefill rate than with the think time): solving them in turn converged slowly
    and stopped wherever the rounds ran out."""
    seen: dict[tuple[float, float], tuple[float, float]] = {}

    def at(p: float, t: float) -> tuple[float, float]:
        if (p, t) not in seen:
            seen[(p, t)] = measure(p, t)
            plateau, ratio = seen[(p, t)]
            log(f"  prefill {p:.4g}, think_s {t:7.2f} -> plateau {plateau:8,.0f}, DRAM/plateau {ratio:.3f}")
        return seen[(p, t)]

    def logres(p: float, t: float) -> tuple[float, float]:
        plateau, ratio = at(p, t)
        return math.log(plateau / PLATEAU_TOK_S), math.log(ratio / DRAM_OVER_PLATEAU)

    def worst(key: tuple[float, float]) -> float:
        return max(abs(r) for r in residuals(*seen[key]))

    step = math.log(1.1)
    done = 0
    for rnd in range(rounds):
        f0 = logres(prefill, think)
        if worst((prefill, think)) <= aim:
            break
        done = rnd + 1
        log(f"round {rnd}: the Jacobian at prefill {prefill:.4g}, think_s {think:.2f}")
        fp = logres(prefill * 1.1, think)
        ft = logres(prefill, think * 1.1)
        j = [
            [(fp[0] - f0[0]) / step, (ft[0] - f0[0]) / step],
            [(fp[1] - f0[1]) / step, (ft[1] - f0[1]) / step],
        ]
        det = j[0][0] * j[1][1] - j[0][1] * j[1][0]
        if det == 0:
            break
        dp = (-f0[0] * j[1][1] + f0[1] * j[0][1]) / det
        dt = (-f0[1] * j[0][0] + f0[0] * j[1][0]) / det
        prefill *= math.exp(min(max(dp, -1.0), 1.0))
        think *= math.exp(min(max(dt, -1.0), 1.0))
    at(prefill, think)
    best = min(seen, key=worst)
    return Solution(best[0], best[1], *seen[best], done, tol)


def report(sol: Solution, seeds: list[int]) -> list[str]:
    """The closing lines: "solved" only within the tolerance, else "NOT solved"; the residuals."""
    rp, rr = sol.residuals
    verdict = "solved" if sol.solved else "NOT solved"
    return [
        f"\n{verdict} (both residuals within ±{sol.tol:.0%}: {'yes' if sol.solved else 'no'}; "
        f"{sol.rounds} round(s)):",
        f"  PREFILL_FLOPS_PER_GPU = {sol.prefill:.4g}  (MFU {sol.prefill / 1e15:.1%} of 1 PFLOP/s dense FP8)",
        f"  THINK_S = {sol.think:.4g} s",
        "residuals (median over seeds " + ",".join(map(str, seeds)) + "):",
        f"  GPU-only plateau      {sol.plateau:8,.0f} tok/s vs {PLATEAU_TOK_S:,.0f}: {rp:+.1%}",
        f"  DRAM peak / plateau   {sol.ratio:8.3f}       vs {DRAM_OVER_PLATEAU}: {rr:+.1%}",
        f"shipped values: PREFILL_FLOPS_PER_GPU = {PREFILL_FLOPS_PER_GPU:.4g}, THINK_S = {THINK_S:.4g}",
    ]


def parse_start(text: str) -> tuple[float, float]:
    """``neutral``, ``shipped`` or ``P,T`` (prefill FLOP/s per GPU, think seconds), both positive."""
    if text == "neutral":
        return NEUTRAL
    if text == "shipped":
        return PREFILL_FLOPS_PER_GPU, THINK_S
    try:
        p, t = (float(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--start {text!r}: use neutral, shipped or P,T such as 2e14,60") from None
    if not (p > 0 and t > 0 and math.isfinite(p) and math.isfinite(t)):
        raise SystemExit(f"--start {text!r}: both numbers must be positive")
    return p, t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--start", default="neutral", help="neutral, shipped, or P,T (e.g. 2e14,60)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line: the solution")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--duration", default="2h")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    dur = parse_duration(args.duration, "--duration")
    print("workload inputs (agentic_coding_turns with PUBLISHED_RUN):")
    for name, (kind, why) in WORKLOAD_INPUTS.items():
        print(f"  {name:18} {kind:9} {why}")
    prefill, think = parse_start(args.start)
    print(f"start ({args.start}): prefill_flops_per_gpu {prefill:.4g}, think_s {think:.4g}")
    sol = solve(lambda p, t: figures(p, t, seeds, dur), prefill, think, rounds=args.rounds)
    print("\n".join(report(sol, seeds)))
    if args.json:
        rp, rr = sol.residuals
        out = {
            "prefill_flops_per_gpu": sol.prefill,
            "think_s": sol.think,
            "residuals": {"plateau": rp, "dram_ratio": rr},
            "solved": sol.solved,
            "tolerance": sol.tol,
            "rounds": sol.rounds,
            "start": {"prefill_flops_per_gpu": prefill, "think_s": think},
            "shipped": {"prefill_flops_per_gpu": PREFILL_FLOPS_PER_GPU, "think_s": THINK_S},
            "workload_inputs": {k: kind for k, (kind, _) in WORKLOAD_INPUTS.items()},
        }
        print(json.dumps(out))
    if not sol.solved:
        sys.exit(1)


if __name__ == "__main__":
    main()
