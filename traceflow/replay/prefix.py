"""Prefix structure from token counts: ``hash_ids`` (prefix-block ids) for every request (DESIGN §4).

Telemetry has no token ids, only counts. A replay needs, per request, the ids of its prompt's blocks
such that two requests share an id exactly where their prompts share that block *and everything
before it* (Mooncake's prefix hashes). This module derives that structure from the counts and the
timing, and keeps the ids of sources that already have them.

The model (every rule is measured against the real Claude Code sessions in
``shared/data/weka_cc_traces``, which carry true 64-token prefix hashes; see ``tests/test_prefix.py``):

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

Source ids (Mooncake, kv-cache-tester, Bailian) are kept: at the source's block size they are
re-based into a per-scope range (the first scope keeps its numbers, so a Mooncake trace re-exports
byte-identical ids), a floor-rule source (kv-cache-tester) gets an own id for its unhashed tail, and
an id seen at two sizes is split. At another block size the ids are re-blocked: the new block ending
at token ``e`` is identified by (scope, the source id of the block holding token ``e − 1``, ``e``'s
offset in it); since a source id stands for its whole prefix, equal keys mean equal prefixes. Tokens
the source ids do not cover get ids of their own.

Ids are numbered chain by chain in order of each chain's first request, then the partial blocks in
request order, so one selection always gets the same ids whatever the export format. Everything is
vectorised (numpy): streams are 64-bit keys (hashes of session and model), and ids are materialised
per range of requests (:meth:`PrefixPlan.ids`), as runs of consecutive integers, so a
10-million-request export never holds all of them at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from traceflow.errors import UsageError

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

I64 = npt.NDArray[np.int64]
BoolA = npt.NDArray[np.bool_]

DEFAULT_BLOCK_SIZE = 512
DEFAULT_BREAK_TTL_S = 300.0

#: Per-request kind codes in :attr:`PrefixPlan.kind`.
KIND_CONTINUE, KIND_FIRST, KIND_DROP, KIND_BREAK, KIND_KEPT = 0, 1, 2, 3, 4
KIND_NAMES = ("continue", "first", "drop", "break", "kept")


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


# ---------------------------------------------------------------------------------------- loading

#: Attributes extracted for the kv-cache-tester export (JSON path -> column).
EXTRA_ATTRIBUTES = {
    "think_time_s": "$.think_time_s",
    "stop": "$.stop",
    "input_types": "$.input_types",
    "output_types": "$.output_types",
    "subagent_type": "$.subagent_type",
    "agent_id": "$.agent_id",
    "request_type": "$.type",
}


def requests_sql(
    selection: Selection | None, *, extras: bool = False, limit: int | None = None, keys: bool = False
) -> tuple[str, list[Any]]:
    """The query :func:`load_requests` runs: one row per request with tokens, in replay order."""
    from traceflow.store.selection import REQUEST_TIME, Selection

    where, params = (selection or Selection()).where()
    ident = "session_id, parent_session_id, prompt_id, model, user_id, agent, source, request_id,"
    if keys:  # 64-bit keys instead of strings (a flat export needs no names)
        ident = """
          hash(session_id, coalesce(model, '')) AS stream_h,
          session_id IS NOT NULL AS has_session,
          CASE WHEN parent_session_id IS NOT NULL
               THEN hash(parent_session_id, coalesce(model, ''), 'sub') END AS sub_h,
          CASE WHEN user_id IS NOT NULL THEN hash(user_id, coalesce(model, ''), 'user') END AS user_h,"""
    extra_cols = ""
    if extras:
        extra_cols = "".join(
            f", json_extract_string(attributes, '{path}') AS {name}"
            for name, path in EXTRA_ATTRIBUTES.items()
        )
    sql = f"""
        SELECT {ident}
          epoch_us({REQUEST_TIME}) AS t_us,
          epoch_us(coalesce(ended_at, CASE WHEN duration_ms IS NOT NULL
              THEN started_at + to_microseconds(CAST(round(duration_ms * 1000) AS BIGINT)) END)) AS end_us,
          CAST(context_tokens AS BIGINT) AS ctx,
          CAST(coalesce(output_tokens, 0) AS BIGINT) AS out,
          CAST(cache_read_tokens AS BIGINT) AS read,
          CASE WHEN cache_read_tokens IS NOT NULL
                    AND coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0) > 0
               THEN attributes IS NULL OR NOT contains(attributes, '"cache_derived"')
               ELSE false END AS measured,
          hash_ids,
          block_size AS src_block,
          CASE WHEN hash_ids IS NOT NULL THEN json_extract_string(attributes, '$.hash_scope') END AS scope
          {"" if keys else ","} {"" if keys else "duration_ms, ttft_ms, seq, event_id"}{extra_cols}
        FROM requests
        WHERE ({where}) AND context_tokens > 0 AND {REQUEST_TIME} IS NOT NULL
        ORDER BY t_us, seq NULLS LAST, event_id
    """
    if limit is not None:
        if limit < 1:
            raise UsageError(f"--limit {limit} must be at least 1")
        sql += f" LIMIT {int(limit)}"
    return sql, params


def load_requests(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    *,
    extras: bool = False,
    limit: int | None = None,
    keys: bool = False,
) -> pl.DataFrame:
    """The selected requests (context > 0) in replay order: time, then source order.

    Columns: ``session_id, parent_session_id, prompt_id, model, user_id, agent, source, request_id,
    t_us, end_us, ctx, out, read, measured, hash_ids, src_block, scope, duration_ms, ttft_ms, seq,
    event_id`` (+ :data:`EXTRA_ATTRIBUTES` with ``extras``). With ``keys`` the names give way to
    64-bit keys (``stream_h, has_session, sub_h, user_h``; no ``source``, ``duration_ms``,
    ``ttft_ms``, ``seq``, ``event_id``): enough for a flat export, and much less to move for
    millions of requests.
    """
    from traceflow.store.lake import query_frame

    sql, params = requests_sql(selection, extras=extras, limit=limit, keys=keys)
    return query_frame(con, sql, params)


# ------------------------------------------------------------------------------------------ plan


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
        flat[_ranges(offsets[:-1][kept], c)] = self.kept_flat[_ranges(self.kept_offsets[r], c)]
        if not kept.all():
            flat[_ranges(offsets[:-1][~kept], counts[~kept])] = self._derived_flat(rows[~kept], dtype)
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
        si = _ranges(self.seg_off[c], nseg)
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


def _local_index(counts: I64) -> I64:
    """``[0..c0), [0..c1), ...`` concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    out: I64 = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
    return out


