"""Hash ids: the plan that holds every request's ``hash_ids`` compactly, and the rules ids obey.

A :class:`PrefixPlan` (what :func:`traceflow.replay.prefix.derive` returns) stores, per request,
either its chain, full-block count and partial-block id (derived requests) or its kept source ids,
and materialises the id lists per range of requests (:meth:`PrefixPlan.ids`), as runs of
consecutive integers, so a 10-million-request export never holds all of them at once.
:func:`check_hash_ids` checks a finished trace against the rules every format relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from traceflow.replay.arrays import I64, ranges

#: Per-request kind codes in :attr:`PrefixPlan.kind`.
KIND_CONTINUE, KIND_FIRST, KIND_DROP, KIND_BREAK, KIND_KEPT = 0, 1, 2, 3, 4
KIND_NAMES = ("continue", "first", "drop", "break", "kept")


@dataclass
class PrefixPlan:
    """Hash ids of every request of a frame (same row order), materialised on demand.

    Derived requests: ``chain`` ≥ 0, ``nfull`` full blocks and ``partial`` (the id of the partial last
    block, −1 for none). Block ``k`` of chain ``c`` is ``base[c] + k`` when ``k ≥ shared[c]``, else
    block ``k`` of ``parent[c]``. Kept requests: ``chain`` = −1, ids in ``kept_flat``.
    """

    block_size: int
    ctx: I64
    chain: I64
    nfull: I64
    partial: I64
    kind: npt.NDArray[np.int8]
    chain_parent: I64
    chain_shared: I64
    chain_base: I64
    kept_offsets: I64
    kept_flat: I64
    next_id: int
    stats: dict[str, Any] = field(default_factory=dict)
    #: Per chain, the runs its full blocks resolve to, root first: blocks ``[seg_lo, seg_hi)`` are
    #: ``seg_base + k`` (CSR by chain: ``seg_off``).
    seg_off: I64 = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    seg_lo: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    seg_hi: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    seg_base: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def n(self) -> int:
        return len(self.ctx)

    def counts(self, start: int = 0, stop: int | None = None) -> I64:
        """Hash ids per request (``ceil(ctx / block_size)``) of requests ``start:stop``."""
        stop = self.n if stop is None else stop
        kept = self.chain[start:stop] < 0
        derived = self.nfull[start:stop] + (self.partial[start:stop] >= 0)
        out: I64 = np.where(kept, np.diff(self.kept_offsets[start : stop + 1]), derived).astype(np.int64)
        return out

    def ids(
        self, start: int = 0, stop: int | None = None, dtype: type[np.signedinteger[Any]] = np.int64
    ) -> tuple[I64, npt.NDArray[np.signedinteger[Any]]]:
        """``(offsets, flat)`` of requests ``start:stop``.

        Request ``start + i`` owns ``flat[offsets[i]:offsets[i + 1]]``. ``dtype=np.int32`` halves
        the memory traffic when :attr:`next_id` < 2³¹ (what a writer of millions of requests wants).
        """
        stop = self.n if stop is None else min(stop, self.n)
        counts = self.counts(start, stop)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        kept = self.chain[start:stop] < 0
        if not kept.any():
            return offsets, self._derived_flat(np.arange(start, stop, dtype=np.int64), dtype)
        rows = np.arange(start, stop, dtype=np.int64)
        flat = np.empty(int(offsets[-1]), dtype=dtype)
        r = rows[kept]
        c = counts[kept]
        flat[ranges(offsets[:-1][kept], c)] = self.kept_flat[ranges(self.kept_offsets[r], c)]
        if not kept.all():
            flat[ranges(offsets[:-1][~kept], counts[~kept])] = self._derived_flat(rows[~kept], dtype)
        return offsets, flat

    def _derived_flat(
        self, rows: I64, dtype: type[np.signedinteger[Any]] = np.int64
    ) -> npt.NDArray[np.signedinteger[Any]]:
        """The ids of derived ``rows``, concatenated.

        A request's ids are a few runs of consecutive integers (its chain's path runs, cut at its
        full blocks, then the partial block): the runs are laid out by one cumulative sum over
        increments (1 inside a run, a jump at each run start), three passes over the ids.
        """
        if not len(rows):
            return np.zeros(0, dtype=dtype)
        c = self.chain[rows]
        nf = self.nfull[rows]
        part = self.partial[rows]
        nseg = self.seg_off[c + 1] - self.seg_off[c]
        si = ranges(self.seg_off[c], nseg)
        f = np.repeat(nf, nseg)
        lo = self.seg_lo[si]
        length = np.maximum(np.minimum(self.seg_hi[si], f) - lo, 0)
        first_value = self.seg_base[si] + lo
        has = part >= 0
        if has.any():  # the partial block: one more run of length 1 after the request's full runs
            run_req = np.repeat(np.arange(len(rows), dtype=np.int64), nseg)
            after = np.searchsorted(run_req, np.flatnonzero(has), side="right")
            length = np.insert(length, after, 1)
            first_value = np.insert(first_value, after, part[has])
        keep = length > 0
        length = length[keep]
        first_value = first_value[keep]
        total = int(length.sum())
        out = np.ones(total, dtype=dtype)
        if total:
            starts = np.cumsum(length) - length
            jump = first_value.copy()
            jump[1:] -= first_value[:-1] + length[:-1] - 1
            out[starts] = jump
            np.cumsum(out, out=out)
        return out

    def lists(self, start: int = 0, stop: int | None = None) -> list[list[int]]:
        """The ids as Python lists (small traces and tests)."""
        offsets, flat = self.ids(start, stop)
        values = flat.tolist()
        return [values[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]


def check_hash_ids(lengths: Sequence[int], hash_ids: Sequence[Sequence[int]], block_size: int) -> list[str]:
    """Problems of a trace's ids: the ceil rule, one size per id, and the prefix property."""
    problems: list[str] = []
    size: dict[int, int] = {}
    parent_of: dict[int, int] = {}
    for i, (length, ids) in enumerate(zip(lengths, hash_ids, strict=True)):
        want = -(-int(length) // block_size)
        if len(ids) != want:
            problems.append(f"request {i}: {len(ids)} ids for {length} tokens (want {want})")
        prev = -1
        for k, h in enumerate(ids):
            s = min(block_size, int(length) - k * block_size)
            if size.setdefault(h, s) != s:
                problems.append(f"request {i}: id {h} at {s} tokens, elsewhere at {size[h]}")
            if parent_of.setdefault(h, prev) != prev:
                problems.append(f"request {i}: id {h} follows {prev}, elsewhere {parent_of[h]}")
            prev = h
        if len(problems) > 20:
            break
    return problems
