"""``traceflow models``, ``traceflow size`` and ``traceflow simulate``: KV tier sizing and cache simulation.

Each command parses its options, calls :mod:`traceflow.kv.models`, :mod:`traceflow.kv.sizing`,
:mod:`traceflow.kv.simulate` or :mod:`traceflow.kv.lake_trace`, and prints.

``--model`` is the lake filter every analysis command has; the KV geometry comes from
``--kv-model NAME`` (the catalogue) or ``--config config.json``, and falls back to a single
``--model`` value when that names a catalogue model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.options import DataOpt, FormatOpt, display, open_lake, with_options, with_selection
from traceflow.errors import UsageError
from traceflow.kv.sizing import DEFAULT_PREFILL_RATE, DEFAULT_SSD

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from traceflow.kv.geometry import KVSize
    from traceflow.kv.simulate import SimConfig
    from traceflow.store.selection import Selection

KvModelOpt = Annotated[
    str | None,
    typer.Option("--kv-model", help="Catalogue model whose KV geometry to use (`traceflow models`)."),
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="A Hugging Face config.json instead of --kv-model.")
]
DtypeOpt = Annotated[
    str | None,
    typer.Option("--dtype", help="KV-cache dtype: bf16, fp16, fp8, fp8_ds_mla, fp32 (default: the model's)."),
]
MtpOpt = Annotated[bool, typer.Option("--mtp", help="Count the MTP draft layer(s) as KV layers.")]
SwaOpt = Annotated[
    bool, typer.Option("--swa-uncapped", help="Count sliding-window layers per token (no hybrid allocator).")
]
TierOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tier",
        help="NAME=SIZE[:read=BW][:latency=DUR][:ttl=DUR][:kind=KIND], top tier first; repeatable "
        "(e.g. --tier gpu=80GB --tier dram=512GB --tier ssd=100TB).",
    ),
]


@dataclass(frozen=True)
class KvChoice:
    """``--kv-model``, ``--config``, ``--dtype``, ``--mtp`` and ``--swa-uncapped``: the KV geometry."""

    kv_model: str | None = None
    config: Path | None = None
    dtype: str | None = None
    mtp: bool = False
    swa_uncapped: bool = False

    def resolve(self, model_filter: Sequence[str]) -> tuple[str, KVSize]:
        """The model's name and KV size; a single ``--model`` filter names it when nothing else does."""
        from traceflow.kv import models

        name = self.kv_model
        if name is None and self.config is None:
            if model_filter and len(model_filter) == 1:
                name = model_filter[0]
            else:
                raise UsageError(
                    "name the model: --kv-model NAME (see `traceflow models`) or --config config.json"
                )
        capped = not self.swa_uncapped
        if self.config is None and name is not None:
            spec = models.find_model(name)
            return spec.name, spec.kv(self.dtype, swa_capped=capped, mtp=self.mtp)
        return models.resolve(name, self.config, self.dtype, swa_capped=capped, mtp=self.mtp)

    def per_token(self, raw: float | None) -> tuple[float | None, str | None]:
        """For the commands that turn tokens into bytes (``working-set``, ``report``, ``dashboard``):
        the KV bytes per token, from ``--kv-model``/``--config`` (resolved as ``size`` and ``simulate``
        do) or ``raw`` (``--kv-bytes-per-token``), and the assumption in words (None: none given)."""
        named = self.kv_model is not None or self.config is not None
        if named and raw is not None:
            raise UsageError("give --kv-model NAME (or --config) or --kv-bytes-per-token N, not both")
        if not named:
            if self.dtype is not None or self.mtp or self.swa_uncapped:
                raise UsageError("--dtype, --mtp and --swa-uncapped shape a model's KV: add --kv-model NAME")
            return raw, None if raw is None else f"{raw:,.0f} B/token (--kv-bytes-per-token)"
        name, size = self.resolve(())
        said = f"{name} {size.dtype}: {size.per_token_bytes:,} B/token"
        if size.per_session_bytes:
            said += f" (its {size.per_session_bytes:,} B of state per session not counted)"
        return float(size.per_token_bytes), said


#: The KV-geometry options, as ``size`` and ``simulate`` show them.
KV_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("kv_model", KvModelOpt, None),
    ("config", ConfigOpt, None),
    ("dtype", DtypeOpt, None),
    ("mtp", MtpOpt, False),
    ("swa_uncapped", SwaOpt, False),
)

