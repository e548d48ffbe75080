"""Cache engines: what each tier of a hierarchy serves, writes and holds as a :class:`BlockTrace` is replayed.

Tiers are given as capacities in blocks (or TTLs); :mod:`traceflow.kv.simulate` turns an engine's
output into prefix hits, TTFT and the report.

Policies
  ``lru``        every block is an object in an LRU stack, touched in request order, exactly as
                 libCacheSim replays the expanded block trace (``object_hit_blocks`` equals its hits).
  ``prefix-lru`` radix-tree style: a request's blocks are ranked root-most = most recent, so the least
                 recent block is always a chain tail (a leaf) and tails are evicted first.
  ``ttl``        a block stays for the tier's TTL after its last use (hits refresh it); capacities are
                 not enforced, the report shows the bytes each tier would need (peak and mean).

Hierarchy
  exclusive (default): one block lives in one tier; a tier's evictions are demoted to the next tier,
  and with promotion (default) a hit in a lower tier moves the block back to the top tier. An exclusive
  LRU hierarchy is one LRU of the summed capacity; tier ``k`` serves stack distances in
  ``(ΣC_<k, ΣC_≤k]``. Inclusive (``inclusive=True``): every tier is written through and serves what it
  holds; tier ``k`` serves distances in ``(C_{k−1}, C_k]``.

Engines
  :func:`fast_lru` (``lru`` with promotion, from the exact LRU maths in :mod:`traceflow.kv.lru`),
  :func:`ttl_engine` (``ttl``), and :func:`reference_engine` (explicit ordered dicts, request by
  request: any policy, inclusion and promotion; slow, simple, the oracle the fast ones are tested on).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from traceflow.kv.lru import NEVER, lru_level, prev_next
from traceflow.kv.trace import F64, I64, BlockTrace


@dataclass(frozen=True, eq=False)
class EngineOutput:
    """What a cache engine reports per access and per tier."""

    served: npt.NDArray[np.int8]  # per access: 1-based tier holding the block when looked up, 0 = none
    written_tokens: I64  # per tier
    resident_blocks: npt.NDArray[np.float64]  # (buckets, tiers) blocks held at each bucket's end
    engine: str = ""


def _bucket_ends(trace: BlockTrace, bucket_s: float) -> tuple[I64, F64]:
    """Per bucket: index of the first access after it (so accesses ``< end`` are in or before it)."""
    t0 = float(trace.time_s[0]) if trace.n_requests else 0.0
    nb = int((float(trace.time_s[-1]) - t0) // bucket_s) + 1 if trace.n_requests else 0
    edges: F64 = t0 + bucket_s * np.arange(1, nb + 1, dtype=np.float64)
    req_end = np.searchsorted(trace.time_s, edges, side="left")
    return trace.offsets[req_end], edges


def _served_from_levels(n: int, miss_sets: list[I64]) -> npt.NDArray[np.int8]:
    """Tier number (1-based) of the first level where an access hits; 0 where every level misses."""
    served = np.zeros(n, dtype=np.int8)
    hit_somewhere = np.zeros(n, dtype=bool)
    for k, misses in enumerate(miss_sets):
        hit = np.ones(n, dtype=bool)
        hit[misses] = False
        new = hit & ~hit_somewhere
        served[new] = k + 1
        hit_somewhere |= hit
    return served


@dataclass(frozen=True)
class Accesses:
    """A trace's block accesses as the fast engines read them: previous/next-use positions and tokens."""

    trace: BlockTrace
    prev: I64
    nxt: I64
    tok: I64

    @classmethod
    def of(
        cls, trace: BlockTrace, links: tuple[I64, I64] | None = None, tokens: I64 | None = None
    ) -> Accesses:
        """``trace`` with the links and tokens given, else computed from it."""
        prev, nxt = links if links is not None else prev_next(trace.blocks)
        return cls(trace, prev, nxt, tokens if tokens is not None else trace.block_tokens())


def fast_lru(acc: Accesses, capacities: Sequence[int], inclusive: bool, bucket_s: float) -> EngineOutput:
    """LRU tiers with promotion on hit, from one reuse-link pass and one pointer loop per tier."""
    trace, prev, nxt, tok = acc.trace, acc.prev, acc.nxt, acc.tok
    n = trace.n_blocks
    levels = list(np.cumsum(capacities)) if not inclusive else list(capacities)
    results = [lru_level(prev, nxt, int(c)) for c in levels]
    served = _served_from_levels(n, [m for m, _ in results])
    written = np.zeros(len(capacities), dtype=np.int64)
    top = next((k for k, c in enumerate(capacities) if c > 0), None)
    for k, (misses, evicted) in enumerate(results):
        if inclusive:
            if capacities[k] > 0:
                written[k] = int(tok[misses].sum())
            continue
        if k == top:  # everything not served by the top tier is written into it
            written[k] = int(tok[misses].sum())
        nxt_tier = next((j for j in range(k + 1, len(capacities)) if capacities[j] > 0), None)
        if (
            top is not None
            and k >= top
            and nxt_tier is not None
            and all(capacities[j] == 0 for j in range(k + 1, nxt_tier))
        ):
            written[nxt_tier] += int(tok[evicted].sum()) if capacities[k] > 0 else 0
    ends, _ = _bucket_ends(trace, bucket_s)
    distinct = np.concatenate(([0], np.cumsum(prev < 0)))[ends].astype(np.float64)
    caps = np.asarray(capacities, dtype=np.float64)
    if inclusive:
        resident = np.minimum(distinct[:, None], caps[None, :])
    else:
        below = np.concatenate(([0.0], np.cumsum(caps)[:-1]))
        resident = np.clip(distinct[:, None] - below[None, :], 0, caps[None, :])
    return EngineOutput(served, written, resident, "lru-fast")


