"""Controlled comparisons (``traceflow compare``): do requests at a boundary miss the cache more than
in-session idle gaps of the same length? A user's way to tell a client bug from TTL expiry.

A **boundary** request is the first request after one of these transitions in its stream:

* ``restart``: the agent process restarted (``restart`` of :mod:`traceflow.analysis.misses`:
  ``--continue`` / ``--resume``);
* ``version``: the client version differs from the previous request's (both known);
* ``model``: the model differs from the previous request's.

Its **controls** are the stream requests with no boundary of any kind (same model, same version, no
restart) after an idle gap in the same *stratum*: the same TTL in force and the same gap bin (the
log-spaced bins of ``queries/steps.sql``: ... 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600
s ...): the TTL-matched control pairs of issue 24. Stream first requests and compaction misses (the
conversation, not the boundary, explains them) are left out on both sides. A boundary whose stratum
has no control is *unmatched*: counted apart, left out of the comparison.

* The boundaries' miss rate with its Wilson score interval, and their missed tokens per request.
* The controls' miss rate **standardised** to the boundaries' strata (each stratum weighted by its
  share of the matched boundaries), with a Wilson interval over the Kish effective sample size
  ``(Σw)² / Σw²`` of the control requests (weight of a control: its stratum's boundaries ÷ controls).
* The difference of the two rates with Newcombe's interval (the square-and-add of the two Wilson
  intervals, his method 10).

No scipy: the normal quantile is :class:`statistics.NormalDist`'s.
"""

from __future__ import annotations

import bisect
import math
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from traceflow.analysis.misses import DEFAULT_MISS_OPTIONS, MissOptions, miss_rows
from traceflow.errors import UsageError

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

#: The boundary kinds.
BOUNDARIES: tuple[str, ...] = ("restart", "version", "model")
#: The lower edges (seconds) of the gap bins, as in ``queries/steps.sql`` (the last is open-ended).
GAP_EDGES: tuple[float, ...] = (
    0,
    0.1,
    0.5,
    1,
    2,
    5,
    10,
    20,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
    3600,
    7200,
    14400,
    28800,
    86400,
)


def wilson(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float] | tuple[None, None]:
    """The Wilson score interval of a proportion ``successes / n`` (``n`` may be an effective size).

    >>> [round(x, 4) for x in wilson(3, 12)]
    [0.0889, 0.5323]
    >>> wilson(0, 0)
    (None, None)
    """
    if n <= 0:
        return None, None
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def gap_bin(gap_s: float) -> int:
    """The index of ``gap_s``'s bin in :data:`GAP_EDGES`.

    >>> [gap_bin(g) for g in (0, 0.05, 20, 299.9, 300, 1000, 10**6)]
    [0, 0, 7, 10, 11, 12, 19]
    """
    return bisect.bisect_right(GAP_EDGES, gap_s) - 1


