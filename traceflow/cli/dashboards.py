"""Dashboard commands: ``traceflow dashboard`` (a live report on a loopback port) and ``traceflow
demo`` (the whole pipeline in one command). Registered on :data:`traceflow.cli.app.app` on import.

The report itself is :func:`traceflow.dashboards.render.write_report`; heavy imports (altair,
vl-convert, starlette, the OpenTelemetry SDK) stay inside the command bodies.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.app import (
    AgentOpt,
    DataOpt,
    ModelOpt,
    SessionOpt,
    SinceOpt,
    SourceOpt,
    UntilOpt,
    UserOpt,
    app,
    open_lake,
    selection_options,
)
from traceflow.errors import TraceflowError, UsageError

if TYPE_CHECKING:
    import polars as pl

    from traceflow.store.lake import Lake

KvOpt = Annotated[
    float | None,
    typer.Option(
        "--kv-bytes-per-token", help="KV bytes per token for byte figures (default 126976: MiniMax-M2 FP8)."
    ),
]

#: Bundled example files (``traceflow/examples``, see ``examples_dir``) and the importer for each.
EXAMPLE_SOURCES: tuple[tuple[str, str], ...] = (
    ("claude-transcript*.jsonl", "claude-code"),
    ("codex-rollout*.jsonl", "codex"),
    ("gemini-chat*.jsonl", "gemini"),
    ("*-otlp-logs*.json", "otlp-json"),
)


#: Tier marks on the demo's hit-ratio chart: exclusive tiers add up (one H200's HBM, then 1 TB DRAM).
DEMO_TIERS: tuple[tuple[str, float], ...] = (("HBM 141 GB", 141e9), ("+ DRAM 1 TB", 1.141e12))


# ---------------------------------------------------------------------------------------- dashboard


def lake_fingerprint(lake: Lake) -> str:
    """Changes whenever a file is published to (or compacted out of) the lake."""
    count, newest, size = 0, 0, 0
    for table in ("requests", "events"):
        for path in lake.files(table):
            try:
                st = path.stat()
            except OSError:
                continue
            count += 1
            newest = max(newest, st.st_mtime_ns)
            size += st.st_size
    return f"{count}-{newest}-{size}"


def dashboard_app(
    lake: Lake, selection: Any = None, kv_bytes_per_token: float | None = None, refresh_s: float = 5.0
) -> Any:
    """A Starlette app serving the report at ``/`` (rebuilt when the lake changed) and the lake's
    fingerprint at ``/version`` (the page polls it and reloads when it changes)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, PlainTextResponse
    from starlette.routing import Route

    from traceflow.dashboards.render import render_html

    lock = threading.Lock()
    cache: dict[str, str] = {}

    def build() -> str:
        with lock:
            version = lake_fingerprint(lake)
            if cache.get("version") != version:
                page, _, _ = render_html(
                    lake.connect(),
                    selection,
                    kv_bytes_per_token=kv_bytes_per_token,
                    refresh_s=refresh_s,
                    version=version,
                    title="traceflow dashboard",
                )
                cache.update(version=version, page=page)
            return cache["page"]

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(await run_in_threadpool(build), headers={"Cache-Control": "no-store"})

    async def version(request: Request) -> PlainTextResponse:
        return PlainTextResponse(lake_fingerprint(lake), headers={"Cache-Control": "no-store"})

    return Starlette(routes=[Route("/", index), Route("/version", version)])


