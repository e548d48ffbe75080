"""Always current, side by side with ccusage: the first report on a fresh lake (the refresh imports
every transcript), a report with nothing new, and one after 1 % new lines (issue 32, docs/freshness.md).

One run times, interleaved round by round so both tools see the same background load:

* **ccusage**: ccusage 20.0.24's native binary, ``daily --json --offline --timezone UTC`` with
  ``CLAUDE_CONFIG_DIR`` pointed at the corpus (what it does every time: read every transcript);
* **first**: traceflow's report on a fresh default lake (no ``--data``, ``XDG_DATA_HOME`` a new
  folder, ``CLAUDE_CONFIG_DIR`` the corpus): the refresh imports the whole history, then it answers;
* **nothing new, stored answer**: the same report again, more than 2 s after the lake was last
  written (the result cache stores no answer over a lake changed less than 2 s before): one ``stat``
  per folder and file of the logs, then the stored answer;
* **nothing new, computed**: the first report with nothing new, less than 2 s after the first
  (the refresh finds nothing, the answer is computed), for reference;
* **1 % new lines**: about 1 % of the corpus's bytes appended as new requests (copies of a few
  sessions with new ids, :func:`bench_import_vs_ccusage.grow_corpus`), then the report: the refresh
  reads only the appended bytes. ccusage re-reads everything after the same growth. The files are
  cut back afterwards.

Each figure is the median of ``--runs`` rounds (each round on a fresh lake), with the range. The
report is ``traceflow daily --json --timezone UTC``, the command issue 32 names (``--report`` changes
it: ``'mix --by day --format json'`` was the earlier one). On this lake it answers from the usage
ledger (traceflow/importers/claude_code_usage.py), so "nothing new, computed" and "stored answer"
are both the ledger's answer (the result cache does not hold ``daily``). Every run's per-day token
totals are compared with ccusage's (they must agree). ``--phases`` adds where a run's time goes:
the interpreter, the imports, the ``stat`` of every file, the parse of the new lines, the ledger's
write, the sums and the printed JSON, each measured in one fresh process (median of ``--runs``).

    python benchmarks/gen_claude_corpus.py --out /tmp/tfbench/corpus200 --size-mb 200 --seed 7
    python benchmarks/bench_refresh.py --corpus /tmp/tfbench/corpus200 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_import_vs_ccusage import (
    DEFAULT_NPM_DIR,
    REFRESH_SHARE,
    ccusage_days,
    compare,
    find_ccusage,
    grow_corpus,
    shrink_corpus,
    traceflow_days,
)

REPO = Path(__file__).resolve().parent.parent
#: traceflow's wall time over ccusage's (issue 32): the first report within 1.4× ccusage's time,
#: later ones at most 0.2× (5× faster).
TARGETS = {"first": 1.4, "nothing_new_stored": 0.2, "one_percent_new": 0.2}


#: CPU seconds (user + system) of each timed process, by the label of its figure.
CPU: dict[str, list[float]] = {}


def timed(cmd: list[str], env: dict[str, str], out: Path, label: str | None = None) -> float:
    """Wall seconds of ``cmd`` with stdout to ``out`` (its CPU seconds go to :data:`CPU` under
    ``label``); a failure stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with out.open("wb") as fh:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.PIPE, check=False)
        wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    if label is not None:
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        CPU.setdefault(label, []).append(cpu)
    return wall


def report_days(path: Path) -> dict[str, dict[str, int]]:
    """Per-day token totals of traceflow's report: ccusage's document (``daily --json``) or mix's rows."""
    doc = json.loads(path.read_text())
    return ccusage_days(path) if isinstance(doc, dict) and "daily" in doc else traceflow_days(path)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


#: One run of ``daily --json`` on the usage ledger, phase by phase (the steps of
#: traceflow.cli.usage_fast.answer), in a fresh process: prints the seconds of each phase as JSON.
PHASES_SCRIPT = r"""
import time
marks = [("start", time.perf_counter(), time.process_time())]
def mark(name):
    marks.append((name, time.perf_counter(), time.process_time()))
import json, os, sys
from traceflow import importers
from traceflow.analysis import usage
from traceflow.importers.claude_code_usage import Ledger, covered
from traceflow.output import to_json
from traceflow.prices import PriceModel
from traceflow.store import local_logs, zones
roots = [str(r.resolve()) for r in importers.get("claude-code").default_paths()]
for name in ("codex", "gemini"):
    importers.get(name).default_paths()
mark("imports")
state = os.path.join(os.environ["XDG_DATA_HOME"], "traceflow", "v1", "_state")
covered(os.path.dirname(os.path.dirname(state)), state)
ledger = Ledger.load(state, roots)
mark("ledger load")
ledger.dirs = ledger.dirs or {}
paths = list(ledger.files) or None
if paths is not None:  # the stat of every folder and file, as update() does first
    for d in ledger.dirs:
        os.stat(d)
    for p in paths:
        os.stat(p)
mark("stat")
nbytes = ledger.update()
mark("read + parse")
ledger.save()
mark("ledger write")
pm = PriceModel.load(None)
rows = usage.ordered("daily", usage.periods_of_requests(ledger.requests.values(), "daily", "UTC", pm), None)
mark("sums")
sys.stdout.write(to_json(usage.document("daily", rows, "UTC", prices=pm)) + "\n")
sys.stdout.flush()
mark("print")
out = {m[0]: [m[1] - p[1], m[2] - p[2]] for p, m in zip(marks, marks[1:])}
out["bytes"] = nbytes
os.write(2, json.dumps(out).encode())
"""


