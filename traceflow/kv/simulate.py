"""Trace-driven simulation of a KV-cache tier hierarchy (GPU → DRAM → SSD → ...). Pure: no store, no DuckDB.

Input is a :class:`BlockTrace`: requests in arrival order, each an ordered list of prefix-block ids
(Mooncake ``hash_ids``: block ``k`` stands for tokens ``[k·B, (k+1)·B)`` and everything before it; the
last block may be partial). Tiers are given in bytes and hold ``capacity // (B × kv_bytes_per_token)``
blocks.

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

A request's usable hit is its longest resident prefix (every engine in KV_TIER_SIZING §4 needs a
contiguous prefix); tokens after the first missing block are recomputed. So, per request,
``Σ_tiers hit_tokens + recomputed_tokens = input_tokens``.

TTFT model (per request, documented in :func:`traceflow.kv.sizing.ttft_seconds`)::

    load    = Σ_tiers hit_tokens × b / read_bw(tier) + latency(tier)   (+ per-session state from the
              tier of the last prefix block, for sliding-window / hybrid models)
    compute = recomputed_tokens / prefill_rate
    TTFT    = load + compute            (or max(load, compute) with overlap=True)

No queueing and no decode are modelled. A *resumed* request is one whose deepest previously seen
prefix block was last used ``resume_after_s`` (15 min) or more earlier.

The LRU core is exact and fast without compiled code: block ids are sorted once (numpy) into
previous/next-use positions; an access whose previous use lies ``≤ C`` accesses back is a hit for
capacity ``C`` whatever happened in between, so a Python loop only visits the other accesses, with an
eviction pointer over last-use positions (the least recently used block is the smallest position
still in use). Hit counts equal libCacheSim's LRU.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from traceflow.errors import UsageError
from traceflow.kv.geometry import KVSize
from traceflow.kv.sizing import DEFAULT_PREFILL_RATE, Tier

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

POLICIES = ("lru", "prefix-lru", "ttl")
_NEVER = np.iinfo(np.int64).max
COLD_DISTANCE = 2**62  # stack distance of a first access: beyond any capacity


# ----------------------------------------------------------------------------------------- traces


@dataclass(frozen=True, eq=False)
class BlockTrace:
    """Requests (arrival time, prompt tokens, optional session) and their prefix-block ids."""

    time_s: F64  # per request, seconds from any origin, non-decreasing
    input_tokens: I64  # per request
    offsets: I64  # len(requests) + 1; request r owns blocks[offsets[r]:offsets[r + 1]]
    blocks: I64  # block ids, request after request
    block_size: int
    session: tuple[str, ...] | None = None  # per request, when the source has sessions

    @property
    def n_requests(self) -> int:
        return len(self.time_s)

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    def counts(self) -> I64:
        return np.diff(self.offsets)

    def request_of_block(self) -> I64:
        return np.repeat(np.arange(self.n_requests, dtype=np.int64), self.counts())

    def local_index(self) -> I64:
        """Position of each block inside its request (0 = the root-most block)."""
        req = self.request_of_block()
        return np.arange(self.n_blocks, dtype=np.int64) - self.offsets[:-1][req]

    def block_tokens(self) -> I64:
        """Tokens each block access covers: ``B`` except a request's partial last block."""
        req = self.request_of_block()
        left = self.input_tokens[req] - self.local_index() * self.block_size
        out: I64 = np.clip(left, 0, self.block_size).astype(np.int64)
        return out

    @classmethod
    def from_requests(
        cls,
        times_s: Sequence[float] | F64,
        input_tokens: Sequence[int] | I64,
        hash_ids: Sequence[Sequence[int]],
        block_size: int,
        session: Sequence[str] | None = None,
    ) -> BlockTrace:
        """Build a trace from per-request lists of block ids (sorted by time, ties kept in order)."""
        times = np.asarray(times_s, dtype=np.float64)
        tokens = np.asarray(input_tokens, dtype=np.int64)
        counts = np.fromiter((len(h) for h in hash_ids), dtype=np.int64, count=len(hash_ids))
        if not (len(times) == len(tokens) == len(counts)):
            raise UsageError("times, input_tokens and hash_ids must have one entry per request")
        flat = np.fromiter((x for h in hash_ids for x in h), dtype=np.int64, count=int(counts.sum()))
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        trace = cls(
            times, tokens, offsets, flat, int(block_size), tuple(session) if session is not None else None
        )
        return trace.sorted_by_time()

    def sorted_by_time(self) -> BlockTrace:
        if self.n_requests < 2 or bool(np.all(np.diff(self.time_s) >= 0)):
            return self
        order = np.argsort(self.time_s, kind="stable")
        counts = self.counts()[order]
        starts = self.offsets[:-1][order]
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        idx = np.repeat(starts - offsets[:-1], counts) + np.arange(int(counts.sum()), dtype=np.int64)
        session = tuple(self.session[i] for i in order) if self.session is not None else None
        return BlockTrace(
            self.time_s[order], self.input_tokens[order], offsets, self.blocks[idx], self.block_size, session
        )

    def head(self, n_requests: int) -> BlockTrace:
        end = int(self.offsets[n_requests])
        return BlockTrace(
            self.time_s[:n_requests],
            self.input_tokens[:n_requests],
            self.offsets[: n_requests + 1],
            self.blocks[:end],
            self.block_size,
            self.session[:n_requests] if self.session is not None else None,
        )


