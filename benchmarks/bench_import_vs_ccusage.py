#!/usr/bin/env python3
"""Side-by-side benchmark: ``traceflow import claude-code`` + ``traceflow mix --by day`` vs ``ccusage daily``.

On one Claude Code transcript corpus (``benchmarks/gen_claude_corpus.py``), in one run:

a. ``ccusage daily --json --offline --timezone UTC`` (``CLAUDE_CONFIG_DIR=CORPUS``, ``TZ=UTC``, an empty
   ``HOME`` so that no other agent's logs are scanned), ``--runs`` times, median;
b. traceflow first import + report into a fresh lake: ``traceflow import claude-code CORPUS/projects --data D
   --format json`` then ``traceflow mix --by day --format json --data D`` (each timed, plus the sum);
c. traceflow repeated report: ``traceflow mix --by day --format json --data D`` on the populated lake,
   ``--runs`` times, median. After the first of them the result cache (``traceflow.store.result_cache``) has
   the answer, so the median is a cache hit: a fresh process that checks the lake's file list and
   prints the stored bytes without importing DuckDB;
c2. the same with the result cache off (``TRACEFLOW_CACHE=0``): every run starts DuckDB and queries;
d. a daily refresh: about 1 % new lines are appended to the corpus's transcripts (copies of whole
   sessions' lines with new request and message ids, on the same days), then traceflow imports what
   is new and reports (``import`` + ``mix --by day``) while ccusage re-scans everything (``--runs``
   times, median); both per-day reports must agree. The corpus files are cut back to their sizes
   afterwards.

b's report is always a cache miss: the lake is new (no cache entries) and the import just changed it.
Its stdout is compared byte for byte with every repeated report's.

b runs first; then a, c and c2 alternate (a, c, c2, a, c, c2, ...) so that all see the same background
load on a shared machine. ccusage is its native binary, the executable of the npm package
``@ccusage/ccusage-linux-x64`` (what ``npx ccusage`` ends up running, without Node's start-up); the
benchmark installs it with ``npm`` into ``--npm-dir`` (a cache folder outside the repository) when it is
not there yet. ``--legacy-npm-dir`` adds one run of an older TypeScript ccusage (e.g. 17.0.2) for
reference.

Every measurement is a fresh process. ``traceflow`` is the console script beside this interpreter
(not a pyenv shim, a bash script that re-executes through ``pyenv exec`` and adds ~0.1 s to every
run), and the traceflow package is byte-compiled first (``compileall``) as ``pip install`` does,
since an environment with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise recompile it on each start.
Wall time is ``time.perf_counter`` around the process; CPU time
(user + sys, children included) and peak RSS (the largest single process of the tree) come from
``/usr/bin/time -v``. The peak of the summed PSS (proportional set size: pages shared after fork() are
split, not counted twice) of the whole process tree, sampled from /proc every 20 ms, is reported too: it
is what matters when a tool forks worker processes. Without ``/usr/bin/time`` the max RSS comes from
``getrusage(RUSAGE_CHILDREN)`` in a fresh helper interpreter. The corpus is read once before the first
measurement so that every tool sees a warm page cache.

Then it checks that per-day totals agree: ccusage's inputTokens / cacheReadTokens / cacheCreationTokens /
outputTokens vs traceflow's cold_input_tokens / cache_read_tokens / cache_write_tokens / output_tokens,
and both vs the generator's ``expected.json``. Prints a markdown table and writes it with the raw numbers
to ``--out`` (JSON).

Usage::

    python benchmarks/bench_import_vs_ccusage.py --corpus /tmp/tfbench/corpus --runs 3 \\
        --out /tmp/tfbench/bench_results.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CCUSAGE_VERSION = "20.0.24"
CCUSAGE_PACKAGE = "@ccusage/ccusage-linux-x64"
DEFAULT_NPM_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "traceflow-bench" / "npm"
#: Share of the corpus's bytes appended as new lines for the daily refresh (d).
REFRESH_SHARE = 0.01
DEFAULT_WORK = Path("/tmp/tfbench/work")
FIELDS = [  # (label, ccusage key, traceflow key, expected.json key)
    ("cold input", "inputTokens", "cold_input_tokens", "cold_input_tokens"),
    ("cache read", "cacheReadTokens", "cache_read_tokens", "cache_read_tokens"),
    ("cache write", "cacheCreationTokens", "cache_write_tokens", "cache_write_tokens"),
    ("output", "outputTokens", "output_tokens", "output_tokens"),
]
#: Speed targets against the ccusage binary (ccusage's wall time / traceflow's): first import + report at
#: least half its speed, a daily refresh faster than its full re-scan, a repeated report 30× faster.
TARGETS = {"first_import_report": 0.5, "daily_refresh": 1.0, "repeated_report": 30.0}
TIME_BIN = "/usr/bin/time"


# --------------------------------------------------------------------------------------------------
# Measuring one process
# --------------------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def _rss_kb(pid: int) -> int:
    """Proportional set size (shared pages split between their users) when the kernel has it, else RSS."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak of the summed PSS of a process tree (root excluded when it is only a wrapper)."""

    def __init__(self, root: int, include_root: bool, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.root, self.include_root, self.interval = root, include_root, interval
        self.peak_kb = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pids, todo = [], [self.root]
            while todo:
                p = todo.pop()
                pids.append(p)
                todo += _children(p)
            total = sum(_rss_kb(p) for p in pids if self.include_root or p != self.root)
            self.peak_kb = max(self.peak_kb, total)
            self.stop.wait(self.interval)


_HELPER = r"""
import json, resource, subprocess, sys, time
cmd = json.loads(sys.argv[1])
t0 = time.perf_counter()
with open(sys.argv[2], "wb") as out, open(sys.argv[3], "wb") as err:
    rc = subprocess.call(cmd, stdout=out, stderr=err)
wall = time.perf_counter() - t0
maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": rc, "wall": wall, "maxrss_kb": maxrss}))
"""


def measure(cmd: list[str], env: dict[str, str], workdir: Path, label: str, timeout: float) -> dict[str, Any]:
    """Run ``cmd`` once in a fresh process; wall seconds, peak RSS, exit code, stdout/stderr files."""
    workdir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    out_p, err_p, time_p = workdir / f"{safe}.stdout", workdir / f"{safe}.stderr", workdir / f"{safe}.time"
    use_time = os.access(TIME_BIN, os.X_OK)
    if use_time:
        full = [TIME_BIN, "-v", "-o", str(time_p), *cmd]
    else:
        full = [sys.executable, "-c", _HELPER, json.dumps(cmd), str(out_p), str(err_p)]
    t0 = time.perf_counter()
    with open(out_p, "wb") as out, open(err_p, "wb") as err:
        proc = subprocess.Popen(full, env=env, stdout=out if use_time else subprocess.PIPE, stderr=err)
        sampler = TreeSampler(proc.pid, include_root=False)
        sampler.start()
        timed_out = False
        try:
            helper_out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            helper_out, _ = proc.communicate()
            timed_out = True
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
    res: dict[str, Any] = {
        "label": label,
        "cmd": cmd,
        "wall_s": wall,
        "tree_peak_rss_mb": sampler.peak_kb / 1024,
    }
    if use_time:
        text = time_p.read_text(errors="replace") if time_p.exists() else ""
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        res["peak_rss_mb"] = int(m.group(1)) / 1024 if m else None
        m = re.search(r"Exit status: (\d+)", text)
        res["rc"] = int(m.group(1)) if m else proc.returncode
        m = re.search(r"User time \(seconds\): ([\d.]+)", text)
        m2 = re.search(r"System time \(seconds\): ([\d.]+)", text)
        res["cpu_s"] = float(m.group(1)) + float(m2.group(1)) if m and m2 else None
        res["rss_method"] = "/usr/bin/time -v"
    else:
        try:
            h = json.loads(helper_out or b"{}")
        except ValueError:
            h = {}
        res["peak_rss_mb"] = h.get("maxrss_kb", 0) / 1024 if h else None
        res["rc"] = h.get("rc", proc.returncode)
        res["rss_method"] = "getrusage(RUSAGE_CHILDREN) in a helper"
    if timed_out:
        res["rc"] = "timeout"
    res["stdout_path"], res["stderr_path"] = str(out_p), str(err_p)
    res["stderr_tail"] = err_p.read_text(errors="replace")[-3000:]
    return res


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median wall and CPU seconds, the fastest wall, the highest memory peaks, and the raw runs."""
    ok = [r for r in runs if r["rc"] == 0] or runs
    return {
        "runs": runs,
        "wall_s": median_of(ok, "wall_s"),
        "wall_min_s": min(r["wall_s"] for r in ok),
        "cpu_s": median_of(ok, "cpu_s"),
        "peak_rss_mb": max((r["peak_rss_mb"] or 0) for r in ok),
        "tree_peak_rss_mb": max(r["tree_peak_rss_mb"] for r in ok),
    }


# --------------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------------


def find_ccusage(npm_dir: Path, explicit: str | None) -> list[str]:
    """The native ccusage binary (what the npm ``ccusage`` shim spawns), or the shim itself."""
    if explicit:
        return explicit.split()
    native = npm_dir / "node_modules" / CCUSAGE_PACKAGE / "bin/ccusage"
    if not native.exists() and not (npm_dir / "node_modules/.bin/ccusage").exists():
        install_ccusage(npm_dir)
    if native.exists():
        if not os.access(native, os.X_OK):
            native.chmod(0o755)  # the npm shim does the same on first use
        return [str(native)]
    shim = npm_dir / "node_modules/.bin/ccusage"
    if shim.exists():
        return [str(shim)]
    raise SystemExit(
        f"ccusage not found under {npm_dir}; install it with:\n"
        f"  npm install --prefix {npm_dir} {CCUSAGE_PACKAGE}@{CCUSAGE_VERSION}"
    )


def install_ccusage(npm_dir: Path) -> None:
    """``npm install`` ccusage's native binary into ``npm_dir`` (a cache folder, not the repository)."""
    npm = shutil.which("npm")
    if npm is None:
        return
    npm_dir.mkdir(parents=True, exist_ok=True)
    print(f"installing {CCUSAGE_PACKAGE}@{CCUSAGE_VERSION} into {npm_dir}", file=sys.stderr)
    cmd = [npm, "install", "--prefix", str(npm_dir), "--no-audit", "--no-fund"]
    subprocess.run([*cmd, f"{CCUSAGE_PACKAGE}@{CCUSAGE_VERSION}"], check=False, stdout=sys.stderr)


def grow_corpus(corpus: Path, share: float) -> list[tuple[Path, int]]:
    """Append about ``share`` of the corpus's JSONL bytes as new lines: to files that fit what is
    left of that share (in path order), a copy of the file's own lines with new request and message
    ids (so they are new requests, on the same days). Returns each grown file with its size before,
    for :func:`shrink_corpus`."""
    files = sorted(corpus.rglob("*.jsonl"))
    sizes = {f: f.stat().st_size for f in files}
    goal = share * sum(sizes.values())
    grown: list[tuple[Path, int]] = []
    added = 0
    for f in files:  # in path order, each file that still fits the goal
        if added >= 0.95 * goal:
            break
        if sizes[f] > goal - added:
            continue
        data = f.read_bytes()
        if not data.endswith(b"\n"):
            continue
        copy = data.replace(b'"requestId":"', b'"requestId":"refresh-').replace(
            b'"id":"msg_', b'"id":"msg_refresh-'
        )
        with f.open("ab") as out:
            out.write(copy)
        grown.append((f, sizes[f]))
        added += len(copy)
    return grown


def shrink_corpus(grown: list[tuple[Path, int]]) -> None:
    """Cut the files :func:`grow_corpus` grew back to their sizes."""
    for f, size in grown:
        os.truncate(f, size)


def find_traceflow(explicit: str | None) -> list[str]:
    if explicit:
        return explicit.split()
    beside = Path(sys.executable).with_name("traceflow")  # not a pyenv shim found first on PATH
    if beside.exists():
        return [str(beside)]
    exe = shutil.which("traceflow")
    return [exe] if exe else [sys.executable, "-m", "traceflow"]


def precompile_traceflow() -> bool:
    """Byte-compile the traceflow package (and its packaged sub-packages) as ``pip install`` would."""
    code = (
        "import importlib.util, compileall\n"
        "ok = True\n"
        "for name in ('traceflow', 'traceflow.queries', 'traceflow.collectors', 'traceflow.dashboards'):\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    for d in (spec.submodule_search_locations or []) if spec else []:\n"
        "        ok = compileall.compile_dir(d, quiet=1) and ok\n"
        "raise SystemExit(0 if ok else 1)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run([sys.executable, "-c", code], env=env, check=False).returncode == 0


def tool_version(cmd: list[str], env: dict[str, str]) -> str:
    for flag in ("--version", "version"):
        try:
            p = subprocess.run([*cmd, flag], env=env, capture_output=True, text=True, timeout=60)
        except Exception as e:
            return f"unknown ({e})"
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip().splitlines()[0]
    return "unknown"


# --------------------------------------------------------------------------------------------------
# Parsing the reports
# --------------------------------------------------------------------------------------------------


def day_key(v: Any) -> str:
    return str(v)[:10]


def ccusage_days(path: Path) -> dict[str, dict[str, int]]:
    data = json.loads(path.read_text())
    rows = data["daily"] if isinstance(data, dict) else data
    out = {}
    for r in rows:
        day = day_key(r.get("period") or r.get("date"))
        out[day] = {lab: int(r.get(ck) or 0) for lab, ck, _, _ in FIELDS}
    return out


def traceflow_days(path: Path) -> dict[str, dict[str, int]]:
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        for k in ("rows", "data", "days", "mix", "result"):
            if isinstance(data.get(k), list):
                data = data[k]
                break
    out: dict[str, dict[str, int]] = {}
    for r in data:
        day = day_key(r.get("day") or r.get("date") or r.get("period"))
        d = out.setdefault(day, {lab: 0 for lab, *_ in FIELDS})
        for lab, _, tk, _ in FIELDS:
            d[lab] += int(r.get(tk) or 0)
    return out


def expected_days(path: Path) -> dict[str, dict[str, int]]:
    data = json.loads(path.read_text())
    return {day_key(r["day"]): {lab: int(r[ek]) for lab, _, _, ek in FIELDS} for r in data["days"]}


def compare(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]], an: str, bn: str) -> dict[str, Any]:
    days = sorted(set(a) | set(b))
    mism = []
    diff_tot = {lab: 0 for lab, *_ in FIELDS}
    for d in days:
        ra, rb = a.get(d), b.get(d)
        if ra != rb:
            row = {"day": d, an: ra, bn: rb}
            mism.append(row)
            for lab, *_ in FIELDS:
                diff_tot[lab] += (ra or {}).get(lab, 0) - (rb or {}).get(lab, 0)
    tot_a = {lab: sum(r[lab] for r in a.values()) for lab, *_ in FIELDS}
    tot_b = {lab: sum(r[lab] for r in b.values()) for lab, *_ in FIELDS}
    return {
        "pair": f"{an} vs {bn}",
        "days": len(days),
        "days_only_in_" + an: sorted(set(a) - set(b)),
        "days_only_in_" + bn: sorted(set(b) - set(a)),
        "days_matching": len(days) - len(mism),
        "agree": not mism,
        "totals_" + an: tot_a,
        "totals_" + bn: tot_b,
        "total_diff": diff_tot,
        "mismatches": mism[:20],
    }


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


