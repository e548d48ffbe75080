"""Message details (issue 25): singular nouns, refused zero tiers, a fit on a handful of requests,
an empty default log folder, and a quiet ``serve``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from traceflow.errors import UsageError
from traceflow.kv.sizing import parse_tier
from traceflow.replay.fit import FEW_REQUESTS
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]


def _one_request(lake: Lake) -> None:
    lake.append(
        "requests",
        [
            {
                "event_id": "a",
                "source": "test",
                "agent": "claude-code",
                "model": "opus",
                "session_id": "s1",
                "prompt_id": "p1",
                "started_at": 1785585600_000000,
                "cold_input_tokens": 10,
                "cache_read_tokens": 100,
                "cache_write_tokens": 5,
                "output_tokens": 3,
            }
        ],
    )


def test_report_on_one_session_says_1_request_and_1_turn(lake: Lake, cli: Cli) -> None:
    """It said "1 requests and 1 turns" (the demo too), and a lake of one session crashed the
    headline's arrivals line (a rate of None formatted as a number)."""
    _one_request(lake)
    code, out, err = cli("report")
    assert code == 0, err
    line = next(x for x in out.splitlines() if "Sessions: median" in x)
    assert "median 1 request and 1 turn over" in line


@pytest.mark.parametrize("spec", ["gpu=0GB", "dram=0", "ssd=0TB:read=7GB/s"])
def test_a_tier_of_zero_bytes_is_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="holds more than 0 bytes"):
        parse_tier(spec)


def test_size_refuses_a_zero_gpu_tier(cli: Cli) -> None:
    code, out, err = cli("size", "--kv-model", "llama-3.1-8b", "--rate", "1000", "--tier", "gpu=0GB")
    assert code == 2
    assert "gpu=0GB" in err + out and "more than 0 bytes" in err + out


def test_fit_on_few_requests_warns(cli: Cli, lake: Lake, tmp_path: Path) -> None:
    code, out, err = cli("synth", "--duration", "3m", "--seed", "3", "--format", "json")
    assert code == 0, err
    n = json.loads(out)["requests"]
    assert 0 < n < FEW_REQUESTS
    profile = tmp_path / "p.json"
    code, out, err = cli("fit", "-o", str(profile), "--format", "json")
    assert code == 0, err
    assert f"traceflow: warning: fitted on only {n:,} requests" in err
    assert f"fitted on only {n:,} requests" in json.loads(profile.read_text())["fitted"]["sample_note"]


def test_fit_on_enough_requests_does_not_warn(cli: Cli, tmp_path: Path) -> None:
    code, out, err = cli("synth", "--duration", "2h", "--rate-scale", "4", "--seed", "3", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["requests"] >= FEW_REQUESTS
    code, out, err = cli("fit", "-o", str(tmp_path / "p.json"), "--format", "json")
    assert code == 0, err
    if json.loads(out)["sessions"] >= 10:
        assert "warning" not in err


def test_import_with_an_empty_default_folder_says_where_it_looked(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "claude"
    (home / "projects").mkdir(parents=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home))
    code, _, err = cli("import", "claude-code")
    assert code == 2
    assert str(home / "projects") in err and "nothing to import" in err
    assert "traceflow import claude-code PATH" in err


def test_serve_logs_no_grpc_fork_line(tmp_path: Path) -> None:
    env = {**os.environ, "TRACEFLOW_CACHE": "0"}
    env.pop("GRPC_ENABLE_FORK_SUPPORT", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "traceflow",
            "serve",
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--data",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # written once both servers and the sealer have started
        assert ready.startswith("traceflow serve:"), ready
        time.sleep(0.5)  # the sealer's start is where gRPC logged its fork line
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert "fork_posix" not in err and "skipping fork() handlers" not in err
    assert "stopped; everything acknowledged is in the lake" in err