def read_mooncake(source: str | Path | Iterable[bytes | str], block_size: int = 512) -> BlockTrace:
    """A Mooncake JSONL trace (``timestamp`` ms, ``input_length``, ``hash_ids``; optional ``session_id``)."""
    lines: Iterable[bytes | str]
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise UsageError(f"--trace {path}: no such file")
        lines = path.read_bytes().splitlines()
    else:
        lines = source
    times: list[float] = []
    tokens: list[int] = []
    hashes: list[list[int]] = []
    sessions: list[str] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
            times.append(float(rec["timestamp"]) / 1000.0)
            tokens.append(int(rec["input_length"]))
            hashes.append([int(h) for h in rec.get("hash_ids") or ()])
            sessions.append(str(rec.get("session_id") or ""))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise UsageError(f"trace line {no} is not a Mooncake record ({e})") from None
    if not times:
        raise UsageError("the trace has no requests")
    return BlockTrace.from_requests(times, tokens, hashes, block_size, sessions if any(sessions) else None)


def chains_from_counts(
    times_s: Sequence[float], sessions: Sequence[str], context_tokens: Sequence[int], block_size: int = 512
) -> BlockTrace:
    """Prefix blocks for traffic that carries token counts but no hash ids (KV_TIER_SIZING §5.1).

    Each session is one append-only chain: full block ``k`` of a session is the same block on every
    request until the context shrinks (a compaction or reset starts a new chain); a partial last block
    gets an id of its own.
    """
    n = len(times_s)
    order = sorted(range(n), key=lambda i: times_s[i])
    chain_of: dict[str, int] = {}
    last_len: dict[str, int] = {}
    next_chain = 0
    hashes: list[list[int]] = [[] for _ in range(n)]
    full_ids: dict[tuple[int, int], int] = {}
    next_id = 0
    for i in order:
        s, ctx = sessions[i], int(context_tokens[i])
        if s not in chain_of or ctx < last_len[s]:
            chain_of[s] = next_chain
            next_chain += 1
        last_len[s] = ctx
        chain = chain_of[s]
        ids = []
        for k in range(ctx // block_size):
            key = (chain, k)
            if key not in full_ids:
                full_ids[key] = next_id
                next_id += 1
            ids.append(full_ids[key])
        if ctx % block_size:
            ids.append(-1 - i)  # partial block: its own id
        hashes[i] = ids
    return BlockTrace.from_requests(times_s, context_tokens, hashes, block_size, sessions)


def agentic_coding_trace(
    duration_s: float = 3_600.0,
    seed: int = 0,
    *,
    sessions_per_min: float = 2.5,
    block_size: int = 512,
    cap_tokens: int = 65_536,
    initial_tokens: tuple[int, int] = (2_000, 4_000),
    system_tokens: int = 0,
    think_s: float = 30.0,
    decode_tok_s: float = 50.0,
    cohort_share: float = 0.25,
    pause_s: tuple[float, float] = (840.0, 960.0),
    pause_after_turns: tuple[int, int] = (18, 22),
    compacted_tokens: tuple[int, int] = (4_000, 8_000),
) -> BlockTrace:
    """The reference agentic-coding workload (DESIGN §4) as a seeded block trace.

    Sessions arrive as a Poisson process (``sessions_per_min``); each turn appends a tool result of
    250–600 tokens (15 %: a file read of 1,500–3,500) and the model answers 40–200 tokens (15 %: a
    400–900-token code block), each ±100 tokens of jitter; the next request follows the answer after
    ``output / decode_tok_s`` plus an exponential think/tool time of mean ``think_s``. Context grows
    monotonically toward ``cap_tokens``; a turn that would pass it is compacted into a fresh chain of
    ``compacted_tokens`` (ASSUMPTION: sessions keep working). A cohort (``cohort_share``) pauses about
    15 minutes after about 20 turns, then resumes. Initial context (ASSUMPTION) 2,000–4,000 tokens,
    optionally after a ``system_tokens`` prefix shared by every session.
    """
    rng = np.random.default_rng(seed)
    n_sessions = int(rng.poisson(sessions_per_min * duration_s / 60.0))
    arrivals = np.sort(rng.uniform(0.0, duration_s, n_sessions))
    mean_gap = think_s + 200.0 / decode_tok_s
    max_turns = int(duration_s / max(mean_gap, 1e-3) * 3) + 60
    sys_blocks = system_tokens // block_size
    req_time: list[F64] = []
    req_ctx: list[I64] = []
    req_chain: list[I64] = []
    req_session: list[I64] = []
    chain_base: list[int] = []
    next_block = sys_blocks
    for s in range(n_sessions):
        m = max_turns
        big_app = rng.random(m) < 0.15
        app = np.where(big_app, rng.integers(1_500, 3_501, m), rng.integers(250, 601, m))
        app = np.maximum(app + rng.integers(-100, 101, m), 1)
        big_out = rng.random(m) < 0.15
        out = np.where(big_out, rng.integers(400, 901, m), rng.integers(40, 201, m))
        out = np.maximum(out + rng.integers(-100, 101, m), 1)
        gaps = out / decode_tok_s + rng.exponential(think_s, m)
        if rng.random() < cohort_share:
            k = int(rng.integers(pause_after_turns[0], pause_after_turns[1] + 1))
            if k < m:
                gaps[k] += rng.uniform(*pause_s)
        times = arrivals[s] + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
        keep = int(np.searchsorted(times, duration_s))
        if keep == 0:
            continue
        ctx = np.empty(keep, dtype=np.int64)
        chains = np.empty(keep, dtype=np.int64)
        cur = int(rng.integers(initial_tokens[0], initial_tokens[1] + 1)) + system_tokens
        chain = len(chain_base)
        chain_base.append(next_block)
        next_block += cap_tokens // block_size + 1
        for t in range(keep):
            if t:
                cur += int(out[t - 1]) + int(app[t])
                if cur > cap_tokens:
                    cur = system_tokens + int(rng.integers(compacted_tokens[0], compacted_tokens[1] + 1))
                    chain = len(chain_base)
                    chain_base.append(next_block)
                    next_block += cap_tokens // block_size + 1
            ctx[t] = cur
            chains[t] = chain
        req_time.append(times[:keep])
        req_ctx.append(ctx)
        req_chain.append(chains)
        req_session.append(np.full(keep, s, dtype=np.int64))
    if not req_time:
        raise UsageError("no session arrived; use a longer duration or a higher rate")
    time = np.concatenate(req_time)
    ctxs = np.concatenate(req_ctx)
    chain_ids = np.concatenate(req_chain)
    sess = np.concatenate(req_session)
    order = np.argsort(time, kind="stable")
    time, ctxs, chain_ids, sess = time[order], ctxs[order], chain_ids[order], sess[order]
    bases = np.asarray(chain_base, dtype=np.int64)[chain_ids]
    nfull = ctxs // block_size
    partial = (ctxs % block_size > 0).astype(np.int64)
    counts = nfull + partial
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    req = np.repeat(np.arange(len(time), dtype=np.int64), counts)
    local = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[:-1][req]
    blocks = np.where(local < sys_blocks, local, bases[req] + local)
    is_partial = local == nfull[req]
    blocks = np.where(is_partial, next_block + req, blocks)
    names = tuple(f"s{int(x)}" for x in sess)
    return BlockTrace(
        time - float(time[0]) if len(time) else time,
        ctxs,
        offsets,
        blocks.astype(np.int64),
        block_size,
        names,
    )


# ------------------------------------------------------------------------------------- reuse links


def prev_next(blocks: I64) -> tuple[I64, I64]:
    """For each access, the position of the previous and next access of the same block (−1 / never).

    One sort of ``id << bits | position`` keys; ids are remapped when they do not fit.

    >>> p, n = prev_next(np.array([7, 8, 7, 7]))
    >>> p.tolist(), [x if x < 99 else None for x in n.tolist()]
    ([-1, -1, 0, 2], [2, None, 3, None])
    """
    n = len(blocks)
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, _NEVER, dtype=np.int64)
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