def _transitions(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (misses.sql rows) with ``prev_version`` and the boundary flags of each request."""
    import polars as pl

    stream = ["session_id", "parent_session_id"]
    frame = frame.sort([*stream, "position"], nulls_last=False).with_columns(
        pl.col("agent_version").shift(1).over(stream).alias("prev_version")
    )
    return frame.with_columns(
        (pl.col("restart").is_not_null()).alias("b_restart"),
        (
            pl.col("agent_version").is_not_null()
            & pl.col("prev_version").is_not_null()
            & (pl.col("agent_version") != pl.col("prev_version"))
        ).alias("b_version"),
        (pl.col("model").ne_missing(pl.col("prev_model"))).alias("b_model"),
    )


def compare(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None,
    boundary: str,
    options: MissOptions = DEFAULT_MISS_OPTIONS,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """The ``traceflow compare`` object for one boundary kind (see the module docstring)."""
    import polars as pl

    if boundary == "resume":  # the old name of restart
        raise UsageError(
            "--boundary resume is now --boundary restart (the agent process restarted: --continue or "
            "--resume); an idle return is sessions' idle_returns"
        )
    if boundary not in BOUNDARIES:
        raise UsageError(f"--boundary {boundary!r}: choose from {', '.join(BOUNDARIES)}")
    if not 0 < confidence < 1:
        raise UsageError(f"--confidence {confidence} must be between 0 and 1 (e.g. 0.95)")
    frame = miss_rows(con, selection, options)
    rows = _transitions(frame).filter(
        (pl.col("position") > 1)
        & pl.col("cause").ne_missing(pl.lit("compaction"))
        & pl.col("gap_s").is_not_null()
    )
    flag = f"b_{boundary}"
    rows = rows.with_columns(
        pl.col("gap_s").map_elements(gap_bin, return_dtype=pl.Int64).alias("bin"),
        pl.col("miss").cast(pl.Int64).alias("missed"),
    )
    bounds = rows.filter(pl.col(flag))
    controls = rows.filter(~(pl.col("b_restart") | pl.col("b_version") | pl.col("b_model")))
    key = ["ttl_in_force_s", "bin"]
    b = bounds.group_by(key).agg(
        pl.len().alias("n"), pl.col("missed").sum().alias("m"), pl.col("missed_tokens").sum().alias("t")
    )
    c = controls.group_by(key).agg(
        pl.len().alias("cn"), pl.col("missed").sum().alias("cm"), pl.col("missed_tokens").sum().alias("ct")
    )
    strata = b.join(c, on=key, how="left").sort(key)
    matched = strata.filter(pl.col("cn").is_not_null())
    unmatched = int(strata.filter(pl.col("cn").is_null())["n"].sum() or 0)
    n_b = int(matched["n"].sum() or 0)
    m_b = int(matched["m"].sum() or 0)
    t_b = int(matched["t"].sum() or 0)
    rate_b = m_b / n_b if n_b else None
    lo_b, hi_b = wilson(m_b, n_b, confidence)
    rate_c = tokens_c = None
    n_eff = 0.0
    sum_w = sum_w2 = 0.0
    if n_b:
        rate_c = tokens_c = 0.0
        for r in matched.iter_rows(named=True):
            share = r["n"] / n_b
            rate_c += share * r["cm"] / r["cn"]
            tokens_c += share * r["ct"] / r["cn"]
            w = r["n"] / r["cn"]  # each of the stratum's controls
            sum_w += w * r["cn"]
            sum_w2 += w * w * r["cn"]
        n_eff = sum_w * sum_w / sum_w2
    lo_c, hi_c = wilson((rate_c or 0.0) * n_eff, n_eff, confidence) if n_b else (None, None)
    diff: dict[str, Any] = {"miss_rate": None, "ci_low": None, "ci_high": None}
    if rate_b is not None and rate_c is not None:
        assert lo_b is not None and hi_b is not None and lo_c is not None and hi_c is not None
        d = rate_b - rate_c
        diff = {
            "miss_rate": d,
            "ci_low": d - math.sqrt((rate_b - lo_b) ** 2 + (hi_c - rate_c) ** 2),
            "ci_high": d + math.sqrt((hi_b - rate_b) ** 2 + (rate_c - lo_c) ** 2),
        }
    return {
        "boundary": boundary,
        "confidence": confidence,
        "boundaries": {
            "requests": n_b,
            "misses": m_b,
            "miss_rate": rate_b,
            "ci_low": lo_b,
            "ci_high": hi_b,
            "missed_tokens": t_b,
            "missed_tokens_per_request": t_b / n_b if n_b else None,
            "unmatched": unmatched,
        },
        "controls": {
            "requests": int(matched["cn"].sum() or 0),
            "misses": int(matched["cm"].sum() or 0),
            "effective_requests": n_eff,
            "miss_rate": rate_c,
            "ci_low": lo_c,
            "ci_high": hi_c,
            "missed_tokens_per_request": tokens_c,
        },
        "difference": diff,
        "strata": [
            {
                "ttl_in_force_s": r["ttl_in_force_s"],
                "gap_from_s": GAP_EDGES[r["bin"]],
                "gap_to_s": GAP_EDGES[r["bin"] + 1] if r["bin"] + 1 < len(GAP_EDGES) else None,
                "boundary_requests": r["n"],
                "boundary_misses": r["m"],
                "control_requests": r["cn"] or 0,
                "control_misses": r["cm"] or 0,
            }
            for r in strata.iter_rows(named=True)
        ],
    }


#: What each boundary kind needs in the lake, in words (:func:`missing`).
NEEDS: dict[str, str] = {
    "restart": (
        "requests after a restart of the agent process (claude --continue or --resume): Claude Code "
        "transcripts that log the restart, or OTLP claude_code.session.count points with start_type "
        "resume or continue"
    ),
    "version": (
        "a stream whose client version changes between two requests (agent_version recorded, as "
        "Claude Code transcripts and OTLP carry it)"
    ),
    "model": "a stream whose model changes between two requests",
}


def missing(result: dict[str, Any]) -> str | None:
    """Why :func:`compare`'s ``result`` compares nothing, and what data it needs; None when it
    compares something."""
    b = result["boundaries"]
    if b["requests"]:
        return None
    boundary = result["boundary"]
    if b["unmatched"]:
        return (
            f"nothing to compare: {b['unmatched']} requests at a {boundary} boundary, none with a "
            "control (a request after an idle gap of the same length and TTL in force, in a stream "
            "with no boundary); compare needs more in-session idle gaps (a longer --since, more sessions)"
        )
    return (
        f"nothing to compare: no request at a {boundary} boundary in the selection; compare "
        f"--boundary {boundary} needs {NEEDS[boundary]}, beside in-session idle gaps of the same length"
    )
