"""What the cross-engine conformance suite shares: a synthetic lake with duplicates and mixed schemas,
and the comparison of two engines' frames (counts, integers and times exact, floats to 1e-12 relative)."""

from __future__ import annotations

import datetime as dt
import math
import random
from pathlib import Path
from typing import Any

import polars as pl

from traceflow.schema import EVENTS, REQUESTS
from traceflow.store.lake import Lake

#: Columns whose values are engine-specific hashes (64-bit ``hash`` in DuckDB, ``xxhash64`` in Spark):
#: keys inside a query, never compared across engines.
HASHED = ("root_key", "prompt_key", "prev_prompt_key", "stream_key")

#: Relative tolerance for floats (sums of floats and means differ in summation order, ~1e-15).
REL = 1e-12

#: The columns an "older" collector did not write yet (they read as NULL).
OLD_MISSING = (
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "cost_usd",
    "hash_ids",
    "block_size",
    "ttft_ms",
)

_T0 = dt.datetime(2026, 3, 1, 22, 0, tzinfo=dt.UTC)  # near midnight: sessions cross UTC days


def _write_old(lake: Lake, table: str, rows: list[dict[str, Any]], missing: tuple[str, ...]) -> None:
    """Rows written the way an older schema did: without ``missing``, one file per partition,
    published as the lake publishes (a local directory or an ``s3://`` lake)."""
    spec = {"requests": REQUESTS, "events": EVENTS}[table]
    schema = {c: t for c, t in spec.schema.items() if c not in missing}
    frame = pl.DataFrame(
        [{k: v for k, v in r.items() if k in schema} for r in rows], schema=schema, orient="row"
    )
    key = "started_at" if table == "requests" else "timestamp"
    for (day,), part in frame.with_columns(pl.col(key).dt.strftime("%Y-%m-%d").alias("__dt")).group_by(
        "__dt", maintain_order=True
    ):
        lake.ensure()
        staged = lake.staging / f"0-old-{random.getrandbits(32):08x}.parquet"
        part.drop("__dt").write_parquet(staged)
        lake.publish([(staged, f"{table}/dt={day}")])


