"""Shared fixtures: the public data beside the checkout, a fresh lake, and the CLI in-process."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from traceflow.store.lake import Lake

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    """``../shared/data`` beside the checkout (CI lays it there), or ``$TRACEFLOW_SHARED_DATA``."""
    env = os.environ.get("TRACEFLOW_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


SHARED = shared_data()


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"shared data not found at {SHARED}; set TRACEFLOW_SHARED_DATA")
    return SHARED


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(tmp_path / "data")


@pytest.fixture
def cli(lake: Lake) -> Callable[..., tuple[int, str, str]]:
    """Run ``traceflow ARGS --data <the test's lake>`` in-process: (exit code, stdout, stderr)."""
    from traceflow.cli.app import app, register_all

    register_all()
    runner = CliRunner()

    def run(*args: str, data: bool = True) -> tuple[int, str, str]:
        argv = [*args, "--data", str(lake.root)] if data else list(args)
        result = runner.invoke(app, argv)
        if result.exception and not isinstance(result.exception, SystemExit):
            from traceflow.errors import TraceflowError, UsageError

            if isinstance(result.exception, TraceflowError):
                code = 2 if isinstance(result.exception, UsageError) else 1
                return code, result.stdout, str(result.exception)
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    return run
