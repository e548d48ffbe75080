"""The requests of one Claude Code transcript since a time, read from the file's end (``statusline``).

A status line runs after every assistant message, so it cannot import the corpus. It reads the
session's transcript backwards, a chunk at a time, and stops at the first chunk whose requests all
began before ``since``: the work grows with the traffic since ``since`` (today), not with the
session's length. Lines are decoded by the importer's decoder
(:data:`~traceflow.importers.claude_code_records.DECODER`) and deduplicated as the importer does:
one request per ``(requestId, message.id)``, its most complete copy (largest
:func:`traceflow.store.measures.completeness`, the last written among equals); API errors and
synthetic messages carry no tokens. The cache write is :func:`traceflow.rows.anthropic_cache_write`'s
(docs/definitions.md).
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

import msgspec

from traceflow.importers.claude_code_records import DECODER, Assistant
from traceflow.rows import anthropic_cache_write
from traceflow.store.measures import completeness

#: Bytes read from the end per step.
CHUNK = 1 << 20


@dataclass(frozen=True)
class TailRequest:
    """One request of the transcript."""

    key: tuple[str | None, str | None] | int
    at: dt.datetime  # the time of its last line: the response's end, near enough
    model: str | None
    cold: int
    read: int
    write: int
    write_5m: int | None
    write_1h: int | None
    output: int

    @property
    def total(self) -> int:
        return completeness(self.cold, self.read, self.write, self.output)


def _request(rec: Assistant, offset: int) -> TailRequest | None:
    msg = rec.message
    usage = msg.usage if msg is not None else None
    if msg is None or usage is None or rec.timestamp is None:
        return None
    if msg.model == "<synthetic>" or rec.isApiErrorMessage:
        return None
    w5, w1 = usage.ttl_split()
    write = anthropic_cache_write(usage.cache_creation_input_tokens or 0, w5, w1) or 0
    at = rec.timestamp if rec.timestamp.tzinfo else rec.timestamp.replace(tzinfo=dt.UTC)
    key: tuple[str | None, str | None] | int = (rec.requestId, msg.id) if rec.requestId or msg.id else offset
    return TailRequest(
        key,
        at,
        msg.model,
        usage.input_tokens or 0,
        usage.cache_read_input_tokens or 0,
        write,
        w5,
        w1,
        usage.output_tokens or 0,
    )


def _lines(data: bytes, base: int) -> list[TailRequest]:
    out: list[TailRequest] = []
    decode = DECODER.decode
    pos = 0
    for line in data.split(b"\n"):
        start = pos
        pos += len(line) + 1
        if b'"assistant"' not in line:  # the only record type with usage: skip the rest undecoded
            continue
        try:
            rec = decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue  # a line being written, or one the importer would report: not this line's job
        if isinstance(rec, Assistant):
            req = _request(rec, base + start)
            if req is not None:
                out.append(req)
    return out


def read_since(path: str | os.PathLike[str], since: dt.datetime, chunk: int = CHUNK) -> list[TailRequest]:
    """The requests of the transcript at ``path`` whose last line is at or after ``since``, deduplicated,
    in file order. Reads from the end and stops once a whole chunk lies before ``since``."""
    found: list[TailRequest] = []
    with Path(path).open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        rest = b""  # the partial first line of the chunk read last (its start lies further back)
        while end > 0:
            start = max(0, end - chunk)
            f.seek(start)
            data = f.read(end - start) + rest
            end = start
            if start > 0:
                cut = data.find(b"\n")
                if cut < 0:  # one line longer than the chunk: read further back
                    rest = data
                    continue
                rest, data = data[: cut + 1], data[cut + 1 :]
            else:
                rest = b""
            requests = _lines(data, start + len(rest) if start > 0 else 0)
            found = requests + found
            if requests and all(r.at < since for r in requests):
                break
    kept: dict[tuple[str | None, str | None] | int, TailRequest] = {}
    for r in found:
        old = kept.get(r.key)
        if old is None or r.total >= old.total:
            kept[r.key] = r
    return [r for r in kept.values() if r.at >= since]