def synthetic_lake(root: str | Path, sessions: int = 120, seed: int = 7) -> Lake:
    """A lake with what the engines must agree on: sub-agents, requests without a session or a
    prompt id, failed (zero-token) requests, gaps from 0 to days across UTC midnight, compaction events,
    and duplicates: copies in an older schema that are less complete (must lose) and newer copies
    (must win), in other files and other partitions."""
    rng = random.Random(seed)
    lake = Lake(root)
    ingested = _T0 + dt.timedelta(days=10)
    requests: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    seq = 0
    for s in range(sessions):
        sid = f"s{s:04d}" if s % 17 else None  # a few requests stand alone
        t = _T0 + dt.timedelta(seconds=rng.uniform(0, 4 * 3600))
        context = rng.randint(1_000, 20_000)
        model = rng.choice(
            ["claude-sonnet-4-5", "claude-haiku-4-5", "gpt-5", None if s % 23 == 0 else "gpt-5"]
        )
        has_prompts = s % 5 != 0
        prompt = 0
        streams = [(sid, None)] + ([(f"s{s:04d}-sub{k}", sid) for k in range(s % 3)] if sid else [])
        for stream_sid, parent in streams:
            st = t + dt.timedelta(seconds=rng.uniform(0, 60))
            for _ in range(rng.randint(1, 25) if stream_sid else 1):
                gap = rng.choice(
                    [0.0, 0.05, rng.expovariate(1 / 8), rng.expovariate(1 / 400), 4000.0, 90000.0]
                )
                st += dt.timedelta(seconds=gap)
                dur = dt.timedelta(milliseconds=rng.randint(200, 60_000))
                if rng.random() < 0.3:
                    prompt += 1
                if rng.random() < 0.08:
                    context = max(500, context // 3)  # a compaction
                    if stream_sid and rng.random() < 0.5:
                        events.append(
                            {
                                "event_id": f"ev-{len(events)}",
                                "source": "synthetic",
                                "agent": "claude-code",
                                "session_id": stream_sid,
                                "parent_session_id": parent,
                                "name": "compaction",
                                "timestamp": st - dt.timedelta(milliseconds=1),
                                "attributes": "{}",
                                "seq": len(events),
                                "ingested_at": ingested,
                            }
                        )
                context += rng.randint(0, 4_000)
                failed = rng.random() < 0.03
                read = 0 if failed else rng.randint(0, context)
                write = 0 if failed else context - read - rng.randint(0, min(300, context - read))
                w1h = rng.choice([0, write, write // 2]) if write else 0
                seq += 1
                requests.append(
                    {
                        "event_id": f"r-{seq}",
                        "source": "synthetic",
                        "agent": "claude-code" if s % 2 else "codex",
                        "agent_version": "1.0",
                        "user_id": f"u{s % 7}",
                        "session_id": stream_sid,
                        "parent_session_id": parent,
                        "prompt_id": f"p{s}-{prompt}" if has_prompts else None,
                        "request_id": f"req-{seq}",
                        "started_at": st,
                        "ended_at": st + dur if rng.random() > 0.02 else None,
                        "duration_ms": dur.total_seconds() * 1000,
                        "ttft_ms": rng.uniform(50, 3000),
                        "model": model,
                        "cold_input_tokens": 0 if failed else context - read - write,
                        "cache_read_tokens": read,
                        "cache_write_tokens": write,
                        "cache_write_5m_tokens": write - w1h,
                        "cache_write_1h_tokens": w1h,
                        "output_tokens": 0 if failed else rng.randint(1, 3_000),
                        "reasoning_tokens": None,
                        "cost_usd": rng.uniform(0, 0.3) if rng.random() < 0.7 else None,
                        "attributes": "{}",
                        "seq": seq,
                        "hash_ids": None,
                        "block_size": None,
                        "ingested_at": ingested + dt.timedelta(microseconds=seq),
                    }
                )
                st += dur
    # duplicates: a less complete copy in the old schema, written later (must lose), and a newer
    # complete copy with a new agent_version (must win)
    lose = [r for r in requests if (r["output_tokens"] or 0) > 0][::9]
    later = ingested + dt.timedelta(days=1)
    stale = [{**r, "output_tokens": 0, "ingested_at": later} for r in lose]
    win = [{**r, "agent_version": "2.0", "ingested_at": later} for r in requests[3::11]]
    half = len(requests) // 2
    lake.append("requests", requests[:half])
    lake.append("requests", requests[half:])
    _write_old(lake, "requests", stale, OLD_MISSING)
    lake.append("requests", win)
    lake.append("events", events)
    _write_old(lake, "events", [{**e, "ingested_at": later} for e in events[::3]], ("attributes",))
    return lake


def _norm(frame: pl.DataFrame) -> pl.DataFrame:
    frame = frame.drop([c for c in HASHED if c in frame.columns])
    exact = [c for c, t in frame.schema.items() if not t.is_float() and not t.is_nested()]
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    return frame.sort(exact + floats, nulls_last=True) if exact + floats else frame


def _same(u: Any, v: Any) -> bool:
    if u is None or v is None:
        return u is None and v is None
    if isinstance(u, float) or isinstance(v, float):
        if isinstance(u, float) and isinstance(v, float) and math.isnan(u) and math.isnan(v):
            return True
        return math.isclose(u, v, rel_tol=REL, abs_tol=1e-300)
    if isinstance(u, list) and isinstance(v, list):
        return len(u) == len(v) and all(_same(a, b) for a, b in zip(u, v, strict=True))
    if isinstance(u, dict) and isinstance(v, dict):
        return u.keys() == v.keys() and all(_same(u[k], v[k]) for k in u)
    return bool(u == v)


def differences(reference: pl.DataFrame, other: pl.DataFrame, *, ordered: bool = False) -> list[str]:
    """What differs between two engines' results: columns, row counts, then values (as a multiset of
    rows unless ``ordered``); integers, strings and times exactly, floats to :data:`REL` relative."""
    a = reference.drop([c for c in HASHED if c in reference.columns]) if ordered else _norm(reference)
    b = other.drop([c for c in HASHED if c in other.columns]) if ordered else _norm(other)
    if a.columns != b.columns:
        return [f"columns {a.columns} != {b.columns}"]
    if a.height != b.height:
        return [f"{a.height} rows != {b.height} rows"]
    out = []
    for col in a.columns:
        for i, (u, v) in enumerate(zip(a[col].to_list(), b[col].to_list(), strict=True)):
            if not _same(u, v):
                out.append(f"{col} row {i}: {u!r} != {v!r} ({a.schema[col]} vs {b.schema[col]})")
                break
    return out


def same_object(reference: Any, other: Any, path: str = "") -> list[str]:
    """Differences between two JSON-like objects (dicts, lists, numbers, frames), as :func:`differences`."""
    if isinstance(reference, dict) and isinstance(other, dict):
        if reference.keys() != other.keys():
            return [f"{path}: keys {sorted(reference)} != {sorted(other)}"]
        return [d for k in reference for d in same_object(reference[k], other[k], f"{path}.{k}")]
    if isinstance(reference, list) and isinstance(other, list):
        if len(reference) != len(other):
            return [f"{path}: {len(reference)} items != {len(other)}"]
        return [
            d
            for i, (u, v) in enumerate(zip(reference, other, strict=True))
            for d in same_object(u, v, f"{path}[{i}]")
        ]
    if isinstance(reference, pl.DataFrame) and isinstance(other, pl.DataFrame):
        return [f"{path}: {d}" for d in differences(reference, other)]
    return [] if _same(reference, other) else [f"{path}: {reference!r} != {other!r}"]
