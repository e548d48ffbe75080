"""Benchmark replay export and synthesis: wall time, CPU time and peak RSS, each stage a fresh process.

    python benchmarks/bench_replay.py                         # 1M synthesis, 10M export (defaults)
    python benchmarks/bench_replay.py --synth-requests 1000000 --export-requests 10000000 \\
        --root /tmp/tfbench/replay --json /tmp/tfbench/replay.json [--keep]

Stages (targets from issue 5: synthesis of 1M requests < 30 s, export of 10M requests to
``mooncake`` < 60 s, memory < 4 GB):

* ``synth-lake``: ``synth --preset agentic-coding`` for ``--synth-requests`` requests into a fresh
  lake (generation + Parquet files, source ``synthetic``);
* ``synth-mooncake``: the same trace straight to a ``mooncake`` file (generation, prefix derivation,
  JSONL);
* ``gen-export-lake`` (set-up, reported for information): ``--export-requests`` synthetic requests
  into the lake the export reads;
* ``export-mooncake``: ``traceflow export mooncake`` of that whole lake as written (DuckDB reads it
  through the deduplicating view's ``row_number()`` window), prefix derivation from token counts,
  JSONL with 512-token ``hash_ids``;
* ``compact-export-lake`` (set-up): ``traceflow compact``, which makes the files the deduplicated
  base that the view reads without a window, as a collector's lake is after its periodic compaction;
* ``export-mooncake-compacted``: the same export from the compacted lake.

The agentic-coding preset (contexts up to 64k tokens, about 65 hash ids per request at 512 tokens)
makes a 10M-request export about 6.4 GB of JSONL. Every lake and output lives under ``--root``
(never inside the repository) and is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PRESET_REQUESTS_PER_RATE = 280_000  # requests of the agentic-coding preset in 6 h at rate-scale 1
DURATION_S = 6 * 3600


def _usage() -> dict[str, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "peak_rss_gb": round(ru.ru_maxrss / 1e6, 3)}


def _trace(requests: int) -> Any:
    from traceflow.replay.synth import generate, preset

    # a slightly higher rate, then the first `requests` in time order
    rate = requests / PRESET_REQUESTS_PER_RATE * 1.05
    return generate(preset("agentic-coding"), DURATION_S, rate_scale=rate, seed=1, max_requests=requests)


def stage(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one stage in this process; returns its figures."""
    from traceflow.store.lake import Lake

    t0 = time.perf_counter()
    out: dict[str, Any] = {"stage": name}
    if name in ("synth-lake", "gen-export-lake"):
        from traceflow.replay.synth_trace import write_lake

        n = args.synth_requests if name == "synth-lake" else args.export_requests
        trace = _trace(n)
        out["generate_s"] = round(time.perf_counter() - t0, 2)
        out["requests"] = write_lake(trace, Lake(args.lake))
        out["sessions"] = trace.n_sessions
    elif name == "compact-export-lake":
        lake = Lake(args.lake)
        before, after = lake.compact("requests")
        out["files_before"], out["files_after"] = before, after
        out["requests"] = args.export_requests
    elif name == "synth-mooncake":
        from traceflow.replay.export import export_frame

        trace = _trace(args.synth_requests)
        out["generate_s"] = round(time.perf_counter() - t0, 2)
        manifest = export_frame(trace.replay_frame(), "mooncake", Path(args.out))
        out["requests"] = manifest["counts"]["requests"]
        out["hash_ids"] = manifest["counts"]["hash_ids"]
        out["output_bytes"] = Path(args.out).stat().st_size
    elif name in ("export-mooncake", "export-mooncake-compacted"):
        from traceflow.replay import export as replay

        phases: dict[str, float] = {}
        for fn in ("load_requests", "derive", "write_mooncake"):  # time the three phases
            orig = getattr(replay, fn)

            def timed(*a: Any, _f: Any = orig, _n: str = fn, **k: Any) -> Any:
                t = time.perf_counter()
                r = _f(*a, **k)
                phases[_n] = round(time.perf_counter() - t, 2)
                return r

            setattr(replay, fn, timed)
        manifest = replay.export(Lake(args.lake), None, "mooncake", Path(args.out))
        out["phases_s"] = phases
        out["requests"] = manifest["counts"]["requests"]
        out["hash_ids"] = manifest["counts"]["hash_ids"]
        out["output_bytes"] = Path(args.out).stat().st_size
        out["prefix_hit_ratio_first_200k"] = manifest["statistics"]["infinite_cache"]["prefix_hit_ratio"]
    else:
        raise SystemExit(f"unknown stage {name}")
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    out.update(_usage())
    return out


def _run(name: str, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "_stage", name, *extra]
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"stage {name} failed:\n{proc.stderr[-3000:]}")
    res: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_wall_s"] = round(wall, 2)  # interpreter start and imports included
    res["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("/tmp/tfbench/replay"))
    ap.add_argument("--synth-requests", type=int, default=1_000_000)
    ap.add_argument("--export-requests", type=int, default=10_000_000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", action="store_true", help="Keep the lakes and outputs under --root.")
    args = ap.parse_args()
    root = args.root.resolve()
    if root.is_relative_to(REPO):
        raise SystemExit(f"refusing to write benchmark data inside the repository ({root})")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    counts = ["--synth-requests", str(args.synth_requests), "--export-requests", str(args.export_requests)]
    results = []
    try:
        results.append(_run("synth-lake", [*counts, "--lake", str(root / "synth-lake")]))
        results.append(_run("synth-mooncake", [*counts, "--out", str(root / "synth.jsonl")]))
        (root / "synth.jsonl").unlink()
        results.append(_run("gen-export-lake", [*counts, "--lake", str(root / "export-lake")]))
        lake_out = ["--lake", str(root / "export-lake"), "--out", str(root / "x.jsonl")]
        results.append(_run("export-mooncake", [*counts, *lake_out]))
        (root / "x.jsonl").unlink()
        results.append(_run("compact-export-lake", [*counts, *lake_out]))
        results.append(_run("export-mooncake-compacted", [*counts, *lake_out]))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report = {"cpus": os.cpu_count(), "results": results}
    print("| stage | requests | wall s | CPU s | peak RSS GB | load avg |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['stage']} | {r['requests']:,} | {r['wall_s']} | {r['cpu_s']} | {r['peak_rss_gb']} "
            f"| {r['load_avg_1m']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_stage":
        p = argparse.ArgumentParser()
        p.add_argument("name")
        p.add_argument("--synth-requests", type=int)
        p.add_argument("--export-requests", type=int)
        p.add_argument("--lake")
        p.add_argument("--out")
        ns = p.parse_args(sys.argv[2:])
        print(json.dumps(stage(ns.name, ns)))
    else:
        main()
