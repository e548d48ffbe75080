"""CLI commands for replay workloads: ``export``, ``fit`` and ``synth`` (see :data:`COMMANDS`).

Heavy imports (polars, numpy, the OpenTelemetry SDK) happen inside the command bodies, so
``traceflow --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.options import (
    DataOpt,
    FormatOpt,
    LakeQuery,
    display,
    open_lake,
    with_lake_query,
    with_selection,
)
from traceflow.errors import UsageError
from traceflow.units import parse_duration

if TYPE_CHECKING:
    from collections.abc import Callable

    from traceflow.output import Rows
    from traceflow.store.selection import Selection

BlockOpt = Annotated[
    int | None,
    typer.Option("--block-size", help="Tokens per hash-id block (default 512; 64 for kvcache-tester)."),
]
SpeedupOpt = Annotated[
    float,
    typer.Option("--speedup", help="Time-warp: play k× faster (divides arrival times, delays, think times)."),
]


def _summary(values: dict[str, Any]) -> Rows:
    from traceflow.output import Rows

    return Rows(list(values), [list(values.values())])


def _echo(values: dict[str, Any], fmt: str) -> None:
    from traceflow.output import render

    typer.echo(render(_summary(values), fmt, single=True, display=display()))


@with_selection
@with_lake_query
def export_cmd(
    fmt_name: Annotated[str, typer.Argument(metavar="FORMAT", help="mooncake, aiperf or kvcache-tester.")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="File to write (a directory for kvcache-tester).")
    ],
    block_size: BlockOpt = None,
    speedup: SpeedupOpt = 1.0,
    limit: Annotated[int | None, typer.Option(help="Only the first N requests in arrival order.")] = None,
    ignore_cache_reads: Annotated[
        bool,
        typer.Option(
            "--ignore-cache-reads",
            help="Derive prefixes from token counts only, not from the cache reads agents report.",
        ),
    ] = False,
    max_context: Annotated[
        int | None,
        typer.Option(
            "--max-context",
            help="Keep every replayed context within N tokens, compacting as the agent does at its cap "
            "(mooncake, aiperf).",
        ),
    ] = None,
    summary_tokens: Annotated[
        int | None,
        typer.Option(
            "--summary-tokens",
            help="With --max-context: the context a compacted session restarts from (default 20000, "
            "an assumption: Claude Code's system prompt, tools and summary).",
        ),
    ] = None,
    *,
    selection: Selection,
    query: LakeQuery,
) -> None:
    """Export the selected requests as a replay trace (Mooncake JSONL, AIPerf sessions, kv-cache-tester).

    Also writes a manifest beside it (trace.jsonl -> trace.manifest.json): counts, statistics and the
    command lines that replay it. With --engine spark the lake is read on Spark (the same query); the
    hash ids and the files are derived here from what it returns, identical to DuckDB's.
    """
    from traceflow.replay.compaction import DEFAULT_SUMMARY_TOKENS
    from traceflow.replay.export import check_format as check_export_format
    from traceflow.replay.export import check_max_context, export
    from traceflow.replay.prefix import PrefixOptions

    check_export_format(fmt_name)
    check_max_context(fmt_name, max_context)
    if summary_tokens is not None and max_context is None:
        raise UsageError("--summary-tokens needs --max-context N")
    manifest = export(
        query.source(["requests"]),
        selection,
        fmt_name,
        output,
        block_size=block_size,
        speedup=speedup,
        limit=limit,
        options=PrefixOptions(use_measured=not ignore_cache_reads),
        max_context=max_context,
        summary_tokens=DEFAULT_SUMMARY_TOKENS if summary_tokens is None else summary_tokens,
    )
    _echo(_export_summary(manifest, output), query.fmt)


def _export_summary(manifest: dict[str, Any], output: Path) -> dict[str, Any]:
    counts = manifest["counts"]
    cache = manifest["statistics"].get("infinite_cache") or {}
    return {
        "format": manifest["format"],
        "output": str(output),
        "manifest": manifest.get("manifest"),
        "requests": counts["requests"],
        "sessions": counts["sessions"],
        "streams": counts.get("streams"),
        "rows": counts.get("rows"),
        "block_size": manifest["block_size"],
        "speedup": manifest["speedup"],
        "requests_with_source_ids": counts.get("requests_kept", 0),
        "requests_derived": counts.get("requests_derived", 0),
        "prefix_hit_ratio": cache.get("prefix_hit_ratio"),
        "input_tokens_max": manifest["statistics"]["input_tokens"].get("max"),
        # aiperf: the largest context AIPerf will send (its live replies included)
        "replayed_context_max_tokens": counts.get("replayed_context_max_tokens"),
        **_compaction_summary(manifest.get("compaction")),
    }


def _compaction_summary(compaction: dict[str, Any] | None) -> dict[str, Any]:
    """The ``--max-context`` figures of an export summary (none without the option)."""
    if compaction is None:
        return {}
    return {
        "max_context": compaction["max_context"],
        "summary_tokens_assumed": compaction["summary_tokens"],
        "sessions_compacted": compaction["sessions_compacted"],
        "compactions": compaction["compactions"],
        "requests_truncated": compaction["requests_truncated"],
    }


@with_selection
def fit(
    output: Annotated[Path, typer.Option("--output", "-o", help="The profile JSON to write.")],
    idle_after: Annotated[
        str, typer.Option(help="A gap at least this long is a pause (idle/resume cohort), not think time.")
    ] = "10m",
    name: Annotated[str | None, typer.Option(help="Name stored in the profile.")] = None,
    *,
    selection: Selection,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Fit a workload profile (arrivals, turns, appended/output tokens, think time, pauses, context cap)."""
    from traceflow.paths import output_file
    from traceflow.replay.fit import fit as fit_profile
    from traceflow.replay.workload import dump_profile

    output = output_file(output, "-o")
    con = open_lake(data).connect(["requests"])
    profile = fit_profile(
        con, selection, idle_threshold_s=parse_duration(idle_after, "--idle-after"), name=name
    )
    dump_profile(profile, output)
    fitted = profile["fitted"]
    for note in ("sample_note", "arrival_note"):
        if fitted.get(note):
            typer.echo(f"traceflow: warning: {fitted[note]}", err=True)
    med = fitted["medians"]
    _echo(
        {
            "profile": str(output),
            "requests": fitted["requests"],
            "sessions": fitted["sessions"],
            "sessions_per_min": fitted["sessions_per_min"],
            "interarrival_cv": fitted["interarrival_cv"],
            "turns_p50": med["turns"],
            "appended_p50": med["appended"],
            "output_p50": med["output"],
            "think_s_p50": med["think_s"],
            "initial_context_p50": med["initial_context"],
            "context_cap": profile["context"]["cap"],
            "on_cap": profile["context"]["on_cap"],
            "pause_cohort_share": profile["idle"]["cohort_share"],
        },
        fmt,
    )


