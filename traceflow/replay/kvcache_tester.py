"""The ``kvcache-tester`` export: one JSON per root session, in a directory.

The kv-cache-tester / WEKA format that AIPerf's ``weka_trace`` loader also reads: 64-token blocks by
default, ``len(hash_ids) == floor(in / 64)`` (the partial tail is not hashed), ids renumbered from 1
per file, ``t`` in seconds from the session start, ``think_time`` and ``api_time``, sub-agents as
``{"type": "subagent", ...}`` entries holding their own requests (``t`` relative to the entry).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from traceflow.errors import UsageError
from traceflow.replay.arrays import ranges
from traceflow.replay.writing import atomic_write

if TYPE_CHECKING:
    import polars as pl

    from traceflow.replay.hash_ids import PrefixPlan

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def write_kvcache_tester(frame: pl.DataFrame, plan: PrefixPlan, out: Path, speedup: float) -> dict[str, Any]:
    """One kv-cache-tester JSON per root session in the directory ``out``."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: the kvcache-tester export writes a directory, and this is a file")
    out.mkdir(parents=True, exist_ok=True)
    c = _Columns(frame, plan, speedup)
    roots: dict[str, list[int]] = {}
    skipped = 0
    for i in range(frame.height):
        sid = c.session[i]
        if sid is None:
            skipped += 1
            continue
        roots.setdefault(c.parent[i] or sid, []).append(i)
    if not roots:
        raise UsageError(
            "the kvcache-tester format is one file per session, and none of the selected requests has "
            "a session id (flat traces such as Mooncake or Azure have none); use mooncake or aiperf"
        )
    used_names: set[str] = set()
    requests_written = 0
    subagents_written = 0
    for root, members in roots.items():
        doc, subagents = _document(c, root, members)
        name = _UNSAFE.sub("_", root).strip("._") or "session"
        candidate = name
        k = 1
        while candidate in used_names:
            k += 1
            candidate = f"{name}-{k}"
        used_names.add(candidate)
        atomic_write(out / f"{candidate}.json", orjson.dumps(doc))
        requests_written += len(members)
        subagents_written += subagents
    return {
        "files": len(roots),
        "rows": requests_written,
        "subagents": subagents_written,
        "skipped_without_session": skipped,
    }