#: Gives a command the KV-geometry options in place of its ``kv: KvChoice`` parameter.
with_kv = with_options("kv", KV_OPTIONS, KvChoice)

PolicyOpt = Annotated[str, typer.Option(help="lru, prefix-lru (evict chain tails first) or ttl.")]
SimTtlOpt = Annotated[str | None, typer.Option("--ttl", help="TTL for tiers without :ttl= (policy ttl).")]
InclusiveOpt = Annotated[
    bool, typer.Option("--inclusive/--exclusive", help="Write-through copies in every tier, or one copy.")
]
PromoteOpt = Annotated[bool, typer.Option("--promote/--no-promote", help="Move lower-tier hits to the top.")]
PrefillRateOpt = Annotated[
    float | None,
    typer.Option(
        "--prefill-rate",
        help=f"Tokens/s recomputed on a miss (default {DEFAULT_PREFILL_RATE:,}: the presets' calibrated "
        "prefill FLOP/s over MiniMax-M2's FLOPs per token at 64k).",
    ),
]
OverlapOpt = Annotated[bool, typer.Option(help="TTFT = max(load, compute) instead of their sum.")]
ResumeAfterOpt = Annotated[str, typer.Option("--resume-after", help="Idle time that makes a resume.")]
BucketOpt = Annotated[str, typer.Option(help="Width of the results-over-time buckets.")]


@dataclass(frozen=True)
class SimChoice:
    """``--tier``, ``--policy``, ``--ttl``, ``--inclusive``, ``--promote``, ``--prefill-rate``,
    ``--overlap``, ``--resume-after`` and ``--bucket``: the tier hierarchy a simulation replays through."""

    tier: list[str] | None = None
    policy: str = "lru"
    ttl: str | None = None
    inclusive: bool = False
    promote: bool = True
    prefill_rate: float | None = None
    overlap: bool = False
    resume_after: str = "15m"
    bucket: str = "1m"

    def config(self, kv_size: KVSize) -> SimConfig:
        """The :class:`~traceflow.kv.simulate.SimConfig` for a model of ``kv_size`` (one ``gpu=80GB``
        tier when no ``--tier`` is given)."""
        from traceflow.kv.simulate import SimConfig
        from traceflow.kv.sizing import DEFAULT_PREFILL_RATE
        from traceflow.units import parse_duration

        return SimConfig(
            tiers=_tiers(self.tier, ["gpu=80GB"]),
            kv=kv_size,
            policy=self.policy,
            inclusive=self.inclusive,
            promote=self.promote,
            prefill_rate=DEFAULT_PREFILL_RATE if self.prefill_rate is None else self.prefill_rate,
            overlap=self.overlap,
            resume_after_s=parse_duration(self.resume_after, "--resume-after"),
            bucket_s=parse_duration(self.bucket, "--bucket"),
            ttl_s=parse_duration(self.ttl, "--ttl") if self.ttl else None,
        )


#: The options of :class:`SimChoice`, as ``simulate`` shows them, with their defaults.
SIM_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("tier", TierOpt, None),
    ("policy", PolicyOpt, "lru"),
    ("ttl", SimTtlOpt, None),
    ("inclusive", InclusiveOpt, False),
    ("promote", PromoteOpt, True),
    ("prefill_rate", PrefillRateOpt, None),
    ("overlap", OverlapOpt, False),
    ("resume_after", ResumeAfterOpt, "15m"),
    ("bucket", BucketOpt, "1m"),
)

#: Gives a command the tier-hierarchy options in place of its ``sim: SimChoice`` parameter.
with_sim_config = with_options("sim", SIM_OPTIONS, SimChoice)


def _tiers(specs: list[str] | None, default: list[str]) -> tuple[Any, ...]:
    from traceflow.kv.sizing import parse_tier

    return tuple(parse_tier(s) for s in (specs or default))


