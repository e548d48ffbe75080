"""Exact LRU maths over a flat block-access sequence: reuse links, hits per capacity, stack distances.

LRU order is the order of last-use positions: with an eviction pointer ``t`` (every block whose last
use is before ``t`` was evicted), an access hits iff its block's previous use is at or after ``t``, and
an eviction moves ``t`` past the next position that is still a block's last use. Where numba is
installed (and ``TRACEFLOW_NATIVE`` is not ``0``) that loop runs compiled (:mod:`traceflow.kv.lru_jit`):
:func:`lru_hits` needs no sort at all, only a last-use table indexed by block id. Otherwise it runs in
numpy and Python: block ids are sorted once into previous/next-use positions (:func:`prev_next`); an
access whose previous use lies ``≤ C`` accesses back is a hit for capacity ``C`` whatever happened in
between, so a Python loop only visits the other accesses, moving the pointer over last-use positions
in bulk. Both give the same hits as libCacheSim's LRU. :func:`stack_distances` gives every access's
Mattson distance at once, for a whole hit-ratio curve.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from traceflow import native

I64 = npt.NDArray[np.int64]

NEVER = np.iinfo(np.int64).max  # next use of an access whose block is not used again
COLD_DISTANCE = 2**62  # stack distance of a first access: beyond any capacity


def prev_next(blocks: I64) -> tuple[I64, I64]:
    """For each access, the position of the previous and next access of the same block (−1 / never).

    One sort of ``id << bits | position`` keys; ids are remapped when they do not fit.

    >>> p, n = prev_next(np.array([7, 8, 7, 7]))
    >>> p.tolist(), [x if x < 99 else None for x in n.tolist()]
    ([-1, -1, 0, 2], [2, None, 3, None])
    """
    n = len(blocks)
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, NEVER, dtype=np.int64)
    if n == 0:
        return prev, nxt
    shift = max(1, int(n).bit_length())
    ids = blocks
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= (1 << (62 - shift)):
        ids = np.unique(ids, return_inverse=True)[1].astype(np.int64)
    key = (ids.astype(np.int64) << shift) | np.arange(n, dtype=np.int64)
    key.sort()
    pos = key & ((1 << shift) - 1)
    same = (key[1:] >> shift) == (key[:-1] >> shift)
    del key
    a = pos[:-1][same]
    b = pos[1:][same]
    prev[b] = a
    nxt[a] = b
    return prev, nxt


def _advance(dead: bytearray, k: int, need: int) -> int:
    """Move the eviction pointer ``k`` past ``need`` live (not re-used) candidates."""
    while need:
        end = k + need
        need = dead.count(1, k, end)  # the dead ones in the stretch do not count: go on for as many
        k = end
    return k


def _fill(count: int, cap: int, misses: int) -> tuple[int, int]:
    """``misses`` more blocks in a cache of ``count`` of ``cap``: the new count and how many evict."""
    if count >= cap:
        return count, misses
    count += misses
    return min(count, cap), max(count - cap, 0)


def _miss_run(x: int, k: int, dead: npt.NDArray[np.uint8], rj: I64, cold_cum: I64) -> int:
    """End (exclusive) of the run of long reuses from ``x`` that surely miss, the cache being full.

    Before long reuse ``y`` is looked up, ``E_y`` evictions have happened since the pointer was at
    ``k`` (the misses ``x..y−1`` and the first accesses in between); ``y`` misses iff its previous use
    is among the first ``E_y`` live candidates from ``k``. The run stops at the first ``y`` this does
    not surely hold for; the caller then looks ``y`` up exactly.
    """
    m = len(rj)
    end = x + 1
    width = 256
    base = int(cold_cum[x + 1]) - x
    while end < m:
        hi = min(m, end + width)
        # evictions before y = (y - x) + colds in (x, y]  for y in [end, hi)
        evictions = np.arange(end, hi, dtype=np.int64) + cold_cum[end + 1 : hi + 1] - base - 2 * x
        window = dead[k : k + int(evictions[-1]) * 2 + 64]
        dead_upto = np.cumsum(window, dtype=np.int64)  # dead in [k, k + z]
        off = rj[end:hi] - k
        at = np.maximum(np.minimum(off, len(window) - 1), 0)
        live = at + 1 - dead_upto[at]
        sure = (off < 0) | ((off < len(window)) & (live <= evictions))
        bad = np.flatnonzero(~sure)
        if len(bad):
            return end + int(bad[0])
        end = hi
        width *= 4
    return end


def lru_level(prev: I64, nxt: I64, capacity: int) -> tuple[I64, I64]:
    """Miss positions and evicted last-use positions (both ascending) of one LRU of ``capacity`` blocks.

    ``prev``/``nxt`` come from :func:`prev_next`. Compiled where numba is enabled, else
    :func:`lru_level_numpy`; the same arrays either way.

    >>> [a.tolist() for a in lru_level(*prev_next(np.array([1, 2, 1, 3, 1, 2])), 2)]
    [[0, 1, 3, 5], [1, 3]]
    """
    if capacity > 0 and native.jit_enabled():
        from traceflow.kv import lru_jit

        misses, evicted = lru_jit.level(prev, nxt, int(capacity))
        return misses, evicted
    return lru_level_numpy(prev, nxt, capacity)


def lru_level_numpy(prev: I64, nxt: I64, capacity: int) -> tuple[I64, I64]:
    """:func:`lru_level` in numpy and Python (exact; see the module docs).

    The block accessed at ``i`` is resident iff its previous access ``p`` is at or after the eviction
    pointer ``t`` (every last-use position below ``t`` was evicted). An access with ``i − p ≤ C`` is
    always a hit and a position whose next use comes within ``C`` accesses is never the LRU block, so
    only the other accesses ("long reuses") and positions (eviction candidates) are visited. First
    accesses are misses that evict one live candidate each; between two long reuses no candidate can
    die, so a run of them moves the pointer in bulk. A long reuse that hits marks its previous
    position dead, so the pointer later skips it. A chain re-read after LRU evicted its root misses
    block after block (each miss evicts the next block of the chain): such runs are found with numpy
    (:func:`_miss_run`) and evict in bulk too.
    """
    n = len(prev)
    ar = np.arange(n, dtype=np.int64)
    if capacity <= 0:
        return ar, np.zeros(0, dtype=np.int64)
    is_ev = nxt - ar > capacity
    ev = np.flatnonzero(is_ev)
    is_cold = prev < 0
    cold = np.flatnonzero(is_cold)
    reuse = np.flatnonzero(~is_cold & (ar - prev > capacity))
    del ar
    reuse_prev = prev[reuse]
    cold_upto = np.cumsum(is_cold)[reuse]  # first accesses before each long reuse
    cold_before_np = np.diff(np.concatenate(([0], cold_upto)))
    cold_cum = np.concatenate(([0], np.cumsum(cold_before_np))).astype(np.int64)
    trailing = len(cold) - (int(cold_upto[-1]) if len(cold_upto) else 0)
    rj_np = (np.cumsum(is_ev) - 1)[reuse_prev]  # eviction-candidate index of each previous use
    del is_ev, is_cold
    ev_pos: list[int] = ev.tolist()
    dead = bytearray(len(ev_pos))
    dead_np = np.frombuffer(dead, dtype=np.uint8)  # a view: sees every mark
    single: list[int] = []  # indices (into reuse) of isolated misses
    runs: list[tuple[int, int]] = []  # [a, b) index ranges of runs of misses
    add_single = single.append
    cap = capacity
    t = 0  # every resident block's last use is at or after t
    k = 0  # eviction pointer into ev_pos
    count = 0  # resident blocks until the cache is full
    m = len(reuse)
    chunk = 1 << 16
    lo = hi = 0  # the slice of long reuses held as Python lists
    rp: list[int] = []
    rj: list[int] = []
    cold_before: list[int] = []
    x = 0
    while x < m:
        if x >= hi:  # lists for the next stretch only: runs may skip whole stretches
            lo, hi = x, min(m, x + chunk)
            rp = reuse_prev[lo:hi].tolist()
            rj = rj_np[lo:hi].tolist()
            cold_before = cold_before_np[lo:hi].tolist()
        i = x - lo
        c = cold_before[i]
        if c:  # first accesses since the last long reuse: each evicts once the cache is full
            count, need = _fill(count, cap, c)
            if need:
                k = _advance(dead, k, need)
                t = ev_pos[k - 1] + 1
        if rp[i] >= t:
            dead[rj[i]] = 1
            x += 1
            continue
        nxt_i = i + 1 if x + 1 < hi else -1
        if count >= cap and x + 1 < m and (nxt_i < 0 or rj[nxt_i] - k <= cold_before[nxt_i]):
            end = _miss_run(x, k, dead_np, rj_np, cold_cum)
            runs.append((x, end))
            evictions = end - x + int(cold_cum[end] - cold_cum[x + 1])
            x = end
        else:
            add_single(x)
            evictions = 1
            x += 1
        count, need = _fill(count, cap, evictions)
        if need:
            k = _advance(dead, k, need)
            t = ev_pos[k - 1] + 1
    if trailing:
        k = _advance(dead, k, _fill(count, cap, trailing)[1])
    alive = np.frombuffer(bytes(dead[:k]), dtype=np.uint8) == 0
    evicted = ev[:k][alive]
    parts = [cold, reuse[np.asarray(single, dtype=np.int64)]]
    parts += [reuse[a:b] for a, b in runs]
    return np.sort(np.concatenate(parts)), evicted


def lru_hits(blocks: I64 | Sequence[int], capacity: int) -> int:
    """Block hits of one LRU cache of ``capacity`` blocks over a block-access sequence.

    Compiled where numba is enabled: one pass with a last-use table indexed by block id (ids spread
    over more than ``4n + 2**20`` values are first renumbered, which sorts them); else
    :func:`prev_next` and :func:`lru_level_numpy`.

    >>> lru_hits([1, 2, 1, 3, 1, 2], 2)
    2
    """
    arr = np.asarray(blocks, dtype=np.int64)
    n = len(arr)
    if n == 0 or capacity <= 0:
        return 0
    if not native.jit_enabled():
        prev, nxt = prev_next(arr)
        misses, _ = lru_level_numpy(prev, nxt, capacity)
        return n - len(misses)
    from traceflow.kv import lru_jit

    lo, hi = int(arr.min()), int(arr.max())
    if hi - lo >= 4 * n + (1 << 20):
        arr = np.unique(arr, return_inverse=True)[1].astype(np.int64).reshape(-1)
        lo, hi = 0, int(arr.max())
    last: npt.NDArray[np.signedinteger[Any]] = np.full(
        hi - lo + 1, -1, dtype=np.int32 if n < 2**31 - 1 else np.int64
    )
    return int(lru_jit.hits(arr, lo, int(capacity), last))


def _earlier_greater(values: I64) -> I64:
    """For each element, how many earlier elements are greater (distinct non-negative values).

    Wavelet-matrix style: one stable partition per bit, all numpy.

    >>> _earlier_greater(np.array([3, 1, 2, 0])).tolist()
    [0, 1, 1, 3]
    """
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    nbits = int(values.max()).bit_length()
    small = n < 2**31 - 1 and int(values.max()) < 2**31 - 1
    dt: type[np.signedinteger[Any]] = np.int32 if small else np.int64
    cur: npt.NDArray[np.signedinteger[Any]] = values.astype(dt)
    res: npt.NDArray[np.signedinteger[Any]] = np.zeros(n, dtype=dt)
    order: npt.NDArray[np.signedinteger[Any]] = np.arange(n, dtype=dt)
    ar = np.arange(n, dtype=dt)
    start = np.empty(n, dtype=bool)
    start[0] = True
    for k in range(nbits - 1, -1, -1):
        bit = (cur >> k) & 1
        ones = np.cumsum(bit, dtype=dt)
        pref = cur >> (k + 1)
        np.not_equal(pref[1:], pref[:-1], out=start[1:])
        before_group = np.maximum.accumulate((ones - bit) * start)
        res += (ones - before_group) * (1 - bit)
        n0 = n - int(ones[-1])
        idx = np.empty(n, dtype=dt)
        is_one = bit.astype(bool)
        idx[np.where(is_one, n0 + ones - 1, ar - ones)] = ar
        cur, res, order = cur[idx], res[idx], order[idx]
    out = np.empty(n, dtype=np.int64)
    out[order] = res
    return out


def stack_distances(blocks: I64 | Sequence[int]) -> I64:
    """Exact LRU (Mattson) stack distance of every access; a first access gets ``2**62`` (never a hit).

    An access hits an LRU of ``C`` blocks iff its distance is ``≤ C``. Computed in one vectorised
    pass: ``d = i − p − #{reuse intervals nested in (p, i)}``.

    >>> [d if d < 99 else None for d in stack_distances([1, 2, 1, 3, 1, 2]).tolist()]
    [None, None, 2, None, 2, 3]
    """
    arr = np.asarray(blocks, dtype=np.int64)
    n = len(arr)
    prev, _ = prev_next(arr)
    d = np.full(n, COLD_DISTANCE, dtype=np.int64)
    reuse = np.flatnonzero(prev >= 0)
    a = prev[reuse]
    nested = _earlier_greater(a)
    d[reuse] = reuse - a - nested
    return d
