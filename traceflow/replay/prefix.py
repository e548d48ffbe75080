"""Prefix structure from token counts: ``hash_ids`` (prefix-block ids) for every request
(docs/replay.md#prefix-blocks-hash_ids).

Telemetry has no token ids, only counts. A replay needs, per request, the ids of its prompt's blocks
such that two requests share an id exactly where their prompts share that block *and everything
before it* (Mooncake's prefix hashes). This module derives that structure from the counts and the
timing, and keeps the ids of sources that already have them.

The model (every rule is measured against the real Claude Code sessions in
``tests/data/weka_cc_traces``, which carry true 64-token prefix hashes; see ``tests/test_prefix.py``):

* **Streams.** A stream is one ``(session_id, model)``: a KV cache belongs to one model, so a side
  request on another model (Claude Code's Haiku calls inside an Opus session) never continues the
  main context. Requests without a ``session_id`` (Mooncake, Azure) are a stream each.
* **Append-only growth.** Within a stream, in time order, a request's prompt is the previous prompt
  plus the previous output plus new input, so it shares every *full* block of the previous prompt.
  A *chain* is a run of such requests: full block ``k`` of a chain is the same block (one id) in every
  request of the chain that reaches it.
* **Compaction / reset.** A context that drops below the previous one starts a new chain. The new
  chain shares only the stream's base prefix with the old one: ``L`` full blocks, where ``L`` is
  the smallest context a chain of the group started with (the system prompt, tools and first prompt
  that a compacted or cleared session keeps). Where the agent reported a real cache read
  (``cache_read_tokens`` not derived by an importer: ``attributes.cache_derived`` is NULL), that
  read is used instead: the new chain shares ``floor(read / B)`` blocks with the old one.
* **Prefix breaks.** With a measured read, a request whose read falls short of the previous prompt
  (by more than ``max(2·B, 2 %)``) although the gap is within ``break_ttl_s`` (the cache could not have
  expired) diverged at the read: a new chain sharing ``floor(read / B)`` blocks.
* **Sub-agents** (``parent_session_id`` set) share only a common system/tool prefix: sibling
  sub-agents of one parent on one model share the group's base prefix ``L`` (the smallest context a
  sibling started with). They share nothing with the parent's own context: in the reference sessions
  none of the 28 sub-agents shares a block with its parent (their system prompt and tools differ),
  while siblings of one type share all but the last 2–3 of the ~160–200 blocks of their first prompt.
* **Across sessions** nothing is shared, except that a session's first request with a measured cache
  read > 0 (Claude Code reads the system prompt and tools cached by the user's earlier sessions)
  shares ``min(read, L_user)`` tokens of full blocks with the user's first session on that model,
  ``L_user`` being the smallest such first read of the user.
* **Ids.** Full blocks of a truly shared prefix keep one id; ``len(hash_ids) == ceil(input / B)``;
  a partial last block gets an id of its own, shared only by requests of one chain with the same
  context (a retry), so an id always stands for one block content at one size (AIPerf rejects an id
  materialised at two sizes).

Source ids (Mooncake, kv-cache-tester, Bailian) are kept where present, re-based or re-blocked
(:mod:`traceflow.replay.source_ids`); only the other requests are derived here.

Ids are numbered chain by chain in order of each chain's first request, then the partial blocks in
request order, so one selection always gets the same ids whatever the export format. Everything is
vectorised (numpy): streams are 64-bit keys (hashes of session and model), and ids are materialised
per range of requests (:meth:`traceflow.replay.hash_ids.PrefixPlan.ids`), as runs of
consecutive integers, so a 10-million-request export never holds all of them at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from traceflow.errors import UsageError
from traceflow.replay.arrays import F64, I64, BoolA, group_first, previous
from traceflow.replay.hash_ids import KIND_BREAK, KIND_CONTINUE, KIND_DROP, KIND_FIRST, KIND_KEPT, PrefixPlan
from traceflow.replay.source_ids import keep_source_ids

if TYPE_CHECKING:
    import polars as pl

DEFAULT_BLOCK_SIZE = 512
DEFAULT_BREAK_TTL_S = 300.0


@dataclass(frozen=True)
class PrefixOptions:
    """How hash ids are assigned."""

    block_size: int = DEFAULT_BLOCK_SIZE
    #: Use ``cache_read_tokens`` the agent reported (never importer-derived ones) as evidence.
    use_measured: bool = True
    #: A measured read short of the previous prompt within this gap is a prefix break.
    break_ttl_s: float = DEFAULT_BREAK_TTL_S
    #: Keep the source's hash ids where present (else derive every request from counts).
    keep_source_ids: bool = True

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise UsageError(f"--block-size {self.block_size} must be a positive number of tokens")


def derive(frame: pl.DataFrame, options: PrefixOptions | None = None) -> PrefixPlan:
    """Hash ids for every row of ``frame`` (as :func:`traceflow.replay.requests.load_requests` returns
    it, in replay order)."""
    import polars as pl

    opts = options or PrefixOptions()
    B = opts.block_size
    n = frame.height
    cols = set(frame.columns)

    def col(name: str, default: Any = None) -> pl.Series:
        if name in cols:
            return frame[name]
        return pl.Series(name, [default] * n)

    ctx = np.asarray(col("ctx").fill_null(0).to_numpy(), dtype=np.int64)
    if (ctx < 0).any():
        raise UsageError("a request has a negative context")
    has_src = np.zeros(n, dtype=bool)
    if opts.keep_source_ids and "hash_ids" in cols and "src_block" in cols:
        has_src = np.asarray(
            (frame["hash_ids"].is_not_null() & frame["src_block"].is_not_null()).to_numpy(), dtype=bool
        )
    kept_idx = np.flatnonzero(has_src)
    kept_offsets = np.zeros(n + 1, dtype=np.int64)
    kept_flat = np.zeros(0, dtype=np.int64)
    next_id = 0
    stats: dict[str, Any] = {"requests_kept": len(kept_idx), "requests_derived": n - len(kept_idx)}
    if len(kept_idx):
        kept_frame = frame[kept_idx.tolist()] if len(kept_idx) < n else frame
        counts, kept_flat, next_id, kstats = keep_source_ids(kept_frame, ctx[kept_idx], B)
        stats.update(kstats)
        per_req = np.zeros(n, dtype=np.int64)
        per_req[kept_idx] = counts
        np.cumsum(per_req, out=kept_offsets[1:])

    chain = np.full(n, -1, dtype=np.int64)
    nfull = np.zeros(n, dtype=np.int64)
    partial = np.full(n, -1, dtype=np.int64)
    kind = np.full(n, KIND_KEPT, dtype=np.int8)
    empty = np.zeros(0, dtype=np.int64)
    plan = PrefixPlan(B, ctx, chain, nfull, partial, kind, empty, empty, empty, kept_offsets, kept_flat, 0)
    derived_idx = np.flatnonzero(~has_src)
    if len(derived_idx):
        sub = frame if len(derived_idx) == n else frame[derived_idx.tolist()]
        next_id = _derive(sub, ctx[derived_idx], derived_idx, opts, plan, next_id, stats)
    plan.next_id = next_id
    plan.stats = stats
    return plan


def _derive(
    frame: pl.DataFrame,
    ctx: I64,
    rows: I64,
    opts: PrefixOptions,
    plan: PrefixPlan,
    next_id: int,
    stats: dict[str, Any],
) -> int:
    """Fill ``plan`` for the derived ``rows`` (``frame`` = those rows, in time order); returns the next
    free id."""
    st = _streams(frame, ctx, opts)
    ch = _chains(st)
    group, base_blocks = _base_prefix(st, ch)
    parent, shared = _parents(st, ch, group, base_blocks)
    resolve_parent = _compress(parent, shared)
    base, next_id = _chain_bases(st, ch, shared, next_id)
    partial, next_id = _partial_ids(st, ch, next_id)
    _resolve_runs(plan, resolve_parent, shared, base)

    target = rows[st.order]
    plan.chain[target] = ch.chain
    plan.nfull[target] = st.ctx // st.block_size
    plan.partial[target] = partial
    plan.kind[target] = np.where(
        st.first,
        KIND_FIRST,
        np.where(ch.drop, KIND_DROP, np.where(ch.brk, KIND_BREAK, KIND_CONTINUE)),
    ).astype(np.int8)
    plan.chain_parent = resolve_parent
    plan.chain_shared = shared
    plan.chain_base = base
    stats.update(
        {
            "streams": int(st.first.sum()),
            "chains": ch.n,
            "resets": int(ch.drop.sum()),
            "prefix_breaks": int(ch.brk.sum()),
            "shared_stream_starts": int(((parent >= 0) & st.first[ch.starts]).sum()) if ch.n else 0,
        }
    )
    return next_id


@dataclass
class _Streams:
    """The derived requests in (stream, time) order: position ``i`` holds row ``order[i]``.

    ``stream`` .. ``read`` are per position; ``t_us`` .. ``user_group`` per row (:func:`_keys`)."""

    block_size: int
    break_ttl_s: float
    order: I64
    stream: I64
    ctx: I64
    prev_ctx: I64  # the previous request's context (0 at the first position)
    first: BoolA  # a stream's first request
    measured: BoolA  # a measured cache read (all False unless ``use_measured``)
    compacted: BoolA  # compacted to a smaller window (traceflow.replay.compaction): a new chain
    read: I64
    any_measured: bool
    t_us: I64
    end_us: I64  # the start where the end is unknown
    is_sub: BoolA
    sub_group: I64
    user_known: BoolA
    user_group: I64

    def gap(self, pos: I64) -> F64:
        """Seconds from the previous request's end to the start of the requests at ``pos``."""
        prev = self.order[np.maximum(pos - 1, 0)]
        out: F64 = (self.t_us[self.order[pos]] - self.end_us[prev]) / 1e6
        return out