def _fmt_num(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return value


def _kv_rows(d: dict[str, Any], skip: tuple[str, ...] = ()) -> Any:
    from traceflow.output import Rows

    rows = [(k, _fmt_num(v)) for k, v in d.items() if not isinstance(v, list | dict) and k not in skip]
    # Numbers stay numbers: the table gives each its unit from the metric's name (traceflow.output).
    return Rows(["metric", "value"], [(k, str(v).lower() if isinstance(v, bool) else v) for k, v in rows])


def _table(records: list[dict[str, Any]]) -> Any:
    from traceflow.output import Rows

    if not records:
        return Rows(["(none)"], [])
    cols = list(records[0])
    return Rows(cols, [[_fmt_num(r.get(c)) for c in cols] for r in records])


def models(fmt: FormatOpt = "table") -> None:
    """List the model catalogue: KV bytes per token (BF16, FP8) and per-session state."""
    from traceflow.kv.models import catalogue_rows
    from traceflow.output import render

    typer.echo(render(_table(catalogue_rows()), fmt, display=display()))


@with_selection
@with_kv
def size(
    kv: KvChoice,
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="New KV tokens per second (default: measured from the lake)."),
    ] = None,
    input_rate: Annotated[
        float | None,
        typer.Option("--input-rate", help="Input tokens per second, for cost per token (default: --rate)."),
    ] = None,
    ttl: Annotated[
        list[str] | None, typer.Option("--ttl", help="Retention time(s): 300, 5m, 1h (repeatable).")
    ] = None,
    tier: TierOpt = None,
    drives: Annotated[int, typer.Option(help="SSDs in the array.")] = DEFAULT_SSD.drives,
    drive_size: Annotated[
        str, typer.Option("--drive-size", help="Capacity of one SSD.")
    ] = f"{DEFAULT_SSD.drive_bytes / 1e12:g}TB",
    raid: Annotated[str, typer.Option(help="raid0, raid1, raid10, raid5 or raid6.")] = DEFAULT_SSD.raid,
    rated_dwpd: Annotated[
        float, typer.Option("--rated-dwpd", help="The SSDs' rated drive writes per day.")
    ] = DEFAULT_SSD.rated_dwpd,
    warranty_years: Annotated[
        float, typer.Option("--warranty-years", help="Years the rating covers.")
    ] = DEFAULT_SSD.warranty_years,
    waf: Annotated[float, typer.Option(help="Write amplification inside the SSD.")] = DEFAULT_SSD.waf,
    ssd_write_rate: Annotated[
        str | None,
        typer.Option("--ssd-write-rate", help="Bytes/s written to flash (default: rate × KV bytes)."),
    ] = None,
    sessions: Annotated[int, typer.Option(help="Sessions held at once (adds per-session state).")] = 0,
    rent_hbm: Annotated[
        bool,
        typer.Option(
            "--rent-hbm",
            help="Bill HBM tiers as their share of rented GPU-hours (default: owned, not billed).",
        ),
    ] = False,
    prices: Annotated[
        Path | None,
        typer.Option(
            "--prices",
            help="JSON file overriding the dated prices (start from a copy of traceflow/kv/prices.json).",
        ),
    ] = None,
    *,
    selection: Selection,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Size KV tiers: bytes per token, footprint per TTL, tier hold time, SSD wear (DWPD) and cost."""
    from traceflow.kv.sizing import Prices, SsdArray, size_report
    from traceflow.output import document, render, to_json
    from traceflow.units import parse_bandwidth, parse_duration, parse_size

    name, kv_size = kv.resolve(selection.models)
    source_note = "given"
    ttls = [parse_duration(t, "--ttl") for t in (ttl or ["1h"])]
    measured: dict[str, Any] = {}
    if rate is None:
        from traceflow.kv.lake_trace import measured_rates

        con = open_lake(data).connect(["requests"])
        rate, measured_input, span = measured_rates(con, selection)
        input_rate = input_rate if input_rate is not None else measured_input
        source_note = f"measured over {span:,.0f} s of the lake's selection"
        measured = _measured_footprints(
            open_lake(data).connect(["requests"]), selection, ttls[0], kv_size.per_token_bytes
        )
    report = size_report(
        kv_size,
        rate,
        ttls,
        _tiers(tier, ["gpu=80GB", "dram=1TB"]),
        SsdArray(drives, parse_size(drive_size, "--drive-size"), raid, rated_dwpd, warranty_years, waf),
        Prices.load(prices),
        model=name,
        input_rate_tok_s=input_rate,
        ssd_write_bytes_per_s=parse_bandwidth(ssd_write_rate, "--ssd-write-rate") if ssd_write_rate else None,
        sessions=sessions,
        rate_source=source_note,
        rent_hbm=rent_hbm,
    )
    from traceflow.kv.headline import sizing_headline

    first = report["footprints"][0]
    report = {
        "headline": sizing_headline(
            ttls[0], first["footprint_bytes"], first["footprint_upper_bytes"], **measured
        ),
        **report,
    }
    if fmt == "json":
        typer.echo(to_json(document(report, display())))
        return
    parts = [
        report["headline"]["headline"],
        render(_kv_rows(_prefixed("headline", report["headline"], skip="headline")), fmt, display=display()),
        render(_kv_rows(report), fmt, display=display()),
        render(_table(report["footprints"]), fmt, display=display()),
        render(_table(report["tiers"]), fmt, display=display()),
    ]
    typer.echo("\n\n".join(parts))


def _prefixed(prefix: str, values: dict[str, Any], skip: str) -> dict[str, Any]:
    return {f"{prefix}.{k}": v for k, v in values.items() if k != skip}


def _measured_footprints(con: Any, selection: Selection, ttl_s: float, kv_bytes: int) -> dict[str, Any]:
    """The working-set peak at ``ttl_s`` and the LRU capacity keeping
    :data:`~traceflow.kv.headline.LRU_SHARE` of the unbounded prefix hits, measured on the selection
    (the arguments of :func:`~traceflow.kv.headline.sizing_headline`)."""
    from traceflow.analysis.working_set import working_set_summary
    from traceflow.kv.headline import LRU_SHARE
    from traceflow.kv.lake_trace import lake_trace
    from traceflow.kv.simulate import capacity_for_share
    from traceflow.store import time_base

    try:  # one clock: a selection mixing agent telemetry and public traces has no working set
        ws = working_set_summary(con, selection, [ttl_s], time_base.headline_resolution(), kv_bytes)
    except UsageError as e:
        return {"unmeasured": str(e)}
    peak = ws["peak_bytes"][0] if ws.height else None
    trace = lake_trace(con, selection, LRU_BLOCK)
    blocks, ratio = capacity_for_share(trace, LRU_SHARE)
    return {
        "working_set_peak_bytes": float(peak) if peak is not None else None,
        "lru_capacity_bytes": float(blocks * LRU_BLOCK * kv_bytes),
        "lru_unbounded_hit_ratio": ratio,
    }


#: Tokens per block of the LRU cross-check in ``size`` (the exports' and ``simulate``'s default).
LRU_BLOCK = 512


@with_selection
@with_kv
@with_sim_config
def simulate(
    kv: KvChoice,
    sim: SimChoice,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="A Mooncake JSONL trace instead of the lake.")
    ] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", help="Built-in synthetic trace instead: agentic-coding.")
    ] = None,
    duration: Annotated[str, typer.Option(help="Length of the --workload trace.")] = "2h",
    seed: Annotated[int, typer.Option(help="Seed of the --workload trace.")] = 0,
    block_size: Annotated[
        int, typer.Option("--block-size", help="Tokens per block where the trace has none.")
    ] = 512,
    sweep: Annotated[
        bool, typer.Option("--sweep", help="Add the LRU hit-ratio-versus-capacity curve.")
    ] = False,
    per_minute: Annotated[
        bool, typer.Option("--per-minute", help="Print the results over time (table).")
    ] = False,
    serving: Annotated[
        str | None,
        typer.Option(
            "--serving",
            help="Serve the workload on a box (preset h200, rtx-pro-6000x4[+dram|+flash] or a JSON/TOML "
            "file): batching, queueing, loads; the lake's selection, or --workload agentic-coding.",
        ),
    ] = None,
    rate_scale: Annotated[
        float | None,
        typer.Option("--rate-scale", help="With --serving on the lake: offer about K times its sessions."),
    ] = None,
    instances: Annotated[
        int, typer.Option("--instances", help="Serving instances, each with its own --tier hierarchy.")
    ] = 1,
    router: Annotated[
        str, typer.Option(help="How --instances share requests: session-hash or prefix (KV-aware).")
    ] = "session-hash",
    shared_tier: Annotated[
        str | None,
        typer.Option(
            "--shared-tier",
            help="NAME=SIZE[:read=BW][:latency=DUR][:kind=KIND]: an LRU object store the instances share, "
            "below their own tiers (e.g. obj=100TB:kind=object).",
        ),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(help="Processes that run the instances (default: min(instances, CPUs)).")
    ] = None,
    engine: Annotated[
        str,
        typer.Option("--engine", help="Where the instances run: local (processes) or spark (a task each)."),
    ] = "local",
    spark_remote: Annotated[
        str | None,
        typer.Option("--spark-remote", help="With --engine spark: a master URL (default local[*])."),
    ] = None,
    *,
    selection: Selection,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Replay traffic through a KV tier hierarchy (or a fleet of them): hits per tier, recompute, TTFT."""
    if block_size < 1:
        raise UsageError(f"--block-size {block_size} must be at least 1 token")
    fleet = instances != 1 or shared_tier is not None
    if serving is not None:
        if fleet or jobs is not None or engine != "local":
            raise UsageError(
                "--serving simulates one box: drop --instances, --shared-tier, --jobs and --engine "
                "(fleet simulation replays a trace)"
            )
        if sweep:
            raise UsageError("--sweep is for the tier replay, not --serving: drop it")
        if router != "session-hash":
            raise UsageError("--router is for --instances, not --serving: drop it")
        _serve(
            serving,
            workload,
            trace,
            sim,
            duration,
            seed,
            block_size,
            per_minute,
            fmt,
            rate_scale,
            selection,
            data,
            kv,
        )
        return
    if rate_scale is not None:
        raise UsageError("--rate-scale scales the lake's sessions for --serving: add --serving BOX")
    from traceflow.kv import simulate as kv_simulate
    from traceflow.kv.lake_trace import choose_trace
    from traceflow.kv.sizing import parse_tier
    from traceflow.units import parse_duration

    mapper = _fleet_mapper(instances, router, jobs, engine, spark_remote)
    name, kv_size = kv.resolve(selection.models)
    bt = choose_trace(
        workload=workload,
        trace=trace,
        connect=lambda: open_lake(data).connect(["requests"]),
        selection=selection,
        duration_s=parse_duration(duration, "--duration"),
        seed=seed,
        block_size=block_size,
    )
    cfg = sim.config(kv_size)
    if fleet:
        from traceflow.kv.fleet import simulate_fleet

        shared = parse_tier(shared_tier) if shared_tier is not None else None
        result = simulate_fleet(bt, cfg, instances, router, shared, mapper).as_dict()
    else:
        result = kv_simulate.simulate(bt, cfg).as_dict()
    report = {"model": name, "dtype": kv_size.dtype, **result}
    if sweep:
        report["sweep"] = kv_simulate.sweep(bt, None, cfg.block_bytes(bt.block_size))
    _print_simulation(report, fmt, per_minute)


