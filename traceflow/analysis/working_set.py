"""The live KV working set (docs/forensics.md#traceflow-working-set): the context the cache must hold at
once for a TTL.

At time t it is the sum of ``context_tokens`` of the session streams (a sub-agent counts apart)
whose last request ended within the TTL before t: a request's context counts from its end until the
TTL runs out or a later request of its stream ends (``queries/working_set.sql``; the later request is
the stream's in the whole lake, so the series of disjoint windows at one bucket width add up bucket
by bucket, and a
selection's series is what its requests hold). The series gives, per
bucket (default a minute), the average over the bucket and the value at its end; peak and
percentiles are taken over the bucket averages from the first request to the last expiry (use a
finer ``resolution_s`` for sharper peaks). Times ``kv_bytes_per_token``
(docs/sizing-formulas.md#kv-bytes-per-token: e.g. 126,976 B for
MiniMax-M2 at FP8) it is the memory a tier must hold.

The series needs one time base (a selection that mixes real telemetry with relative-time traces is
refused, naming ``--source``) and has at most :data:`~traceflow.store.time_base.MAX_BUCKETS` buckets:
past that the bucket width is coarsened, and the summary's ``resolution_s`` is the width used. The
series of disjoint windows add up only at one width: a window of a coarsened selection is coarsened
less (or not at all), so it must be asked at the coarsened width (the CLI says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from traceflow.store import time_base
from traceflow.units import format_duration

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

DEFAULT_TTL_S = 300.0

#: Columns of :func:`working_set_summary` (JSON keys are a contract).
SUMMARY_COLUMNS = (
    "ttl_s",
    "ttl",
    "resolution_s",
    "buckets",
    "peak_tokens",
    "peak_at",
    "p95_tokens",
    "p50_tokens",
    "mean_tokens",
    "peak_streams",
    "mean_streams",
    "kv_bytes_per_token",
    "peak_bytes",
    "p95_bytes",
    "mean_bytes",
)


def working_set_series(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    ttl_s: float = DEFAULT_TTL_S,
    resolution_s: float = time_base.DEFAULT_RESOLUTION_S,
    kv_bytes_per_token: float | None = None,
) -> pl.DataFrame:
    """One row per bucket: ``bucket_start, tokens, tokens_end, streams, streams_end`` (and
    ``bytes, bytes_end`` when ``kv_bytes_per_token`` is given)."""
    _check(ttl_s, resolution_s, kv_bytes_per_token)
    res = working_set_resolution(con, selection, ttl_s, resolution_s)
    return _series(con, selection, ttl_s, res, kv_bytes_per_token)


def _check(ttl_s: float, resolution_s: float, kv_bytes_per_token: float | None) -> None:
    from traceflow.errors import UsageError

    if ttl_s <= 0 or resolution_s <= 0:
        raise UsageError("the TTL and --resolution must be positive")
    if kv_bytes_per_token is not None and kv_bytes_per_token <= 0:
        raise UsageError("--kv-bytes-per-token must be positive")


def _series(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None,
    ttl_s: float,
    res: float,
    kv_bytes_per_token: float | None,
) -> pl.DataFrame:
    """The series over buckets of ``res`` seconds, already bounded (:func:`working_set_resolution`)."""
    import polars as pl

    frame = time_base.run_grid(con, "working_set", selection, res, ttl_s=float(ttl_s))
    # Sums of +/- deltas: round away float noise (the values are whole tokens at bucket ends).
    frame = frame.with_columns(
        pl.col("tokens_end").round(0), pl.col("tokens").round(6), pl.col("streams").round(9)
    )
    if kv_bytes_per_token is not None:
        frame = frame.with_columns(
            (pl.col("tokens") * kv_bytes_per_token).alias("bytes"),
            (pl.col("tokens_end") * kv_bytes_per_token).alias("bytes_end"),
        )
    return frame


def working_set_resolution(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None,
    ttl_s: float = DEFAULT_TTL_S,
    resolution_s: float = time_base.DEFAULT_RESOLUTION_S,
) -> float:
    """The bucket width :func:`working_set_series` uses: ``resolution_s``, coarsened where the span
    (to the last expiry) would pass the bucket cap. UsageError when the selection mixes time bases."""
    return time_base.grid_resolution(con, selection, resolution_s, "working-set", pad_s=ttl_s)


def summarise(
    series: pl.DataFrame, ttl_s: float, resolution_s: float, kv_bytes_per_token: float | None = None
) -> dict[str, Any]:
    """Peak (and when), p95, p50 and mean of a series from :func:`working_set_series` (its bucket
    width is read from the series when it has two buckets or more)."""
    if series.height >= 2:
        resolution_s = (series["bucket_start"][1] - series["bucket_start"][0]).total_seconds()
    out: dict[str, Any] = {
        "ttl_s": float(ttl_s),
        "ttl": format_duration(ttl_s),
        "resolution_s": float(resolution_s),
        "buckets": series.height,
    }
    if series.height:
        tokens = series["tokens"]
        peak_idx = int(tokens.arg_max())  # type: ignore[arg-type]
        out.update(
            peak_tokens=float(tokens[peak_idx]),
            peak_at=series["bucket_start"][peak_idx],
            p95_tokens=float(tokens.quantile(0.95, "linear")),  # type: ignore[arg-type]
            p50_tokens=float(tokens.quantile(0.5, "linear")),  # type: ignore[arg-type]
            mean_tokens=float(tokens.mean()),  # type: ignore[arg-type]
            peak_streams=float(series["streams"].max()),  # type: ignore[arg-type]
            mean_streams=float(series["streams"].mean()),  # type: ignore[arg-type]
        )
    else:
        out.update(
            peak_tokens=None,
            peak_at=None,
            p95_tokens=None,
            p50_tokens=None,
            mean_tokens=None,
            peak_streams=None,
            mean_streams=None,
        )
    out["kv_bytes_per_token"] = kv_bytes_per_token
    for key in ("peak", "p95", "mean"):
        tokens_value = out[f"{key}_tokens"]
        out[f"{key}_bytes"] = (
            tokens_value * kv_bytes_per_token
            if kv_bytes_per_token is not None and tokens_value is not None
            else None
        )
    return {k: out[k] for k in SUMMARY_COLUMNS}


def working_set_summary(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    ttls: Sequence[float] = (DEFAULT_TTL_S,),
    resolution_s: float = time_base.DEFAULT_RESOLUTION_S,
    kv_bytes_per_token: float | None = None,
) -> pl.DataFrame:
    """One row per TTL: :data:`SUMMARY_COLUMNS`."""
    import polars as pl

    for t in ttls:
        _check(t, resolution_s, kv_bytes_per_token)
    span = time_base.span_s(time_base.require_one(con, selection, "working-set"))  # one scan for all TTLs
    rows = []
    for t in ttls:
        res = time_base.bounded_resolution(span + t, resolution_s)
        rows.append(
            summarise(_series(con, selection, t, res, kv_bytes_per_token), t, res, kv_bytes_per_token)
        )
    schema: dict[str, Any] = {
        "ttl_s": pl.Float64,
        "ttl": pl.String,
        "resolution_s": pl.Float64,
        "buckets": pl.Int64,
        "peak_tokens": pl.Float64,
        "peak_at": pl.Datetime("us", "UTC"),
        "p95_tokens": pl.Float64,
        "p50_tokens": pl.Float64,
        "mean_tokens": pl.Float64,
        "peak_streams": pl.Float64,
        "mean_streams": pl.Float64,
        "kv_bytes_per_token": pl.Float64,
        "peak_bytes": pl.Float64,
        "p95_bytes": pl.Float64,
        "mean_bytes": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)
