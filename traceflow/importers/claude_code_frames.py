"""The request and event frames of a batch of Claude Code transcripts.

One API response is written as one ``assistant`` line per content block, each repeating the whole
``usage``; :func:`requests_frame` keeps one row per ``(requestId, message.id)``: the most complete
copy (largest :func:`traceflow.store.measures.completeness`), the last written among equals, choosing it
in Python so that only the kept rows become a frame. The cache write is
:func:`traceflow.rows.anthropic_cache_write`'s. The request starts at the earliest of its lines'
trigger times (the user or tool-result line that preceded the first block, flagged
``started_at_estimated``), else at the first block. :func:`events_frame` builds the events column by column.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import orjson

from traceflow.importers.claude_code_rows import COLUMNS, SOURCE
from traceflow.importers.compressed import plain_name
from traceflow.rows import Row, anthropic_cache_write
from traceflow.store.measures import completeness


def _request_rows(kept: Any) -> Any:
    """The lake rows of the kept block lines (with ``ended_at``, ``started_at``, ``estimated``)."""
    import polars as pl

    from traceflow.schema import REQUESTS

    ids = _request_ids(*(kept[c].to_list() for c in ("request_id", "message_id", "file", "seq")))
    attrs = pl.struct(
        pl.col("message_id"),
        pl.col("file"),
        pl.col("cwd"),
        pl.col("git_branch"),
        pl.col("agent_id"),
        pl.col("uuid"),
        pl.col("speed"),
        pl.col("service_tier"),
        pl.col("stop_reason"),
        pl.col("estimated").alias("started_at_estimated"),
    ).struct.json_encode()
    frame = kept.with_columns(
        event_id=pl.Series(ids, dtype=pl.String),
        source=pl.lit(SOURCE),
        agent=pl.lit("claude-code"),
        user_id=pl.lit(None, dtype=pl.String),
        duration_ms=pl.lit(None, dtype=pl.Float64),
        ttft_ms=pl.lit(None, dtype=pl.Float64),
        attributes=attrs,
        hash_ids=pl.lit(None, dtype=pl.List(pl.Int64)),
        block_size=pl.lit(None, dtype=pl.Int32),
        ingested_at=pl.lit(int(time.time() * 1_000_000)).cast(pl.Datetime("us", "UTC")),
    )
    return frame.select([pl.col(c).cast(t) for c, t in REQUESTS.schema.items()])


def _request_ids(requests: list[Any], messages: list[Any], files: list[str], seqs: list[int]) -> list[str]:
    """``stable_id("anthropic-request", r) if r else stable_id("claude-message", m) if m else
    stable_id("claude-line", f, n)`` for each row, reusing the hash state of the constant prefixes."""
    prefixes = {}
    for kind in ("anthropic-request", "claude-message", "claude-line"):
        h = hashlib.blake2b(digest_size=16)
        h.update(b"\x1f")
        h.update(kind.encode())
        prefixes[kind] = h
    by_request, by_message, by_line = (
        prefixes["anthropic-request"],
        prefixes["claude-message"],
        prefixes["claude-line"],
    )
    out = []
    for r, m, f, n in zip(requests, messages, files, seqs, strict=True):
        if r:
            h = by_request.copy()
            h.update(b"\x1f" + str(r).encode())
        elif m:
            h = by_message.copy()
            h.update(b"\x1f" + str(m).encode())
        else:
            h = by_line.copy()
            h.update(b"\x1f" + plain_name(str(f)).encode() + b"\x1f" + str(n).encode())
        out.append(h.hexdigest())
    return out


_TYPES_BY_KIND = {"str": "String", "i64": "Int64", "f64": "Float64"}


def requests_frame(raw: list[tuple[str, list[tuple[Any, ...]]]]) -> Any:
    """One request row per ``(requestId, message.id)`` from each file's block line tuples, as a
    lake frame.

    The kept copy and the first line of each request are chosen in one pass in Python (the token
    counts are validated ints below ``2**60``, the text columns text), so that only the kept rows
    become a frame.
    """
    import polars as pl

    rank = {p: r for r, p in enumerate(sorted({p for p, _ in raw}))}
    # key -> [kept row, its total, file rank, seq, path; first line's start, file rank, seq]
    slots: dict[str, list[Any]] = {}
    for path, acc in raw:
        f = rank[path]
        for row in acc:
            (seq, request_id, message_id, ts, trigger, _, _, _, _, _, cold, read, creation, w5, w1, output,
             _, _, _, _, _, _, _, _, _) = row  # fmt: skip
            if request_id is not None:
                key = "r:" + request_id
            elif message_id is not None:
                key = "m:" + message_id
            else:
                key = f"l:{path}:{seq}"
            write = anthropic_cache_write(creation, w5, w1)
            total = completeness(cold, read, write, output)
            start = ts if trigger is None or trigger > ts else trigger
            slot = slots.get(key)
            if slot is None:
                slots[key] = [row, total, f, seq, path, write, start, f, seq, trigger is not None]
            else:
                if (total, f, seq) >= (slot[1], slot[2], slot[3]):
                    slot[0:6] = row, total, f, seq, path, write
                if (f, seq) < (slot[7], slot[8]):
                    slot[6:10] = start, f, seq, trigger is not None
    kept = sorted(slots.values(), key=lambda s: (s[2], s[3]))
    names = list(COLUMNS)
    values = list(zip(*(s[0] for s in kept), strict=True)) if kept else [() for _ in names[1:]]
    columns = [pl.Series("file", [s[4] for s in kept], dtype=pl.String)] + [
        pl.Series(name, col, dtype=getattr(pl, _TYPES_BY_KIND[COLUMNS[name]]), strict=True)
        for name, col in zip(names[1:], values, strict=True)
    ]
    stamp = pl.Datetime("us", "UTC")
    frame = pl.DataFrame(columns).with_columns(
        ended_at=pl.col("ts").cast(stamp),
        started_at=pl.Series([s[6] for s in kept], dtype=pl.Int64).cast(stamp),
        estimated=pl.Series([s[9] for s in kept], dtype=pl.Boolean),
        cache_write_tokens=pl.Series([s[5] for s in kept], dtype=pl.Int64),
    )
    return _request_rows(frame)


def events_frame(rows: list[Row]) -> Any:
    """``frame_from_rows(EVENTS, rows)`` for this importer's event rows, built column by column.

    The rows have the same keys (see :func:`traceflow.importers.claude_code_rows._event`),
    ``timestamp`` an int or None and ``attributes`` a dict, serialised as
    :func:`traceflow.store.lake.frame_from_rows` does.
    """
    import polars as pl

    from traceflow.schema import EVENTS, polars_type
    from traceflow.store.lake import frame_from_rows

    now = int(time.time() * 1_000_000)
    dumps, option = orjson.dumps, orjson.OPT_NON_STR_KEYS
    columns = []
    try:
        for name, duck in EVENTS.columns.items():
            dtype = polars_type(duck)
            if name == "attributes":
                values: list[Any] = [
                    dumps(r["attributes"], option=option, default=str).decode() for r in rows
                ]
            elif name == "ingested_at":
                values = [now] * len(rows)
            else:
                values = [r.get(name) for r in rows]
            if isinstance(dtype, pl.Datetime):
                columns.append(pl.Series(name, values, dtype=pl.Int64, strict=True).cast(dtype))
            else:
                columns.append(pl.Series(name, values, dtype=dtype, strict=True))
    except Exception:  # a value of another type (an id that is a number): the general path decides
        return frame_from_rows(EVENTS, rows)
    return pl.DataFrame(columns)
