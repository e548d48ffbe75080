"""The published vLLM + LMCache tier benchmark beside traceflow's serving model (README, worked example).

Runs the agentic-coding workload (2 h by default) on the three presets and prints the side-by-side
table. ``python benchmarks/bench_serving.py [--duration 2h] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from traceflow.kv.scheduler import run
from traceflow.kv.serving import PRESETS
from traceflow.kv.synthetic import agentic_coding_turns
from traceflow.output import to_json
from traceflow.units import parse_duration

BOXES = {
    "GPU only": "rtx-pro-6000x4",
    "+ DRAM 512 GB": "rtx-pro-6000x4+dram",
    "+ flash": "rtx-pro-6000x4+flash",
}

#: (figure, published, how to read it from the reports)
PUBLISHED: list[tuple[str, str, Any]] = [
    ("GPU-only plateau tok/s [calibrated]", "12,000", lambda r: r["GPU only"]["throughput_final_tok_s"]),
    ("DRAM peak / baseline [calibrated]", "2.9x", lambda r: _ratio(r, "+ DRAM 512 GB")),
    ("flash peak / baseline", "2.2x", lambda r: _ratio(r, "+ flash")),
    ("DRAM tier full at (min)", "~45", lambda r: (r["+ DRAM 512 GB"]["crossover_s"] or 0) / 60),
    ("flash after crossover tok/s", "~30,000", lambda r: r["+ flash"]["throughput_final_tok_s"]),
    ("DRAM after crossover tok/s", "~17,000", lambda r: r["+ DRAM 512 GB"]["throughput_final_tok_s"]),
    ("DRAM output peak tok/s", "~300", lambda r: r["+ DRAM 512 GB"]["output_peak_tok_s"]),
    ("flash output held tok/s", "~250", lambda r: r["+ flash"]["output_final_tok_s"]),
    ("resume TTFT median DRAM s", "0.6", lambda r: r["+ DRAM 512 GB"]["resumed_service_p50_s"]),
    ("resume TTFT median flash s", "0.8", lambda r: r["+ flash"]["resumed_service_p50_s"]),
    ("resume TTFT median GPU only s", "1.4", lambda r: r["GPU only"]["resumed_service_p50_s"]),
    ("resume TTFT worst DRAM s", "0.8", lambda r: r["+ DRAM 512 GB"]["resumed_service_max_s"]),
    ("resume TTFT worst flash s", "3.2", lambda r: r["+ flash"]["resumed_service_max_s"]),
    ("resume TTFT worst GPU only s", "13.9", lambda r: r["GPU only"]["resumed_service_max_s"]),
    ("flash peak write GB/s", "4.1", lambda r: r["+ flash"]["tiers"][1]["peak_write_bytes_per_s"] / 1e9),
    ("flash peak read GB/s", "1.1", lambda r: r["+ flash"]["tiers"][1]["peak_read_bytes_per_s"] / 1e9),
    ("flash mean write GB/s", "1.9", lambda r: r["+ flash"]["tiers"][1]["mean_write_bytes_per_s"] / 1e9),
]


def _ratio(reports: dict[str, Any], box: str) -> float:
    return float(reports[box]["throughput_peak_tok_s"] / reports["GPU only"]["throughput_final_tok_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", default="2h")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the three reports here")
    args = ap.parse_args()
    turns = agentic_coding_turns(parse_duration(args.duration, "--duration"), args.seed)
    reports: dict[str, Any] = {}
    for label, preset in BOXES.items():
        t0 = time.perf_counter()
        reports[label] = run(PRESETS[preset], turns)
        print(f"{label}: {time.perf_counter() - t0:.1f} s")
    print("\n| figure | published | traceflow |\n|---|---:|---:|")
    for name, published, get in PUBLISHED:
        value = get(reports)
        shown = "n/a" if value is None else (f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}")
        print(f"| {name} | {published} | {shown} |")
    if args.json:
        with open(args.json, "w") as f:
            f.write(to_json(reports))


if __name__ == "__main__":
    main()
