"""Ctrl-C during an import: one message, exit 130, no half-written file left in ``v1/_staging``, and
running the same import again completes it (every request once).

The import runs as a user runs it (a subprocess) and gets a real SIGINT while it is writing: the trace
spans 1,500 days, so the import stages 1,500 partition files before it publishes any; the signal is
sent once the first staged file exists (an event, not a delay).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DAYS = 1500
DAY_MS = 86_400_000


def _trace(path: Path) -> Path:
    with open(path, "w") as fh:
        for i in range(DAYS):  # one request a day: one partition (and one staged file) each
            rec = {"timestamp": i * DAY_MS, "input_length": 1000, "output_length": 10, "hash_ids": [i]}
            fh.write(json.dumps(rec) + "\n")
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRACEFLOW_CACHE": "0", "HOME": str(tmp_path / "home")}


def _staged(lake: Path) -> list[str]:
    staging = lake / "v1" / "_staging"
    return sorted(p.name for p in staging.iterdir()) if staging.is_dir() else []


def test_ctrl_c_during_an_import_cleans_up_and_a_rerun_completes_it(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "days.jsonl")
    lake = tmp_path / "lake"
    argv = [sys.executable, "-m", "traceflow", "import", "mooncake", str(trace), "--data", str(lake)]
    proc = subprocess.Popen(
        [*argv, "--jobs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path)
    )
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
        while not _staged(lake) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, "the import ended before it staged a file"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceflow: interrupted: "), err
    assert "run the same command again" in err
    assert _staged(lake) == []  # nothing half-written left behind
    # the bookkeeping was not saved: the same command reads the file again and completes the import
    run = subprocess.run(argv, capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert run.returncode == 0, run.stderr
    assert _staged(lake) == []
    count = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceflow",
            "sql",
            "SELECT count(*) AS n, count(DISTINCT started_at) AS days FROM requests",
            "--data",
            str(lake),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert count.returncode == 0, count.stderr
    assert json.loads(count.stdout) == [{"n": DAYS, "days": DAYS}]


def test_kill_9_at_the_staging_step_leaves_nothing_after_the_next_import_or_compact(tmp_path: Path) -> None:
    """``kill -9`` cannot clean up: the staging files it leaves go at the next import (and at
    ``compact``) because their writer is gone; a live writer's (the collector's, a concurrent
    import's) stay."""
    lake = tmp_path / "lake"
    live = lake / "v1" / "_staging" / f"{time.time_ns()}-{os.getpid()}-00000000.parquet"  # this process
    for command in ("import", "compact"):
        trace = _trace(tmp_path / f"days-{command}.jsonl")  # new to the import each time
        argv = [sys.executable, "-m", "traceflow", "import", "mooncake", str(trace), "--data", str(lake)]
        proc = subprocess.Popen([*argv, "--jobs", "1"], stderr=subprocess.PIPE, env=_env(tmp_path))
        try:
            deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
            while not _staged(lake) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            assert proc.poll() is None, "the import ended before it staged a file"
            proc.kill()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        left = [n for n in _staged(lake) if n != live.name]
        assert left and all(f"-{proc.pid}-" in n for n in left)  # what kill -9 leaves
        live.write_bytes(b"being written")
        after = [*argv] if command == "import" else [*argv[:3], "compact", "--data", str(lake)]
        run = subprocess.run(after, capture_output=True, text=True, env=_env(tmp_path), timeout=300)
        assert run.returncode == 0, run.stderr
        assert _staged(lake) == [live.name]
        live.unlink()
