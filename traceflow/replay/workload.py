"""Workload profiles: fit one from a selection, generate traces from a profile or a preset (DESIGN §4).

A *profile* is a small JSON document (``traceflow fit -o profile.json``)::

    {"traceflow_profile": 1, "name": ..., "agent": ..., "model": ...,
     "arrival":  {"sessions_per_min": λ, "cv": 1.0},        # renewal process (cv 1 = Poisson)
     "turns":    DIST | null,                                # requests per session (null: until the cap)
     "initial_context": DIST,                                # tokens of a session's first request
     "appended": DIST,                                       # new input tokens per later request
     "output":   DIST,                                       # output tokens per request
     "think_s":  DIST,                                       # gap from a response to the next request
     "latency":  {"base_s": a, "per_output_token_s": b},     # request duration = a + b·output
     "idle":     {"threshold_s": T, "cohort_share": p, "after_turns": DIST, "pause_s": DIST},
     "context":  {"cap": C, "on_cap": "end" | "compact", "compact_to": DIST | null},
     "cache_ttl_s": 300, "fitted": {...}}

``DIST`` is ``{"kind": "constant"|"uniform"|"exponential"|"lognormal"|"quantiles"|"mixture", ...}``
with optional ``jitter`` (uniform ±j added), ``min``/``max`` (clamps) and ``integer``.
``quantiles`` holds ``q``: values at equally spaced probabilities 0..1 (sampled by linear
interpolation, so it reproduces the data's distribution); ``mixture`` holds weighted components.

**Fit** (:func:`fit`) reads the main streams of the selected sessions (sub-agents and side requests
on another model are left out): arrival = first requests of sessions (rate and inter-arrival CV);
per session, in time order, appended = ``context − previous context − previous output`` (turns
that did not drop), think time = start − previous end (gaps ≥ ``idle_threshold_s`` are pauses: the
idle/resume cohort), output, initial context, turns, latency by least squares; a context drop is a
compaction (``on_cap = compact`` at the median pre-drop context), else the cap is the largest
context and sessions end there. Appended tokens, outputs and think times are *mixtures*: a second
component (file reads next to tool results, code blocks next to tool calls) is split off in log
space when a two-Gaussian model beats one by BIC; each component keeps its empirical quantiles.

**Generate** (:func:`generate`): sessions arrive by the renewal process (× ``rate_scale``) over
``duration``; each runs turn after turn (context = previous context + previous output + appended),
a cohort pauses once, the session ends at its turn count, at the cap (``end``) or at the end of the
window, or compacts (``compact``). Seeded: one seed gives one trace. The reported cache: a request
reads the previous context when the gap is within ``cache_ttl_s`` (5 min, Claude Code's TTL) and
writes the rest (``attributes.cache_derived = "synthetic"``).

The built-in preset ``agentic-coding`` is the reference workload of DESIGN §4 and generates the same
process as ``traceflow.kv.synthetic.agentic_coding_trace`` (``traceflow simulate --workload``): λ = 2.5
sessions/min Poisson; tool results of 250–600 tokens, 15 % file reads of 1,500–3,500; answers of
40–200 tokens, 15 % code blocks of 400–900; ±100 jitter; contexts grow monotonically toward a 64k
cap; a quarter of the sessions pause 840–960 s after 19–23 requests, then resume. ASSUMPTIONS (the
same as the simulator's): an initial context of 2,000–4,000 tokens, think times exponential with
mean 30 s, 50 output tokens/s, sessions keep working until the window ends, and a request that
would pass the cap is compacted to 4,000–8,000 tokens.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import orjson

from traceflow.errors import UsageError

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

PROFILE_VERSION = 1
PRESETS: tuple[str, ...] = ("agentic-coding",)
DEFAULT_IDLE_THRESHOLD_S = 600.0
DEFAULT_CACHE_TTL_S = 300.0
QUANTILE_POINTS = 51
#: Start of synthetic traces written to the lake unless ``start`` is given (like the relative
#: public traces, they begin at the Unix epoch).
DEFAULT_START_US = 0

Dist = dict[str, Any]


# ---------------------------------------------------------------------------------- distributions


def sample(dist: Dist, rng: np.random.Generator, size: int) -> F64:
    """``size`` draws from ``dist`` (modifiers applied)."""
    kind = dist.get("kind")
    if kind == "constant":
        out = np.full(size, float(dist["value"]))
    elif kind == "uniform":
        out = rng.uniform(float(dist["low"]), float(dist["high"]), size)
    elif kind == "exponential":
        out = rng.exponential(float(dist["mean"]), size)
    elif kind == "lognormal":
        out = float(dist["median"]) * np.exp(rng.normal(0.0, float(dist["sigma"]), size))
    elif kind == "quantiles":
        q = np.asarray(dist["q"], dtype=np.float64)
        if len(q) == 1:
            out = np.full(size, q[0])
        else:
            out = np.interp(rng.random(size), np.linspace(0.0, 1.0, len(q)), q)
    elif kind == "mixture":
        comps = dist["components"]
        w = np.asarray([float(c["weight"]) for c in comps], dtype=np.float64)
        if w.sum() <= 0:
            raise UsageError("a mixture's weights must add up to more than 0")
        which = rng.choice(len(comps), size=size, p=w / w.sum())
        out = np.empty(size, dtype=np.float64)
        for k, comp in enumerate(comps):
            m = which == k
            cnt = int(m.sum())
            if cnt:
                out[m] = sample({**comp, "kind": comp.get("kind", "quantiles")}, rng, cnt)
    else:
        raise UsageError(f"unknown distribution kind {kind!r} in the profile")
    jitter = float(dist.get("jitter") or 0)
    if jitter:
        out = out + rng.uniform(-jitter, jitter, size)
    if dist.get("integer"):
        out = np.rint(out)
    if dist.get("min") is not None:
        out = np.maximum(out, float(dist["min"]))
    if dist.get("max") is not None:
        out = np.minimum(out, float(dist["max"]))
    return out


def dist_median(dist: Dist | None, samples: int = 200_000) -> float | None:
    """The median of ``dist`` (exact for a plain quantile table, else by seeded sampling)."""
    if dist is None:
        return None
    if dist.get("kind") == "quantiles" and not dist.get("jitter"):
        q = dist["q"]
        return float(np.interp(0.5, np.linspace(0, 1, len(q)), q))
    return float(np.median(sample(dist, np.random.default_rng(12345), samples)))


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


# ------------------------------------------------------------------------------------- profiles


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
    "description": "The reference agentic-coding workload (DESIGN §4).",
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


def load_profile(path: Path) -> dict[str, Any]:
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise UsageError(
            f"--profile {path}: no such file (write one with `traceflow fit -o {path}`)"
        ) from None
    except orjson.JSONDecodeError as e:
        raise UsageError(f"--profile {path} is not JSON: {e}") from None
    return validate_profile(doc, str(path))


def validate_profile(doc: Any, where: str = "profile") -> dict[str, Any]:
    """``doc`` if it is a usable profile, else a :class:`UsageError` naming what is wrong."""
    if not isinstance(doc, dict) or doc.get("traceflow_profile") != PROFILE_VERSION:
        raise UsageError(f"{where} is not a traceflow profile (version {PROFILE_VERSION})")
    for key in ("arrival", "initial_context", "appended", "output", "think_s", "context"):
        if not isinstance(doc.get(key), dict):
            raise UsageError(f"{where}: missing or invalid {key!r}")
    rate = doc["arrival"].get("sessions_per_min")
    if not isinstance(rate, int | float) or rate <= 0:
        raise UsageError(f"{where}: arrival.sessions_per_min must be a positive number")
    if doc["context"].get("on_cap") not in ("end", "compact"):
        raise UsageError(f"{where}: context.on_cap must be 'end' or 'compact'")
    return doc


def profile_medians(profile: Mapping[str, Any]) -> dict[str, float | None]:
    """Medians of the profile's per-turn distributions (for people and for round-trip checks)."""
    return {
        "appended": dist_median(profile.get("appended")),
        "output": dist_median(profile.get("output")),
        "think_s": dist_median(profile.get("think_s")),
        "initial_context": dist_median(profile.get("initial_context")),
    }


