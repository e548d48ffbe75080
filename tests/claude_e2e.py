"""Helpers for the end-to-end tests with the real Claude Code CLI (tests/test_claude_code_e2e.py).

* :func:`locate_claude` / :func:`require_claude`: the pinned CLI that ``scripts/install_claude_code.sh``
  installs (``$TRACEFLOW_CLAUDE_BIN`` overrides the path).
* :class:`Collector`: ``python -m traceflow serve`` on free ports with a temp data dir.
* :class:`ClaudeHome`: one isolated Claude Code installation state (HOME, CLAUDE_CONFIG_DIR,
  TMPDIR, CLAUDE_CODE_TMPDIR, XDG_RUNTIME_DIR, working directory) and :meth:`ClaudeHome.claude`
  to run ``claude -p`` in it with telemetry to a collector over one OTLP protocol.
* :func:`expected_by_session` / :func:`lake_by_session`: what the fake API returned vs what the lake
  holds, per session (sub-agents folded into their parent).

The fake API and what it answers: tests/fake_anthropic.py; the captures: tests/data/SOURCES.md.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from traceflow.collectors.settings import ReadyLine, serve_argv
from traceflow.store.lake import Lake

CLAUDE_VERSION = "2.1.332"
REPO = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = REPO / "scripts" / "install_claude_code.sh"
PROTOCOLS = ("http/json", "http/protobuf", "grpc")


# -- the CLI ----------------------------------------------------------------------------------------
def install_dir() -> Path:
    return Path(os.environ.get("TRACEFLOW_CLAUDE_DIR") or REPO / ".ci" / "cache" / "claude-code")


def _version(binary: Path, scratch: Path) -> str | None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch),
        "CLAUDE_CONFIG_DIR": str(scratch / ".claude"),
        "TMPDIR": str(scratch),
        "CLAUDE_CODE_TMPDIR": str(scratch),
        "XDG_RUNTIME_DIR": str(scratch),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    try:
        r = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def locate_claude(scratch: Path) -> tuple[Path | None, str]:
    """The pinned ``claude`` binary, or ``(None, why not)``. ``scratch`` is a throw-away dir."""
    explicit = os.environ.get("TRACEFLOW_CLAUDE_BIN")
    if explicit:
        candidates = [Path(explicit)]
    else:
        nm = install_dir() / "node_modules"
        candidates = [nm / ".bin" / "claude", *sorted(nm.glob("@anthropic-ai/claude-code-*/claude"))]
    seen = []
    for cand in candidates:
        if not (cand.is_file() and os.access(cand, os.X_OK)):
            continue
        version = _version(cand, scratch)
        if version and version.split()[0] == CLAUDE_VERSION:
            return cand, ""
        seen.append(f"{cand} reports {version!r}")
    where = ", ".join(seen) if seen else f"no working binary at {explicit or candidates[0]}"
    return None, f"Claude Code {CLAUDE_VERSION} not found ({where})"


def require_claude(scratch: Path) -> Path:
    """The binary; without it: fail when ``$CI`` is set (CI must run these tests), else skip."""
    binary, why = locate_claude(scratch)
    if binary is not None:
        return binary
    msg = f"{why}; run `bash scripts/install_claude_code.sh` first (or set TRACEFLOW_CLAUDE_BIN)"
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


# -- the collector ----------------------------------------------------------------------------------
class Collector:
    """``python -m traceflow serve --data DATA --http-port 0 --grpc-port 0``."""

    def __init__(self, data: Path, log_dir: Path) -> None:
        self.data = data
        self.stderr_path = log_dir / "collector.stderr"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_line = ""
        self.http_url = ""  # http://127.0.0.1:P
        self.grpc_url = ""  # http://127.0.0.1:P (what OTEL_EXPORTER_OTLP_ENDPOINT wants for gRPC)
        self.exit_code: int | None = None

    def start(self, timeout_s: float = 60.0) -> Collector:
        cmd = serve_argv(self.data)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        bound = ReadyLine.parse(line.decode())
        if bound is None:
            self.kill()
            raise RuntimeError(f"the collector did not start: {line!r}\n{self.stderr_tail()}")
        self.ready_line = line.decode().strip()
        self.http_url = bound.http_url
        self.grpc_url = "http://" + bound.grpc_target if bound.grpc_target else ""
        if not (self.http_url and self.grpc_url):
            self.kill()
            raise RuntimeError(f"cannot read the bound ports from the ready line {self.ready_line!r}")
        return self

    def endpoint(self, protocol: str) -> str:
        return self.grpc_url if protocol == "grpc" else self.http_url

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            return "collector stderr:\n" + self.stderr_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait: the collector flushes and seals everything, then exits (0 expected)."""
        if self.proc is None:
            return -1
        if self.exit_code is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.exit_code = self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                self.exit_code = -9
        return self.exit_code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# -- Claude Code runs -------------------------------------------------------------------------------