def _lru_level(prev: I64, nxt: I64, capacity: int) -> tuple[I64, I64]:
    """Misses and evicted positions of one LRU of ``capacity`` blocks (exact; see the module docs).

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
            if count < cap:
                count += c
                need = count - cap if count > cap else 0
                count = min(count, cap)
            else:
                need = c
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
        if count < cap:
            count += evictions
            need = count - cap if count > cap else 0
            count = min(count, cap)
        else:
            need = evictions
        if need:
            k = _advance(dead, k, need)
            t = ev_pos[k - 1] + 1
    if trailing:
        need = trailing if count >= cap else max(0, count + trailing - cap)
        k = _advance(dead, k, need)
    alive = np.frombuffer(bytes(dead[:k]), dtype=np.uint8) == 0
    evicted = ev[:k][alive]
    parts = [cold, reuse[np.asarray(single, dtype=np.int64)]]
    parts += [reuse[a:b] for a, b in runs]
    return np.sort(np.concatenate(parts)), evicted


def lru_hits(blocks: I64 | Sequence[int], capacity: int) -> int:
    """Block hits of one LRU cache of ``capacity`` blocks over a block-access sequence.

    >>> lru_hits([1, 2, 1, 3, 1, 2], 2)
    2
    """
    arr = np.asarray(blocks, dtype=np.int64)
    prev, nxt = prev_next(arr)
    misses, _ = _lru_level(prev, nxt, capacity)
    return len(arr) - len(misses)


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


# ------------------------------------------------------------------------------------------ engines


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


def _capacities(tiers: Sequence[Tier], block_bytes: float) -> list[int]:
    return [t.capacity_blocks(block_bytes) for t in tiers]


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


def fast_lru(
    trace: BlockTrace,
    capacities: Sequence[int],
    inclusive: bool,
    bucket_s: float,
    links: tuple[I64, I64] | None = None,
    tokens: I64 | None = None,
) -> EngineOutput:
    """LRU tiers with promotion on hit, from one reuse-link pass and one pointer loop per tier."""
    prev, nxt = links if links is not None else prev_next(trace.blocks)
    tok = tokens if tokens is not None else trace.block_tokens()
    n = trace.n_blocks
    levels = list(np.cumsum(capacities)) if not inclusive else list(capacities)
    results = [_lru_level(prev, nxt, int(c)) for c in levels]
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


def ttl_engine(
    trace: BlockTrace,
    ttls: Sequence[float],
    inclusive: bool,
    bucket_s: float,
    links: tuple[I64, I64] | None = None,
    tokens: I64 | None = None,
) -> EngineOutput:
    """TTL tiers: a block is served by the tier whose retention window covers its idle time."""
    prev, nxt = links if links is not None else prev_next(trace.blocks)
    tok = tokens if tokens is not None else trace.block_tokens()
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
    has_next = nxt != _NEVER
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


# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class SimConfig:
    """A tier hierarchy and the models that turn hits into time."""

    tiers: tuple[Tier, ...]
    kv: KVSize
    policy: str = "lru"
    inclusive: bool = False
    promote: bool = True
    prefill_rate: float = DEFAULT_PREFILL_RATE
    overlap: bool = False
    resume_after_s: float = 900.0
    bucket_s: float = 60.0
    admit_orphans: bool = True
    ttl_s: float | None = None  # for tiers without their own ttl under the ttl policy
    engine: str = "auto"  # auto | reference

    def block_bytes(self, block_size: int) -> int:
        return block_size * self.kv.per_token_bytes


@dataclass(frozen=True, eq=False)
class SimResult:
    """Per-request outcome (arrays) and the report (:meth:`as_dict`)."""

    config: SimConfig
    trace: BlockTrace
    output: EngineOutput
    hit_tokens: npt.NDArray[np.int64]  # (requests, tiers) usable prefix tokens from each tier
    hit_blocks: npt.NDArray[np.int64]  # (requests, tiers)
    recomputed_tokens: I64  # per request
    ttft_s: F64
    idle_s: F64  # per request: time since its deepest previously seen prefix block was used
    report: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return self.report


def _quantile(x: F64, q: float) -> float | None:
    return float(np.quantile(x, q)) if len(x) else None


def simulate(trace: BlockTrace, config: SimConfig) -> SimResult:
    """Run ``trace`` through the tier hierarchy of ``config``."""
    if config.policy not in POLICIES:
        raise UsageError(f"--policy {config.policy!r}: choose one of {', '.join(POLICIES)}")
    if not config.tiers:
        raise UsageError("give at least one --tier, e.g. --tier gpu=80GB")
    if trace.n_requests == 0:
        raise UsageError("the trace has no requests")
    if config.kv.per_token_bytes <= 0:
        raise UsageError("the model has no KV bytes per token")
    block_bytes = config.block_bytes(trace.block_size)
    caps = _capacities(config.tiers, block_bytes)
    tok = trace.block_tokens()
    links = prev_next(trace.blocks)
    if config.policy == "ttl":
        ttls = []
        for t in config.tiers:
            ttl = t.ttl_s if t.ttl_s is not None else config.ttl_s
            if ttl is None:
                raise UsageError(
                    f"--policy ttl needs a TTL for tier {t.name!r}: --ttl 5m or --tier {t.name}=SIZE:ttl=5m"
                )
            ttls.append(ttl)
        out = ttl_engine(trace, ttls, config.inclusive, config.bucket_s, links, tok)
    elif config.policy == "lru" and config.promote and config.engine != "reference":
        out = fast_lru(trace, caps, config.inclusive, config.bucket_s, links, tok)
    else:
        out = reference_engine(
            trace,
            caps,
            config.policy,
            config.inclusive,
            config.promote,
            config.bucket_s,
            config.admit_orphans,
            tok,
        )
    return _summarise(trace, config, out, links[0], tok, caps)


def _first_in_request(trace: BlockTrace, mask: npt.NDArray[np.bool_], req: I64, local: I64) -> I64:
    """Per request, the local index of the first access where ``mask`` holds (else its block count)."""
    first = trace.counts().copy()
    idx = np.flatnonzero(mask)
    if len(idx):
        r = req[idx]
        uniq, at = np.unique(r, return_index=True)
        first[uniq] = local[idx[at]]
    return first


def _summarise(
    trace: BlockTrace, config: SimConfig, out: EngineOutput, prev: I64, tok: I64, caps: list[int]
) -> SimResult:
    m = len(config.tiers)
    b = config.kv.per_token_bytes
    req = trace.request_of_block()
    local = trace.local_index()
    served = out.served.astype(np.int64)
    n_req = trace.n_requests
    first_miss = _first_in_request(trace, served == 0, req, local)
    usable = local < first_miss[req]
    hit_tokens = np.zeros((n_req, m), dtype=np.int64)
    hit_blocks = np.zeros((n_req, m), dtype=np.int64)
    for k in range(m):
        sel = usable & (served == k + 1)
        hit_tokens[:, k] = np.bincount(req[sel], weights=tok[sel], minlength=n_req).astype(np.int64)
        hit_blocks[:, k] = np.bincount(req[sel], minlength=n_req)
    recomputed = trace.input_tokens - hit_tokens.sum(axis=1)
    # TTFT
    bw = np.array([t.read_bytes_per_s for t in config.tiers], dtype=np.float64)
    lat = np.array([t.latency_s for t in config.tiers], dtype=np.float64)
    per_byte = np.where(np.isfinite(bw), 1.0 / np.where(np.isfinite(bw), bw, 1.0), 0.0)
    load = (hit_tokens * b) @ per_byte + (hit_tokens > 0) @ lat
    state = config.kv.per_session_bytes
    hit_any = first_miss > 0
    if state and hit_any.any():
        last_idx = trace.offsets[:-1] + np.maximum(first_miss - 1, 0)
        tier_of_last = served[np.minimum(last_idx, max(trace.n_blocks - 1, 0))] - 1
        load = load + np.where(hit_any, state * per_byte[np.clip(tier_of_last, 0, m - 1)], 0.0)
    compute = recomputed / config.prefill_rate
    ttft = np.maximum(load, compute) if config.overlap else load + compute
    # resumes: deepest previously seen block of the prefix, and when it was last used
    t_acc = trace.time_s[req]
    first_cold = _first_in_request(trace, prev < 0, req, local)
    idle = np.full(n_req, np.nan)
    seen = first_cold > 0
    deepest = trace.offsets[:-1][seen] + first_cold[seen] - 1
    idle[seen] = trace.time_s[seen] - t_acc[prev[deepest]]
    resumed = seen & (idle >= config.resume_after_s)
    report = _report(
        trace, config, out, caps, hit_tokens, hit_blocks, recomputed, ttft, idle, resumed, served, tok
    )
    return SimResult(config, trace, out, hit_tokens, hit_blocks, recomputed, ttft, idle, report)


def _report(
    trace: BlockTrace,
    config: SimConfig,
    out: EngineOutput,
    caps: list[int],
    hit_tokens: npt.NDArray[np.int64],
    hit_blocks: npt.NDArray[np.int64],
    recomputed: I64,
    ttft: F64,
    idle: F64,
    resumed: npt.NDArray[np.bool_],
    served: I64,
    tok: I64,
) -> dict[str, Any]:
    b = config.kv.per_token_bytes
    block_bytes = config.block_bytes(trace.block_size)
    n_blocks = trace.n_blocks
    input_tokens = int(trace.input_tokens.sum())
    total_hit_blocks = int(hit_blocks.sum())
    total_hit_tokens = int(hit_tokens.sum())
    duration = float(trace.time_s[-1] - trace.time_s[0]) if trace.n_requests > 1 else 0.0
    tiers = []
    for k, t in enumerate(config.tiers):
        hb = int(hit_blocks[:, k].sum())
        ht = int(hit_tokens[:, k].sum())
        written = int(out.written_tokens[k])
        tiers.append(
            {
                "name": t.name,
                "kind": t.kind,
                "capacity_bytes": t.capacity_bytes if math.isfinite(t.capacity_bytes) else None,
                "capacity_blocks": caps[k] if math.isfinite(t.capacity_bytes) else None,
                "ttl_s": t.ttl_s
                if t.ttl_s is not None
                else (config.ttl_s if config.policy == "ttl" else None),
                "read_bytes_per_s": t.read_bytes_per_s if math.isfinite(t.read_bytes_per_s) else None,
                "hit_blocks": hb,
                "hit_tokens": ht,
                "hit_ratio": hb / n_blocks if n_blocks else 0.0,
                "token_hit_ratio": ht / input_tokens if input_tokens else 0.0,
                "object_hit_blocks": int((served == k + 1).sum()),
                "bytes_read": ht * b,
                "bytes_written": written * b,
                "write_bytes_per_s": written * b / duration if duration else None,
                "peak_resident_bytes": float(out.resident_blocks[:, k].max()) * block_bytes
                if len(out.resident_blocks)
                else 0.0,
                "mean_resident_bytes": float(out.resident_blocks[:, k].mean()) * block_bytes
                if len(out.resident_blocks)
                else 0.0,
            }
        )
    worst: dict[str, Any] | None = None
    if resumed.any():
        idx = np.flatnonzero(resumed)
        w = int(idx[np.argmax(ttft[idx])])
        worst = {
            "request": w,
            "session": trace.session[w] if trace.session is not None else None,
            "time_s": float(trace.time_s[w]),
            "idle_s": float(idle[w]),
            "input_tokens": int(trace.input_tokens[w]),
            "hit_tokens": {t.name: int(hit_tokens[w, k]) for k, t in enumerate(config.tiers)},
            "recomputed_tokens": int(recomputed[w]),
            "ttft_s": float(ttft[w]),
        }
    return {
        "model_kv_bytes_per_token": b,
        "per_session_bytes": config.kv.per_session_bytes,
        "block_size": trace.block_size,
        "block_bytes": block_bytes,
        "policy": config.policy,
        "inclusive": config.inclusive,
        "promote": config.promote,
        "engine": out.engine,
        "requests": trace.n_requests,
        "blocks": n_blocks,
        "duration_s": duration,
        "input_tokens": input_tokens,
        "hit_blocks": total_hit_blocks,
        "misses": n_blocks - total_hit_blocks,
        "hit_ratio": total_hit_blocks / n_blocks if n_blocks else 0.0,
        "hit_tokens": total_hit_tokens,
        "token_hit_ratio": total_hit_tokens / input_tokens if input_tokens else 0.0,
        "object_hit_blocks": int((served > 0).sum()),
        "recomputed_tokens": int(recomputed.sum()),
        "bytes_read": total_hit_tokens * b,
        "bytes_written": int(out.written_tokens.sum()) * b,
        "prefill_rate_tok_s": config.prefill_rate,
        "ttft_mean_s": float(ttft.mean()),
        "ttft_p50_s": _quantile(ttft, 0.5),
        "ttft_p99_s": _quantile(ttft, 0.99),
        "resumed_requests": int(resumed.sum()),
        "resume_after_s": config.resume_after_s,
        "resumed_ttft_p50_s": _quantile(ttft[resumed], 0.5),
        "worst_resumed": worst,
        "tiers": tiers,
        "per_minute": _per_bucket(trace, config, out, hit_tokens, recomputed, ttft),
    }


def _per_bucket(
    trace: BlockTrace,
    config: SimConfig,
    out: EngineOutput,
    hit_tokens: npt.NDArray[np.int64],
    recomputed: I64,
    ttft: F64,
) -> list[dict[str, Any]]:
    t0 = float(trace.time_s[0])
    bucket = ((trace.time_s - t0) // config.bucket_s).astype(np.int64)
    nb = int(bucket[-1]) + 1
    block_bytes = config.block_bytes(trace.block_size)
    reqs = np.bincount(bucket, minlength=nb)
    inp = np.bincount(bucket, weights=trace.input_tokens, minlength=nb)
    rec = np.bincount(bucket, weights=recomputed, minlength=nb)
    busy = np.bincount(bucket, weights=ttft, minlength=nb)
    hits = [np.bincount(bucket, weights=hit_tokens[:, k], minlength=nb) for k in range(len(config.tiers))]
    order = np.lexsort((ttft, bucket))
    starts = np.concatenate(([0], np.cumsum(reqs)))
    rows = []
    for i in range(nb):
        row: dict[str, Any] = {
            "minute": i,
            "start_s": i * config.bucket_s,
            "requests": int(reqs[i]),
            "input_tokens": int(inp[i]),
            "token_hit_ratio": float(1 - rec[i] / inp[i]) if inp[i] else None,
            "recomputed_tokens": int(rec[i]),
        }
        for k, t in enumerate(config.tiers):
            row[f"{t.name}_hit_tokens"] = int(hits[k][i])
        for k, t in enumerate(config.tiers):
            row[f"{t.name}_resident_bytes"] = float(out.resident_blocks[i, k]) * block_bytes
        if reqs[i]:
            seg = ttft[order[starts[i] : starts[i + 1]]]
            row["ttft_p50_s"] = float(seg[(len(seg) - 1) // 2])
            row["ttft_p99_s"] = float(seg[min(len(seg) - 1, math.ceil(0.99 * len(seg)) - 1)])
        else:
            row["ttft_p50_s"] = row["ttft_p99_s"] = None
        row["prefill_throughput_tok_s"] = float(inp[i] / busy[i]) if busy[i] > 0 else None
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------- sweep


def default_capacities(distinct_blocks: int, points: int = 24) -> list[int]:
    """Log-spaced capacities from 1 block to every distinct block."""
    if distinct_blocks <= 1:
        return [1]
    grid = np.unique(np.round(np.geomspace(1, distinct_blocks, points)).astype(np.int64))
    return [int(x) for x in grid]


def sweep(
    trace: BlockTrace, capacities: Sequence[int] | None = None, block_bytes: int = 0
) -> list[dict[str, Any]]:
    """Hit ratio versus LRU capacity (blocks) from one exact stack-distance pass.

    ``hit_ratio`` counts every block found (libCacheSim's object hits); ``prefix_hit_ratio`` and
    ``token_hit_ratio`` count only each request's leading run of hits, as a prefix cache can use.
    Exclusive LRU tiers of capacities ``C1, C2, ...`` hit what one LRU of ``C1 + C2 + ...`` hits.
    """
    n = trace.n_blocks
    d = np.minimum(stack_distances(trace.blocks), n + 1)  # n + 1: a first access
    tok = trace.block_tokens()
    req = trace.request_of_block()
    # running maximum of the distance inside each request: a block is usable iff all before it hit
    big = np.int64(trace.n_blocks + 2)
    run = np.maximum.accumulate(d + req * big) - req * big
    distinct = int((d == n + 1).sum())
    caps = list(capacities) if capacities else default_capacities(distinct)
    d_sorted = np.sort(d)
    order = np.argsort(run, kind="stable")
    run_sorted = run[order]
    tok_cum = np.concatenate(([0], np.cumsum(tok[order])))
    total_tokens = int(trace.input_tokens.sum())
    rows = []
    for c in caps:
        hits = int(np.searchsorted(d_sorted, min(c, n), side="right"))
        usable = int(np.searchsorted(run_sorted, min(c, n), side="right"))
        rows.append(
            {
                "capacity_blocks": int(c),
                "capacity_bytes": int(c) * block_bytes if block_bytes else None,
                "hit_blocks": hits,
                "hit_ratio": hits / n if n else 0.0,
                "prefix_hit_blocks": usable,
                "prefix_hit_ratio": usable / n if n else 0.0,
                "token_hit_ratio": int(tok_cum[usable]) / total_tokens if total_tokens else 0.0,
            }
        )
    return rows


def iter_block_accesses(trace: BlockTrace) -> Iterator[int]:
    """The flat block-access sequence (what libCacheSim replays)."""
    yield from trace.blocks.tolist()