# ------------------------------------------------------------------------------------ generation


@dataclass
class SynthTrace:
    """A generated trace: one entry per request, sorted by start time (ties: session, turn)."""

    profile: dict[str, Any]
    key: str
    start_us: int
    session: I64
    turn: I64
    prompt: I64  # prompt index within the session (a new one at the start and after each pause)
    t_us: I64  # start, µs since the epoch
    end_us: I64
    ctx: I64
    out: I64
    read: I64
    drop: npt.NDArray[np.bool_]
    n_sessions: int

    @property
    def n(self) -> int:
        return len(self.t_us)

    def session_ids(self, idx: I64) -> list[str]:
        return [f"syn-{self.key}-{s:07d}" for s in idx.tolist()]

    def lake_frame(self, start: int = 0, stop: int | None = None) -> pl.DataFrame:
        """Rows ``start:stop`` with the lake's ``requests`` schema (source ``synthetic``)."""
        import polars as pl

        from traceflow.schema import REQUESTS

        stop = self.n if stop is None else stop
        sl = slice(start, stop)
        m = stop - start
        key = self.key
        idx = pl.Series("i", np.arange(start, stop, dtype=np.int64))
        sess = pl.Series("s", self.session[sl])
        attrs = orjson.dumps(
            {"synthetic": {"profile": self.profile.get("name"), "key": key}, "cache_derived": "synthetic"}
        ).decode()
        ctx = self.ctx[sl]
        read = self.read[sl]
        dur_ms = (self.end_us[sl] - self.t_us[sl]) / 1000.0
        frame = pl.DataFrame(
            {
                "i": idx,
                "s": sess,
                "p": self.prompt[sl],
                "started_at": self.t_us[sl],
                "ended_at": self.end_us[sl],
                "duration_ms": dur_ms,
                "cache_read_tokens": read,
                "cache_write_tokens": ctx - read,
                "output_tokens": self.out[sl],
            }
        )
        frame = frame.select(
            pl.format("syn-{}-{}", pl.lit(key), pl.col("i")).alias("event_id"),
            pl.lit("synthetic").alias("source"),
            pl.lit(self.profile.get("agent") or "claude-code").alias("agent"),
            pl.lit(None, pl.String).alias("agent_version"),
            pl.lit(None, pl.String).alias("user_id"),
            pl.format("syn-{}-{}", pl.lit(key), pl.col("s").cast(pl.String).str.zfill(7)).alias("session_id"),
            pl.lit(None, pl.String).alias("parent_session_id"),
            pl.format(
                "syn-{}-{}-p{}", pl.lit(key), pl.col("s").cast(pl.String).str.zfill(7), pl.col("p")
            ).alias("prompt_id"),
            pl.format("req_syn_{}_{}", pl.lit(key), pl.col("i")).alias("request_id"),
            pl.col("started_at"),
            pl.col("ended_at"),
            pl.col("duration_ms"),
            pl.lit(None, pl.Float64).alias("ttft_ms"),
            pl.lit(self.profile.get("model") or "synthetic").alias("model"),
            pl.lit(0, pl.Int64).alias("cold_input_tokens"),
            pl.col("cache_read_tokens"),
            pl.col("cache_write_tokens"),
            pl.lit(None, pl.Int64).alias("cache_write_5m_tokens"),
            pl.lit(None, pl.Int64).alias("cache_write_1h_tokens"),
            pl.col("output_tokens"),
            pl.lit(None, pl.Int64).alias("reasoning_tokens"),
            pl.lit(None, pl.Float64).alias("cost_usd"),
            pl.lit(attrs).alias("attributes"),
            pl.col("i").alias("seq"),
            pl.lit(None, pl.List(pl.Int64)).alias("hash_ids"),
            pl.lit(None, pl.Int32).alias("block_size"),
            pl.lit(None, pl.Int64).alias("ingested_at"),
        )
        del m
        now = int(dt.datetime.now(dt.UTC).timestamp() * 1_000_000)
        frame = frame.with_columns(pl.col("ingested_at").fill_null(now))
        return frame.cast(dict(REQUESTS.schema))  # type: ignore[arg-type]

    def replay_frame(self) -> pl.DataFrame:
        """The trace shaped as :func:`traceflow.replay.prefix.load_requests` returns requests."""
        import polars as pl

        lf = self.lake_frame()
        return lf.select(
            "session_id",
            "parent_session_id",
            "prompt_id",
            "model",
            "user_id",
            "agent",
            "source",
            "request_id",
            pl.col("started_at").dt.epoch("us").alias("t_us"),
            pl.col("ended_at").dt.epoch("us").alias("end_us"),
            (pl.col("cache_read_tokens") + pl.col("cache_write_tokens")).alias("ctx"),
            pl.col("output_tokens").alias("out"),
            pl.col("cache_read_tokens").alias("read"),
            pl.lit(False).alias("measured"),
            "hash_ids",
            pl.col("block_size").alias("src_block"),
            pl.lit(None, pl.String).alias("scope"),
            "duration_ms",
            "ttft_ms",
            "seq",
            "event_id",
        )


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