@app.command()
def dashboard(
    port: Annotated[int, typer.Option(help="Loopback port (0 picks a free one).")] = 8050,
    refresh: Annotated[float, typer.Option(help="Seconds between checks for new data.")] = 5.0,
    kv_bytes_per_token: KvOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    agent: AgentOpt = None,
    model: ModelOpt = None,
    session: SessionOpt = None,
    user: UserOpt = None,
    source: SourceOpt = None,
    data: DataOpt = None,
) -> None:
    """Serve the HTML report on 127.0.0.1 and refresh it as data arrives (Ctrl-C stops)."""
    import socket

    import uvicorn

    selection = selection_options(since, until, agent, model, session, user, source)
    lake = open_lake(data)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as e:
        raise UsageError(
            f"cannot listen on 127.0.0.1:{port} ({e.strerror}); pass --port 0 for a free port"
        ) from None
    typer.echo(
        f"traceflow dashboard: http://127.0.0.1:{sock.getsockname()[1]}/ (data {lake.root}); Ctrl-C stops"
    )
    config = uvicorn.Config(
        dashboard_app(lake, selection, kv_bytes_per_token, refresh), log_level="warning", access_log=False
    )
    uvicorn.Server(config).run(sockets=[sock])


# --------------------------------------------------------------------------------------------- demo


class _Steps:
    """Step lines and a progress bar on stderr (the bar only on a terminal)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty() and not quiet
        self.t0 = time.monotonic()
        self.last = 0.0

    def step(self, text: str) -> None:
        if not self.quiet:
            sys.stderr.write(f"[{time.monotonic() - self.t0:5.1f}s] {text}\n")
            sys.stderr.flush()

    def bar(self, done: int, total: int, label: str) -> None:
        now = time.monotonic()
        if not self.tty or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        frac = done / total if total else 1.0
        sys.stderr.write(f"\r        {label} [{'#' * int(frac * 30):<30}] {done:,}/{total:,}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def examples_dir() -> Path | None:
    """The example agent logs installed with traceflow (``traceflow/examples``: small hand-written
    Claude Code, Codex and Gemini CLI logs, copies of ``tests/data/agent-examples``); None when this
    install lacks them."""
    path = Path(__file__).resolve().parents[1] / "examples"
    return path if path.is_dir() else None


def start_collector(data: Path, timeout_s: float = 30.0) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m traceflow.collectors.server`` on a free loopback port; (process, OTLP/HTTP URL)."""
    cmd = [
        sys.executable,
        "-m",
        "traceflow.collectors.server",
        "--data",
        str(data),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--summary-interval",
        "3600",
    ]
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
            m = re.search(r"OTLP/HTTP on (http://[^\s,]+)", line)
            if m:
                return proc, m.group(1)
        if proc.poll() is not None:
            raise TraceflowError(f"the collector exited with status {proc.returncode} before it was ready")
        time.sleep(0.05)
    stop_collector(proc)
    raise TraceflowError(f"the collector was not ready within {timeout_s:g} s")


def stop_collector(proc: subprocess.Popen[str], timeout_s: float = 20.0) -> None:
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

    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    from traceflow.replay.loadgen import CLAUDE_CODE_VERSION, build_records

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
        logger.emit(
            LogRecord(
                timestamp=ts,
                observed_timestamp=ts,
                body="claude_code.api_request",
                attributes=attrs,
                event_name="claude_code.api_request",
            )
        )
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


def _count_requests(lake: Lake, source: str | None = None) -> int:
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


