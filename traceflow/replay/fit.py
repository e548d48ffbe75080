"""Fit a workload profile to the selected requests
(docs/replay.md#traceflow-fit-o-profilejson-traceflow-synth).

The profile is described in :mod:`traceflow.replay.workload`. :func:`fit` reads the main streams of the
selected sessions (sub-agents and side requests on another model are left out): arrival = first requests
of sessions (rate and inter-arrival CV); per session, in time order, appended = ``context − previous
context − previous output`` (turns that did not drop), think time = start − previous end (gaps ≥
``idle_threshold_s`` are pauses: the idle/resume cohort), output, initial context, turns, latency by
least squares; a context drop is a compaction (``on_cap = compact`` at the median pre-drop context),
else the cap is the largest context and sessions end there. Appended tokens, outputs and think times are
*mixtures*: a second component (file reads next to tool results, code blocks next to tool calls) is
split off in log space when a two-Gaussian model beats one by BIC; each component keeps its empirical
quantiles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from traceflow.errors import UsageError
from traceflow.replay.arrays import F64
from traceflow.replay.workload import DEFAULT_CACHE_TTL_S, DEFAULT_IDLE_THRESHOLD_S, PROFILE_VERSION, Dist

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

QUANTILE_POINTS = 51


#: Below this many requests or sessions a fit warns that its distributions are rough.
FEW_REQUESTS = 200
FEW_SESSIONS = 10


def fit(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    *,
    idle_threshold_s: float = DEFAULT_IDLE_THRESHOLD_S,
    name: str | None = None,
) -> dict[str, Any]:
    """Fit a profile to the selected requests (see the module docstring)."""
    from traceflow.replay.requests import load_requests

    frame = load_requests(con, selection)
    if frame.is_empty():
        raise UsageError("no requests with tokens match the selection; nothing to fit")
    return fit_frame(frame, idle_threshold_s=idle_threshold_s, name=name)


def fit_frame(
    frame: pl.DataFrame, *, idle_threshold_s: float = DEFAULT_IDLE_THRESHOLD_S, name: str | None = None
) -> dict[str, Any]:
    """:func:`fit` on a frame shaped as :func:`traceflow.replay.requests.load_requests` returns it."""
    import polars as pl

    main = frame.filter(pl.col("session_id").is_not_null() & pl.col("parent_session_id").is_null())
    if main.is_empty():
        raise UsageError(
            "the selection has no requests with a session id (flat traces such as Mooncake or Azure "
            "carry no sessions); fit needs sessions"
        )
    # the main stream of each session: its most used model
    counts = main.group_by("session_id", "model").len()
    best = counts.sort(
        ["session_id", "len", "model"], descending=[False, True, False], nulls_last=True
    ).unique("session_id", keep="first")
    main = main.join(best.select("session_id", "model"), on=["session_id", "model"], nulls_equal=True)
    main = main.sort(["session_id", "t_us", "seq"], nulls_last=True, maintain_order=True)
    sid = main["session_id"].to_numpy()
    t = np.asarray(main["t_us"].to_numpy(), dtype=np.float64) / 1e6
    end_known = np.asarray(main["end_us"].is_not_null().to_numpy(), dtype=bool)
    end = np.where(end_known, np.asarray(main["end_us"].fill_null(0).to_numpy(), dtype=np.float64) / 1e6, t)
    ctx = np.asarray(main["ctx"].to_numpy(), dtype=np.int64)
    out = np.asarray(main["out"].to_numpy(), dtype=np.int64)
    dur = np.asarray(main["duration_ms"].fill_null(np.nan).to_numpy(), dtype=np.float64) / 1000.0
    n = len(t)
    first = np.ones(n, dtype=bool)
    first[1:] = sid[1:] != sid[:-1]
    cont = ~first
    prev = np.roll(np.arange(n), 1)
    drop = cont & (ctx < ctx[prev])
    grow = cont & ~drop

    # arrivals: the first request of every root session of the whole selection
    roots = (
        frame.filter(pl.col("session_id").is_not_null())
        .group_by(pl.coalesce("parent_session_id", "session_id"))
        .agg(pl.col("t_us").min())
    )
    starts = np.sort(np.asarray(roots["t_us"].to_numpy(), dtype=np.float64) / 1e6)
    n_sessions = len(starts)
    span = float(starts[-1] - starts[0]) if n_sessions > 1 else 0.0
    rate = (n_sessions - 1) / span * 60.0 if span > 0 else None
    gaps_a = np.diff(starts)
    cv = float(gaps_a.std() / gaps_a.mean()) if len(gaps_a) > 1 and gaps_a.mean() > 0 else 1.0

    # latency: duration = a + b * output (least squares on requests that have a duration)
    has_dur = np.isfinite(dur)
    if has_dur.sum() >= 10:
        A = np.stack([np.ones(int(has_dur.sum())), out[has_dur].astype(np.float64)], axis=1)
        coef, *_ = np.linalg.lstsq(A, dur[has_dur], rcond=None)
        base_s, per_tok = max(float(coef[0]), 0.0), max(float(coef[1]), 0.0)
    else:
        base_s = per_tok = 0.0

    appended = (ctx - ctx[prev] - out[prev])[grow]
    appended = appended[appended >= 1]
    gap = np.where(end_known[prev], t - end[prev], t - t[prev] - (base_s + per_tok * out[prev]))[cont]
    gap = np.maximum(gap, 0.0)
    pause = gap >= idle_threshold_s
    think = gap[~pause]

    # the idle/resume cohort: sessions with a pause, after how many turns, for how long
    turn_no = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))
    cont_idx = np.flatnonzero(cont)
    pause_rows = cont_idx[pause]
    sess_codes = np.cumsum(first) - 1
    n_main = int(first.sum())
    paused_sessions = np.unique(sess_codes[pause_rows])
    first_pause_turn = []
    seen: set[int] = set()
    for r in pause_rows.tolist():
        s = int(sess_codes[r])
        if s not in seen:
            seen.add(s)
            first_pause_turn.append(int(turn_no[r]))
    turns = np.bincount(sess_codes)

    if drop.any():
        pre = ctx[prev][drop]
        cap = int(np.median(pre))
        on_cap = "compact"
        compact_to: Dist | None = quantile_dist(ctx[drop], integer=True, minimum=1)
    else:
        cap = int(ctx.max())
        on_cap = "end"
        compact_to = None
    models = main["model"].drop_nulls()
    agents = main["agent"].drop_nulls() if "agent" in main.columns else pl.Series([], dtype=pl.String)
    profile: dict[str, Any] = {
        "traceflow_profile": PROFILE_VERSION,
        "name": name or "fitted",
        "description": "Fitted by traceflow fit.",
        "agent": agents.mode().sort()[0] if len(agents) else "claude-code",
        "model": models.mode().sort()[0] if len(models) else "synthetic",
        "arrival": {"sessions_per_min": round(rate, 6) if rate else 1.0, "cv": round(cv, 4)},
        "turns": quantile_dist(turns, integer=True, minimum=1),
        "initial_context": quantile_dist(ctx[first], integer=True, minimum=1),
        "appended": fit_mixture(appended) if len(appended) else {"kind": "constant", "value": 1},
        "output": fit_mixture(np.maximum(out, 1)),
        "think_s": fit_mixture(think, integer=False, minimum=0.0)
        if len(think)
        else {"kind": "constant", "value": 0.0},
        "latency": {"base_s": round(base_s, 6), "per_output_token_s": round(per_tok, 8)},
        "idle": {
            "threshold_s": idle_threshold_s,
            "cohort_share": round(len(paused_sessions) / n_main, 6) if n_main else 0.0,
            "after_turns": quantile_dist(first_pause_turn, integer=True, minimum=1)
            if first_pause_turn
            else None,
            "pause_s": quantile_dist(gap[pause]) if pause.any() else None,
        },
        "context": {"cap": cap, "on_cap": on_cap, "compact_to": compact_to},
        "cache_ttl_s": DEFAULT_CACHE_TTL_S,
    }
    profile["fitted"] = {
        "requests": int(frame.height),
        "main_stream_requests": n,
        "sessions": n_sessions,
        "span_s": round(span, 3),
        "sessions_per_min": profile["arrival"]["sessions_per_min"],
        "interarrival_cv": profile["arrival"]["cv"],
        "medians": {
            "appended": float(np.median(appended)) if len(appended) else None,
            "output": float(np.median(out)),
            "think_s": float(np.median(think)) if len(think) else None,
            "initial_context": float(np.median(ctx[first])),
            "turns": float(np.median(turns)),
        },
        "compactions": int(drop.sum()),
        "pauses": int(pause.sum()),
    }
    if frame.height < FEW_REQUESTS or n_sessions < FEW_SESSIONS:
        profile["fitted"]["sample_note"] = (
            f"fitted on only {frame.height:,} requests in {n_sessions:,} sessions: the distributions "
            f"rest on a few values each, so a workload synthesised from them is rough; fit at least "
            f"{FEW_REQUESTS:,} requests in {FEW_SESSIONS} sessions (a wider --since/--until, or more sources)"
        )
    if rate is None:
        profile["fitted"]["arrival_note"] = (
            "all sessions start at the same time (a source without absolute times, such as "
            "kv-cache-tester traces): arrival.sessions_per_min is a placeholder of 1.0; set it"
        )
    return profile


# ---------------------------------------------------------------------------------- distributions


def _quantiles(values: F64, points: int = QUANTILE_POINTS) -> list[float]:
    q = np.quantile(values, np.linspace(0.0, 1.0, points))
    return [round(float(x), 4) for x in q]


def quantile_dist(
    values: Sequence[float] | npt.NDArray[Any], *, integer: bool = False, minimum: float | None = None
) -> Dist:
    arr = np.asarray(values, dtype=np.float64)
    d: Dist = {"kind": "quantiles", "q": _quantiles(arr)}
    if integer:
        d["integer"] = True
    if minimum is not None:
        d["min"] = minimum
    return d


def fit_mixture(
    values: Sequence[float] | npt.NDArray[Any], *, integer: bool = True, minimum: float = 1.0
) -> Dist:
    """An empirical mixture: one or two components split in log space (BIC), each its quantiles."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not len(x):
        return {"kind": "constant", "value": minimum}
    base: Dist = {"integer": True} if integer else {}
    base["min"] = minimum
    lx = np.log(np.maximum(x, 1e-3))
    split = _two_components(lx) if len(x) >= 50 else None
    if split is None:
        return {"kind": "quantiles", "q": _quantiles(x), **base}
    lo = x[lx <= split]
    hi = x[lx > split]
    comps = [
        {"weight": round(len(part) / len(x), 6), "kind": "quantiles", "q": _quantiles(part)}
        for part in (lo, hi)
    ]
    return {"kind": "mixture", "components": comps, **base}