def _ranges(starts: I64, counts: I64) -> I64:
    """``[s0, s0+c0), [s1, s1+c1), ...`` concatenated."""
    out: I64 = np.repeat(starts, counts) + _local_index(counts)
    return out


def _group_first(sorted_keys: I64) -> BoolA:
    first = np.ones(len(sorted_keys), dtype=bool)
    if len(sorted_keys) > 1:
        first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return first


def _hash(frame: pl.DataFrame, exprs: list[Any]) -> I64:
    import polars as pl

    h = frame.select(pl.struct(exprs).hash(seed=7).reinterpret(signed=True)).to_series()
    return np.asarray(h.to_numpy(), dtype=np.int64)


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


# ------------------------------------------------------------------------------------ derivation


def derive(frame: pl.DataFrame, options: PrefixOptions | None = None) -> PrefixPlan:
    """Hash ids for every row of ``frame`` (as :func:`load_requests` returns it, in replay order)."""
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
        counts, kept_flat, next_id, kstats = _keep(kept_frame, ctx[kept_idx], B)
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
    """Fill ``plan`` for the derived ``rows`` (``frame`` = those rows, in time order)."""
    import polars as pl

    B = opts.block_size
    n = frame.height
    cols = set(frame.columns)

    def series(name: str) -> pl.Series:
        return frame[name] if name in cols else pl.Series(name, [None] * n)

    def ints(name: str, fill: int) -> I64:
        return np.asarray(series(name).fill_null(fill).to_numpy(), dtype=np.int64)

    t_us = ints("t_us", 0)
    end_known = np.asarray(series("end_us").is_not_null().to_numpy(), dtype=bool)
    end_us = np.where(end_known, ints("end_us", 0), t_us)
    read = ints("read", 0)
    measured = (
        np.asarray(series("measured").fill_null(False).to_numpy(), dtype=bool)
        if opts.use_measured
        else np.zeros(n, dtype=bool)
    )
    stream, is_sub, sub_group, user_known, user_group = _keys(frame)

    # -- streams, in (stream, time) order (a stable parallel sort)
    o = np.asarray(
        pl.DataFrame({"s": stream}).select(pl.arg_sort_by("s", maintain_order=True)).to_series().to_numpy(),
        dtype=np.int64,
    )
    s_o = stream[o]
    c_o = ctx[o]
    first = _group_first(s_o)
    prev_ctx = np.empty_like(c_o)
    if n:
        prev_ctx[0] = 0
        prev_ctx[1:] = c_o[:-1]
    drop = ~first & (c_o < prev_ctx)

    def gap(pos: I64) -> npt.NDArray[np.float64]:
        """Seconds from the previous request's end to the start of the requests at ``pos``."""
        prev = o[np.maximum(pos - 1, 0)]
        out: npt.NDArray[np.float64] = (t_us[o[pos]] - end_us[prev]) / 1e6
        return out

    brk = np.zeros(n, dtype=bool)
    any_measured = bool(measured.any())
    if any_measured:
        m_o = measured[o]
        r_o = read[o]
        cand = np.flatnonzero(~first & ~drop & m_o & (r_o < prev_ctx - np.maximum(2 * B, prev_ctx // 50)))
        brk[cand[gap(cand) <= opts.break_ttl_s]] = True
    new_chain = first | drop | brk
    chain_o = np.cumsum(new_chain) - 1
    n_chains = int(chain_o[-1]) + 1 if n else 0
    starts = np.flatnonzero(new_chain)  # position (stream order) of each chain's first request
    kind_o = np.where(first, KIND_FIRST, np.where(drop, KIND_DROP, np.where(brk, KIND_BREAK, KIND_CONTINUE)))

    # -- groups: a main stream is its own group; sibling sub-agents on one model share one
    start_rows = o[starts]
    start_ctx = c_o[starts]
    start_group = np.where(is_sub[start_rows], sub_group[start_rows], s_o[starts])
    # L_g: the smallest context a chain of the group started with, in full blocks
    order_g = np.argsort(start_group, kind="stable")
    gs = start_group[order_g]
    gfirst = _group_first(gs)
    gid = np.cumsum(gfirst) - 1
    gmin = np.minimum.reduceat(start_ctx[order_g], np.flatnonzero(gfirst)) if len(gs) else start_ctx
    L_chain = np.empty(n_chains, dtype=np.int64)
    L_chain[order_g] = (gmin // B)[gid]

    parent = np.full(n_chains, -1, dtype=np.int64)
    shared = np.zeros(n_chains, dtype=np.int64)
    maxfull = np.maximum.reduceat(c_o, starts) // B if n_chains else np.zeros(0, dtype=np.int64)

    # resets inside a stream (drop / measured break): parent = the stream's previous chain
    reset = ~first[starts]
    rc = np.flatnonzero(reset)
    if len(rc):
        pos = starts[rc]
        parent[rc] = rc - 1
        cap = np.minimum(prev_ctx[pos] // B, c_o[pos] // B)
        if any_measured:
            live = m_o[pos] & (gap(pos) <= opts.break_ttl_s)
            s = np.where(live, r_o[pos] // B, L_chain[rc])
        else:
            s = L_chain[rc]
        shared[rc] = np.clip(s, 0, cap)

    # stream starts: siblings hang under the group's first (earliest) stream start
    fc = np.flatnonzero(first[starts])
    if len(fc):
        pos = starts[fc]
        t_start = t_us[o[pos]]
        grp = start_group[fc]
        order = np.lexsort((o[pos], t_start, grp))
        gsorted = grp[order]
        gf = _group_first(gsorted)
        head_of = np.maximum.accumulate(np.where(gf, np.arange(len(order)), 0))
        head_chain = fc[order][head_of]
        mine = fc[order]
        sib = (head_chain != mine) & is_sub[o[pos]][order]
        kids = mine[sib]
        parent[kids] = head_chain[sib]
        shared[kids] = np.minimum(L_chain[kids], maxfull[head_chain[sib]])
        # main streams: a measured read on the first request proves a prefix cached by the user's
        # earlier sessions (system prompt and tools) -> share it with the user's first session
        main = ~is_sub[o[pos]] & user_known[o[pos]]
        if main.any() and any_measured:
            mfc = fc[main]
            mpos = pos[main]
            ug = user_group[o[mpos]]
            mt = t_us[o[mpos]]
            mread = np.where(m_o[mpos], r_o[mpos], 0)
            order = np.lexsort((o[mpos], mt, ug))
            ugs = ug[order]
            uf = _group_first(ugs)
            uid = np.cumsum(uf) - 1
            head = mfc[order][np.flatnonzero(uf)][uid]
            has_read = mread[order] > 0
            big = np.iinfo(np.int64).max
            lmin = np.minimum.reduceat(np.where(has_read, mread[order], big), np.flatnonzero(uf))[uid]
            mine = mfc[order]
            ok = has_read & (head != mine) & (lmin < big)
            s = np.minimum(np.minimum(mread[order][ok], lmin[ok]) // B, maxfull[head[ok]])
            s = np.minimum(s, c_o[starts[mine[ok]]] // B)
            parent[mine[ok]] = head[ok]
            shared[mine[ok]] = s
    shared = np.where(parent < 0, 0, shared)

    # pointer compression: a chain whose shared prefix lies inside its parent's shared prefix
    # takes its blocks from the grandparent directly (keeps the resolve loop short)
    p = parent.copy()
    for _ in range(64):
        pp = np.maximum(p, 0)
        skip = (p >= 0) & (shared > 0) & (shared <= shared[pp]) & (p[pp] >= 0)
        if not skip.any():
            break
        p = np.where(skip, p[pp], p)
    # own blocks and ids
    own = np.maximum(maxfull - shared, 0)
    # ids are allocated chain by chain in order of the chains' first requests (so the numbering does
    # not depend on how streams were keyed), then the partial blocks in request order
    by_time = np.argsort(o[starts], kind="stable")
    off = np.empty(n_chains, dtype=np.int64)
    if n_chains:
        own_t = own[by_time]
        off[by_time] = next_id + np.cumsum(own_t) - own_t
    base = off - shared
    next_id += int(own.sum())

    # partial last blocks: one id per (chain, context) value
    has_part = c_o % B != 0
    same_prev = np.zeros(n, dtype=bool)
    if n > 1:
        same_prev[1:] = (chain_o[1:] == chain_o[:-1]) & (c_o[1:] == c_o[:-1])
    new_part = has_part & ~(same_prev & has_part)
    # number new partial blocks in time order; a retry reuses the id of the request before it
    new_t = np.zeros(n, dtype=bool)
    new_t[o] = new_part
    pid_t = next_id + np.cumsum(new_t) - 1
    src = np.arange(n, dtype=np.int64)
    src = np.maximum.accumulate(np.where(new_part, src, 0))  # stream-order position of the id's owner
    pid = pid_t[o[src]]
    next_id += int(new_part.sum())

    # the runs each chain's full blocks resolve to (root first), for fast materialisation
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
        cur[active] = p[a]
        active = active[p[a] >= 0]
        level += 1
    if parts:
        seg_chain, seg_anc, seg_lo, seg_hi, seg_level = (np.concatenate(x) for x in zip(*parts, strict=True))
        order_s = np.lexsort((-seg_level, seg_chain))
        plan.seg_off = np.zeros(n_chains + 1, dtype=np.int64)
        np.cumsum(np.bincount(seg_chain, minlength=n_chains), out=plan.seg_off[1:])
        plan.seg_lo = seg_lo[order_s]
        plan.seg_hi = seg_hi[order_s]
        plan.seg_base = base[seg_anc[order_s]]

    target = rows[o]
    plan.chain[target] = chain_o
    plan.nfull[target] = c_o // B
    plan.partial[target] = np.where(has_part, pid, -1)
    plan.kind[target] = kind_o.astype(np.int8)
    plan.chain_parent = p
    plan.chain_shared = shared
    plan.chain_base = base
    stats.update(
        {
            "streams": int(first.sum()),
            "chains": n_chains,
            "resets": int(drop.sum()),
            "prefix_breaks": int(brk.sum()),
            "shared_stream_starts": int(((parent >= 0) & first[starts]).sum()) if n_chains else 0,
        }
    )
    return next_id


# ------------------------------------------------------------------------------------ kept ids


def _keep(frame: pl.DataFrame, ctx: I64, B: int) -> tuple[I64, I64, int, dict[str, Any]]:
    """Source hash ids of ``frame``'s rows at block size ``B``: (counts, flat ids, next free id, stats)."""
    import polars as pl

    n = frame.height
    lens = np.asarray(frame["hash_ids"].list.len().to_numpy(), dtype=np.int64)
    src_flat = np.asarray(frame["hash_ids"].explode().drop_nulls().to_numpy(), dtype=np.int64)
    if len(src_flat) != int(lens.sum()):
        raise UsageError("a request's hash_ids contain nulls")
    src_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=src_off[1:])
    sb = np.asarray(frame["src_block"].to_numpy(), dtype=np.int64)
    scope_s = frame["scope"] if "scope" in frame.columns else pl.Series("scope", [None] * n, pl.String)
    scope_df = pl.DataFrame({"scope": scope_s.fill_null("")})
    # scope codes in order of first appearance
    scope = np.asarray(
        scope_df.with_row_index()
        .with_columns(pl.col("index").min().over("scope").alias("first"))
        .select(pl.col("first").rank("dense").cast(pl.Int64) - 1)
        .to_series()
        .to_numpy(),
        dtype=np.int64,
    )
    want = -(-ctx // B)  # ceil
    counts = want.copy()
    out_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=out_off[1:])
    flat = np.full(int(out_off[-1]), -1, dtype=np.int64)
    next_id = 0
    n_scopes = int(scope.max()) + 1 if n else 0
    identity_scopes = 0
    split_scopes = 0
    for sc in range(n_scopes):
        rows = np.flatnonzero(scope == sc)
        identity = bool((sb[rows] == B).all())
        src_idx = _ranges(src_off[rows], lens[rows])
        sids = src_flat[src_idx]
        if identity and len(sids):
            if sids.min() < 0:
                identity = False
            else:
                # an id must stand for one size: (id, size) pairs unique per id
                k = _local_index(lens[rows])
                size = np.minimum(B, np.repeat(ctx[rows], lens[rows]) - k * B)
                valid = size > 0
                ids_v, size_v = sids[valid], size[valid]
                srt = np.argsort(ids_v, kind="stable")
                ids_v, size_v = ids_v[srt], size_v[srt]
                if bool(((ids_v[1:] == ids_v[:-1]) & (size_v[1:] != size_v[:-1])).any()):
                    identity = False
                    split_scopes += 1
        if identity:
            identity_scopes += 1
            take = np.minimum(lens[rows], want[rows])
            dst = _ranges(out_off[rows], take)
            flat[dst] = src_flat[_ranges(src_off[rows], take)] + next_id
            next_id += int(sids.max()) + 1 if len(sids) else 0
            continue
        # re-block: new block j ends at e = min((j+1)B, ctx); key = (source id holding token e-1, offset)
        j = _local_index(want[rows])
        rep_rows = np.repeat(rows, want[rows])
        e = np.minimum((j + 1) * B, ctx[rep_rows])
        b = sb[rep_rows]
        q = (e - 1) // b
        covered = q < lens[rep_rows]
        src_pos = src_off[rep_rows] + np.minimum(q, np.maximum(lens[rep_rows] - 1, 0))
        sid = np.where(covered, src_flat[np.minimum(src_pos, max(len(src_flat) - 1, 0))], 0)
        offset = e - q * b
        dst = out_off[rep_rows] + j
        if covered.any():
            keys = pl.DataFrame({"sid": sid[covered], "off": offset[covered]})
            rank = np.asarray(
                keys.select(pl.struct("sid", "off").rank("dense").cast(pl.Int64) - 1).to_series().to_numpy(),
                dtype=np.int64,
            )
            flat[dst[covered]] = next_id + rank
            next_id += int(rank.max()) + 1
    # blocks no source id covers (floor-rule tails, short id lists): ids of their own
    missing = flat < 0
    n_missing = int(missing.sum())
    flat[missing] = next_id + np.arange(n_missing, dtype=np.int64)
    next_id += n_missing
    stats = {
        "source_scopes": n_scopes,
        "source_scopes_kept_verbatim": identity_scopes,
        "source_scopes_split_two_sizes": split_scopes,
        "blocks_without_source_id": n_missing,
    }
    return counts, flat, next_id, stats


# ------------------------------------------------------------------------------------ statistics


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