def _streams(frame: pl.DataFrame, ctx: I64, opts: PrefixOptions) -> _Streams:
    """The columns the derivation reads, with the requests put in stream order (a stable parallel sort)."""
    import polars as pl

    n = frame.height
    cols = set(frame.columns)

    def series(name: str) -> pl.Series:
        return frame[name] if name in cols else pl.Series(name, [None] * n)

    def ints(name: str, fill: int) -> I64:
        return np.asarray(series(name).fill_null(fill).to_numpy(), dtype=np.int64)

    t_us = ints("t_us", 0)
    end_known = np.asarray(series("end_us").is_not_null().to_numpy(), dtype=bool)
    measured = (
        np.asarray(series("measured").fill_null(False).to_numpy(), dtype=bool)
        if opts.use_measured
        else np.zeros(n, dtype=bool)
    )
    stream, is_sub, sub_group, user_known, user_group = _keys(frame)
    order = np.asarray(
        pl.DataFrame({"s": stream}).select(pl.arg_sort_by("s", maintain_order=True)).to_series().to_numpy(),
        dtype=np.int64,
    )
    stream_o = stream[order]
    ctx_o = ctx[order]
    return _Streams(
        block_size=opts.block_size,
        break_ttl_s=opts.break_ttl_s,
        order=order,
        stream=stream_o,
        ctx=ctx_o,
        prev_ctx=previous(ctx_o),
        first=group_first(stream_o),
        measured=measured[order],
        compacted=np.asarray(series("compacted").fill_null(False).to_numpy(), dtype=bool)[order],
        read=ints("read", 0)[order],
        any_measured=bool(measured.any()),
        t_us=t_us,
        end_us=np.where(end_known, ints("end_us", 0), t_us),
        is_sub=is_sub,
        sub_group=sub_group,
        user_known=user_known,
        user_group=user_group,
    )