def phases(python: str, env: dict[str, str], work: Path, corpus: Path, runs: int) -> dict[str, Any]:
    """Where the ledger's runs spend their time (see :data:`PHASES_SCRIPT`): medians of ``runs``
    rounds of a first run, a run with nothing new and one after +1 % lines, each phase's wall and
    CPU seconds, and the process's own wall time (the rest is the interpreter's start and exit)."""
    found: dict[str, dict[str, list[float]]] = {}

    def once(label: str, xdg: Path) -> None:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [python, "-c", PHASES_SCRIPT],
            env={**env, "XDG_DATA_HOME": str(xdg)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=True,
        )
        wall = time.perf_counter() - t0
        got = json.loads(proc.stderr.decode().strip().splitlines()[-1])
        slot = found.setdefault(label, {})
        slot.setdefault("process wall", []).append(wall)
        for name, value in got.items():
            if name == "bytes":
                slot.setdefault("bytes read", []).append(float(value))
            else:
                slot.setdefault(f"{name} wall", []).append(value[0])
                slot.setdefault(f"{name} cpu", []).append(value[1])

    for i in range(runs):
        xdg = work / f"phases-{i}"
        t0 = time.perf_counter()
        subprocess.run([python, "-c", "pass"], env=env, check=True)
        found.setdefault("interpreter", {}).setdefault("python -c pass wall", []).append(
            time.perf_counter() - t0
        )
        once("first", xdg)
        once("nothing new", xdg)
        grown = grow_corpus(corpus, REFRESH_SHARE)
        try:
            once("1 % new lines", xdg)
        finally:
            shrink_corpus(grown)
    return {k: {n: statistics.median(v) for n, v in d.items()} for k, d in found.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, type=Path, help="corpus root (holds projects/)")
    ap.add_argument("--runs", type=int, default=5, help="rounds (each figure is their median)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/tfbench/refresh"), help="scratch folder")
    ap.add_argument("--npm-dir", type=Path, default=DEFAULT_NPM_DIR, help="where ccusage@20.0.24 is")
    ap.add_argument("--ccusage", help="ccusage command (default: the native binary under --npm-dir)")
    ap.add_argument(
        "--report",
        default="daily --json --timezone UTC",
        help="the traceflow report timed (the earlier one: 'mix --by day --format json')",
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs `-m traceflow`")
    ap.add_argument("--out", type=Path, default=Path("/tmp/tfbench/bench_refresh.json"))
    ap.add_argument("--phases", action="store_true", help="also time the phases of the ledger's runs")
    args = ap.parse_args(argv)

    corpus = args.corpus.resolve()
    if not (corpus / "projects").is_dir():
        raise SystemExit(f"{corpus}/projects not found: generate it with benchmarks/gen_claude_corpus.py")
    work = args.work.resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    home = work / "home"
    home.mkdir()
    for f in corpus.rglob("*.jsonl"):  # a warm page cache for every tool
        f.read_bytes()

    # A user's interpreter keeps compiled modules (pip writes them; PYTHONDONTWRITEBYTECODE, set in
    # some sandboxes, would compile every module of every run again) and buffers its output.
    drop = ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRACEFLOW_") and k not in drop}
    base.update(TZ="UTC", HOME=str(home), NO_COLOR="1", CLAUDE_CONFIG_DIR=str(corpus))
    base.update(CODEX_HOME=str(home / "no-codex"), GEMINI_DIR=str(home / "no-gemini"))
    base["PYTHONPATH"] = str(REPO) + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    cc = [*find_ccusage(args.npm_dir, args.ccusage), "daily", "--json", "--offline", "--timezone", "UTC"]
    subprocess.run([args.python, "-m", "compileall", "-q", str(REPO / "traceflow")], env=base, check=False)
    tf = [args.python, "-m", "traceflow", *args.report.split()]

    times: dict[str, list[float]] = {
        k: []
        for k in (
            "ccusage",
            "first",
            "nothing_new_computed",
            "nothing_new_stored",
            "ccusage_after_growth",
            "one_percent_new",
        )
    }
    checks: list[dict[str, Any]] = []
    grown_bytes = 0
    load = [os.getloadavg()[0]]
    for i in range(args.runs):
        env = {**base, "XDG_DATA_HOME": str(work / f"xdg-{i}")}  # a fresh default lake each round
        out = work / f"r{i}"
        out.mkdir()
        times["ccusage"].append(timed(cc, env, out / "ccusage.json", "ccusage"))
        times["first"].append(timed(tf, env, out / "first.json", "first"))
        written = time.time()
        times["nothing_new_computed"].append(timed(tf, env, out / "computed.json", "nothing_new_computed"))
        time.sleep(max(0.0, written + 2.2 - time.time()))  # past the result cache's racy window
        timed(tf, env, out / "store.json")  # computes and stores the answer
        times["nothing_new_stored"].append(timed(tf, env, out / "stored.json", "nothing_new_stored"))
        grown = grow_corpus(corpus, REFRESH_SHARE)
        try:
            grown_bytes = sum(f.stat().st_size - size for f, size in grown)
            times["ccusage_after_growth"].append(
                timed(cc, env, out / "ccusage_grown.json", "ccusage_after_growth")
            )
            times["one_percent_new"].append(timed(tf, env, out / "grown.json", "one_percent_new"))
        finally:
            shrink_corpus(grown)
        cc_days, cc_grown = ccusage_days(out / "ccusage.json"), ccusage_days(out / "ccusage_grown.json")
        checks.append(
            {
                name: compare(
                    cc_days if name != "grown" else cc_grown,
                    report_days(out / f"{name}.json"),
                    "ccusage",
                    "traceflow",
                )["agree"]
                for name in ("first", "computed", "stored", "grown")
            }
        )
        load.append(os.getloadavg()[0])
        print(f"round {i}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items()), file=sys.stderr)

    figures = {k: spread(v) for k, v in times.items()}
    cpu = {k: spread(v) for k, v in CPU.items()}
    cc_med = figures["ccusage"]["median"]
    grown_med = figures["ccusage_after_growth"]["median"]
    ratios = {
        "first": figures["first"]["median"] / cc_med,
        "nothing_new_computed": figures["nothing_new_computed"]["median"] / cc_med,
        "nothing_new_stored": figures["nothing_new_stored"]["median"] / cc_med,
        "one_percent_new": figures["one_percent_new"]["median"] / grown_med,
    }
    result = {
        "corpus": str(corpus),
        "corpus_bytes": sum(f.stat().st_size for f in corpus.rglob("*.jsonl")),
        "appended_bytes": grown_bytes,
        "report": args.report,
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "loadavg_1m": load,
        "seconds": figures,
        "cpu_seconds": cpu,
        "traceflow_over_ccusage": ratios,
        "totals_agree": checks,
    }
    if args.phases:
        result["phases"] = phases(args.python, base, work, corpus, args.runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    rows = [
        ("ccusage 20.0.24", "`daily --json --offline`", "ccusage", None),
        ("traceflow", f"first `{args.report}`, fresh lake (refresh imports all)", "first", "first"),
        (
            "traceflow",
            "nothing new, answer computed (< 2 s after a write)",
            "nothing_new_computed",
            "nothing_new_computed",
        ),
        ("traceflow", "nothing new, stored answer", "nothing_new_stored", "nothing_new_stored"),
        ("ccusage 20.0.24", "`daily` after +1 % lines", "ccusage_after_growth", None),
        ("traceflow", "after +1 % lines (refresh reads only them)", "one_percent_new", "one_percent_new"),
    ]
    print("| tool | run | median s | range s | CPU s | × ccusage's time | target |")
    print("|---|---|---:|---:|---:|---:|---|")
    for tool, what, key, ratio in rows:
        f = figures[key]
        r = f"{ratios[ratio]:.2f}" if ratio else "—"
        goal = TARGETS.get(key)
        verdict = (
            "—"
            if goal is None or ratio is None
            else f"≤ {goal} {'met' if ratios[ratio] <= goal else 'missed'}"
        )
        print(
            f"| {tool} | {what} | {f['median']:.3f} | {f['min']:.3f}–{f['max']:.3f} | "
            f"{cpu[key]['median']:.3f} | {r} | {verdict} |"
        )
    for label, figures_ in result.get("phases", {}).items():
        print(f"phases, {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures_.items()))
    print(
        f"\ntotals agree with ccusage in every run: {all(all(c.values()) for c in checks)}; "
        f"load average {min(load):.1f}–{max(load):.1f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