def ttl_engine(acc: Accesses, ttls: Sequence[float], inclusive: bool, bucket_s: float) -> EngineOutput:
    """TTL tiers: a block is served by the tier whose retention window covers its idle time."""
    trace, prev, nxt, tok = acc.trace, acc.prev, acc.nxt, acc.tok
    req = trace.request_of_block()
    t_acc = trace.time_s[req]
    n = trace.n_blocks
    ttl = np.asarray(ttls, dtype=np.float64)
    bounds = ttl if inclusive else np.cumsum(ttl)
    idle = np.full(n, np.inf)
    has_prev = prev >= 0
    idle[has_prev] = t_acc[has_prev] - t_acc[prev[has_prev]]
    served = np.zeros(n, dtype=np.int8)
    done = np.zeros(n, dtype=bool)
    for k, bound in enumerate(bounds):
        within = (idle <= bound) & has_prev
        served[within & ~done] = k + 1
        done |= within
    t_end = float(trace.time_s[-1]) if trace.n_requests else 0.0
    idle_next = np.full(n, np.inf)
    has_next = nxt != NEVER
    idle_next[has_next] = t_acc[nxt[has_next]] - t_acc[has_next]
    written = np.zeros(len(ttls), dtype=np.int64)
    lower = np.concatenate(([0.0], bounds[:-1])) if not inclusive else np.zeros(len(ttls))
    for k in range(len(ttls)):
        if inclusive:
            written[k] = int(tok[(idle > bounds[k]) | ~has_prev].sum())
        elif k == 0:
            written[0] = int(tok[(idle > bounds[0]) | ~has_prev].sum())
        else:  # demoted into tier k when it outlives the tiers above, before the next use / trace end
            demoted = (idle_next > lower[k]) & (t_acc + lower[k] <= t_end)
            written[k] = int(tok[demoted].sum())
    _, edges = _bucket_ends(trace, bucket_s)
    resident = np.zeros((len(edges), len(ttls)))
    stay_end = np.minimum(t_acc + np.inf, np.where(has_next, t_acc + idle_next, np.inf))
    for k in range(len(ttls)):
        start = t_acc + lower[k]
        end = np.minimum(stay_end, t_acc + bounds[k])
        valid = end > start
        s_sorted = np.sort(start[valid])
        e_sorted = np.sort(end[valid])
        resident[:, k] = np.searchsorted(s_sorted, edges, "right") - np.searchsorted(e_sorted, edges, "right")
    return EngineOutput(served, written, resident, "ttl")


