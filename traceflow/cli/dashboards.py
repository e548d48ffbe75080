"""Dashboard commands: ``traceflow dashboard`` (the shared explorer, on loopback or signed in,
:mod:`traceflow.dashboards.live`) and ``traceflow demo`` (the whole pipeline in one command,
:mod:`traceflow.dashboards.demo`).

Heavy imports (altair, vl-convert, starlette, the OpenTelemetry SDK) happen in the library, when a
command runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.options import DataOpt, open_lake, with_selection
from traceflow.cli.sizing import KvChoice, with_kv
from traceflow.dashboards import live

if TYPE_CHECKING:
    from collections.abc import Callable

    from traceflow.store.selection import Selection

KvOpt = Annotated[
    float | None,
    typer.Option(
        "--kv-bytes-per-token",
        help="KV bytes per token for byte figures (default 126976: MiniMax-M2 FP8; or --kv-model NAME).",
    ),
]


@with_selection
@with_kv
def dashboard(
    kv: KvChoice,
    port: Annotated[int, typer.Option(help="Port (0 picks a free one).")] = live.DEFAULT_PORT,
    host: Annotated[
        str, typer.Option(help="Address to bind; anything but loopback requires --tokens.")
    ] = live.DEFAULT_HOST,
    tokens: Annotated[
        Path | None,
        typer.Option(
            help="File of 'TEAM TOKEN' lines (as serve --tokens): viewers sign in with a token and see "
            "their team's rows (team * sees all); re-read when it changes.",
            show_default=False,
        ),
    ] = None,
    refresh: Annotated[
        float, typer.Option(help="Seconds between checks for new data.")
    ] = live.DEFAULT_REFRESH_S,
    kv_bytes_per_token: KvOpt = None,
    *,
    selection: Selection,
    data: DataOpt = None,
) -> None:
    """Serve the explorer: filters, a team's sessions, a session's timeline, the report, a JSON API.

    On 127.0.0.1 by default; another --host needs --tokens, and each viewer signs in (Ctrl-C stops).
    """
    live.check_bind(host, port, tokens)  # before the lake is opened (and refreshed)
    kv_bytes_per_token, kv_said = kv.per_token(kv_bytes_per_token)
    assumed = kv_said or "MiniMax-M2 fp8: 126,976 B/token, the default (--kv-model NAME for yours)"
    lake = open_lake(data)
    live.serve_dashboard(
        lake,
        selection,
        host=host,
        port=port,
        tokens=tokens,
        refresh_s=refresh,
        kv_bytes_per_token=kv_bytes_per_token,
        kv_said=kv_said,
        ready=lambda url: typer.echo(
            f"traceflow dashboard: {url} (data {lake.location}; KV bytes: {assumed}); Ctrl-C stops"
        ),
    )


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


def demo(
    data: Annotated[
        Path | None,
        typer.Option(
            "--data", help="Keep the demo's lake in DIR (default: a temporary lake, removed after)."
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "--html",
            help="Where to write the HTML report (default: traceflow-demo.html beside the demo's lake).",
        ),
    ] = None,
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
    from traceflow.dashboards.demo import run_demo
    from traceflow.output import render

    steps = _Steps(quiet)
    result = run_demo(
        data,
        html=html,
        png=png,
        svg=svg,
        minutes=minutes,
        stream_seconds=stream_seconds,
        seed=seed,
        examples=examples,
        no_examples=no_examples,
        step=steps.step,
        bar=steps.bar,
    )
    written = result.written
    typer.echo("traceflow demo")
    typer.echo("==============")
    for line in written["headline"]:
        typer.echo(f"* {line}")
    typer.echo("")
    typer.echo("Token mix per agent, whole lake (the streamed traffic and the imported examples):")
    typer.echo(render(result.by_agent, "table"))
    typer.echo("")
    typer.echo(
        f"HTML report: {result.html} ({written['html_bytes'] / 1e6:.1f} MB, "
        f"{len(written['charts'])} charts, opens offline)"
    )
    for kind in ("png", "svg"):
        if written.get(kind):
            typer.echo(f"{kind.upper()} charts: {Path(written[kind][0]).parent}")
    if result.data is not None:
        typer.echo(f"data: {result.data} (try `traceflow report --data {result.data}`)")
    steps.step("done")


#: The commands of this module, by name (registered by :mod:`traceflow.cli.app`).
COMMANDS: dict[str, Callable[..., Any]] = {
    "dashboard": dashboard,
    "demo": demo,
}
