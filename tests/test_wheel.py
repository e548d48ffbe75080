"""The wheel built from the repository runs ``traceflow demo`` with no repository beside it.

The wheel is built from the files the Dockerfile's build stage copies (so the image gets a working
wheel too), installed in a fresh virtual environment, and run from an empty folder with
``PYTHONPATH`` unset: the SQL under ``queries/``, the bundled examples, the price and model
catalogues and every other data file have to be inside the wheel (pyproject's package-data). No
package index is needed: the environment sees this interpreter's installed dependencies
(``--system-site-packages``) and the wheel goes in with ``--no-deps --no-index``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def copied_by_the_dockerfile() -> list[str]:
    """The paths the Dockerfile's build stage copies into the build context."""
    text = (REPO / "Dockerfile").read_text()
    build_stage = text.split("\nFROM ", 2)[1]
    paths = []
    for line in build_stage.splitlines():
        if line.startswith("COPY "):
            paths += line.split()[1:-1]
    return paths


def can_build_without_isolation() -> bool:
    """setuptools >= 68 with a bdist_wheel (its own from 70.1, or the wheel package's) is installed."""
    try:
        import setuptools
    except ImportError:
        return False
    major = int(setuptools.__version__.split(".")[0])
    own = major > 70 or setuptools.__version__.startswith(("70.1", "70.2", "70.3"))
    return major >= 68 and (own or importlib.util.find_spec("wheel") is not None)


def test_the_built_wheel_runs_the_demo_in_a_fresh_venv(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in copied_by_the_dockerfile():
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    wheels = tmp_path / "wheels"
    # Offline where the build backend is installed; otherwise pip's isolated build fetches
    # setuptools from the configured package index.
    isolation = ["--no-build-isolation"] if can_build_without_isolation() else []
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(wheels), str(source)],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("traceflow-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    sql = {p.name for p in (REPO / "queries").glob("*.sql")}
    assert sql and {f"traceflow/queries/{n}" for n in sql} <= names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python, traceflow = venv / "bin" / "python", venv / "bin" / "traceflow"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        cwd=tmp_path,
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRACEFLOW_"))}
    env["HOME"] = str(tmp_path / "home")
    where = subprocess.run(
        [python, "-c", "import traceflow, traceflow.queries as q; print(traceflow.__file__, q.__file__)"],
        check=True,
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where  # the wheel, not the checkout

    report = elsewhere / "demo.html"
    demo = subprocess.run(
        [traceflow, "demo", "--minutes", "5", "--stream-seconds", "2", "--quiet", "--out", str(report)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Token mix per agent" in demo.stdout
    for agent in ("claude-code", "codex", "gemini-cli"):  # the bundled example logs were imported
        assert agent in demo.stdout
    assert report.stat().st_size > 100_000 and b"<html" in report.read_bytes()[:2000].lower()