def _fleet_mapper(
    instances: int, router: str, jobs: int | None, engine: str, spark_remote: str | None
) -> Any:
    """Where ``simulate --instances`` runs its instances (checking the fleet options first)."""
    from traceflow.kv.fleet import check_fleet, process_map

    check_fleet(instances, router)
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: give at least 1 process")
    if engine not in ("local", "spark"):
        raise UsageError(f"--engine {engine!r}: simulate runs instances on local (processes) or spark")
    if spark_remote and engine != "spark":
        raise UsageError("--spark-remote needs --engine spark")
    if engine == "local":
        return process_map(jobs)
    if jobs is not None:
        raise UsageError("--jobs is for --engine local; Spark runs one task per instance")
    from traceflow.engines.spark import map_tasks

    return lambda fn, items: map_tasks(fn, items, spark_remote)


def _print_simulation(
    report: dict[str, Any], fmt: str, per_minute: bool, lead: dict[str, Any] | None = None
) -> None:
    """The simulate report: JSON, or (``lead``,) the summary, the tiers, the instances, the worst
    resume, the results over time and the sweep."""
    from traceflow.output import document, render, to_json

    if fmt == "json":
        typer.echo(to_json(document(report, display())))
        return
    parts = [render(_kv_rows(lead), fmt, display=display())] if lead is not None else []
    parts += [
        render(_kv_rows(report), fmt, display=display()),
        render(_table(report["tiers"]), fmt, display=display()),
    ]
    if report.get("per_instance"):
        parts.append(render(_table(report["per_instance"]), fmt, display=display()))
    if report.get("worst_resumed"):
        parts.append(
            render(
                _kv_rows({f"worst_resumed.{k}": v for k, v in report["worst_resumed"].items()}),
                fmt,
                display=display(),
            )
        )
    if per_minute:
        parts.append(render(_table(report["per_minute"]), fmt, display=display()))
    if report.get("sweep"):
        parts.append(render(_table(report["sweep"]), fmt, display=display()))
    typer.echo("\n\n".join(parts))