def _two_components(lx: F64) -> float | None:
    """The log-space threshold of a two-Gaussian mixture that BIC prefers to one Gaussian, else None."""
    n = len(lx)
    s = np.sort(lx)
    if s[-1] - s[0] < 1e-9:
        return None
    # initialise at the Otsu split, then a few EM steps
    c1 = np.cumsum(s)
    c2 = np.cumsum(s * s)
    k = np.arange(1, n)
    m1 = c1[:-1] / k
    m2 = (c1[-1] - c1[:-1]) / (n - k)
    between = k * (n - k) * (m1 - m2) ** 2
    cut = int(np.argmax(between)) + 1
    w = np.array([cut / n, 1 - cut / n])
    mu = np.array([s[:cut].mean(), s[cut:].mean()])
    var = np.array([max(s[:cut].var(), 1e-4), max(s[cut:].var(), 1e-4)])
    del c2
    ll2 = -np.inf
    for _ in range(50):
        dens = w / np.sqrt(2 * np.pi * var) * np.exp(-((lx[:, None] - mu) ** 2) / (2 * var))
        tot = dens.sum(axis=1) + 1e-300
        ll_new = float(np.log(tot).sum())
        r = dens / tot[:, None]
        nk = r.sum(axis=0) + 1e-12
        w = nk / n
        mu = (r * lx[:, None]).sum(axis=0) / nk
        var = np.maximum((r * (lx[:, None] - mu) ** 2).sum(axis=0) / nk, 1e-4)
        if abs(ll_new - ll2) < 1e-6 * abs(ll_new):
            ll2 = ll_new
            break
        ll2 = ll_new
    v1 = max(float(lx.var()), 1e-4)
    ll1 = float(-0.5 * n * (np.log(2 * np.pi * v1) + 1))
    bic1 = 2 * math.log(n) - 2 * ll1
    bic2 = 5 * math.log(n) - 2 * ll2
    if not (bic2 < bic1 - 10) or w.min() < 0.02:
        return None
    lo, hi = (0, 1) if mu[0] <= mu[1] else (1, 0)
    # the threshold where the two weighted densities cross, between the means
    grid = np.linspace(mu[lo], mu[hi], 512)
    d_lo = w[lo] / np.sqrt(var[lo]) * np.exp(-((grid - mu[lo]) ** 2) / (2 * var[lo]))
    d_hi = w[hi] / np.sqrt(var[hi]) * np.exp(-((grid - mu[hi]) ** 2) / (2 * var[hi]))
    cross = np.flatnonzero(d_hi >= d_lo)
    return float(grid[cross[0]]) if len(cross) else float((mu[lo] + mu[hi]) / 2)
