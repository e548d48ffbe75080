"""The compiled parts of traceflow, and the switch that turns them off.

``traceflow._cscan`` (C, built by ``pip install`` where a compiler is present) scans Claude Code
transcripts; without it, or with ``TRACEFLOW_NATIVE=0``, the pure-Python code does the same work,
more slowly, with the same results.
"""

from __future__ import annotations

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
