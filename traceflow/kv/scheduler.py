"""Step simulation of one serving box (:class:`~traceflow.kv.serving.ServingSpec`) under closed-loop load.

Pure. The model, step by step (vLLM V1 with an LMCache-style offload connector):

* **Sessions, closed loop.** A session's first request arrives at its trace time; each later one
  arrives its think time (from the workload) after the previous answer's last token. A slow box
  therefore sees fewer requests, as real agents wait for their answers.
* **Queue and admission.** Arrivals wait in a FIFO queue. The head is admitted when fewer than
  ``max_num_seqs`` requests run and the GPU KV pool (:attr:`ServingSpec.kv_bytes`, in blocks of the
  trace's block size) has room for its context and answer; cached blocks that no running request
  uses are evicted LRU to make room (vLLM's prefix cache).
* **Lookup.** The longest prefix of the request's blocks found in the GPU pool, then in the offload
  tiers top first, is reused; the rest is computed. Blocks found in an offload tier are loaded
  synchronously in the step that admits the request (LMCache's default retrieval):
  ``load = bytes / (gpus × kv_load_bytes_per_s_per_gpu)``, plus, for a tier on a medium (flash → RAM →
  GPU), its read first: :func:`~traceflow.kv.serving.tier_read_seconds_per_byte` (the ranks' serial
  per-chunk file reads, ``stream_read`` each, under the medium's ``read`` ceiling).
* **Steps (continuous batching, chunked prefill).** Each step runs one token of every decoding request
  and prefill chunks of the others up to ``max_num_batched_tokens``. Step time =
  ``max(FLOPs / (gpus × prefill_flops_per_gpu), bytes / (gpus × hbm_bytes_per_s)) + loads``, FLOPs by
  :func:`traceflow.kv.sizing.prefill_flops` (linear + causal attention over the cached prefix), bytes =
  the MoE weights the step's tokens route to + the KV the decoding requests read.
* **Stores.** The KV of computed blocks is written through to every offload tier when the prefill
  ends, LRU per tier. A tier with ``write`` bandwidth drains a write backlog; a store that would push
  the backlog past ``staging`` is dropped.
* **TTFT** = end of the step that finishes the prefill − arrival (queueing + loading + prefill);
  the first output token comes with it.

Counts: total throughput = input tokens (cached included) of prefills finished + output tokens, per
second of the bucket.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceflow.kv.serving import ServingSpec, check_spec, tier_read_seconds_per_byte
from traceflow.kv.sizing import prefill_flops
from traceflow.kv.synthetic import SessionTurns


@dataclass(slots=True)
class _Req:
    idx: int
    issue_s: float
    n_in: int
    n_out: int
    cached: int = 0  # prefix tokens reused (GPU + loaded)
    done_in: int = 0  # prefix tokens ready (cached + computed so far)
    left_out: int = 0
    blocks_held: int = 0
    first_new: int = 0  # index of the first computed block
    first_token_s: float = math.nan


class _Tier:
    __slots__ = ("backlog", "cap", "dropped_bytes", "last_s", "lru", "read_bytes", "spec", "written_bytes")

    def __init__(self, spec: Any, block_bytes: int) -> None:
        self.spec = spec
        self.cap = int(spec.capacity_bytes // block_bytes) if math.isfinite(spec.capacity_bytes) else 2**62
        self.lru: OrderedDict[int, int] = OrderedDict()
        self.backlog = 0.0
        self.last_s = 0.0
        self.read_bytes = 0.0
        self.written_bytes = 0.0
        self.dropped_bytes = 0.0

    def store(self, block: int, tokens: int, nbytes: float, now: float) -> None:
        if block in self.lru:
            self.lru.move_to_end(block)
            return
        bw = self.spec.write_bytes_per_s
        if math.isfinite(bw):
            self.backlog = max(0.0, self.backlog - (now - self.last_s) * bw)
            self.last_s = now
            if self.backlog + nbytes > self.spec.staging_bytes:
                self.dropped_bytes += nbytes
                return
            self.backlog += nbytes
        self.lru[block] = tokens
        self.written_bytes += nbytes
        if len(self.lru) > self.cap:
            self.lru.popitem(last=False)


class _Buckets:
    def __init__(self, width: float, n_tiers: int) -> None:
        self.width = width
        self.n_tiers = n_tiers
        self.rows: list[dict[str, Any]] = []

    def row(self, t: float) -> dict[str, Any]:
        i = int(t // self.width)
        while len(self.rows) <= i:
            self.rows.append(
                {
                    "in": 0,
                    "out": 0,
                    "ttft": [],
                    "queue": [],
                    "read": [0.0] * self.n_tiers,
                    "write": [0.0] * self.n_tiers,
                    "resident": [0.0] * (self.n_tiers + 1),
                }
            )
        return self.rows[i]


def run(
    spec: ServingSpec, turns: SessionTurns, bucket_s: float = 60.0, keep_requests: bool = False
) -> dict[str, Any]:
    """Serve ``turns`` on ``spec``; the report (keys documented in docs/sizing.md, ``simulate --serving``).

    ``keep_requests`` adds ``requests[]`` (per request: arrival, admission, TTFT, cached tokens; NaN
    where the run ended first).
    """
    check_spec(spec, f"--serving {spec.name}")
    trace = turns.trace
    kv = spec.kv()
    b = kv.per_token_bytes
    bs = trace.block_size
    block_bytes = bs * b
    pool = int(spec.kv_bytes // block_bytes)
    tiers = [_Tier(t, block_bytes) for t in spec.tiers]
    load_rate = spec.kv_load_rate()
    per_load_byte = [1.0 / load_rate + tier_read_seconds_per_byte(t, spec.gpus) for t in spec.tiers]
    c = find_cfg(spec)
    layers, heads, hd = c
    blocks = trace.blocks
    offsets = trace.offsets
    n_req = trace.n_requests
    # sessions: their requests in order
    sess = turns.session
    order = np.lexsort((np.arange(n_req), sess))
    nxt = np.full(n_req, -1, dtype=np.int64)
    same = sess[order][1:] == sess[order][:-1]
    nxt[order[:-1][same]] = order[1:][same]
    first = np.ones(n_req, dtype=bool)
    first[order[1:][same]] = False
    out_tok = turns.output_tokens.tolist()
    think = turns.think_s.tolist()
    n_in_all = trace.input_tokens.tolist()
    nxt_l = nxt.tolist()

    arrivals: list[tuple[float, int]] = [(float(trace.time_s[i]), int(i)) for i in np.flatnonzero(first)]
    heapq.heapify(arrivals)
    waiting: list[_Req] = []  # FIFO (index of head kept separately)
    head = 0
    prefilling: list[_Req] = []
    decoding: list[_Req] = []
    pinned: dict[int, int] = {}
    cached: OrderedDict[int, None] = OrderedDict()  # GPU blocks no running request holds (LRU)
    answers = 0  # blocks reserved for the running requests' answers
    # blocks held by running requests: each distinct context block once (``pinned``, however many running
    # requests share it) + the answers' blocks
    rejected = np.zeros(n_req, dtype=bool)
    issue = np.full(n_req, np.nan)
    ttft = np.full(n_req, np.nan)
    cached_tok = np.zeros(n_req, dtype=np.int64)
    loaded_tok = np.zeros(n_req, dtype=np.int64)
    finish = np.full(n_req, np.nan)
    admitted = np.full(n_req, np.nan)
    buckets = _Buckets(bucket_s, len(tiers))
    now = 0.0
    steps = 0
    busy_s = 0.0
    gpu_full_s: float | None = None
    tier_full_s: list[float | None] = [None] * len(tiers)
    end_s = float(trace.time_s[-1]) if n_req else 0.0

    def admit(r: _Req) -> float:
        """Look the request up, pin its blocks, return the load time it adds to this step."""
        nonlocal answers
        lo, hi = int(offsets[r.idx]), int(offsets[r.idx + 1])
        ids = blocks[lo:hi].tolist()
        n_in = r.n_in
        load_s = 0.0
        k = 0
        hit_tok = 0
        ld = 0
        for k in range(len(ids)):
            blk = ids[k]
            tok = min(bs, n_in - k * bs)
            if blk in pinned:
                pinned[blk] += 1
            elif blk in cached:
                del cached[blk]
                pinned[blk] = 1
            else:
                j = next((j for j, t in enumerate(tiers) if blk in t.lru), -1)
                if j < 0:
                    break
                tiers[j].lru.move_to_end(blk)
                nbytes = tok * b
                tiers[j].read_bytes += nbytes
                buckets.row(now)["read"][j] += nbytes
                load_s += nbytes * per_load_byte[j]
                ld += tok
                pinned[blk] = 1
            hit_tok += tok
        else:
            k = len(ids)
        if hit_tok >= n_in:  # the last token is always computed
            hit_tok = n_in - 1
        for blk in ids[k:]:
            pinned[blk] = pinned.get(blk, 0) + 1
        r.first_new = k
        r.cached = hit_tok
        r.done_in = hit_tok
        r.blocks_held = -(-r.n_out // bs)
        answers += r.blocks_held
        cached_tok[r.idx] = hit_tok
        loaded_tok[r.idx] = ld
        evict()
        return load_s

    def evict() -> None:
        nonlocal gpu_full_s
        # the pool holds the running requests' blocks plus the cached ones
        over = len(cached) + len(pinned) + answers - pool
        if over > 0 and gpu_full_s is None:
            gpu_full_s = now
        for _ in range(max(over, 0)):
            if not cached:
                break
            cached.popitem(last=False)

    def release(r: _Req) -> None:
        nonlocal answers
        lo, hi = int(offsets[r.idx]), int(offsets[r.idx + 1])
        for blk in blocks[lo:hi].tolist():
            n = pinned[blk] - 1
            if n:
                pinned[blk] = n
            else:
                del pinned[blk]
                cached[blk] = None
        answers -= r.blocks_held
        evict()

    def store(r: _Req, t: float) -> None:
        if not tiers:
            return
        lo, hi = int(offsets[r.idx]), int(offsets[r.idx + 1])
        row = buckets.row(t)
        for k, blk in enumerate(blocks[lo + r.first_new : hi].tolist(), start=r.first_new):
            tok = min(bs, r.n_in - k * bs)
            nbytes = tok * b
            for j, tier in enumerate(tiers):
                before = tier.written_bytes
                tier.store(blk, tok, nbytes, t)
                row["write"][j] += tier.written_bytes - before
                if tier_full_s[j] is None and len(tier.lru) >= tier.cap:
                    tier_full_s[j] = t

    while (arrivals or head < len(waiting) or prefilling or decoding) and now < end_s:
        while arrivals and arrivals[0][0] <= now:
            t, i = heapq.heappop(arrivals)
            issue[i] = t
            waiting.append(_Req(i, t, n_in_all[i], max(int(out_tok[i]), 1)))
        if head >= len(waiting) and not prefilling and not decoding:
            now = arrivals[0][0] if arrivals else end_s
            continue
        budget = spec.max_num_batched_tokens - len(decoding)
        load_s = 0.0
        chunks: list[tuple[_Req, int]] = []
        for r in prefilling:
            if budget <= 0:
                break
            n = min(r.n_in - r.done_in, budget)
            chunks.append((r, n))
            budget -= n
        running = len(prefilling) + len(decoding)
        while budget > 0 and head < len(waiting) and running < spec.max_num_seqs:
            r = waiting[head]
            lo, hi = int(offsets[r.idx]), int(offsets[r.idx + 1])
            ids = blocks[lo:hi].tolist()
            out_blocks = -(-r.n_out // bs)
            if len(ids) + out_blocks > pool:
                # larger than the whole pool: it can never run (vLLM refuses a request past its capacity)
                head += 1
                rejected[r.idx] = True
                continue
            need = sum(1 for blk in ids if blk not in pinned) + out_blocks
            if len(pinned) + answers + need > pool:
                break  # no room until a running request ends (cached blocks are evicted as needed)
            head += 1
            admitted[r.idx] = now
            load_s += admit(r)
            prefilling.append(r)
            running += 1
            n = min(r.n_in - r.done_in, budget)
            chunks.append((r, n))
            budget -= n
        if head > 4096:
            waiting = waiting[head:]
            head = 0
        step = (
            step_seconds(
                spec,
                [(n, r.done_in) for r, n in chunks],
                [r.n_in + (r.n_out - r.left_out) for r in decoding],
                (layers, heads, hd),
            )
            + load_s
        )
        # fast-forward pure decode stretches (nothing to prefill, the queue head cannot move)
        repeat = 1
        if not chunks and decoding:
            horizon = arrivals[0][0] if arrivals else math.inf
            limit = min(r.left_out for r in decoding)
            edge = (math.floor(now / bucket_s) + 1) * bucket_s
            gap = min(horizon, edge) - now
            repeat = max(1, min(limit, int(gap / step) if step > 0 else limit))
        now += step * repeat
        busy_s += step * repeat
        steps += repeat
        row = buckets.row(now - 1e-9)
        row["queue"].append(len(waiting) - head)
        row["resident"][0] = (len(cached) + len(pinned) + answers) * block_bytes
        for j, tier in enumerate(tiers):
            row["resident"][j + 1] = len(tier.lru) * block_bytes
        still: list[_Req] = []

        def advance(r: _Req, now: float = now, still: list[_Req] = still) -> None:
            """Finish ``r`` (releasing it and scheduling its session's next turn) or keep decoding."""
            if r.left_out <= 0:
                finish[r.idx] = now
                release(r)
                n = nxt_l[r.idx]
                if n >= 0:
                    heapq.heappush(arrivals, (now + think[r.idx], n))
            else:
                still.append(r)

        for r in decoding:
            r.left_out -= repeat
            row["out"] += repeat
            advance(r)
        done_prefill = []
        for r, n in chunks:
            r.done_in += n
            if r.done_in >= r.n_in:
                done_prefill.append(r)
        for r in done_prefill:
            prefilling.remove(r)
            ttft[r.idx] = now - r.issue_s
            row["in"] += r.n_in
            row["out"] += 1
            row["ttft"].append(now - r.issue_s)
            store(r, now)
            r.left_out = r.n_out - 1
            advance(r)
        decoding = still
    report = _report(
        spec,
        turns,
        buckets,
        issue,
        admitted,
        ttft,
        cached_tok,
        loaded_tok,
        finish,
        tiers,
        pool,
        block_bytes,
        steps,
        busy_s,
        gpu_full_s,
        tier_full_s,
        end_s,
        rejected,
    )
    if keep_requests:
        report["requests"] = {
            "arrival_s": issue.tolist(),
            "admitted_s": admitted.tolist(),
            "ttft_s": ttft.tolist(),
            "cached_tokens": cached_tok.tolist(),
            "input_tokens": trace.input_tokens.tolist(),
        }
    return report


def step_seconds(
    spec: ServingSpec,
    chunks: list[tuple[int, int]],
    decode_contexts: list[int],
    cfg: tuple[int, int, int] | None = None,
) -> float:
    """One engine step of ``spec`` without loads: prefill ``chunks`` (new tokens, tokens before them) and
    one token for each decoding request (its context length).

    ``max(FLOPs / (gpus × prefill_flops_per_gpu), bytes / (gpus × hbm)) + step_overhead_s``; FLOPs: the
    chunks' :func:`~traceflow.kv.sizing.prefill_flops` + ``2·N_active + 4·L·heads·d·ctx`` per decoder;
    bytes: the MoE weights the step's tokens route to + the KV the decoders read.
    """
    layers, heads, hd = cfg if cfg is not None else find_cfg(spec)
    n_active = spec.active_params
    flops = sum(prefill_flops(n_active, layers, heads, hd, hd, n, p) for n, p in chunks)
    flops += sum(2 * n_active + 4.0 * layers * heads * hd * ctx for ctx in decode_contexts)
    kv_read = sum(decode_contexts) * spec.kv().per_token_bytes
    n_tok = len(decode_contexts) + sum(n for n, _ in chunks)
    mem = spec.weight_bytes_touched_per_gpu(n_tok) * spec.gpus + kv_read
    compute = flops / (spec.gpus * spec.prefill_flops_per_gpu)
    return max(compute, mem / (spec.gpus * spec.hbm_bytes_per_s)) + spec.step_overhead_s


#: Peak throughput is the best moving average over this window (one-minute buckets are noisy).
PEAK_WINDOW_S = 300.0


def find_cfg(spec: ServingSpec) -> tuple[int, int, int]:
    """Layers, query heads and head size of the model (for attention FLOPs)."""
    from traceflow.kv.geometry import head_dim, num_layers, text_config
    from traceflow.kv.models import find_model

    c = text_config(find_model(spec.model).config)
    return num_layers(c), int(c["num_attention_heads"]), head_dim(c)


def _mean_after(per_minute: list[dict[str, Any]], start_s: float) -> float | None:
    """Mean throughput of the buckets that start at or after ``start_s`` (None when the run is shorter)."""
    after = [r["throughput_tok_s"] for r in per_minute if r["start_s"] >= start_s]
    return float(np.mean(after)) if after else None


def _q(x: list[float] | np.ndarray, q: float) -> float | None:
    return float(np.quantile(np.asarray(x), q)) if len(x) else None


def _report(
    spec: ServingSpec,
    turns: SessionTurns,
    buckets: _Buckets,
    issue: np.ndarray,
    admitted: np.ndarray,
    ttft: np.ndarray,
    cached_tok: np.ndarray,
    loaded_tok: np.ndarray,
    finish: np.ndarray,
    tiers: list[_Tier],
    pool: int,
    block_bytes: int,
    steps: int,
    busy_s: float,
    gpu_full_s: float | None,
    tier_full_s: list[float | None],
    end_s: float,
    rejected: np.ndarray,
) -> dict[str, Any]:
    w = buckets.width
    trace = turns.trace
    served = ~np.isnan(ttft)
    names = ["gpu"] + [t.spec.name for t in tiers]
    per_minute = []
    last_resident = [0.0] * len(names)
    n_rows = min(len(buckets.rows), math.ceil(end_s / w) if end_s > 0 else len(buckets.rows))
    for i, r in enumerate(buckets.rows[:n_rows]):
        res = r["resident"]
        if any(res):
            last_resident = list(res)
        row: dict[str, Any] = {
            "minute": i,
            "start_s": i * w,
            "throughput_tok_s": (r["in"] + r["out"]) / w,
            "input_tok_s": r["in"] / w,
            "output_tok_s": r["out"] / w,
            "requests": len(r["ttft"]),
            "ttft_p50_s": _q(r["ttft"], 0.5),
            "ttft_p99_s": _q(r["ttft"], 0.99),
            "queue_length": float(np.mean(r["queue"])) if r["queue"] else 0.0,
        }
        for j, name in enumerate(names):
            row[f"{name}_resident_bytes"] = last_resident[j]
        for j, t in enumerate(tiers):
            row[f"{t.spec.name}_read_bytes_per_s"] = r["read"][j] / w
            row[f"{t.spec.name}_write_bytes_per_s"] = r["write"][j] / w
        per_minute.append(row)
    thr = np.array([r["throughput_tok_s"] for r in per_minute]) if per_minute else np.zeros(1)
    span = max(1, min(len(thr), round(PEAK_WINDOW_S / w)))
    peak = float(np.convolve(thr, np.ones(span) / span, mode="valid").max())
    crossover = tier_full_s[0] if tiers else gpu_full_s
    tail = max(1, round(900 / w))
    after = [r["throughput_tok_s"] for r in per_minute if crossover is not None and r["start_s"] >= crossover]
    resumed = turns.resumed & served
    # a resumed turn that arrived but got no first token before the run ended waited at least until the end
    stuck = turns.resumed & ~served & ~np.isnan(issue)
    rt = ttft[resumed]
    worst_wait = float(
        max(rt.max() if len(rt) else 0.0, (end_s - issue[stuck]).max() if stuck.any() else 0.0)
    )
    service = ttft - (admitted - issue)  # TTFT without the queue wait: load + prefill
    rs = service[resumed]
    ti = ttft[served]
    worst_i = int(np.flatnonzero(resumed)[np.argmax(rt)]) if len(rt) else None
    io_total = sum(r["in"] for r in buckets.rows) + sum(r["out"] for r in buckets.rows)
    tier_rows = []
    for j, t in enumerate(tiers):
        reads = [r[f"{t.spec.name}_read_bytes_per_s"] for r in per_minute]
        writes = [r[f"{t.spec.name}_write_bytes_per_s"] for r in per_minute]
        tier_rows.append(
            {
                "name": t.spec.name,
                "kind": t.spec.kind,
                "capacity_bytes": t.spec.capacity_bytes,
                "capacity_blocks": t.cap,
                "full_at_s": tier_full_s[j],
                "read_bytes": t.read_bytes,
                "written_bytes": t.written_bytes,
                "dropped_bytes": t.dropped_bytes,
                "peak_read_bytes_per_s": max(reads) if reads else 0.0,
                "peak_write_bytes_per_s": max(writes) if writes else 0.0,
                "mean_write_bytes_per_s": t.written_bytes / end_s if end_s else 0.0,
            }
        )
    return {
        "serving": spec.summary(),
        "requests_offered": trace.n_requests,
        "requests_served": int(served.sum()),
        "served_share": float(served.sum() / trace.n_requests) if trace.n_requests else 0.0,
        "requests_rejected": int(rejected.sum()),
        "requests_finished": int((~np.isnan(finish)).sum()),
        "duration_s": end_s,
        "steps": steps,
        "busy_s": busy_s,
        "gpu_pool_blocks": pool,
        "gpu_full_at_s": gpu_full_s,
        "crossover_s": crossover,
        "input_tokens_served": int(trace.input_tokens[served].sum()),
        "cached_tokens": int(cached_tok[served].sum()),
        "loaded_tokens": int(loaded_tok[served].sum()),
        "computed_tokens": int((trace.input_tokens[served] - cached_tok[served]).sum()),
        "output_tokens": int(sum(r["out"] for r in buckets.rows)),
        "tokens_total": int(io_total),
        "throughput_mean_tok_s": float(thr.mean()),
        "throughput_peak_tok_s": peak,
        "throughput_post_crossover_tok_s": float(np.mean(after)) if after else None,
        "throughput_final_tok_s": float(thr[-tail:].mean()),
        "throughput_after_40min_tok_s": _mean_after(per_minute, 2_400.0),
        "throughput_after_80min_tok_s": _mean_after(per_minute, 4_800.0),
        "output_peak_tok_s": max((r["output_tok_s"] for r in per_minute), default=0.0),
        "output_final_tok_s": float(np.mean([r["output_tok_s"] for r in per_minute[-tail:]]))
        if per_minute
        else 0.0,
        "ttft_p50_s": _q(ti, 0.5),
        "ttft_p99_s": _q(ti, 0.99),
        "resumed_requests": int(resumed.sum()),
        "resumed_ttft_p50_s": _q(rt, 0.5),
        "resumed_ttft_max_s": float(rt.max()) if len(rt) else None,
        "resumed_unserved": int(stuck.sum()),
        "resumed_worst_wait_s": worst_wait if (len(rt) or stuck.any()) else None,
        "resumed_service_p50_s": _q(rs, 0.5),
        "resumed_service_max_s": float(rs.max()) if len(rs) else None,
        "queue_wait_p50_s": _q((admitted - issue)[served], 0.5),
        "worst_resumed": None
        if worst_i is None
        else {
            "request": worst_i,
            "session": trace.session[worst_i] if trace.session is not None else None,
            "arrival_s": float(issue[worst_i]),
            "input_tokens": int(trace.input_tokens[worst_i]),
            "cached_tokens": int(cached_tok[worst_i]),
            "loaded_tokens": int(loaded_tok[worst_i]),
            "queue_wait_s": float(admitted[worst_i] - issue[worst_i]),
            "ttft_s": float(ttft[worst_i]),
        },
        "tiers": tier_rows,
        "per_minute": per_minute,
    }
