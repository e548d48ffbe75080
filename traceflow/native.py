"""The compiled parts of traceflow, and the switch that turns them off.

``traceflow.kv.lru_jit`` (numba, compiled on first use and cached) runs the LRU simulator's loops.
Without numba, or with ``TRACEFLOW_NATIVE=0``, the numpy code does the same work, more slowly, with
the same hits.
"""

from __future__ import annotations

import importlib.util

from traceflow import config


def jit_available() -> bool:
    """Whether numba is installed (checked without importing it: that takes ~0.3 s)."""
    return importlib.util.find_spec("numba") is not None


def jit_enabled() -> bool:
    """Whether the LRU simulator uses its numba kernels: installed, and not off (``TRACEFLOW_NATIVE=0``)."""
    return jit_available() and config.get("native") != "0"
