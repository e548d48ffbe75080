"""Benchmark the analyses on a lake that mixes time bases (issue 14): peak RSS and wall time of
`report --html`, `load` and `working-set`, each a fresh CLI process under ``/usr/bin/time -v``.

    python benchmarks/bench_mixed_lake.py [--work /tmp/tfbench/mixed] [--json out.json]

The lake holds the repository's test data (``tests/data``, unpacked as the tests do): the Claude Code
transcripts and OTLP captures (``claude-code-otlp``; real telemetry, 2026), the hand-written agent
examples (the packaged ``traceflow/examples`` and ``agent-examples``), the 36 kv-cache-tester sessions
(``weka_cc_traces``; relative, every session from t = 0) and the Mooncake conversation trace
(relative, no sessions). `load` and `working-set` refuse the whole lake (it mixes
time bases), so they are run per time base with ``--source``; the report runs over the whole lake
(its time sections keep to the real telemetry). Targets: `report --html` under 2 GB and 2 minutes;
`load`, `working-set` under 2 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RELATIVE = ["--source", "mooncake", "--source", "kvcache-tester"]


def _traceflow(*args: str) -> list[str]:
    return [sys.executable, "-m", "traceflow", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def build(lake: Path) -> dict[str, int]:
    """Import the test data into ``lake``; the requests per source."""
    sys.path.insert(0, str(REPO))
    from tests.conftest import EXAMPLES, TESTDATA

    transcripts = sorted(str(p) for p in (TESTDATA / "claude-code-otlp").rglob("transcripts/*.jsonl"))
    steps = [
        ("claude-code", *transcripts, str(EXAMPLES / "claude-transcript.jsonl")),
        ("otlp-json", str(TESTDATA / "claude-code-otlp"), str(EXAMPLES), str(TESTDATA / "agent-examples")),
        ("kvcache-tester", str(TESTDATA / "weka_cc_traces")),
        ("mooncake", str(TESTDATA / "mooncake_conversation_trace.jsonl")),
    ]
    for source, *paths in steps:
        subprocess.run(
            _traceflow("import", source, *paths, "--data", str(lake)),
            check=True,
            env=_env(),
            capture_output=True,
        )
    out = subprocess.run(
        _traceflow("mix", "--by", "source", "--format", "json", "--data", str(lake)),
        check=True,
        env=_env(),
        capture_output=True,
        text=True,
    ).stdout
    return {r["source"]: r["requests"] for r in json.loads(out)}


def measure(name: str, args: list[str]) -> dict[str, Any]:
    """Run ``traceflow ARGS`` under /usr/bin/time -v: exit status, wall seconds, peak RSS (MB)."""
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *_traceflow(*args)], env=_env(), capture_output=True, text=True
    )
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    wall = re.search(
        r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", proc.stderr
    )
    seconds = None
    if wall:
        seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    first_error = next((ln for ln in proc.stderr.splitlines() if "error" in ln.lower()), "")
    return {
        "command": name,
        "exit": proc.returncode,
        "wall_s": seconds,
        "peak_rss_mb": int(rss.group(1)) / 1024 if rss else None,
        "error": first_error[:200],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/tfbench/mixed"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    lake = args.work / "lake"
    sources = build(lake)
    data = ["--data", str(lake)]
    runs = [
        measure("report --html (whole lake)", ["report", "--html", str(args.work / "report.html"), *data]),
        measure("load (whole lake: refused)", ["load", *data]),
        measure(
            "load --source <real telemetry>",
            ["load", "--source", "otlp-json", "--source", "claude-code-jsonl", *data],
        ),
        measure("load --source <relative traces>", ["load", *RELATIVE, *data]),
        measure("working-set (whole lake: refused)", ["working-set", *data]),
        measure(
            "working-set --source <real telemetry>",
            ["working-set", "--source", "otlp-json", "--source", "claude-code-jsonl", *data],
        ),
        measure("working-set --source <relative traces>", ["working-set", *RELATIVE, *data]),
        measure(
            "export (whole lake: refused)", ["export", "mooncake", "-o", str(args.work / "t.jsonl"), *data]
        ),
    ]
    print(f"lake: {', '.join(f'{k} {v:,}' for k, v in sources.items())} requests\n")
    print("| command | exit | wall (s) | peak RSS (MB) |\n|---|---|---|---|")
    for r in runs:
        print(f"| `{r['command']}` | {r['exit']} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"sources": sources, "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