def corpus_stats(corpus: Path) -> dict[str, Any]:
    files = 0
    size = 0
    for root, _, names in os.walk(corpus / "projects"):
        for n in names:
            if n.endswith(".jsonl"):
                files += 1
                size += os.path.getsize(os.path.join(root, n))
    st: dict[str, Any] = {"jsonl_files": files, "jsonl_bytes": size, "jsonl_mib": round(size / 2**20, 1)}
    exp = corpus / "expected.json"
    if exp.exists():
        st["generator"] = json.loads(exp.read_text()).get("corpus", {})
    return st


def warm_cache(corpus: Path) -> float:
    t0 = time.perf_counter()
    for root, _, names in os.walk(corpus / "projects"):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                while f.read(1 << 22):
                    pass
    return time.perf_counter() - t0


def interpreter_of(cmd: list[str]) -> str:
    """The Python that runs a ``traceflow`` command (its script's shebang), else this one."""
    with contextlib.suppress(OSError, IndexError):
        first = Path(cmd[0]).read_bytes()[:256].split(b"\n", 1)[0]
        if first.startswith(b"#!"):
            exe = first[2:].decode().strip().split()[0]
            if Path(exe).exists():
                return exe
    return sys.executable


_READ_ALL = (
    "import os, sys\n"
    "for root, _, names in os.walk(sys.argv[1]):\n"
    "    for n in names:\n"
    "        with open(os.path.join(root, n), 'rb', buffering=0) as f:\n"
    "            while f.read(1 << 20):\n"
    "                pass\n"
)


