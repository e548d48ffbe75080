"""Vectorised index helpers over runs and groups (numpy), for the prefix derivation and the writers."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BoolA = npt.NDArray[np.bool_]


def local_index(counts: I64) -> I64:
    """``[0..c0), [0..c1), ...`` concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    out: I64 = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
    return out


def ranges(starts: I64, counts: I64) -> I64:
    """``[s0, s0+c0), [s1, s1+c1), ...`` concatenated."""
    out: I64 = np.repeat(starts, counts) + local_index(counts)
    return out


def group_first(sorted_keys: I64) -> BoolA:
    """True where a run of equal keys starts."""
    first = np.ones(len(sorted_keys), dtype=bool)
    if len(sorted_keys) > 1:
        first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return first


def previous(values: I64) -> I64:
    """``values`` shifted one place on: each element's predecessor, 0 for the first."""
    out = np.empty_like(values)
    if len(values):
        out[0] = 0
        out[1:] = values[:-1]
    return out