class _Columns:
    """The frame's columns as lists (a column the frame lacks reads as None), and each request's ids
    under the floor rule (the partial tail block dropped)."""

    def __init__(self, frame: pl.DataFrame, plan: PrefixPlan, speedup: float) -> None:
        n = frame.height
        cols = set(frame.columns)

        def col(name: str) -> list[Any]:
            return frame[name].to_list() if name in cols else [None] * n

        self.speedup = speedup
        self.block_size = plan.block_size
        self.ctx = plan.ctx
        offsets, self.flat = plan.ids(0, n)
        self.off: list[int] = offsets.tolist()
        self.keep: list[int] = np.minimum(np.diff(offsets), plan.ctx // plan.block_size).tolist()
        self.session = col("session_id")
        self.parent = col("parent_session_id")
        self.model = col("model")
        self.t_us = col("t_us")
        self.end_us = col("end_us")
        self.dur = col("duration_ms")
        self.ttft = col("ttft_ms")
        self.outp = col("out")
        self.think = col("think_time_s")
        self.stop = col("stop")
        self.in_types = col("input_types")
        self.out_types = col("output_types")
        self.sub_type = col("subagent_type")
        self.req_type = col("request_type")
        self.agent_id = col("agent_id")

    def models(self, rows: list[int]) -> list[str]:
        """The models of ``rows``, each once, in order of first use."""
        return list(dict.fromkeys(self.model[i] or "unknown" for i in rows))

    def end(self, i: int) -> int:
        """Request ``i``'s end (its start where the end is unknown)."""
        end: int = self.end_us[i] if self.end_us[i] is not None else self.t_us[i]
        return end


def _document(c: _Columns, root: str, members: list[int]) -> tuple[dict[str, Any], int]:
    """The file of one root session, and how many sub-agents it holds."""
    main = [i for i in members if c.parent[i] is None]
    subs: dict[str, list[int]] = {}
    for i in members:
        if c.parent[i] is not None:
            subs.setdefault(c.session[i], []).append(i)
    # entries in time order: parent requests and sub-agent blocks (at their first request)
    entries: list[tuple[int, int, list[int]]] = [(c.t_us[i], i, [i]) for i in main]
    entries += [(c.t_us[rows[0]], rows[0], rows) for rows in subs.values()]
    entries.sort(key=lambda e: (e[0], e[1]))
    file_ids = _renumber(c, [i for _, _, rows in entries for i in rows])
    t0 = min(c.t_us[i] for i in members)
    prev_end: dict[str, int] = {}
    reqs: list[dict[str, Any]] = []
    tokens = {"parent": [0, 0], "sub": [0, 0]}
    for _, first, rows in entries:
        if c.parent[first] is None:
            reqs.append(_request(c, first, t0, prev_end, file_ids[first]))
            tokens["parent"][0] += int(c.ctx[first])
            tokens["parent"][1] += int(c.outp[first])
            continue
        reqs.append(_subagent(c, root, rows, t0, file_ids))
        for i in rows:
            tokens["sub"][0] += int(c.ctx[i])
            tokens["sub"][1] += int(c.outp[i])
    doc = {
        "id": root,
        "models": c.models([first for _, first, _ in entries if c.parent[first] is None]) or ["unknown"],
        "block_size": c.block_size,
        "hash_id_scope": "local",
        "tool_tokens": 0,
        "system_tokens": 0,
        "totals": {
            "parent_tokens": {"input": tokens["parent"][0], "output": tokens["parent"][1]},
            "subagent_tokens": {"input": tokens["sub"][0], "output": tokens["sub"][1]},
            "combined_tokens": {
                "input": tokens["parent"][0] + tokens["sub"][0],
                "output": tokens["parent"][1] + tokens["sub"][1],
            },
            "subagent_count": len(subs),
        },
        "requests": reqs,
    }
    return doc, len(subs)


def _subagent(
    c: _Columns, root: str, rows: list[int], t0: int, file_ids: dict[int, list[int]]
) -> dict[str, Any]:
    """A sub-agent's entry: its requests, ``t`` relative to the entry's start."""
    st = c.t_us[rows[0]]
    sub_prev: dict[str, int] = {}
    inner = [_request(c, i, st, sub_prev, file_ids[i]) for i in rows]
    last = rows[-1]
    aid = c.agent_id[rows[0]] or str(c.session[rows[0]])
    if aid.startswith(f"{root}/"):
        aid = aid[len(root) + 1 :]
    return {
        "t": round((st - t0) / 1e6 / c.speedup, 3),
        "type": "subagent",
        "agent_id": aid,
        "subagent_type": c.sub_type[rows[0]] or "unknown",
        "duration_ms": round((c.end(last) - st) / 1000 / c.speedup),
        "total_tokens": int(c.ctx[last]) + int(c.outp[last]),
        "tool_use_count": sum(1 for i in rows if c.stop[i] == "tool_use"),
        "status": "completed",
        "requests": inner,
        "models": c.models(rows),
        "tool_tokens": 0,
        "system_tokens": 0,
    }


def _request(c: _Columns, i: int, t0_us: int, prev_end: dict[str, int], ids: list[int]) -> dict[str, Any]:
    """Request ``i``: ``t`` from ``t0_us``; think time from the attribute, else from the end of the
    stream's previous request (``prev_end``, updated)."""
    key = f"{c.session[i]}\x1f{c.model[i]}"
    think = c.think[i]
    if think is not None:
        think_s: float | None = float(think) / c.speedup
    elif key in prev_end:
        think_s = max((c.t_us[i] - prev_end[key]) / 1e6, 0.0) / c.speedup
    else:
        think_s = 0.0
    prev_end[key] = c.end(i)
    streamed = c.req_type[i] == "s" or (c.req_type[i] is None and c.ttft[i] is not None)
    rec: dict[str, Any] = {
        "t": round((c.t_us[i] - t0_us) / 1e6 / c.speedup, 3),
        "type": "s" if streamed else "n",
        "model": c.model[i] or "unknown",
        "in": int(c.ctx[i]),
        "out": int(c.outp[i]),
        "hash_ids": ids,
        "input_types": _json_list(c.in_types[i]),
        "output_types": _json_list(c.out_types[i]),
        "stop": c.stop[i] or "",
        "api_time": round(c.dur[i] / 1000.0, 3) if c.dur[i] is not None else None,
        "think_time": round(think_s, 3) if think_s is not None else None,
    }
    if streamed:
        rec["ttft"] = round(c.ttft[i] / 1000.0, 3) if c.ttft[i] is not None else None
    return rec


def _renumber(c: _Columns, rows: list[int]) -> dict[int, list[int]]:
    """Ids of one file's ``rows`` (in file order) renumbered 1, 2, ... in order of first appearance."""
    counts = np.array([c.keep[i] for i in rows], dtype=np.int64)
    starts = np.array([c.off[i] for i in rows], dtype=np.int64)
    ids = c.flat[ranges(starts, counts)]
    if len(ids):
        _, first_idx, inv = np.unique(ids, return_index=True, return_inverse=True)
        rank = np.empty(len(first_idx), dtype=np.int64)
        rank[np.argsort(first_idx, kind="stable")] = np.arange(1, len(first_idx) + 1)
        ids = rank[inv.ravel()]
    values = ids.tolist()
    out: dict[int, list[int]] = {}
    pos = 0
    for i, n in zip(rows, counts.tolist(), strict=True):
        out[i] = values[pos : pos + n]
        pos += n
    return out


def _json_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return [str(value)]
    return [str(v) for v in parsed] if isinstance(parsed, list) else [str(parsed)]
