"""Latency of ``traceflow statusline``: a long session's transcript (history of earlier days, then
today's traffic), answered from its tail, and the same session from the lake (no transcript).

    python benchmarks/bench_statusline.py [--mb 50] [--today 400] [--runs 7]
    python benchmarks/bench_statusline.py --mb 1 --long-line-mb 256 --runs 3 --baseline /work/main

Prints the median wall and CPU (user + sys of the child) seconds of each way over ``--runs``
runs of ``python -m traceflow statusline``. ``--long-line-mb N`` writes one line of N MiB (zero
bytes, sparse: a pasted image's size) between the earlier days and today's traffic; ``--baseline
REPO`` runs the same with another checkout's code too (side by side).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SESSION = "b3c1d2e4-0000-4000-8000-000000000001"


def _line(t: dt.datetime, n: int, pad: int) -> str:
    return json.dumps(
        {
            "type": "assistant",
            "sessionId": SESSION,
            "requestId": f"req_{n}",
            "uuid": f"a{n}",
            "timestamp": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "message": {
                "id": f"msg_{n}",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "x" * pad}],
                "usage": {
                    "input_tokens": 3,
                    "cache_read_input_tokens": 20_000 + n,
                    "cache_creation_input_tokens": 500,
                    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 500},
                    "output_tokens": 200,
                },
            },
        }
    )


def write_transcript(path: Path, mb: float, today: int, long_mb: float = 0) -> None:
    now = dt.datetime.now(dt.UTC)
    start = now - dt.timedelta(days=20)
    pad = 2000
    old = int(mb * 1e6 / (pad + 400))
    with path.open("w") as f:
        for i in range(old):  # the earlier days
            f.write(_line(start + dt.timedelta(seconds=i * 60), i, pad) + "\n")
        if long_mb:
            f.write('{"type":"user","x":"')
            f.flush()
            f.truncate(f.tell() + int(long_mb * 2**20))
            f.seek(0, os.SEEK_END)
            f.write('"}\n')
        for j in range(today):  # today's traffic, the last one a minute ago
            f.write(_line(now - dt.timedelta(seconds=(today - j) * 30), old + j, pad) + "\n")


def _run(args: list[str], stdin: str, env: dict[str, str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "traceflow", *args], input=stdin, capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return wall, cpu, out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--today", type=int, default=400)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--long-line-mb", type=float, default=0.0)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout to run side by side")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACEFLOW_CACHE": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "projects" / "p" / f"{SESSION}.jsonl"
        path.parent.mkdir(parents=True)
        write_transcript(path, a.mb, a.today, a.long_line_mb)
        env["TRACEFLOW_DATA"] = str(root / "lake")
        imported = subprocess.run(
            [sys.executable, "-m", "traceflow", "import", "claude-code", str(root / "projects")],
            env={**env, "TRACEFLOW_MAX_LINE_BYTES": "4GiB"},  # the long line is past the default limit
            capture_output=True,
            text=True,
        )
        if imported.returncode not in (0, 3):  # 3: records skipped (the long line is no JSON)
            raise SystemExit(imported.stderr)
        size = path.stat().st_size / 2**20
        codes = [("", env)]
        if a.baseline is not None:
            codes.append((" [baseline]", {**env, "PYTHONPATH": str(a.baseline.resolve())}))
        for label, stdin in (
            ("transcript tail", json.dumps({"session_id": SESSION, "transcript_path": str(path)})),
            ("lake (no transcript)", json.dumps({"session_id": SESSION})),
        ):
            for which, code_env in codes:
                runs = [_run(["statusline"], stdin, code_env) for _ in range(a.runs)]
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                spread = max(r[1] for r in runs) - min(r[1] for r in runs)
                print(
                    f"{label + which:34s} {size:.0f} MiB transcript: wall {wall:.3f} s, "
                    f"cpu {cpu:.3f} s (spread {spread:.3f})  | {runs[0][2]}"
                )
        base = [_run(["--version"], "", env) for _ in range(a.runs)]
        print(
            f"{'--version (floor)':22s} wall {statistics.median(r[0] for r in base):.3f} s, "
            f"cpu {statistics.median(r[1] for r in base):.3f} s"
        )


if __name__ == "__main__":
    main()
