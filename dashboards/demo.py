"""``traceflow demo``: the whole pipeline in one call, on synthetic agentic-coding traffic.

:func:`run_demo` starts a collector (``python -m traceflow serve`` on free loopback ports), streams a
generated workload to it as Claude Code OTLP log records through the OpenTelemetry SDK, imports the
bundled example agent logs, and writes the HTML report. The SDK, altair and vl-convert are imported
only when it runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceflow.collectors.settings import ReadyLine, serve_argv
from traceflow.errors import TraceflowError, UsageError

if TYPE_CHECKING:
    import polars as pl

    from traceflow.output import Rows
    from traceflow.store.lake import Lake

#: Bundled example files (``traceflow/examples``) and the importer for each.
EXAMPLE_SOURCES: tuple[tuple[str, str], ...] = (
    ("claude-transcript*.jsonl", "claude-code"),
    ("codex-rollout*.jsonl", "codex"),
    ("gemini-chat*.jsonl", "gemini"),
    ("*-otlp-logs*.json", "otlp-json"),
)

#: Tier marks on the demo's hit-ratio chart: exclusive tiers add up (one H200's HBM, then 1 TB DRAM).
DEMO_TIERS: tuple[tuple[str, float], ...] = (("HBM 141 GB", 141e9), ("+ DRAM 1 TB", 1.141e12))


def examples_dir() -> Path | None:
    """The example agent logs installed with traceflow (``traceflow/examples``: small hand-written
    Claude Code, Codex and Gemini CLI logs, which the tests read too; their expected rows are in
    ``tests/data/agent-examples/README.md``); None when this install lacks them."""
    import traceflow

    path = Path(traceflow.__file__).parent / "examples"
    return path if path.is_dir() else None


def start_collector(data: Path, timeout_s: float = 30.0) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m traceflow serve`` on a free loopback port; (process, OTLP/HTTP URL)."""
    cmd = serve_argv(data, "--host", "127.0.0.1", "--summary-interval", "3600")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in lines:
            ready = ReadyLine.parse(line)
            if ready is not None and ready.http_url:
                return proc, ready.http_url
        if proc.poll() is not None:
            raise TraceflowError(f"the collector exited with status {proc.returncode} before it was ready")
        time.sleep(0.05)
    stop_collector(proc)
    raise TraceflowError(f"the collector was not ready within {timeout_s:g} s")


def stop_collector(proc: subprocess.Popen[str], timeout_s: float = 20.0) -> None:
    """Stop the collector (SIGTERM, then SIGKILL after ``timeout_s``)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stream_otlp(
    frame: pl.DataFrame,
    url: str,
    *,
    wall_s: float,
    progress: Any = None,
) -> dict[str, Any]:
    """Send the trace as Claude Code ``api_request`` log records through the OpenTelemetry SDK's
    OTLP/HTTP exporter, time-warped: paced to take about ``wall_s`` seconds, while the records keep
    the trace's own spacing in their timestamps (ending now), so gaps and TTLs stay real."""
    import secrets

    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    from traceflow.replay.loadgen import CLAUDE_CODE_VERSION, build_records, emit_api_request

    offsets_us, records = build_records(frame, secrets.token_hex(6))
    provider = LoggerProvider(
        resource=Resource.create(
            {
                "service.name": "claude-code",
                "service.version": CLAUDE_CODE_VERSION,
                "traceflow.synthetic": True,
            }
        )
    )
    provider.add_log_record_processor(
        BatchLogRecordProcessor(
            OTLPLogExporter(endpoint=url.rstrip("/") + "/v1/logs", timeout=10),
            max_export_batch_size=256,
            schedule_delay_millis=250,
        )
    )
    logger = provider.get_logger("com.anthropic.claude_code.events", CLAUDE_CODE_VERSION)
    span_us = float(offsets_us[-1]) if len(offsets_us) else 0.0
    warp = span_us / 1e6 / wall_s if wall_s > 0 and span_us > 0 else float("inf")
    start = time.time()
    base_ns = int(start * 1e9 - span_us * 1000)  # the trace ends now
    n = len(records)
    for k, (off, attrs) in enumerate(zip(offsets_us.tolist(), records, strict=True)):
        delay = start + off / 1e6 / warp - time.time()
        if delay > 0:
            time.sleep(delay)
        ts = base_ns + int(off * 1000)
        attrs["event.timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts / 1e9)) + (
            f".{(ts // 1_000_000) % 1000:03d}Z"
        )
        emit_api_request(logger, ts, attrs)
        if progress is not None:
            progress(k + 1, n)
    ok = provider.force_flush(60_000)
    provider.shutdown()
    return {
        "requests": n,
        "span_s": span_us / 1e6,
        "warp": warp,
        "wall_s": time.time() - start,
        "flushed": ok,
        "start_ns": base_ns,
    }


def count_requests(lake: Lake, source: str | None = None) -> int:
    """Requests in the lake (from ``source`` only, when given)."""
    con = lake.connect(["requests"])
    where = "source = ?" if source else "true"
    rows = con.execute(
        f"SELECT count(*)::BIGINT FROM requests WHERE {where}", [source] if source else []
    ).fetchall()
    return int(rows[0][0])