@app.command()
def demo(
    data: Annotated[
        Path | None,
        typer.Option(
            "--data", help="Keep the demo's lake in DIR (default: a temporary lake, removed after)."
        ),
    ] = None,
    html: Annotated[Path, typer.Option("--html", help="Where to write the HTML report.")] = Path(
        "traceflow-demo.html"
    ),
    png: Annotated[Path | None, typer.Option("--png", help="Also write one PNG per chart into DIR.")] = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Also write one SVG per chart into DIR.")] = None,
    minutes: Annotated[float, typer.Option(help="Minutes of agentic-coding sessions arriving.")] = 40.0,
    stream_seconds: Annotated[
        float, typer.Option(help="Wall-clock seconds to stream them in (time warp).")
    ] = 12.0,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic workload.")] = 0,
    examples: Annotated[
        Path | None, typer.Option(help="Folder of example agent logs to import (default: the bundled ones).")
    ] = None,
    no_examples: Annotated[
        bool, typer.Option("--no-examples", help="Do not import the example logs.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
) -> None:
    """Run the whole pipeline in under a minute: collector, live OTLP, import, analyses, HTML report."""
    import datetime as dt

    from traceflow.dashboards.render import javascript_bundle, write_report
    from traceflow.replay.workload import generate, preset
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
    steps = _Steps(quiet)
    # bundling the Vega libraries takes seconds the first time: do it while the traffic streams
    threading.Thread(target=javascript_bundle, daemon=True).start()
    temp = None
    if data is None:
        temp = Path(tempfile.mkdtemp(prefix="traceflow-demo-"))
        data = temp / "data"
    lake = Lake(data)
    try:
        steps.step(f"starting a collector on free loopback ports (data {data})")
        proc, url = start_collector(data)
        try:
            steps.step(f"collector ready: OTLP/HTTP on {url}")
            trace = generate(preset("agentic-coding"), minutes * 60.0, seed=seed)
            frame = trace.replay_frame()
            steps.step(
                f"streaming {frame.height:,} Claude Code api_request events of {minutes:g} min of "
                f"agentic-coding "
                f"sessions through OTLP/HTTP (OpenTelemetry SDK), time-warped into ~{stream_seconds:g} s"
            )
            before = _count_requests(lake, "otlp")
            sent = stream_otlp(
                frame, url, wall_s=stream_seconds, progress=lambda d, t: steps.bar(d, t, "sent")
            )
            steps.step(
                f"sent {sent['requests']:,} events "
                f"({sent['span_s'] / 60:.1f} min of traffic at {sent['warp']:.0f}x)"
            )
            deadline = time.monotonic() + 30
            while (got := _count_requests(lake, "otlp") - before) < sent[
                "requests"
            ] and time.monotonic() < deadline:
                time.sleep(0.25)
            steps.step(f"the collector stored {got:,} requests in the lake")
        finally:
            stop_collector(proc)
        folder = None if no_examples else (examples or examples_dir())
        if folder is not None and folder.is_dir():
            imported = import_examples(lake, folder)
            steps.step(
                f"imported the example logs in {folder}: "
                + ", ".join(f"{name} ({source})" for name, source, _ in imported)
            )
        elif not no_examples:
            steps.step("no bundled example logs found (pass --examples DIR); skipped")
        # the report covers the streamed traffic; the examples are months old and would stretch every
        # time axis, so they show in the per-agent mix below and stay in the lake (--data keeps it)
        since = dt.datetime.fromtimestamp(sent["start_ns"] / 1e9 - 60, dt.UTC)
        steps.step(f"running the analyses and writing the report (requests since {since:%H:%M:%S} UTC)")
        written = write_report(
            lake, Selection(since=since), html=html, png_dir=png, svg_dir=svg, tiers=DEMO_TIERS
        )
        from traceflow.analysis.mix import token_mix_rows
        from traceflow.output import render

        by_agent = render(token_mix_rows(lake.connect(["requests"]), None, ["agent"]), "table")
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    typer.echo("traceflow demo")
    typer.echo("==============")
    for line in written["headline"]:
        typer.echo(f"* {line}")
    typer.echo("")
    typer.echo("Token mix per agent, whole lake (the streamed traffic and the imported examples):")
    typer.echo(by_agent)
    typer.echo("")
    typer.echo(
        f"HTML report: {html} ({written['html_bytes'] / 1e6:.1f} MB, "
        f"{len(written['charts'])} charts, opens offline)"
    )
    for kind in ("png", "svg"):
        if written.get(kind):
            typer.echo(f"{kind.upper()} charts: {Path(written[kind][0]).parent}")
    if temp is None:
        typer.echo(f"data: {data} (try `traceflow report --data {data}`)")
    steps.step("done")
