"""Workload profiles: the document, its distributions, reading and writing it
(docs/replay.md#traceflow-fit-o-profilejson-traceflow-synth).

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

A profile is fitted to a selection by :mod:`traceflow.replay.fit` and turns into a trace in
:mod:`traceflow.replay.synth` (which also holds the built-in presets).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from traceflow.errors import UsageError
from traceflow.paths import read_text
from traceflow.replay.arrays import F64
from traceflow.replay.writing import atomic_write

PROFILE_VERSION = 1
DEFAULT_IDLE_THRESHOLD_S = 600.0
DEFAULT_CACHE_TTL_S = 300.0

Dist = dict[str, Any]


# ----------------------------------------------------------------------------------------- times


_DURATION = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


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


# ------------------------------------------------------------------------------------- profiles


def load_profile(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise UsageError(f"--profile {path}: no such file (write one with `traceflow fit -o {path}`)")
    try:
        doc = orjson.loads(read_text(path, "--profile", "a profile written by `traceflow fit`"))
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


def dump_profile(profile: Mapping[str, Any], path: Path) -> None:
    atomic_write(path, orjson.dumps(profile, option=orjson.OPT_INDENT_2) + b"\n")
