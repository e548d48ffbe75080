"""Replay exports: the selected requests as traces that serving benchmarks replay
(docs/replay.md#traceflow-export-format-o-file).

:func:`export` loads the selection (:mod:`traceflow.replay.requests`), derives every request's
``hash_ids`` (:mod:`traceflow.replay.prefix`), hands both to the format's writer and writes the
manifest. Formats (docs/formats.md):

``mooncake``
    Flat Mooncake JSONL, one request a line, in arrival order (:mod:`traceflow.replay.mooncake`).
``aiperf``
    AIPerf ``mooncake_trace`` with sessions: first turns with the whole context, later turns with
    the new tokens and the think-time ``delay`` (:mod:`traceflow.replay.aiperf`).
``kvcache-tester``
    One JSON per root session (a directory), the kv-cache-tester / WEKA format that AIPerf's
    ``weka_trace`` loader also reads (:mod:`traceflow.replay.kvcache_tester`).

Every export writes ``<name>.manifest.json`` beside the output (``trace.jsonl`` ->
``trace.manifest.json``; a directory ``traces/`` -> ``traces.manifest.json``): the selection,
counts, block size, speedup, statistics and the command lines that replay it.

``--speedup k`` divides arrival times, delays and think times by ``k`` (server times are kept);
``--limit N`` keeps the first ``N`` requests in arrival order (sessions cut at the end);
``--max-context N`` keeps every replayed context within ``N`` as the agent does at its cap
(:mod:`traceflow.replay.compaction`; ``mooncake`` and ``aiperf``).

A selection that mixes real telemetry with relative-time traces (:mod:`traceflow.store.time_base`)
is refused with a message naming ``--source``: one trace has one clock.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from traceflow import __version__
from traceflow.errors import UsageError
from traceflow.paths import output_file, output_folder
from traceflow.replay.aiperf import write_aiperf
from traceflow.replay.compaction import DEFAULT_SUMMARY_TOKENS, compact_to_window
from traceflow.replay.kvcache_tester import write_kvcache_tester
from traceflow.replay.mooncake import infinite_cache, write_mooncake
from traceflow.replay.prefix import PrefixOptions, derive, stream_keys
from traceflow.replay.requests import load_requests
from traceflow.replay.writing import atomic_write
from traceflow.store import time_base
from traceflow.store.sql import sql_string

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.replay.hash_ids import PrefixPlan
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection
    from traceflow.store.sql import Engine

FORMATS: tuple[str, ...] = ("mooncake", "aiperf", "kvcache-tester")
DEFAULT_BLOCK_SIZE: dict[str, int] = {"mooncake": 512, "aiperf": 512, "kvcache-tester": 64}
#: DuckDB's memory while an export reads a lake (it spills beyond that): keeps a 10-million-request
#: export within a few GB.
DUCKDB_MEMORY = "2GB"


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"export format {fmt!r} is not one of: {', '.join(FORMATS)}")
    return fmt


def check_max_context(fmt: str, max_context: int | None) -> None:
    """``--max-context`` is for the formats whose contexts it rewrites (exit 2 for the others)."""
    if max_context is not None and fmt not in ("mooncake", "aiperf"):
        raise UsageError(f"--max-context is for the mooncake and aiperf exports, not {fmt}")


def check_output(out: Path, fmt: str) -> Path:
    """``out`` (``-o``) once ``fmt`` can be written there: a folder for kvcache-tester, else a file."""
    return output_folder(out, "-o") if fmt == "kvcache-tester" else output_file(out, "-o")


def manifest_path(out: Path) -> Path:
    """``trace.jsonl`` -> ``trace.manifest.json``; ``traces/`` -> ``traces.manifest.json``."""
    name = out.name.rstrip("/") or "export"
    stem = name.split(".", 1)[0] if "." in name and not out.is_dir() else name
    return out.with_name(f"{stem}.manifest.json")


def export(
    source: Lake | duckdb.DuckDBPyConnection | Engine,
    selection: Selection | None,
    fmt: str,
    out: Path,
    *,
    block_size: int | None = None,
    speedup: float = 1.0,
    limit: int | None = None,
    options: PrefixOptions | None = None,
    duckdb_memory: str | None = DUCKDB_MEMORY,
    max_context: int | None = None,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
) -> dict[str, Any]:
    """Export the selected requests of a lake to ``out`` in ``fmt``; returns the manifest.

    ``source`` is a lake (its own connection is opened, with DuckDB held to ``duckdb_memory`` and
    spilling to a temporary directory), an open connection with a ``requests`` view, or another
    engine over the lake (``traceflow.engines.spark``): the query runs there, the hash ids and the
    files are derived here from the frame it returns, so every engine writes the same bytes.
    """
    import tempfile

    from traceflow.store.lake import Lake

    check_format(fmt)
    check_max_context(fmt, max_context)
    out = check_output(out, fmt)
    with tempfile.TemporaryDirectory(prefix="traceflow-export-") as spill:
        con: duckdb.DuckDBPyConnection | Engine
        if isinstance(source, Lake):
            con = own = source.connect(["requests"])
            if duckdb_memory:
                own.execute(f"SET memory_limit = '{duckdb_memory}'")
                own.execute(f"SET temp_directory = {sql_string(spill)}")
            own.execute("SET preserve_insertion_order = false")
            own.execute("SET enable_progress_bar = false")
        else:
            con = source
        # a trace has one clock: never real telemetry and relative-time traces on one 56-year axis
        time_base.require_one(con, selection, "export")
        frame = load_requests(
            con, selection, extras=fmt == "kvcache-tester", limit=limit, keys=fmt == "mooncake"
        )
        if isinstance(source, Lake):
            own.close()
    if frame.is_empty():
        raise UsageError(
            "no requests with tokens match the selection; check --since/--until and the filters "
            "(`traceflow mix --by source` lists what the lake holds)"
        )
    return export_frame(
        frame,
        fmt,
        out,
        block_size=block_size,
        speedup=speedup,
        options=options,
        source={"selection": _selection_dict(selection), "limit": limit},
        max_context=max_context,
        summary_tokens=summary_tokens,
    )


def export_frame(
    frame: pl.DataFrame,
    fmt: str,
    out: Path,
    *,
    block_size: int | None = None,
    speedup: float = 1.0,
    options: PrefixOptions | None = None,
    source: Mapping[str, Any] | None = None,
    max_context: int | None = None,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
) -> dict[str, Any]:
    """Write ``frame`` (shaped as :func:`traceflow.replay.requests.load_requests` returns it) to ``out``."""
    check_format(fmt)
    check_max_context(fmt, max_context)
    out = check_output(out, fmt)
    if not (speedup > 0 and math.isfinite(speedup)):
        raise UsageError(f"--speedup {speedup} must be a positive number")
    bs = block_size or DEFAULT_BLOCK_SIZE[fmt]
    base = options or PrefixOptions()
    opts = PrefixOptions(bs, base.use_measured, base.break_ttl_s, base.keep_source_ids)
    compaction: dict[str, Any] | None = None
    if max_context is not None:
        frame, compaction = compact_to_window(
            frame, stream_keys(frame), max_context, summary_tokens, replies=fmt == "aiperf"
        )
    plan = derive(frame, opts)
    if fmt == "kvcache-tester":
        written = write_kvcache_tester(frame, plan, out, speedup)
    else:
        written = (write_mooncake if fmt == "mooncake" else write_aiperf)(frame, plan, out, speedup)
    if "cache" not in written:
        written = {**written, "cache": infinite_cache(plan)}
    manifest = _manifest(frame, plan, fmt, out, bs, speedup, source or {}, written)
    if compaction is not None:
        manifest["compaction"] = compaction
    mpath = manifest_path(out)
    atomic_write(mpath, orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
    manifest["manifest"] = str(mpath)
    return manifest


# ------------------------------------------------------------------------------------ manifest


def _selection_dict(selection: Selection | None) -> dict[str, Any]:
    if selection is None:
        return {}
    out: dict[str, Any] = {}
    for key in ("since", "until"):
        v = getattr(selection, key)
        if v is not None:
            out[key] = v.isoformat()
    for key in ("agents", "models", "sessions", "users", "sources"):
        v = getattr(selection, key)
        if v:
            out[key] = list(v)
    if selection.conditions:  # --where, as typed (traceflow.store.filters)
        out["where"] = [str(c) for c in selection.conditions]
    return out


def _dist(values: Any) -> dict[str, Any]:
    arr = np.asarray(values, dtype=np.float64)
    if not len(arr):
        return {}
    return {
        "mean": round(float(arr.mean()), 2),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
    }


def _manifest(
    frame: pl.DataFrame,
    plan: PrefixPlan,
    fmt: str,
    out: Path,
    block_size: int,
    speedup: float,
    source: Mapping[str, Any],
    written: Mapping[str, Any],
) -> dict[str, Any]:
    t = np.asarray(frame["t_us"].to_numpy(), dtype=np.int64)
    span_s = float(t.max() - t.min()) / 1e6 if len(t) else 0.0
    if "session_id" in frame.columns:
        sessions: int | None = frame["session_id"].drop_nulls().n_unique()
        roots: int | None = frame["parent_session_id"].fill_null(frame["session_id"]).drop_nulls().n_unique()
    else:  # a keys-only frame (flat export): streams are (session, model) pairs
        sessions = roots = None
    stats: dict[str, Any] = {
        "span_s": round(span_s, 3),
        "replay_span_s": round(span_s / speedup, 3),
        "requests_per_s": round(len(t) / span_s, 4) if span_s > 0 else None,
        "input_tokens": _dist(plan.ctx),
        "output_tokens": _dist(frame["out"].to_numpy()),
    }
    if "cache" in written:
        stats["infinite_cache"] = written["cache"]
    sources = frame["source"].value_counts(sort=True).rows() if "source" in frame.columns else []
    rel = out.name
    return {
        "format": fmt,
        "output": rel,
        "traceflow_version": __version__,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "source": dict(source),
        "sources": {str(k): int(v) for k, v in sources},
        "block_size": block_size,
        "speedup": speedup,
        "counts": {
            "requests": plan.n,
            "sessions": sessions,
            "root_sessions": roots,
            **{k: v for k, v in written.items() if k != "cache"},
            **plan.stats,
            "unique_hash_ids_allocated": plan.next_id,
        },
        "statistics": stats,
        "hash_ids": {
            "rule": "floor(input/block) (partial tail not hashed)"
            if fmt == "kvcache-tester"
            else "ceil(input/block); a partial last block has its own id",
            "derivation": "source ids kept (re-blocked when the block size differs); other requests "
            "derived from token counts (traceflow.replay.prefix)",
        },
        "replay": _replay_commands(fmt, rel, block_size),
    }


def _replay_commands(fmt: str, rel: str, block_size: int) -> dict[str, str]:
    """The command lines that replay the export ``rel``, by tool."""
    aiperf = f"aiperf profile --model MODEL --url URL --endpoint-type chat --streaming --input-file {rel}"
    if fmt == "kvcache-tester":
        return {"aiperf": f"{aiperf} --custom-dataset-type weka_trace --tokenizer TOKENIZER"}
    commands = {
        "aiperf": f"{aiperf} --custom-dataset-type mooncake_trace --fixed-schedule "
        f"--isl-block-size {block_size} --tokenizer TOKENIZER"
    }
    if fmt == "mooncake":
        commands["vllm"] = (
            f"vllm bench serve --dataset-name timed_trace --dataset-path {rel} "
            f"--timed-trace-chunk-hash-size {block_size} --timed-trace-sec-multiplier 0.001"
        )
    return commands