@dataclass
class Invocation:
    """One ``claude`` process: its arguments, result and the fake-API records it caused."""

    name: str
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    api_records: list[dict[str, Any]]

    @property
    def result(self) -> dict[str, Any]:
        """The ``--output-format json`` result object ({} when stdout is not one)."""
        try:
            obj = json.loads(self.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {}
        return obj if isinstance(obj, dict) else {}

    @property
    def sessions(self) -> set[str]:
        """The ``x-claude-code-session-id`` values of its API calls."""
        return {r["session_id"] for r in self.api_records if r.get("k") is not None and r.get("session_id")}

    def describe(self) -> str:
        return (
            f"{self.name}: claude {' '.join(self.args)} -> rc {self.returncode} in {self.seconds:.2f} s\n"
            f"stdout: {self.stdout[-1500:]}\nstderr: {self.stderr[-1500:]}"
        )


@dataclass
class ClaudeHome:
    """An isolated home for Claude Code: nothing is read from or written to the real ~ or /tmp."""

    root: Path
    binary: Path
    api_url: str
    endpoint: str
    protocol: str
    traces: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for d in (self.home, self.config_dir, self.tmp, self.xdg, self.cwd):
            d.mkdir(parents=True, exist_ok=True)

    home = property(lambda self: self.root / "home")
    config_dir = property(lambda self: self.root / "home" / ".claude")
    tmp = property(lambda self: self.root / "tmp")
    xdg = property(lambda self: self.root / "xdg")
    cwd = property(lambda self: self.root / "work")
    projects = property(lambda self: self.config_dir / "projects")  # the JSONL transcripts

    def env(self) -> dict[str, str]:
        """A clean environment (nothing inherited but PATH): isolation, offline API, telemetry."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "HOME": str(self.home),
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "TMPDIR": str(self.tmp),
            "CLAUDE_CODE_TMPDIR": str(self.tmp),
            "XDG_RUNTIME_DIR": str(self.xdg),
            "NO_PROXY": "127.0.0.1,localhost",
            # the fake Messages API; nothing may leave the machine
            "ANTHROPIC_BASE_URL": self.api_url,
            "ANTHROPIC_API_KEY": "sk-fake",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root
            "CLAUDE_CODE_MAX_RETRIES": "1",  # keeps the error scenarios short
            # telemetry to the collector
            "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": self.protocol,
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",
            "OTEL_LOGS_EXPORT_INTERVAL": "1000",
            "OTEL_TRACES_EXPORT_INTERVAL": "1000",
        }
        if self.traces:  # beta spans: claude_code.llm_request etc. (same request ids as the events)
            env.update({"CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1", "OTEL_TRACES_EXPORTER": "otlp"})
        env.update(self.extra_env)
        return env

    def claude(
        self,
        name: str,
        *args: str,
        api_records: Callable[[], Sequence[dict[str, Any]]],
        timeout_s: float = 120.0,
    ) -> Invocation:
        """Run ``claude ARGS --output-format json`` in the working dir; ``api_records`` returns the
        fake API's records so far (the new ones are attributed to this run)."""
        before = len(api_records())
        argv = [str(self.binary), *args, "--output-format", "json"]
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=self.cwd,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own process group: claude and its tool children
            out, err = proc.communicate()
            err += f"\n[killed after {timeout_s} s]".encode()
        seconds = time.monotonic() - t0
        return Invocation(
            name,
            list(args),
            proc.returncode,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
            seconds,
            list(api_records()[before:]),
        )


# -- expected vs stored -----------------------------------------------------------------------------
TOTAL_KEYS = ("requests", "cold", "read", "write", "output", "write_5m", "write_1h")


def expected_by_session(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per ``x-claude-code-session-id``: the request count and the token sums the fake API returned
    (successful ``/v1/messages`` calls only; a sub-agent's calls carry its parent's session id)."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        u = r.get("usage")
        if r.get("k") is None or r.get("status") != 200 or not u:
            continue
        t = out.setdefault(r["session_id"], dict.fromkeys(TOTAL_KEYS, 0))
        t["requests"] += 1
        t["cold"] += u["input_tokens"]
        t["read"] += u["cache_read_input_tokens"]
        t["write"] += u["cache_creation_input_tokens"]
        t["output"] += u["output_tokens"]
        t["write_5m"] += u["cache_creation"]["ephemeral_5m_input_tokens"]
        t["write_1h"] += u["cache_creation"]["ephemeral_1h_input_tokens"]
    return out


def query(data: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    con = Lake(data).connect()
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def lake_by_session(data: Path) -> dict[str, dict[str, int]]:
    """The lake's ``requests`` per ``coalesce(parent_session_id, session_id)``, same keys."""
    rows = query(
        data,
        """select coalesce(parent_session_id, session_id), count(*),
                  sum(cold_input_tokens), sum(cache_read_tokens), sum(cache_write_tokens), sum(output_tokens),
                  sum(cache_write_5m_tokens), sum(cache_write_1h_tokens)
           from requests group by 1""",
    )
    return {r[0]: dict(zip(TOTAL_KEYS, (int(x or 0) for x in r[1:]), strict=True)) for r in rows}


def token_metrics_by_session(data: Path) -> dict[str, dict[str, int]]:
    """``claude_code.token.usage`` metric deltas per session and type (input/output/cacheRead/...)."""
    rows = query(
        data,
        """select session_id, type, sum(delta) from metric_points
           where name like '%token.usage' and delta is not null group by 1, 2""",
    )
    out: dict[str, dict[str, int]] = {}
    for sess, typ, total in rows:
        out.setdefault(sess, {})[typ] = round(total)
    return out


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # the lake may be empty / mid-publish at first
            pass
        time.sleep(interval_s)
    try:
        return predicate()
    except Exception:
        return False
