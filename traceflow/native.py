"""The compiled parts of traceflow, and the switch that turns them off.

``traceflow._cscan`` (C, built by ``pip install`` where a compiler is present) scans Claude Code
transcripts; ``traceflow.kv.lru_jit`` (numba, compiled on first use and cached) runs the LRU
simulator's loops. Without them, or with ``TRACEFLOW_NATIVE=0``, the pure-Python/numpy code does the
same work, more slowly, with the same results.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from traceflow import config

try:
    from traceflow import _cscan  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler
    _cscan = None


def available() -> bool:
    """Whether the compiled scanner was built."""
    return _cscan is not None


def enabled() -> bool:
    """Whether importers use it: built, and not turned off by ``TRACEFLOW_NATIVE=0``."""
    return _cscan is not None and config.get("native") != "0"


def claude_scanner() -> Callable[..., Any] | None:
    """``_cscan.scan`` when it is enabled, else None."""
    return _cscan.scan if enabled() else None


def jit_available() -> bool:
    """Whether numba is installed (checked without importing it: that takes ~0.3 s)."""
    return importlib.util.find_spec("numba") is not None


def jit_enabled() -> bool:
    """Whether the LRU simulator uses its numba kernels: installed, and not off (``TRACEFLOW_NATIVE=0``)."""
    return jit_available() and config.get("native") != "0"