class _Hierarchy:
    """Reference engine: OrderedDict tiers, request by request (any policy, inclusion, promotion)."""

    def __init__(
        self, capacities: Sequence[int], inclusive: bool, promote: bool, admit_orphans: bool
    ) -> None:
        self.caps = [int(c) for c in capacities]
        self.m = len(self.caps)
        self.inclusive = inclusive
        self.promote = promote
        self.admit_orphans = admit_orphans
        self.tiers: list[OrderedDict[int, int]] = [OrderedDict() for _ in self.caps]  # block -> tokens
        self.where: dict[int, int] = {}  # exclusive: block -> tier index
        self.written = [0] * self.m
        self.top = next((j for j, c in enumerate(self.caps) if c > 0), -1)  # zero-capacity tiers are skipped
        self.below = [next((i for i in range(j + 1, self.m) if self.caps[i] > 0), -1) for j in range(self.m)]

    def lookup(self, blocks: Sequence[int]) -> list[int]:
        if self.inclusive:
            out = []
            for b in blocks:
                k = next((j + 1 for j, t in enumerate(self.tiers) if b in t), 0)
                out.append(k)
            return out
        return [self.where.get(b, -1) + 1 for b in blocks]

    # -- exclusive ---------------------------------------------------------------------------------
    def _cascade(self) -> None:
        for j in range(self.m):
            tier = self.tiers[j]
            while len(tier) > self.caps[j]:
                b, tok = tier.popitem(last=False)
                down = self.below[j]
                if down >= 0:
                    self.tiers[down][b] = tok
                    self.where[b] = down
                    self.written[down] += tok
                else:
                    del self.where[b]

    def lru_request(self, blocks: Sequence[int], tokens: Sequence[int], served: list[int]) -> None:
        """Touch the blocks one by one; ``served`` gets each block's tier at its own access."""
        for i, (b, tok) in enumerate(zip(blocks, tokens, strict=True)):
            if self.inclusive:
                s = next((j + 1 for j, t in enumerate(self.tiers) if b in t), 0)
                served[i] = s
                for j, tier in enumerate(self.tiers):
                    if not self.promote and s > j + 1:
                        continue  # a hit from below is not copied up
                    if b in tier:
                        tier.move_to_end(b)
                    elif self.caps[j] > 0:
                        tier[b] = tok
                        self.written[j] += tok
                        if len(tier) > self.caps[j]:
                            tier.popitem(last=False)
                continue
            k = self.where.get(b)
            served[i] = 0 if k is None else k + 1
            if k is not None and (k == self.top or not self.promote):
                self.tiers[k].move_to_end(b)
                continue
            if k is not None:
                del self.tiers[k][b]
            if self.top >= 0:
                self.tiers[self.top][b] = tok
                self.where[b] = self.top
                self.written[self.top] += tok
                self._cascade()

    def _keep(self, blocks: list[int], capacity: int) -> tuple[list[int], set[int]]:
        """The blocks of one request that can stay (root-most first) and those that only pass through."""
        n = len(blocks)
        if n <= capacity:
            return blocks, set()
        if capacity <= 0:
            return [], set(blocks)
        keep = [*blocks[: capacity - 1], blocks[-1]] if self.admit_orphans else blocks[:capacity]
        return keep, set(blocks) - set(keep)

    def prefix_request(self, blocks: Sequence[int], tokens: Sequence[int], served: list[int]) -> None:
        """Look the request up once (its longest resident prefix), then insert it tail-first-evictable."""
        served[:] = self.lookup(blocks)
        tok_of = dict(zip(blocks, tokens, strict=True))
        if self.inclusive:
            for j, tier in enumerate(self.tiers):
                touched = [
                    b for b, s in zip(blocks, served, strict=True) if self.promote or s == 0 or s <= j + 1
                ]
                had = {b for b in touched if b in tier}
                for b in had:
                    del tier[b]
                keep, passing = self._keep(touched, self.caps[j])
                self.written[j] += sum(tok_of[b] for b in keep if b not in had)
                if self.admit_orphans:
                    self.written[j] += sum(tok_of[b] for b in passing if b not in had)
                for b in reversed(keep):
                    tier[b] = tok_of[b]
                while len(tier) > self.caps[j]:
                    tier.popitem(last=False)
            return
        stay: list[int] = []  # lower-tier hits that are not promoted
        moving: list[int] = []
        for b, s in zip(blocks, served, strict=True):
            if s - 1 != self.top and s > 0 and not self.promote:
                stay.append(b)
            else:
                moving.append(b)
        for b in reversed(stay):
            self.tiers[self.where[b]].move_to_end(b)
        if self.top < 0:
            return
        had_top = set()
        for b in moving:
            k = self.where.pop(b, None)
            if k is not None:
                del self.tiers[k][b]
                if k == self.top:
                    had_top.add(b)
        keep, passing = self._keep(moving, sum(self.caps) - len(stay))
        self.written[self.top] += sum(tok_of[b] for b in keep if b not in had_top)
        if self.admit_orphans:
            self.written[self.top] += sum(tok_of[b] for b in passing if b not in had_top)
        top = self.tiers[self.top]
        for b in reversed(keep):
            top[b] = tok_of[b]
            self.where[b] = self.top
        self._cascade()

    def resident(self) -> list[int]:
        return [len(t) for t in self.tiers]


def reference_engine(
    trace: BlockTrace,
    capacities: Sequence[int],
    policy: str,
    inclusive: bool,
    promote: bool,
    bucket_s: float,
    admit_orphans: bool = True,
    tokens: I64 | None = None,
) -> EngineOutput:
    """The explicit (slow, simple) engine for ``lru`` and ``prefix-lru`` with any inclusion/promotion."""
    h = _Hierarchy(capacities, inclusive, promote, admit_orphans)
    tok = (tokens if tokens is not None else trace.block_tokens()).tolist()
    blocks = trace.blocks.tolist()
    offs = trace.offsets.tolist()
    served_all = np.zeros(trace.n_blocks, dtype=np.int8)
    ends, _ = _bucket_ends(trace, bucket_s)
    resident = np.zeros((len(ends), len(capacities)))
    bucket = 0
    ends_l = ends.tolist()
    step = h.prefix_request if policy == "prefix-lru" else h.lru_request
    for r in range(trace.n_requests):
        lo, hi = offs[r], offs[r + 1]
        while bucket < len(ends_l) and ends_l[bucket] <= lo:
            resident[bucket] = h.resident()
            bucket += 1
        bl = blocks[lo:hi]
        served = [0] * len(bl)
        step(bl, tok[lo:hi], served)
        served_all[lo:hi] = served
    while bucket < len(ends_l):
        resident[bucket] = h.resident()
        bucket += 1
    return EngineOutput(served_all, np.asarray(h.written, dtype=np.int64), resident, f"{policy}-reference")
