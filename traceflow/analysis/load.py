"""Arrivals and load over time (docs/forensics.md#traceflow-load): new sessions per minute and whether
they arrive as a Poisson process, requests per second, sessions open at once, tokens per second by kind.

The series is ``queries/load.sql`` (one row per bucket, default one minute, empty buckets included).
The Poisson check is the index-of-dispersion test: for counts ``x_1..x_n`` per bucket, ``D =
variance / mean`` is 1 for a Poisson process, and ``(n - 1) * D`` follows a chi-squared law with
``n - 1`` degrees of freedom; the two-sided p-value says how surprising ``D`` is. Real traffic has a
daily rhythm (a Poisson process whose rate changes), which alone makes ``D`` exceed 1, so the
summary also gives the index *within each hour*: the buckets cut into consecutive hour-long windows
from the first bucket (not clock hours), each bucket against its window's mean, pooled; it is near 1
when arrivals are Poisson at a slowly varying rate.

A session is new in the bucket of its first request in the whole lake, and only in a selection that
holds that request: a window that starts inside a session shows it open, not new (new sessions add
up over disjoint windows, as requests and tokens do). Only requests with a session id make sessions
(a sessionless trace such as Mooncake has requests and
tokens per second but no sessions), and the series needs one time base: a selection that mixes real
telemetry with relative-time traces is refused, naming ``--source`` (:mod:`traceflow.store.time_base`).
The grid has at most :data:`~traceflow.store.time_base.MAX_BUCKETS` buckets: past that the bucket
width is coarsened (the summary's ``resolution_s`` is the width used, and its ``note`` says so: the
series of disjoint windows add up bucket by bucket only at one width, and a window of a coarsened
selection is coarsened less, so each must be asked at the coarsened width). Arrival figures (sessions per
minute, dispersion, sessions open) are ``null`` with a ``note`` saying why where they do not apply:
no request has a session id, or the sessions all count time from their own zero (kv-cache-tester).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceflow.schema import TOKEN_KINDS
from traceflow.store import time_base

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

#: Summary keys that are None ("not applicable") where arrivals do not apply (:func:`arrivals_note`).
NOT_APPLICABLE = (
    "new_sessions_per_min",
    "index_of_dispersion",
    "chi2",
    "p_value",
    "poisson",
    "index_of_dispersion_within_hour",
    "active_sessions_mean",
    "active_sessions_peak",
)


def load_series(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    resolution_s: float = time_base.DEFAULT_RESOLUTION_S,
) -> pl.DataFrame:
    """One row per bucket of ``resolution_s`` seconds, coarser where the selection's span would pass
    :data:`~traceflow.store.time_base.MAX_BUCKETS` (see :func:`load_resolution`); the columns of
    ``queries/load.sql``. UsageError when the selection mixes time bases."""
    return time_base.run_grid(con, "load", selection, load_resolution(con, selection, resolution_s))


def load_resolution(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None,
    resolution_s: float = time_base.DEFAULT_RESOLUTION_S,
) -> float:
    """The bucket width :func:`load_series` uses: ``resolution_s``, coarsened past the bucket cap.
    UsageError when it is not positive or when the selection mixes time bases."""
    _check_resolution(resolution_s)
    return time_base.grid_resolution(con, selection, resolution_s, "load")


def _check_resolution(resolution_s: float) -> None:
    if resolution_s <= 0:
        from traceflow.errors import UsageError

        raise UsageError("--resolution must be positive")


def load_overview(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    resolution_s: float = time_base.DEFAULT_RESOLUTION_S,
    command: str = "load",
) -> pl.DataFrame:
    """:func:`load_summary` of :func:`load_series`, with arrivals marked not applicable where they
    are not (:func:`arrivals_note`). UsageError when the selection mixes time bases."""
    _check_resolution(resolution_s)
    sources = time_base.require_one(con, selection, command)  # one scan serves the check and the grid
    applies, note = arrivals_note(sources)
    res = time_base.bounded_resolution(time_base.span_s(sources), resolution_s)
    series = time_base.run_grid(con, "load", selection, res)
    notes = [n for n in (time_base.coarsening_note(resolution_s, res), note) if n]
    return load_summary(series, res, arrivals=applies, note="; ".join(notes) or None)


def arrivals_note(sources: Sequence[time_base.SourceSpan]) -> tuple[bool, str | None]:
    """Whether arrival figures apply to a selection of ``sources``, and a note on what is left out.

    Not when no request has a session id (every source sessionless), nor when a source's sessions
    all start at their own zero (:data:`~traceflow.store.time_base.ALIGNED_START_SOURCES`).
    """
    sessionless = [s for s in sources if s.sessionless]
    listing = ", ".join(f"{s.source}: {s.sessionless:,} requests" for s in sessionless)
    if sources and all(s.sessionless == s.requests for s in sources):
        return False, f"not applicable: no request in the selection has a session id ({listing})"
    aligned = [s.source for s in sources if s.source in time_base.ALIGNED_START_SOURCES]
    if aligned:
        return False, (
            f"not applicable: {', '.join(map(str, aligned))} sessions each count time from their own "
            "start (all begin at t = 0), so their starts are not arrivals; choose other sources with --source"
        )
    if sessionless:
        return True, f"requests without a session id are not counted as sessions ({listing})"
    return True, None


def _gamma_p(a: float, x: float) -> float:
    """The regularised lower incomplete gamma function P(a, x) (series / continued fraction)."""
    if x <= 0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * math.exp(log_front))
    # Lentz's continued fraction for Q(a, x)
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def chi2_cdf(x: float, dof: int) -> float:
    """P(X <= x) for a chi-squared variable with ``dof`` degrees of freedom.

    >>> round(chi2_cdf(3.841458820694124, 1), 6), round(chi2_cdf(100.0, 100), 4)
    (0.95, 0.5188)
    """
    return _gamma_p(dof / 2.0, x / 2.0)


@dataclass(frozen=True)
class Dispersion:
    """The index-of-dispersion test of counts per bucket."""

    buckets: int
    mean: float | None
    variance: float | None
    index: float | None  # variance / mean: 1 for Poisson, > 1 bursty, < 1 regular
    chi2: float | None  # (buckets - 1) * index
    p_value: float | None  # two-sided
    poisson: bool | None  # p_value >= alpha

    def as_dict(self) -> dict[str, Any]:
        return {
            "buckets": self.buckets,
            "mean": self.mean,
            "variance": self.variance,
            "index_of_dispersion": self.index,
            "chi2": self.chi2,
            "p_value": self.p_value,
            "poisson": self.poisson,
        }


def dispersion(counts: Sequence[float], alpha: float = 0.05) -> Dispersion:
    """Index of dispersion of ``counts`` with its chi-squared test (two-sided, level ``alpha``).

    >>> d = dispersion([2, 3, 1, 4, 2, 3, 2, 3])
    >>> round(d.index, 3), d.poisson
    (0.343, True)
    """
    n = len(counts)
    if n < 2:
        return Dispersion(n, None, None, None, None, None, None)
    mean = sum(counts) / n
    var = sum((c - mean) ** 2 for c in counts) / (n - 1)
    if mean == 0:
        return Dispersion(n, mean, var, None, None, None, None)
    index = var / mean
    chi2 = (n - 1) * index
    cdf = chi2_cdf(chi2, n - 1)
    p = min(1.0, 2 * min(cdf, 1 - cdf))
    return Dispersion(n, mean, var, index, chi2, p, p >= alpha)


def local_dispersion(counts: Sequence[float], window: int) -> float | None:
    """The index of dispersion within consecutive windows of ``window`` buckets (pooled), or None.

    Each window's counts are compared with that window's own mean, so a rate that changes slowly
    (a daily rhythm) does not inflate it. Windows with no arrivals are skipped.
    """
    num = 0.0
    dof = 0
    total = 0.0
    used = 0
    for start in range(0, len(counts), window):
        chunk = counts[start : start + window]
        if len(chunk) < 2:
            continue
        m = sum(chunk) / len(chunk)
        if m == 0:
            continue
        num += sum((c - m) ** 2 for c in chunk)
        dof += len(chunk) - 1
        total += sum(chunk)
        used += len(chunk)
    if not dof or not total:
        return None
    return (num / dof) / (total / used)


def load_summary(
    series: pl.DataFrame,
    resolution_s: float = time_base.DEFAULT_RESOLUTION_S,
    *,
    arrivals: bool = True,
    note: str | None = None,
) -> pl.DataFrame:
    """One row: span, sessions, arrival rate and its dispersion test, requests/s, sessions open,
    tokens/s by kind (mean and peak over the buckets), and ``note``.

    ``resolution_s`` is the series' bucket width (read from the series when it has two buckets or
    more). With ``arrivals`` false (see :func:`arrivals_note`) the arrival figures are None ("not
    applicable"), and ``sessions`` too when the series has none.
    """
    import polars as pl

    if series.height >= 2:
        resolution_s = (series["bucket_start"][1] - series["bucket_start"][0]).total_seconds()
    counts = series["new_sessions"].to_list() if series.height else []
    disp = dispersion(counts)
    per_hour = max(2, round(3600 / resolution_s))
    row: dict[str, Any] = {
        "resolution_s": float(resolution_s),
        "buckets": series.height,
        "span_s": series.height * float(resolution_s),
        "sessions": int(sum(counts)),
        "requests": int(series["requests"].sum()) if series.height else 0,
        "new_sessions_per_min": (disp.mean * 60 / resolution_s) if disp.mean is not None else None,
        "index_of_dispersion": disp.index,
        "chi2": disp.chi2,
        "p_value": disp.p_value,
        "poisson": disp.poisson,
        "index_of_dispersion_within_hour": local_dispersion(counts, per_hour),
    }
    for col, name in (("requests_per_s", "requests_per_s"), ("active_sessions", "active_sessions")):
        row[f"{name}_mean"] = float(series[col].mean()) if series.height else None  # type: ignore[arg-type]
        row[f"{name}_peak"] = series[col].max() if series.height else None
    for kind in TOKEN_KINDS:
        col = f"{kind}_per_s"
        row[f"{col}_mean"] = float(series[col].mean()) if series.height else None  # type: ignore[arg-type]
        row[f"{col}_peak"] = float(series[col].max()) if series.height else None  # type: ignore[arg-type]
    if not arrivals:
        for key in NOT_APPLICABLE:
            row[key] = None
        if not row["sessions"]:
            row["sessions"] = None
    row["note"] = note
    return pl.DataFrame(
        [row],
        schema_overrides={
            "sessions": pl.Int64,
            "new_sessions_per_min": pl.Float64,
            "index_of_dispersion": pl.Float64,
            "chi2": pl.Float64,
            "p_value": pl.Float64,
            "poisson": pl.Boolean,
            "index_of_dispersion_within_hour": pl.Float64,
            "active_sessions_mean": pl.Float64,
            "active_sessions_peak": pl.Int64,
            "requests_per_s_peak": pl.Float64,
            "note": pl.String,
        },
    )