def import_examples(lake: Lake, folder: Path) -> list[tuple[str, str, int]]:
    """Import every bundled example file this demo knows; (file, source, rows) per file imported."""
    from traceflow import importers
    from traceflow.importers.run import run_import

    done = []
    for pattern, source in EXAMPLE_SOURCES:
        for path in sorted(folder.glob(pattern)):
            try:
                summary = run_import(lake, importers.get(source), [path], jobs=1)
            except TraceflowError as e:
                done.append((path.name, f"{source} (skipped: {e})", 0))
                continue
            done.append((path.name, source, int(summary.rows.get("requests", 0))))
    return done


#: The report's file name, beside the demo's lake unless ``--out`` names another place.
REPORT_NAME = "traceflow-demo.html"


@dataclass
class DemoResult:
    """What :func:`run_demo` made: the report's ``write_report`` summary, the token mix per agent over
    the whole lake, the data directory (None when it was a temporary one, removed since) and where the
    HTML report is."""

    written: dict[str, Any]
    by_agent: Rows
    data: Path | None
    html: Path


def _no_progress(text: str) -> None:
    pass


def run_demo(
    data: Path | None = None,
    *,
    html: Path | None = None,
    png: Path | None = None,
    svg: Path | None = None,
    minutes: float = 40.0,
    stream_seconds: float = 12.0,
    seed: int = 0,
    examples: Path | None = None,
    no_examples: bool = False,
    step: Callable[[str], None] = _no_progress,
    bar: Callable[[int, int, str], None] | None = None,
) -> DemoResult:
    """Run the demo into the lake in ``data`` (a temporary one, removed after, when None).

    The report goes to ``html``, else to ``traceflow-demo.html`` beside the lake: inside ``data``, or
    in the temporary folder that held the temporary lake (which is kept for it). Never into the
    current directory unless asked.

    ``step`` receives one line per stage; ``bar`` (done, total, label) the progress of the stream.
    """
    from traceflow.analysis.mix import token_mix_rows
    from traceflow.dashboards.render import javascript_bundle, write_report
    from traceflow.dashboards.report_data import ReportOptions
    from traceflow.replay.synth import generate, preset
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection

    if minutes <= 0 or stream_seconds < 0:
        raise UsageError("--minutes must be positive and --stream-seconds not negative")
    try:
        import opentelemetry.exporter.otlp.proto.http._log_exporter
        import opentelemetry.sdk._logs  # noqa: F401
    except ImportError:
        raise UsageError(
            "traceflow demo sends its traffic with the OpenTelemetry SDK: "
            "pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"
        ) from None
    # bundling the Vega libraries takes seconds the first time: do it while the traffic streams
    threading.Thread(target=javascript_bundle, daemon=True).start()
    temp = None
    if data is None:
        temp = Path(tempfile.mkdtemp(prefix="traceflow-demo-"))
        data = temp / "data"
    if html is None:
        html = (temp if temp is not None else data) / REPORT_NAME
    html = html.expanduser().absolute()
    lake = Lake(data)
    try:
        step(f"starting a collector on free loopback ports (data {data})")
        proc, url = start_collector(data)
        try:
            step(f"collector ready: OTLP/HTTP on {url}")
            trace = generate(preset("agentic-coding"), minutes * 60.0, seed=seed)
            frame = trace.replay_frame()
            step(
                f"streaming {frame.height:,} Claude Code api_request events of {minutes:g} min of "
                f"agentic-coding "
                f"sessions through OTLP/HTTP (OpenTelemetry SDK), time-warped into ~{stream_seconds:g} s"
            )
            before = count_requests(lake, "otlp")
            sent = stream_otlp(
                frame,
                url,
                wall_s=stream_seconds,
                progress=None if bar is None else (lambda d, t: bar(d, t, "sent")),
            )
            step(
                f"sent {sent['requests']:,} events "
                f"({sent['span_s'] / 60:.1f} min of traffic at {sent['warp']:.0f}x)"
            )
            deadline = time.monotonic() + 30
            while (got := count_requests(lake, "otlp") - before) < sent[
                "requests"
            ] and time.monotonic() < deadline:
                time.sleep(0.25)
            step(f"the collector stored {got:,} requests in the lake")
        finally:
            stop_collector(proc)
        folder = None if no_examples else (examples or examples_dir())
        if folder is not None and folder.is_dir():
            imported = import_examples(lake, folder)
            step(
                f"imported the example logs in {folder}: "
                + ", ".join(f"{name} ({source})" for name, source, _ in imported)
            )
        elif not no_examples:
            step("no bundled example logs found (pass --examples DIR); skipped")
        # the report covers the streamed traffic; the examples are months old and would stretch every
        # time axis, so they show in the per-agent mix and stay in the lake (--data keeps it)
        since = dt.datetime.fromtimestamp(sent["start_ns"] / 1e9 - 60, dt.UTC)
        step(f"running the analyses and writing the report (requests since {since:%H:%M:%S} UTC)")
        options = ReportOptions(tiers=DEMO_TIERS)
        written = write_report(lake, Selection(since=since), options, html=html, png_dir=png, svg_dir=svg)
        by_agent = token_mix_rows(lake.connect(["requests"]), None, ["agent"])
    finally:
        if temp is not None:
            shutil.rmtree(data, ignore_errors=True)  # the temporary lake; the report beside it stays
            with contextlib.suppress(OSError):
                temp.rmdir()  # empty when the report went elsewhere (--out)
    return DemoResult(written, by_agent, None if temp is not None else data, html)