def _serving_model(spec: Any, kv: KvChoice) -> Any:
    """The box of ``--serving`` with the model ``--kv-model`` (and ``--dtype``) names: a GPU preset
    serves it (:func:`traceflow.kv.serving.serve_model`); a fixed box only its own. The other
    KV-geometry options do not apply to a box and are refused (exit 2), never ignored."""
    from traceflow.kv.models import find_model
    from traceflow.kv.serving import serve_model

    given = (("--config", kv.config), ("--mtp", kv.mtp), ("--swa-uncapped", kv.swa_uncapped))
    unused = [o for o, v in given if v]
    if unused:
        raise UsageError(
            f"{', '.join(unused)}: --serving takes its model from --kv-model NAME (a catalogue model with "
            "parameter counts) or its spec file; drop them"
        )
    if kv.kv_model is None and kv.dtype is None:
        return spec
    if spec.gpu:
        return serve_model(spec, kv.kv_model or spec.model, kv.dtype)
    if kv.kv_model is not None and find_model(kv.kv_model).name != find_model(spec.model).name:
        raise UsageError(
            f"--kv-model {kv.kv_model} differs from the box's model {spec.model}: a box serves its own "
            "model; use a GPU preset (h100xN, h200xN, b200xN) or a --serving file with "
            '"preset", "model", "total_params" and "active_params"'
        )
    if kv.dtype is not None and kv.dtype != spec.kv_dtype:
        raise UsageError(
            f"--dtype {kv.dtype}: the box {spec.name} keeps its KV in {spec.kv_dtype}; give a --serving "
            'file with "kv_dtype"'
        )
    return spec


