"""Block traces: requests in arrival order, each an ordered list of prefix-block ids (pure but for files).

A :class:`BlockTrace` is what the cache simulator (:mod:`traceflow.kv.simulate`) replays. Block ids
follow Mooncake's ``hash_ids``: block ``k`` of a request stands for tokens ``[k·B, (k+1)·B)`` and
everything before it; the last block may be partial. Traces come from a Mooncake JSONL file
(:func:`read_mooncake`), from per-request token counts (:func:`chains_from_counts`) or from the
synthetic workload in :mod:`traceflow.kv.synthetic`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import orjson

from traceflow.errors import UsageError

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


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
    """Prefix blocks for traffic that carries token counts but no hash ids
    (docs/sizing-formulas.md#from-token-counts-to-blocks).

    Each session is one append-only chain: full block ``k`` of a session is the same block on every
    request until the context shrinks (a compaction or reset starts a new chain); a partial last block
    gets an id of its own.
    """
    n = len(times_s)
    times = np.asarray(times_s, dtype=np.float64)
    ctx = np.asarray(context_tokens, dtype=np.int64)
    order = np.argsort(times, kind="stable")  # time order, ties in the order given
    chain_of: dict[str, int] = {}
    last_len: dict[str, int] = {}
    chains = np.empty(n, dtype=np.int64)  # each request's chain, in time order
    next_chain = 0
    for j, i in enumerate(order.tolist()):
        s, c = sessions[i], int(ctx[i])
        if s not in chain_of or c < last_len[s]:
            chain_of[s] = next_chain
            next_chain += 1
        last_len[s] = c
        chains[j] = chain_of[s]
    full = ctx[order] // block_size
    partial = ctx[order] % block_size > 0
    # full block k of a chain is one id, numbered by first use (request after request, k ascending)
    k = np.arange(int(full.sum()), dtype=np.int64) - np.repeat(np.cumsum(full) - full, full)
    key = np.repeat(chains, full) * (int(full.max(initial=0)) + 1) + k
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    # each request's blocks: its full blocks, then its partial last block (an id of its own: -1 - i)
    offsets = np.concatenate(([0], np.cumsum(full + partial))).astype(np.int64)
    blocks = np.empty(int(offsets[-1]), dtype=np.int64)
    blocks[np.repeat(offsets[:-1], full) + k] = rank[inverse.reshape(-1)]
    has = np.flatnonzero(partial)
    blocks[offsets[has] + full[has]] = -1 - order[has]
    session = tuple(sessions[i] for i in order.tolist())
    return BlockTrace(times[order], ctx[order], offsets, blocks, int(block_size), session)


def iter_block_accesses(trace: BlockTrace) -> Iterator[int]:
    """The flat block-access sequence (what libCacheSim replays)."""
    yield from trace.blocks.tolist()