def _headers(values: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--header {item!r} must look like KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


class _SendProgress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if self.enabled:
            sys.stderr.write(f"\rsent {done:,}/{total:,} requests")
            sys.stderr.flush()
            if done == total:
                sys.stderr.write("\n")


@with_selection
def synth(
    profile: Annotated[
        Path | None, typer.Option("--profile", help="A profile written by `traceflow fit`.")
    ] = None,
    preset: Annotated[
        str | None, typer.Option("--preset", help="A built-in profile: agentic-coding (the default).")
    ] = None,
    duration: Annotated[str, typer.Option(help="Length of the generated trace: 90s, 30m, 2h, 1d.")] = "1h",
    rate_scale: Annotated[float, typer.Option(help="Multiply the session arrival rate by this.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Random seed: one seed, one trace.")] = 0,
    start: Annotated[
        str | None, typer.Option(help="Time of the trace start in the lake (default 1970-01-01T00:00Z).")
    ] = None,
    export_fmt: Annotated[
        str | None, typer.Option("--export", help="Write this export format to -o instead of the lake.")
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File for --export.")] = None,
    block_size: BlockOpt = None,
    speedup: SpeedupOpt = 1.0,
    send: Annotated[
        str | None,
        typer.Option("--send", help="Send the trace as Claude Code OTLP log telemetry to this endpoint."),
    ] = None,
    protocol: Annotated[str, typer.Option(help="OTLP protocol for --send: http/protobuf or grpc.")] = (
        "http/protobuf"
    ),
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="With --send: send at once, stamped as a backfill ending now.")
    ] = False,
    header: Annotated[
        list[str] | None, typer.Option("--header", help="With --send: an OTLP header KEY=VALUE (repeatable).")
    ] = None,
    captured: Annotated[
        bool,
        typer.Option(
            "--captured", help="With --send: replay the selected requests of the lake, not a profile."
        ),
    ] = False,
    limit: Annotated[int | None, typer.Option(help="At most this many requests.")] = None,
    *,
    selection: Selection,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Generate a workload from a profile or preset.

    Into the lake (source synthetic), to an export format, or as live OTLP telemetry (--send URL, the
    load generator).
    """
    if export_fmt is not None and output is None:
        raise UsageError("--export FORMAT needs -o FILE")
    if output is not None and export_fmt is None:
        raise UsageError("-o FILE needs --export FORMAT (mooncake, aiperf or kvcache-tester)")
    if send is not None and export_fmt is not None:
        raise UsageError("give --send URL or --export FORMAT, not both")
    if captured and send is None:
        raise UsageError(
            "--captured replays the lake's requests with --send; use `traceflow export` to write them"
        )
    if profile is not None and preset is not None:
        raise UsageError("give --profile FILE or --preset NAME, not both")
    if captured and (profile is not None or preset is not None):
        raise UsageError("--captured replays the lake's requests; it takes no --profile or --preset")
    if export_fmt is not None:
        from traceflow.replay.export import check_format as check_export_format
        from traceflow.replay.export import check_output

        check_export_format(export_fmt)
        assert output is not None
        output = check_output(output, export_fmt)

    if captured:
        from traceflow.replay.requests import load_requests

        frame = load_requests(open_lake(data).connect(["requests"]), selection, limit=limit)
        _send(frame, send, protocol, speedup, no_wait, header, fmt)  # type: ignore[arg-type]
        return

    from traceflow.replay.synth import generate
    from traceflow.replay.synth import preset as builtin
    from traceflow.replay.workload import load_profile

    prof = load_profile(profile) if profile is not None else builtin(preset or "agentic-coding")
    start_us = 0
    if start is not None:
        from traceflow.store.lake import to_micros
        from traceflow.store.selection import parse_time

        start_us = to_micros(parse_time(start, "--start"))
    trace = generate(
        prof,
        parse_duration(duration, "--duration"),
        rate_scale=rate_scale,
        seed=seed,
        start_us=start_us,
        max_requests=limit,
    )
    summary: dict[str, Any] = {
        "profile": prof.get("name"),
        "seed": seed,
        "duration_s": parse_duration(duration, "--duration"),
        "rate_scale": rate_scale,
        "sessions": len(set(trace.session.tolist())),
        "requests": trace.n,
    }
    if send is not None:
        _send(trace.replay_frame(), send, protocol, speedup, no_wait, header, fmt, summary)
        return
    if export_fmt is not None:
        from traceflow.replay.export import export_frame

        assert output is not None
        manifest = export_frame(
            trace.replay_frame(),
            export_fmt,
            output,
            block_size=block_size,
            speedup=speedup,
            source={"synthetic": {k: v for k, v in summary.items() if k != "requests"}},
        )
        _echo({**summary, **_export_summary(manifest, output)}, fmt)
        return
    from traceflow.replay.synth_trace import write_lake

    lake = open_lake(data, create=True)
    written = write_lake(trace, lake)
    _echo({**summary, "written_to": lake.location, "source": "synthetic", "rows": written}, fmt)


def _send(
    frame: Any,
    url: str,
    protocol: str,
    speedup: float,
    no_wait: bool,
    header: list[str] | None,
    fmt: str,
    extra: dict[str, Any] | None = None,
) -> None:
    from traceflow.replay.loadgen import send as send_otlp

    result = send_otlp(
        frame,
        url,
        protocol=protocol,
        speedup=float("inf") if no_wait else speedup,
        headers=_headers(header),
        progress=_SendProgress(fmt != "json"),
    )
    _echo({**(extra or {}), **result}, fmt)


#: The commands of this module, by name (registered by :mod:`traceflow.cli.app`).
COMMANDS: dict[str, Callable[..., Any]] = {
    "export": export_cmd,
    "fit": fit,
    "synth": synth,
}
