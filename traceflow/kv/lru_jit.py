"""The LRU loops of :mod:`traceflow.kv.lru`, compiled by numba (JIT, cached on disk after the first run).

One idea in both: LRU order is the order of last-use positions. With an eviction pointer ``t`` (every
block whose last use is before ``t`` has been evicted), an access hits iff its block's previous use is
at or after ``t``; a miss that overfills the cache moves ``t`` just past the first position at or after
it that is still a block's last use, which evicts that block (the least recently used one). The
pointer only moves forward, so a whole trace costs one pass over the accesses and one over the
positions the pointer crosses: O(n), no hashing, no list. Same hits as libCacheSim's LRU.

Import this module only through :func:`traceflow.native.jit_enabled` (importing numba takes ~0.3 s).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


@numba.njit(cache=True, nogil=True)
def hits(ids: I64, lo: int, capacity: int, last: npt.NDArray[np.signedinteger[Any]]) -> int:
    """Hits of an LRU of ``capacity`` ≥ 1 blocks over ``ids`` (each in ``[lo, lo + len(last))``).

    ``last`` (all −1 on entry) is the last-use position of each block, indexed by ``id − lo``: a
    position ``j`` is still its block's last use iff ``last[ids[j] − lo] == j``.
    """
    t = 0
    count = 0
    n_hits = 0
    for i in range(len(ids)):
        x = ids[i] - lo
        p = last[x]
        last[x] = i
        if p >= t:
            n_hits += 1
        elif count < capacity:
            count += 1
        else:
            j = t
            while last[ids[j] - lo] != j:
                j += 1
            t = j + 1
    return n_hits


@numba.njit(cache=True, nogil=True)
def level(prev: I64, nxt: I64, capacity: int) -> tuple[I64, I64]:
    """Miss positions and evicted last-use positions (both ascending) of an LRU of ``capacity`` ≥ 1 blocks.

    ``prev``/``nxt`` are :func:`traceflow.kv.lru.prev_next`'s links: at access ``i``, position ``j``
    is its block's last use iff ``nxt[j] > i``.
    """
    n = len(prev)
    misses = np.empty(n, dtype=np.int64)
    evicted = np.empty(n, dtype=np.int64)
    n_miss = 0
    n_ev = 0
    t = 0
    count = 0
    for i in range(n):
        if prev[i] >= t:
            continue
        misses[n_miss] = i
        n_miss += 1
        if count < capacity:
            count += 1
            continue
        j = t
        while nxt[j] <= i:
            j += 1
        evicted[n_ev] = j
        n_ev += 1
        t = j + 1
    return misses[:n_miss].copy(), evicted[:n_ev].copy()


@numba.njit(cache=True, nogil=True)
def route_prefix(offsets: I64, blocks: I64, tokens: I64, instances: int, n_ids: int) -> I64:
    """:func:`traceflow.kv.fleet.route`'s ``prefix`` rule over ``blocks`` relabelled ``0..n_ids-1``:
    the instance that last took the deepest block of a request's longest remembered prefix, else the
    one with the fewest routed tokens (ties to the lowest index); then its blocks remember it."""
    n = len(offsets) - 1
    owner = np.full(n_ids, -1, dtype=np.int64)
    load = np.zeros(instances, dtype=np.int64)
    out = np.zeros(n, dtype=np.int64)
    for r in range(n):
        lo, hi = offsets[r], offsets[r + 1]
        k = lo
        while k < hi and owner[blocks[k]] >= 0:
            k += 1
        if k > lo:
            i = owner[blocks[k - 1]]
        else:
            i = 0
            for j in range(1, instances):
                if load[j] < load[i]:
                    i = j
        for b in range(lo, hi):
            owner[blocks[b]] = i
        load[i] += tokens[r]
        out[r] = i
    return out