def write_lake(trace: SynthTrace, lake: Any, chunk: int = 1_000_000) -> int:
    """Append ``trace`` to the lake's ``requests`` (source ``synthetic``); returns the rows written."""
    written = 0
    for a in range(0, trace.n, chunk):
        frame = trace.lake_frame(a, min(a + chunk, trace.n))
        lake.append("requests", frame)
        written += frame.height
    return written


# ------------------------------------------------------------------------------------------- fit


def fit(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    *,
    idle_threshold_s: float = DEFAULT_IDLE_THRESHOLD_S,
    name: str | None = None,
) -> dict[str, Any]:
    """Fit a profile to the selected requests (see the module docstring)."""
    from traceflow.replay.prefix import load_requests

    frame = load_requests(con, selection)
    if frame.is_empty():
        raise UsageError("no requests with tokens match the selection; nothing to fit")
    return fit_frame(frame, idle_threshold_s=idle_threshold_s, name=name)


def fit_frame(
    frame: pl.DataFrame, *, idle_threshold_s: float = DEFAULT_IDLE_THRESHOLD_S, name: str | None = None
) -> dict[str, Any]:
    """:func:`fit` on a frame shaped as :func:`traceflow.replay.prefix.load_requests` returns it."""
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
    if rate is None:
        profile["fitted"]["arrival_note"] = (
            "all sessions start at the same time (a source without absolute times, such as "
            "kv-cache-tester traces): arrival.sessions_per_min is a placeholder of 1.0; set it"
        )
    return profile


def dump_profile(profile: Mapping[str, Any], path: Path) -> None:
    data = orjson.dumps(profile, option=orjson.OPT_INDENT_2) + b"\n"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
