"""Generate a trace from a workload profile or a preset
(docs/replay.md#traceflow-fit-o-profilejson-traceflow-synth).

The profile is described in :mod:`traceflow.replay.workload`. :func:`generate`: sessions arrive by the
renewal process (× ``rate_scale``) over ``duration``; each runs turn after turn (context = previous
context + previous output + appended), a cohort pauses once, the session ends at its turn count, at the
cap (``end``) or at the end of the window, or compacts (``compact``). Seeded: one seed gives one trace.
The reported cache: a request reads the previous context when the gap is within ``cache_ttl_s`` (5 min,
Claude Code's TTL) and writes the rest (``attributes.cache_derived = "synthetic"``).

The built-in preset ``agentic-coding`` is the reference workload of
docs/replay.md#the-reference-agentic-coding-workload (the turn sizes of
``traceflow.kv.synthetic.agentic_coding_trace``, ``traceflow simulate --workload``, which differs in
three ways since issue 23: its sessions end at the cap, 11 of them resume, and its think time is
calibrated): λ = 2.5 sessions/min Poisson; tool results of 250–600 tokens, 15 % file reads of
1,500–3,500; answers of 40–200 tokens, 15 % code blocks of 400–900; ±100 jitter; contexts grow
monotonically toward a 64k cap; a quarter of the sessions pause 840–960 s after 19–23 requests, then
resume. ASSUMPTIONS: an initial context of 2,000–4,000 tokens (as the simulator's), think times
exponential with mean 30 s, 50 output tokens/s, sessions keep working until the window ends, and a
request that would pass the cap is compacted to 4,000–8,000 tokens.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from traceflow.errors import UsageError
from traceflow.replay.arrays import F64, I64
from traceflow.replay.synth_trace import SynthTrace
from traceflow.replay.workload import (
    DEFAULT_CACHE_TTL_S,
    DEFAULT_IDLE_THRESHOLD_S,
    PROFILE_VERSION,
    Dist,
    sample,
    validate_profile,
)

PRESETS: tuple[str, ...] = ("agentic-coding",)
#: Start of synthetic traces written to the lake unless ``start`` is given (like the relative
#: public traces, they begin at the Unix epoch).
DEFAULT_START_US = 0


def _run_key(
    profile: Mapping[str, Any], duration_s: float, rate_scale: float, seed: int, start_us: int
) -> str:
    blob = orjson.dumps(
        {"p": profile, "d": duration_s, "r": rate_scale, "s": seed, "t": start_us},
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.blake2b(blob, digest_size=5).hexdigest()


def generate(
    profile: Mapping[str, Any],
    duration_s: float,
    *,
    rate_scale: float = 1.0,
    seed: int = 0,
    start_us: int = DEFAULT_START_US,
    max_requests: int | None = None,
) -> SynthTrace:
    """A seeded trace from ``profile`` over ``duration_s`` seconds (see the module docstring);
    ``max_requests`` keeps the first requests in time order."""
    prof = validate_profile(dict(profile))
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise UsageError("--duration must be positive")
    if not (rate_scale > 0 and math.isfinite(rate_scale)):
        raise UsageError(f"--rate-scale {rate_scale} must be a positive number")
    if max_requests is not None and max_requests < 1:
        raise UsageError(f"--limit {max_requests} must be at least 1")
    rng = np.random.default_rng(seed)
    lam = float(prof["arrival"]["sessions_per_min"]) / 60.0 * rate_scale  # sessions per second
    cv = float(prof["arrival"].get("cv") or 1.0)
    arrivals = _renewal(rng, lam, cv, duration_s)
    n_s = len(arrivals)
    if n_s == 0:
        raise UsageError("no session arrived in the window; use a longer --duration or a higher --rate-scale")
    turns_d = prof.get("turns")
    turn_limit = (
        np.maximum(np.rint(sample(turns_d, rng, n_s)), 1).astype(np.int64)
        if turns_d
        else np.full(n_s, np.iinfo(np.int64).max, dtype=np.int64)
    )
    idle = prof.get("idle") or {}
    cohort = rng.random(n_s) < float(idle.get("cohort_share") or 0.0)
    after = (
        np.maximum(np.rint(sample(idle["after_turns"], rng, n_s)), 1).astype(np.int64)
        if cohort.any() and idle.get("after_turns")
        else np.zeros(n_s, dtype=np.int64)
    )
    ctx_cfg = prof["context"]
    cap = int(ctx_cfg.get("cap") or 2**62)
    compact = ctx_cfg.get("on_cap") == "compact"
    compact_to = ctx_cfg.get("compact_to")
    lat = prof.get("latency") or {}
    base_s = float(lat.get("base_s") or 0.0)
    per_tok = float(lat.get("per_output_token_s") or 0.0)
    ttl_us = float(prof.get("cache_ttl_s") or DEFAULT_CACHE_TTL_S) * 1e6
    end_window_us = duration_s * 1e6

    alive = np.arange(n_s, dtype=np.int64)
    t_next = arrivals * 1e6  # µs from the window start
    ctx_prev = np.zeros(n_s, dtype=np.int64)
    out_prev = np.zeros(n_s, dtype=np.int64)
    end_prev = np.zeros(n_s, dtype=np.float64)
    prompt = np.zeros(n_s, dtype=np.int64)
    parts: list[tuple[I64, ...]] = []
    total = 0
    j = 0
    while len(alive):
        m = len(alive)
        start = t_next[alive]
        ok = (start < end_window_us) & (j < turn_limit[alive])
        if j == 0:
            ctx = np.maximum(np.rint(sample(prof["initial_context"], rng, m)), 1).astype(np.int64)
            ctx = np.minimum(ctx, cap)
            dropped = np.zeros(m, dtype=bool)
        else:
            app = np.maximum(np.rint(sample(prof["appended"], rng, m)), 1).astype(np.int64)
            ctx = ctx_prev[alive] + out_prev[alive] + app
            over = ctx > cap
            dropped = np.zeros(m, dtype=bool)
            if compact and over.any():
                new = (
                    np.rint(sample(compact_to, rng, int(over.sum())))
                    if compact_to
                    else np.full(int(over.sum()), cap // 4)
                )
                ctx[over] = np.clip(new, 1, cap).astype(np.int64)
                dropped = over
            elif over.any():
                ok &= ~over
        out = np.maximum(np.rint(sample(prof["output"], rng, m)), 1).astype(np.int64)
        think = np.maximum(sample(prof["think_s"], rng, m), 0.0)
        pause = cohort[alive] & (after[alive] == j + 1)
        if pause.any():
            think[pause] += np.maximum(sample(idle["pause_s"], rng, int(pause.sum())), 0.0)
        dur = base_s + per_tok * out
        end = start + dur * 1e6
        resumed = (j > 0) & (after[alive] == j) & cohort[alive]
        prompt[alive] += resumed.astype(np.int64)
        keep = ok
        if keep.any():
            sel = alive[keep]
            gap = start[keep] - end_prev[sel]
            read = np.where((j > 0) & ~dropped[keep] & (gap <= ttl_us), ctx_prev[sel], 0).astype(np.int64)
            parts.append(
                (
                    sel,
                    np.full(len(sel), j, dtype=np.int64),
                    prompt[sel].copy(),
                    np.rint(start[keep]).astype(np.int64),
                    np.rint(end[keep]).astype(np.int64),
                    ctx[keep],
                    out[keep],
                    np.minimum(read, ctx[keep]),
                    dropped[keep].astype(np.int64),
                )
            )
            total += len(sel)
        ctx_prev[alive] = ctx
        out_prev[alive] = out
        end_prev[alive] = end
        t_next[alive] = end + think * 1e6
        alive = alive[keep]
        j += 1
    if not parts:
        raise UsageError("the profile produced no request in the window")
    cols = [np.concatenate([p[k] for p in parts]) for k in range(9)]
    order = np.lexsort((cols[1], cols[0], cols[3]))
    cols = [c[order] for c in cols]
    if max_requests is not None:
        cols = [c[:max_requests] for c in cols]
    key = _run_key(prof, duration_s, rate_scale, seed, start_us)
    return SynthTrace(
        profile=prof,
        key=key,
        start_us=start_us,
        session=cols[0],
        turn=cols[1],
        prompt=cols[2],
        t_us=cols[3] + start_us,
        end_us=cols[4] + start_us,
        ctx=cols[5],
        out=cols[6],
        read=cols[7],
        drop=cols[8].astype(bool),
        n_sessions=n_s,
    )


def _renewal(rng: np.random.Generator, lam: float, cv: float, duration_s: float) -> F64:
    """Arrival times in ``[0, duration_s)`` of a renewal process with rate ``lam`` and gap CV ``cv``
    (gamma gaps; cv = 1 is Poisson)."""
    shape = 1.0 / max(cv, 1e-3) ** 2
    scale = 1.0 / (lam * shape)
    out: list[F64] = []
    t = 0.0
    n = int(lam * duration_s * 1.1) + 16
    while True:
        gaps = rng.gamma(shape, scale, n)
        times = t + np.cumsum(gaps)
        # the process starts in equilibrium for Poisson; for others, the first gap is a plain draw
        if not out:
            times = times - gaps[0] + rng.uniform(0, gaps[0])
        inside = times[times < duration_s]
        out.append(inside)
        if len(inside) < n:
            break
        t = float(times[-1])
    return np.concatenate(out) if out else np.zeros(0)


# ------------------------------------------------------------------------------------- presets


def _uniform(low: float, high: float) -> Dist:
    return {"kind": "uniform", "low": low, "high": high}


def preset(name: str) -> dict[str, Any]:
    """A built-in profile (a fresh copy)."""
    if name != "agentic-coding":
        raise UsageError(f"no preset called {name!r}; choose one of: {', '.join(PRESETS)}")
    return copy.deepcopy(_AGENTIC_CODING)


_AGENTIC_CODING: dict[str, Any] = {
    "traceflow_profile": PROFILE_VERSION,
    "name": "agentic-coding",
    "description": "The reference agentic-coding workload (docs/replay.md).",
    "agent": "claude-code",
    "model": "claude-sonnet-4-5",
    "arrival": {"sessions_per_min": 2.5, "cv": 1.0},
    "turns": None,
    "initial_context": {"kind": "uniform", "low": 2000, "high": 4000, "integer": True},
    "appended": {
        "kind": "mixture",
        "components": [{"weight": 0.85, **_uniform(250, 600)}, {"weight": 0.15, **_uniform(1500, 3500)}],
        "jitter": 100,
        "integer": True,
        "min": 1,
    },
    "output": {
        "kind": "mixture",
        "components": [{"weight": 0.85, **_uniform(40, 200)}, {"weight": 0.15, **_uniform(400, 900)}],
        "jitter": 100,
        "integer": True,
        "min": 1,
    },
    "think_s": {"kind": "exponential", "mean": 30.0},
    "latency": {"base_s": 0.0, "per_output_token_s": 0.02},
    "idle": {
        "threshold_s": DEFAULT_IDLE_THRESHOLD_S,
        "cohort_share": 0.25,
        "after_turns": {"kind": "uniform", "low": 19, "high": 23, "integer": True},
        "pause_s": _uniform(840, 960),
    },
    "context": {"cap": 65536, "on_cap": "compact", "compact_to": _uniform(4000, 8000)},
    "cache_ttl_s": DEFAULT_CACHE_TTL_S,
}