def floor_costs(python: str, corpus: Path, runs: int) -> dict[str, float]:
    """Fixed costs no design on this stack avoids (median wall seconds of ``runs`` each): starting
    the interpreter, importing DuckDB (a report reads Parquet with it) and polars (the importer
    writes Parquet with it), and reading the corpus's bytes once on one core."""
    probes = {
        "python_start_s": ["-c", "pass"],
        "python_import_duckdb_s": ["-c", "import duckdb"],
        "python_import_polars_s": ["-c", "import polars"],
        "python_read_corpus_s": ["-c", _READ_ALL, str(corpus / "projects")],
    }
    out = {}
    for name, args in probes.items():
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([python, *args], check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    start = out["python_start_s"]
    # two processes: the import (reads the bytes on two cores, writes Parquet with the cheaper of the
    # two libraries) and the report (queries with DuckDB)
    duck, polars = out["python_import_duckdb_s"] - start, out["python_import_polars_s"] - start
    out["floor_first_import_report_s"] = (
        2 * start + min(duck, polars) + duck + (out["python_read_corpus_s"] - start) / 2
    )
    return out


def fmt(v: float | None, nd: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{nd}f}"


def daily_refresh(
    tf: list[str],
    corpus: Path,
    lake: Path,
    cc_cmd: list[str],
    cc_env: dict[str, str],
    env: dict[str, str],
    logs: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """d: ccusage's full re-scan of the grown corpus (``--runs`` times) and traceflow's import of
    the new lines into the populated lake + ``mix --by day``; their per-day totals compared."""
    cc_runs = []
    for i in range(args.runs):
        r = measure(cc_cmd, cc_env, logs, f"ccusage_daily_refresh_{i}", args.timeout)
        print(f"ccusage daily after the refresh, run {i}: {r['wall_s']:.2f}s rc={r['rc']}", file=sys.stderr)
        cc_runs.append(r)
    cmd = [*tf, "import", "claude-code", str(corpus / "projects"), "--data", str(lake), "--format", "json"]
    imp = measure(cmd, env, logs, "traceflow_refresh_import", args.timeout)
    mix_cmd = [*tf, "mix", "--by", "day", "--format", "json", "--data", str(lake)]
    mix = measure(mix_cmd, env, logs, "traceflow_refresh_mix", args.timeout)
    print(f"traceflow refresh: import {imp['wall_s']:.2f}s, mix {mix['wall_s']:.2f}s", file=sys.stderr)
    steps = {
        "ccusage_daily_refresh": summarize(cc_runs),
        "traceflow_refresh_import": summarize([imp]),
        "traceflow_refresh_mix": summarize([mix]),
        "traceflow_refresh": {
            "wall_s": imp["wall_s"] + mix["wall_s"],
            "cpu_s": (imp["cpu_s"] or 0) + (mix["cpu_s"] or 0) if imp.get("cpu_s") else None,
            "peak_rss_mb": max(imp["peak_rss_mb"] or 0, mix["peak_rss_mb"] or 0),
            "tree_peak_rss_mb": max(imp["tree_peak_rss_mb"], mix["tree_peak_rss_mb"]),
        },
    }
    out: dict[str, Any] = {"steps": steps}
    with contextlib.suppress(OSError):
        out["import_stdout"] = Path(imp["stdout_path"]).read_text(errors="replace")[:2000]
    ok = [r for r in cc_runs if r["rc"] == 0]
    if ok and imp["rc"] == 0 and mix["rc"] == 0:
        tf_days = traceflow_days(Path(mix["stdout_path"]))
        out["agreement"] = compare(tf_days, ccusage_days(Path(ok[-1]["stdout_path"])), "traceflow", "ccusage")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--corpus", required=True, type=Path, help="corpus root (contains projects/ and expected.json)"
    )
    ap.add_argument(
        "--plain-runs",
        type=int,
        default=10,
        help="uninstrumented, interleaved runs of ccusage and the repeated report (wall time only)",
    )
    ap.add_argument(
        "--runs", type=int, default=3, help="repetitions of the ccusage run and of the repeated report"
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/tfbench/bench_results.json"))
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="scratch: lake, stdout/stderr captures")
    ap.add_argument(
        "--npm-dir", type=Path, default=DEFAULT_NPM_DIR, help="where ccusage@20.0.24 is npm-installed"
    )
    ap.add_argument("--ccusage", help="ccusage command (default: the native binary under --npm-dir)")
    ap.add_argument("--traceflow", help="traceflow command (default: `traceflow` on PATH)")
    ap.add_argument(
        "--with-npx", action="store_true", help="also time one run through the npm `ccusage` node shim"
    )
    ap.add_argument(
        "--legacy-npm-dir",
        type=Path,
        help="also time one run of an older, TypeScript ccusage (e.g. 17.0.2) npm-installed there",
    )
    ap.add_argument("--skip-traceflow", action="store_true")
    ap.add_argument("--skip-ccusage", action="store_true")
    ap.add_argument("--skip-refresh", action="store_true", help="leave out the daily refresh (d)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per-process timeout, seconds")
    args = ap.parse_args(argv)

    corpus = args.corpus.resolve()
    if not (corpus / "projects").is_dir():
        raise SystemExit(f"{corpus}/projects not found")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    home = Path(tempfile.mkdtemp(prefix="home-", dir=work))  # isolated HOME for ccusage

    results: dict[str, Any] = {
        "corpus": str(corpus),
        "runs": args.runs,
        "host": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "corpus_stats": corpus_stats(corpus),
    }
    print(
        f"corpus: {results['corpus_stats']['jsonl_mib']} MiB in "
        f"{results['corpus_stats']['jsonl_files']} JSONL files",
        file=sys.stderr,
    )
    results["warm_cache_read_s"] = warm_cache(corpus)
    results["loadavg_start"] = load = os.getloadavg()
    if load[0] > 0.5 * (os.cpu_count() or 1):
        print(
            f"warning: load average {load[0]:.1f} on {os.cpu_count()} CPUs; timings will be noisy",
            file=sys.stderr,
        )

    base_env = dict(os.environ)
    base_env["TZ"] = "UTC"
    steps: dict[str, Any] = {}

    # The order is: traceflow first import + report on a fresh lake (b), then --runs rounds that each
    # run ccusage once (a) and the repeated traceflow report once (c). Interleaving a and c makes both
    # see the same background load when the machine is shared.
    cc_cmd: list[str] | None = None
    cc_env = {**base_env, "CLAUDE_CONFIG_DIR": str(corpus), "HOME": str(home), "NO_COLOR": "1"}
    if not args.skip_ccusage:
        cc = find_ccusage(args.npm_dir, args.ccusage)
        results["ccusage"] = {"cmd": cc, "version": tool_version(cc, cc_env)}
        cc_cmd = [*cc, "daily", "--json", "--offline", "--timezone", "UTC"]

    # ---------------------------------------------------------------- b. traceflow first import + report
    mix_cmd: list[str] | None = None
    first: dict[str, Any] | None = None
    if not args.skip_traceflow:
        tf = find_traceflow(args.traceflow)
        results["traceflow"] = {
            "cmd": tf,
            "version": tool_version(tf, base_env),
            "precompiled": precompile_traceflow(),
        }

        def first_import(lake: Path, env: dict[str, str], label: str) -> dict[str, Any]:
            """``traceflow import claude-code`` of the corpus into a fresh ``lake``, timed."""
            if lake.exists():
                shutil.rmtree(lake)
            cmd = [*tf, "import", "claude-code", str(corpus / "projects"), "--data", str(lake)]
            run = measure([*cmd, "--format", "json"], env, logs, label, args.timeout)
            print(f"{label}: {run['wall_s']:.2f}s rc={run['rc']}", file=sys.stderr)
            steps[label] = summarize([run])
            return run

        lake = work / "lake"
        imp = first_import(lake, base_env, "traceflow_import")
        with contextlib.suppress(OSError):
            imp_out = Path(imp["stdout_path"]).read_text(errors="replace")
            results["traceflow"]["import_stdout"] = imp_out[:4000]
        if imp["rc"] == 0:
            cmd = [*tf, "mix", "--by", "day", "--format", "json", "--data", str(lake)]
            cached = lake / "v1" / "_cache" / "results"
            results["traceflow"]["first_report_cache_miss"] = not any(cached.glob("*.bin"))
            first = measure(cmd, base_env, logs, "traceflow_mix_first", args.timeout)
            print(f"traceflow mix (first): {first['wall_s']:.2f}s rc={first['rc']}", file=sys.stderr)
            steps["traceflow_mix_first"] = summarize([first])
            if first["rc"] == 0:
                mix_cmd = cmd
                steps["traceflow_import_plus_mix"] = {
                    "wall_s": imp["wall_s"] + first["wall_s"],
                    "cpu_s": (imp["cpu_s"] or 0) + (first["cpu_s"] or 0) if imp.get("cpu_s") else None,
                    "peak_rss_mb": max(imp["peak_rss_mb"] or 0, first["peak_rss_mb"] or 0),
                    "tree_peak_rss_mb": max(imp["tree_peak_rss_mb"], first["tree_peak_rss_mb"]),
                }
        results["floor"] = floor_costs(interpreter_of(tf), corpus, args.runs)
        failed = [r for r in (imp, first) if r is not None and r["rc"] != 0]
        if failed:
            results["traceflow"]["failure"] = [
                {"step": r["label"], "rc": r["rc"], "stderr_tail": r["stderr_tail"]} for r in failed
            ]

    # ---------------------------------------------------------------- a + c, interleaved
    cc_runs: list[dict[str, Any]] = []
    mix_runs: list[dict[str, Any]] = []
    nocache_runs: list[dict[str, Any]] = []
    nocache_env = {**base_env, "TRACEFLOW_CACHE": "0"}
    for i in range(args.runs):
        if cc_cmd is not None:
            r = measure(cc_cmd, cc_env, logs, f"ccusage_daily_{i}", args.timeout)
            print(f"ccusage daily run {i}: {r['wall_s']:.2f}s rc={r['rc']}", file=sys.stderr)
            cc_runs.append(r)
        if mix_cmd is not None:
            r = measure(mix_cmd, base_env, logs, f"traceflow_mix_repeat_{i}", args.timeout)
            print(f"traceflow mix (repeat {i}): {r['wall_s']:.2f}s rc={r['rc']}", file=sys.stderr)
            mix_runs.append(r)
            r = measure(mix_cmd, nocache_env, logs, f"traceflow_mix_nocache_{i}", args.timeout)
            print(f"traceflow mix (TRACEFLOW_CACHE=0, {i}): {r['wall_s']:.2f}s rc={r['rc']}", file=sys.stderr)
            nocache_runs.append(r)
    # ---------------------------------------------------------------- a + c again, uninstrumented
    # /usr/bin/time and the 20 ms PSS sampler add a few tens of ms per process: nothing next to
    # ccusage's seconds, half again of a cached report's. So a and c also run bare (stdout to
    # /dev/null, wall time from perf_counter only), interleaved the same way.
    plain: dict[str, list[float]] = {"ccusage": [], "traceflow": []}
    if cc_cmd is not None and mix_cmd is not None:
        for _ in range(args.plain_runs):
            for name, cmd, env in (("ccusage", cc_cmd, cc_env), ("traceflow", mix_cmd, base_env)):
                t0 = time.perf_counter()
                null = subprocess.DEVNULL
                subprocess.run(cmd, env=env, stdout=null, stderr=null, check=False)
                plain[name].append(time.perf_counter() - t0)
        results["uninstrumented"] = {
            "runs": args.plain_runs,
            "ccusage_median_s": statistics.median(plain["ccusage"]),
            "traceflow_repeated_median_s": statistics.median(plain["traceflow"]),
        }
        u = results["uninstrumented"]
        u["speedup"] = u["ccusage_median_s"] / u["traceflow_repeated_median_s"]
        print(
            f"uninstrumented medians of {args.plain_runs}: ccusage {u['ccusage_median_s']:.3f}s, "
            f"traceflow repeated report {u['traceflow_repeated_median_s']:.3f}s ({u['speedup']:.1f}x)",
            file=sys.stderr,
        )
    # ---------------------------------------------------------------- d. daily refresh
    refresh: dict[str, Any] = {}
    if cc_cmd is not None and mix_cmd is not None and not args.skip_refresh:
        grown = grow_corpus(corpus, REFRESH_SHARE)
        appended = sum(f.stat().st_size - n for f, n in grown)
        try:
            refresh = daily_refresh(tf, corpus, work / "lake", cc_cmd, cc_env, base_env, logs, args)
        finally:
            shrink_corpus(grown)
        refresh["appended_mib"] = round(appended / 2**20, 2)
        refresh["grown_files"] = len(grown)
        steps.update(refresh.pop("steps"))
        results["refresh"] = refresh
    cc_days = None
    if cc_runs:
        steps["ccusage_daily"] = summarize(cc_runs)
        ok = [r for r in cc_runs if r["rc"] == 0]
        if ok:
            cc_days = ccusage_days(Path(ok[-1]["stdout_path"]))
        else:
            results["ccusage"]["failure"] = {
                "rc": cc_runs[-1]["rc"],
                "stderr_tail": cc_runs[-1]["stderr_tail"],
            }
    if mix_runs:
        steps["traceflow_mix_repeated"] = summarize(mix_runs)
        if first is not None:
            ref = Path(first["stdout_path"]).read_bytes()
            results["traceflow"]["repeated_stdout_identical"] = all(
                Path(r["stdout_path"]).read_bytes() == ref for r in mix_runs + nocache_runs
            )
    if nocache_runs:
        steps["traceflow_mix_repeated_nocache"] = summarize(nocache_runs)
    if cc_cmd is not None and args.with_npx:
        shim = args.npm_dir / "node_modules/.bin/ccusage"
        r = measure([str(shim), *cc_cmd[1:]], cc_env, logs, "ccusage_daily_npx_shim", args.timeout)
        steps["ccusage_daily_npx_shim"] = summarize([r])
    legacy_days = None
    legacy_version = None
    if args.legacy_npm_dir is not None:
        pkg = args.legacy_npm_dir / "node_modules/ccusage"
        legacy_version = json.loads((pkg / "package.json").read_text())["version"]
        bin_rel = json.loads((pkg / "package.json").read_text())["bin"]["ccusage"]
        node = shutil.which("node") or "node"
        cmd = [node, str(pkg / bin_rel), "daily", "--json", "--offline", "--timezone", "UTC"]
        r = measure(cmd, cc_env, logs, "ccusage_legacy_daily", args.timeout)
        print(
            f"ccusage {legacy_version} (TypeScript) daily: {r['wall_s']:.2f}s rc={r['rc']}", file=sys.stderr
        )
        steps["ccusage_legacy_daily"] = summarize([r])
        results["ccusage_legacy"] = {"cmd": cmd, "version": legacy_version}
        if r["rc"] == 0:
            legacy_days = ccusage_days(Path(r["stdout_path"]))
    tf_days = None
    if first is not None and first["rc"] == 0:
        try:
            tf_days = traceflow_days(Path(first["stdout_path"]))
        except (ValueError, KeyError, TypeError) as e:
            results["traceflow"]["parse_error"] = f"{type(e).__name__}: {e}"
    results["loadavg_end"] = os.getloadavg()
    results["steps"] = steps

    # ---------------------------------------------------------------- agreement
    agreement = []
    exp_p = corpus / "expected.json"
    exp_days = expected_days(exp_p) if exp_p.exists() else None
    if cc_days is not None and exp_days is not None:
        agreement.append(compare(cc_days, exp_days, "ccusage", "expected"))
    if tf_days is not None and exp_days is not None:
        agreement.append(compare(tf_days, exp_days, "traceflow", "expected"))
    if cc_days is not None and tf_days is not None:
        agreement.append(compare(tf_days, cc_days, "traceflow", "ccusage"))
    if legacy_days is not None and exp_days is not None:
        agreement.append(compare(legacy_days, exp_days, f"ccusage {legacy_version}", "expected"))
    results["agreement"] = agreement

    # ---------------------------------------------------------------- table
    base = steps.get("ccusage_daily", {}).get("wall_s")
    n = args.runs
    rows = [
        ("ccusage 20.0.24", f"`daily --json --offline` (median of {n})", "ccusage_daily"),
        ("ccusage 20.0.24", "same, via the npm node shim (1 run)", "ccusage_daily_npx_shim"),
        (
            f"ccusage {legacy_version} (TypeScript)",
            "`daily --json --offline` (1 run)",
            "ccusage_legacy_daily",
        ),
        (
            "ccusage 20.0.24",
            f"`daily` after +1 % new lines (full re-scan, median of {n})",
            "ccusage_daily_refresh",
        ),
        ("traceflow", "`import claude-code` into a fresh lake", "traceflow_import"),
        ("traceflow", "`mix --by day` (first)", "traceflow_mix_first"),
        ("traceflow", "**first import + report** (sum)", "traceflow_import_plus_mix"),
        ("traceflow", f"**repeated report** `mix --by day` (median of {n})", "traceflow_mix_repeated"),
        ("traceflow", "daily refresh: `import` of the +1 % new lines", "traceflow_refresh_import"),
        ("traceflow", "daily refresh: `mix --by day`", "traceflow_refresh_mix"),
        ("traceflow", "**daily refresh: import + report** (sum)", "traceflow_refresh"),
        (
            "traceflow",
            f"repeated report, result cache off (`TRACEFLOW_CACHE=0`) (median of {n})",
            "traceflow_mix_repeated_nocache",
        ),
    ]
    lines = [
        "| tool | step | wall s | CPU s | peak RSS MB | tree PSS MB | speedup (wall) | speedup (CPU) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    base_cpu = steps.get("ccusage_daily", {}).get("cpu_s")
    speedups: dict[str, float | None] = {}
    speedups_cpu: dict[str, float | None] = {}
    for tool, label, key in rows:
        st = steps.get(key)
        if st is None:
            continue
        sp = base / st["wall_s"] if base and st.get("wall_s") else None
        spc = base_cpu / st["cpu_s"] if base_cpu and st.get("cpu_s") else None
        speedups[key], speedups_cpu[key] = sp, spc
        is_cc = key.startswith("ccusage")
        cell = "—" if is_cc else (fmt(sp, 1) + "×" if sp else "n/a")
        cell_cpu = "—" if is_cc else (fmt(spc, 1) + "×" if spc else "n/a")
        lines.append(
            f"| {tool} | {label} | {fmt(st.get('wall_s'))} | {fmt(st.get('cpu_s'))} | "
            f"{fmt(st.get('peak_rss_mb'), 0)} | {fmt(st.get('tree_peak_rss_mb'), 0)} | {cell} | {cell_cpu} |"
        )
    table = "\n".join(lines)
    results["speedups"] = speedups
    legacy_wall = steps.get("ccusage_legacy_daily", {}).get("wall_s")
    vs_legacy = ""
    if legacy_wall:
        results["speedups_vs_legacy"] = sp_leg = {
            k: legacy_wall / steps[k]["wall_s"]
            for k in (
                "ccusage_daily",
                "traceflow_import_plus_mix",
                "traceflow_mix_repeated",
                "traceflow_mix_repeated_nocache",
            )
            if k in steps and steps[k].get("wall_s")
        }
        vs_legacy = f"\n\nwall-time speedups vs ccusage {legacy_version} (TypeScript, 1 run): " + ", ".join(
            f"{k} {v:.1f}×" for k, v in sp_leg.items()
        )
    results["speedups_cpu"] = speedups_cpu
    cc_refresh = steps.get("ccusage_daily_refresh", {}).get("wall_s")
    tf_refresh = steps.get("traceflow_refresh", {}).get("wall_s")
    refresh_speedup = cc_refresh / tf_refresh if cc_refresh and tf_refresh else None
    results["refresh_speedup"] = refresh_speedup
    results["targets"] = {
        "first_import_report_>=0.5x": (speedups.get("traceflow_import_plus_mix") or 0)
        >= TARGETS["first_import_report"],
        "daily_refresh_faster_than_rescan": (refresh_speedup or 0) > TARGETS["daily_refresh"],
        "repeated_report_>=30x": (speedups.get("traceflow_mix_repeated") or 0) >= TARGETS["repeated_report"],
    }
    if "uninstrumented" in results:
        u = results["uninstrumented"]
        met = u["speedup"] >= TARGETS["repeated_report"]
        results["targets"]["repeated_report_>=30x_uninstrumented"] = met
    agree_lines = []
    for a in agreement:
        agree_lines.append(
            f"- {a['pair']}: {a['days_matching']}/{a['days']} days identical"
            + ("" if a["agree"] else f"; total diff {a['total_diff']}")
        )
    if "refresh" in results and "agreement" in results["refresh"]:
        a = results["refresh"]["agreement"]
        agree_lines.append(
            f"- after the refresh (+{results['refresh']['appended_mib']} MiB in "
            f"{results['refresh']['grown_files']} files), {a['pair']}: "
            f"{a['days_matching']}/{a['days']} days identical"
            + ("" if a["agree"] else f"; total diff {a['total_diff']}")
        )
    if refresh_speedup:
        agree_lines.append(
            f"- daily refresh: traceflow import + report {tf_refresh:.2f} s vs ccusage's re-scan "
            f"{cc_refresh:.2f} s: {refresh_speedup:.1f}×"
        )
    results["table_markdown"] = table
    results["agreement_markdown"] = "\n".join(agree_lines)
    results["agreement_markdown"] += (
        f"\n\nload average at start / end: {results['loadavg_start'][0]:.2f} / "
        f"{results['loadavg_end'][0]:.2f} on {os.cpu_count()} CPUs"
    )
    results["agreement_markdown"] += vs_legacy
    if "floor" in results and base:
        f = results["floor"]
        results["agreement_markdown"] += (
            f"\n\nfixed costs (medians of {n}): Python start {f['python_start_s']:.3f} s, "
            f"with `import duckdb` {f['python_import_duckdb_s']:.3f} s, "
            f"with `import polars` {f['python_import_polars_s']:.3f} s, "
            f"reading the corpus once {f['python_read_corpus_s']:.3f} s; so a first import + report on this "
            f"stack costs at least {f['floor_first_import_report_s']:.2f} s before any parsing, against "
            f"{base / TARGETS['first_import_report']:.2f} s for 0.5× ccusage"
        )
    if "uninstrumented" in results:
        u = results["uninstrumented"]
        results["agreement_markdown"] += (
            f"\n\nuninstrumented (no /usr/bin/time, no sampler), medians of {u['runs']} interleaved runs: "
            f"ccusage {u['ccusage_median_s']:.3f} s, traceflow repeated report "
            f"{u['traceflow_repeated_median_s']:.3f} s: {u['speedup']:.1f}×"
        )
    if "traceflow" in results and "failure" in results["traceflow"]:
        results["agreement_markdown"] += (
            "\n- traceflow FAILED: " + json.dumps(results["traceflow"]["failure"])[:2000]
        )

    shutil.rmtree(home, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(table)
    print()
    print(results["agreement_markdown"])
    print(f"\nraw numbers: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