def _serve(
    serving: str,
    workload: str | None,
    trace: Path | None,
    sim: SimChoice,
    duration: str,
    seed: int,
    block_size: int,
    per_minute: bool,
    fmt: str,
    rate_scale: float | None = None,
    selection: Selection | None = None,
    data: Path | None = None,
    kv: KvChoice | None = None,
) -> None:
    """``simulate --serving``: the closed-loop workload on a serving box (:mod:`traceflow.kv.scheduler`):
    the lake's selection (scaled by ``rate_scale``) or the built-in agentic-coding workload."""
    from traceflow.kv.scheduler import run
    from traceflow.kv.serving import load_serving
    from traceflow.kv.synthetic import PUBLISHED_RUN, agentic_coding_turns
    from traceflow.units import parse_duration

    if trace is not None or workload not in (None, "agentic-coding"):
        raise UsageError(
            "--serving replays sessions with their answers: the lake's selection (no --trace) or "
            "--workload agentic-coding"
        )
    if sim.tier:
        raise UsageError('--serving takes its tiers from the box spec (its "tiers" list), not --tier')
    spec = _serving_model(load_serving(serving), kv or KvChoice())
    if workload is None and selection is not None:
        from traceflow.kv.lake_trace import lake_turns

        turns = lake_turns(
            open_lake(data).connect(["requests"]), selection, block_size, rate_scale or 1.0, seed
        )
        named: dict[str, Any] = {
            "source": "lake",
            "rate_scale": rate_scale or 1.0,
            "sessions": int(turns.session.max()) + 1 if len(turns.session) else 0,
            "requests": int(turns.trace.n_requests),
        }
    else:
        if rate_scale is not None:
            raise UsageError("--rate-scale scales the lake's sessions: drop --workload, or drop --rate-scale")
        turns = agentic_coding_turns(
            parse_duration(duration, "--duration"), seed, block_size=block_size, **PUBLISHED_RUN
        )
        named = {"source": "agentic-coding", "duration": duration, "seed": seed}
    report = {"workload": named, **run(spec, turns, parse_duration(sim.bucket, "--bucket"))}
    lead = {**{f"workload.{k}": v for k, v in named.items()}, **report["serving"]}
    _print_simulation(report, fmt, per_minute, lead=lead)


#: The commands of this module, by name (registered by :mod:`traceflow.cli.app`).
COMMANDS: dict[str, Callable[..., Any]] = {
    "models": models,
    "size": size,
    "simulate": simulate,
}