@dataclass
class _Chains:
    """Runs of append-only growth over :class:`_Streams` positions: a new chain at each stream's
    first request, context drop and prefix break."""

    drop: BoolA
    brk: BoolA
    chain: I64  # per position
    starts: I64  # per chain: the position of its first request
    maxfull: I64  # per chain: the full blocks of its largest context

    @property
    def n(self) -> int:
        return len(self.starts)


def _chains(st: _Streams) -> _Chains:
    B = st.block_size
    drop = ~st.first & ((st.ctx < st.prev_ctx) | st.compacted)
    brk = np.zeros(len(st.ctx), dtype=bool)
    if st.any_measured:  # a measured read short of the previous prompt while the cache was warm
        short = st.read < st.prev_ctx - np.maximum(2 * B, st.prev_ctx // 50)
        cand = np.flatnonzero(~st.first & ~drop & st.measured & short)
        brk[cand[st.gap(cand) <= st.break_ttl_s]] = True
    new_chain = st.first | drop | brk
    starts = np.flatnonzero(new_chain)
    maxfull = np.maximum.reduceat(st.ctx, starts) // B if len(starts) else np.zeros(0, dtype=np.int64)
    return _Chains(drop=drop, brk=brk, chain=np.cumsum(new_chain) - 1, starts=starts, maxfull=maxfull)


def _base_prefix(st: _Streams, ch: _Chains) -> tuple[I64, I64]:
    """Per chain: its group and the group's base prefix ``L`` in full blocks.

    A main stream is its own group; sibling sub-agents on one model share one. ``L`` is the smallest
    context a chain of the group started with."""
    start_rows = st.order[ch.starts]
    start_ctx = st.ctx[ch.starts]
    group = np.where(st.is_sub[start_rows], st.sub_group[start_rows], st.stream[ch.starts])
    order_g = np.argsort(group, kind="stable")
    gfirst = group_first(group[order_g])
    gid = np.cumsum(gfirst) - 1
    gmin = np.minimum.reduceat(start_ctx[order_g], np.flatnonzero(gfirst)) if len(order_g) else start_ctx
    base_blocks = np.empty(ch.n, dtype=np.int64)
    base_blocks[order_g] = (gmin // st.block_size)[gid]
    return group, base_blocks


def _parents(st: _Streams, ch: _Chains, group: I64, base_blocks: I64) -> tuple[I64, I64]:
    """Per chain: the chain it shares a prefix with (−1 for none) and how many full blocks."""
    parent = np.full(ch.n, -1, dtype=np.int64)
    shared = np.zeros(ch.n, dtype=np.int64)
    _reset_parents(st, ch, base_blocks, parent, shared)
    stream_starts = np.flatnonzero(st.first[ch.starts])
    if len(stream_starts):
        _sibling_parents(st, ch, stream_starts, group, base_blocks, parent, shared)
        if st.any_measured:
            _user_parents(st, ch, stream_starts, parent, shared)
    return parent, np.where(parent < 0, 0, shared)


def _reset_parents(st: _Streams, ch: _Chains, base_blocks: I64, parent: I64, shared: I64) -> None:
    """Resets inside a stream (drop / measured break): the parent is the stream's previous chain."""
    B = st.block_size
    rc = np.flatnonzero(~st.first[ch.starts])
    if not len(rc):
        return
    pos = ch.starts[rc]
    parent[rc] = rc - 1
    cap = np.minimum(st.prev_ctx[pos] // B, st.ctx[pos] // B)
    if st.any_measured:
        live = st.measured[pos] & (st.gap(pos) <= st.break_ttl_s)
        s = np.where(live, st.read[pos] // B, base_blocks[rc])
    else:
        s = base_blocks[rc]
    shared[rc] = np.clip(s, 0, cap)


def _sibling_parents(
    st: _Streams, ch: _Chains, fc: I64, group: I64, base_blocks: I64, parent: I64, shared: I64
) -> None:
    """Sub-agent stream starts (chains ``fc``) hang under their group's first (earliest) stream start."""
    rows = st.order[ch.starts[fc]]
    grp = group[fc]
    order = np.lexsort((rows, st.t_us[rows], grp))
    gf = group_first(grp[order])
    head_of = np.maximum.accumulate(np.where(gf, np.arange(len(order)), 0))
    head_chain = fc[order][head_of]
    mine = fc[order]
    sib = (head_chain != mine) & st.is_sub[rows][order]
    kids = mine[sib]
    parent[kids] = head_chain[sib]
    shared[kids] = np.minimum(base_blocks[kids], ch.maxfull[head_chain[sib]])


def _user_parents(st: _Streams, ch: _Chains, fc: I64, parent: I64, shared: I64) -> None:
    """Main stream starts (chains ``fc``): a measured read on the first request proves a prefix cached
    by the user's earlier sessions (system prompt and tools), shared with the user's first session."""
    B = st.block_size
    pos = ch.starts[fc]
    main = ~st.is_sub[st.order[pos]] & st.user_known[st.order[pos]]
    if not main.any():
        return
    mfc = fc[main]
    mpos = pos[main]
    rows = st.order[mpos]
    ug = st.user_group[rows]
    mread = np.where(st.measured[mpos], st.read[mpos], 0)
    order = np.lexsort((rows, st.t_us[rows], ug))
    uf = group_first(ug[order])
    uid = np.cumsum(uf) - 1
    head = mfc[order][np.flatnonzero(uf)][uid]
    has_read = mread[order] > 0
    big = np.iinfo(np.int64).max
    lmin = np.minimum.reduceat(np.where(has_read, mread[order], big), np.flatnonzero(uf))[uid]
    mine = mfc[order]
    ok = has_read & (head != mine) & (lmin < big)
    s = np.minimum(np.minimum(mread[order][ok], lmin[ok]) // B, ch.maxfull[head[ok]])
    s = np.minimum(s, st.ctx[ch.starts[mine[ok]]] // B)
    parent[mine[ok]] = head[ok]
    shared[mine[ok]] = s


def _compress(parent: I64, shared: I64) -> I64:
    """Pointer compression: a chain whose shared prefix lies inside its parent's shared prefix takes
    its blocks from the grandparent directly (keeps the resolve loop short)."""
    p = parent.copy()
    for _ in range(64):
        pp = np.maximum(p, 0)
        skip = (p >= 0) & (shared > 0) & (shared <= shared[pp]) & (p[pp] >= 0)
        if not skip.any():
            break
        p = np.where(skip, p[pp], p)
    return p


def _chain_bases(st: _Streams, ch: _Chains, shared: I64, next_id: int) -> tuple[I64, int]:
    """Per chain, ``base``: its own block ``k`` (``k ≥ shared``) is id ``base + k``; and the next free id.

    Ids are allocated chain by chain in order of the chains' first requests, so the numbering does
    not depend on how streams were keyed."""
    own = np.maximum(ch.maxfull - shared, 0)
    by_time = np.argsort(st.order[ch.starts], kind="stable")
    off = np.empty(ch.n, dtype=np.int64)
    if ch.n:
        own_t = own[by_time]
        off[by_time] = next_id + np.cumsum(own_t) - own_t
    return off - shared, next_id + int(own.sum())


def _partial_ids(st: _Streams, ch: _Chains, next_id: int) -> tuple[I64, int]:
    """Per position, the id of the partial last block (−1 for none), one per (chain, context) value
    and numbered in time order (a retry reuses the id of the request before it); and the next free id."""
    n = len(st.ctx)
    has_part = st.ctx % st.block_size != 0
    same_prev = np.zeros(n, dtype=bool)
    if n > 1:
        same_prev[1:] = (ch.chain[1:] == ch.chain[:-1]) & (st.ctx[1:] == st.ctx[:-1])
    new_part = has_part & ~(same_prev & has_part)
    new_t = np.zeros(n, dtype=bool)
    new_t[st.order] = new_part
    pid_t = next_id + np.cumsum(new_t) - 1
    # stream-order position of the id's owner
    owner = np.maximum.accumulate(np.where(new_part, np.arange(n, dtype=np.int64), 0))
    partial: I64 = np.where(has_part, pid_t[st.order[owner]], -1)
    return partial, next_id + int(new_part.sum())


def _resolve_runs(plan: PrefixPlan, parent: I64, shared: I64, base: I64) -> None:
    """Store in ``plan`` the runs each chain's full blocks resolve to (root first), for fast
    materialisation."""
    n_chains = len(parent)
    big = np.iinfo(np.int64).max
    cur = np.arange(n_chains, dtype=np.int64)
    hi = np.full(n_chains, big, dtype=np.int64)
    active = np.arange(n_chains, dtype=np.int64)
    parts: list[tuple[I64, I64, I64, I64, I64]] = []
    level = 0
    while len(active):
        a = cur[active]
        parts.append((active, a, shared[a], hi[active].copy(), np.full(len(active), level, dtype=np.int64)))
        hi[active] = np.minimum(hi[active], shared[a])
        cur[active] = parent[a]
        active = active[parent[a] >= 0]
        level += 1
    if parts:
        seg_chain, seg_anc, seg_lo, seg_hi, seg_level = (np.concatenate(x) for x in zip(*parts, strict=True))
        order_s = np.lexsort((-seg_level, seg_chain))
        plan.seg_off = np.zeros(n_chains + 1, dtype=np.int64)
        np.cumsum(np.bincount(seg_chain, minlength=n_chains), out=plan.seg_off[1:])
        plan.seg_lo = seg_lo[order_s]
        plan.seg_hi = seg_hi[order_s]
        plan.seg_base = base[seg_anc[order_s]]


# ----------------------------------------------------------------------------------- stream keys


def _hash(frame: pl.DataFrame, exprs: list[Any]) -> I64:
    import polars as pl

    h = frame.select(pl.struct(exprs).hash(seed=7).reinterpret(signed=True)).to_series()
    return np.asarray(h.to_numpy(), dtype=np.int64)


def stream_keys(frame: pl.DataFrame) -> I64:
    """Per row, the key of its stream (one per ``(session, model)``; a request without a session is a
    stream of its own): the streams the derivation follows."""
    return _keys(frame)[0]


def _keys(frame: pl.DataFrame) -> tuple[I64, BoolA, I64, BoolA, I64]:
    """Per row: stream key, is a sub-agent, sibling-group key, has a user, user-group key.

    Keys are 64-bit hashes (of ``(session, model)``, ``(parent, model)``, ``(user, model)``), computed
    by the query (``keys=True``) or here; a request without a session is a stream of its own."""
    import polars as pl

    n = frame.height
    cols = set(frame.columns)

    def known(name: str) -> BoolA:
        if name not in cols:
            return np.zeros(n, dtype=bool)
        return np.asarray(frame[name].is_not_null().to_numpy(), dtype=bool)

    def hashed(name: str) -> I64:
        return np.asarray(frame[name].fill_null(0).reinterpret(signed=True).to_numpy(), dtype=np.int64)

    if "stream_h" in cols:
        has_session = np.asarray(frame["has_session"].to_numpy(), dtype=bool)
        stream, sub, user = hashed("stream_h"), hashed("sub_h"), hashed("user_h")
        is_sub, user_known = known("sub_h"), known("user_h")
    else:
        model = pl.col("model").fill_null("") if "model" in cols else pl.lit("")

        def col(name: str) -> Any:
            return pl.col(name) if name in cols else pl.lit(None, pl.String)

        has_session = known("session_id")
        stream = _hash(frame, [col("session_id"), model])
        sub = _hash(frame, [col("parent_session_id"), model, pl.lit("sub")])
        user = _hash(frame, [col("user_id"), model, pl.lit("user")])
        is_sub, user_known = known("parent_session_id"), known("user_id")
    stream = np.where(has_session, stream, np.arange(n, dtype=np.int64))
    return stream, is_sub & has_session, sub, user_known, user
