"""Types are checked, not only written: ``mypy --strict`` over the whole package (collectors/ and
dashboards/ included, through the traceflow/ links) and ``ruff`` over the tree, as part of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_strict_passes() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_ruff_passes() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "traceflow",
            "collectors",
            "dashboards",
            "tests",
            "benchmarks",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
