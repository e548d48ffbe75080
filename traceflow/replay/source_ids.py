"""Source hash ids kept: requests that arrive with prefix-block ids of their own
(docs/replay.md#prefix-blocks-hash_ids).

Source ids (Mooncake, kv-cache-tester, Bailian) are kept: at the source's block size they are
re-based into a per-scope range (the first scope keeps its numbers, so a Mooncake trace re-exports
byte-identical ids), a floor-rule source (kv-cache-tester) gets an own id for its unhashed tail, and
an id seen at two sizes is split. At another block size the ids are re-blocked: the new block ending
at token ``e`` is identified by (scope, the source id of the block holding token ``e − 1``, ``e``'s
offset in it); since a source id stands for its whole prefix, equal keys mean equal prefixes. Tokens
the source ids do not cover get ids of their own.

Sources that carry ids: Mooncake, kv-cache-tester and Bailian traces (``hash_ids`` and
``block_size`` columns of ``requests``; ``attributes.hash_scope`` names the scope an id is unique
in). :func:`traceflow.replay.prefix.derive` hands these rows here and derives the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from traceflow.errors import UsageError
from traceflow.replay.arrays import I64, local_index, ranges

if TYPE_CHECKING:
    import polars as pl


def keep_source_ids(frame: pl.DataFrame, ctx: I64, B: int) -> tuple[I64, I64, int, dict[str, Any]]:
    """Source hash ids of ``frame``'s rows at block size ``B``: (counts, flat ids, next free id, stats).

    Ids number from 0; ``ctx`` is each row's context. ``len(ids) == ceil(ctx / B)`` per row."""
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
        src_idx = ranges(src_off[rows], lens[rows])
        sids = src_flat[src_idx]
        if identity and len(sids):
            if sids.min() < 0:
                identity = False
            else:
                # an id must stand for one size: (id, size) pairs unique per id
                k = local_index(lens[rows])
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
            dst = ranges(out_off[rows], take)
            flat[dst] = src_flat[ranges(src_off[rows], take)] + next_id
            next_id += int(sids.max()) + 1 if len(sids) else 0
            continue
        # re-block: new block j ends at e = min((j+1)B, ctx); key = (source id holding token e-1, offset)
        j = local_index(want[rows])
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
