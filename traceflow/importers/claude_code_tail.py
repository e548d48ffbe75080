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
import stat
from dataclasses import dataclass

import msgspec

from traceflow.importers.claude_code_records import DECODER, Assistant
from traceflow.rows import anthropic_cache_write
from traceflow.store.measures import completeness

#: Bytes read from the end per step.
CHUNK = 1 << 20
#: A line longer than this is skipped, not decoded (Claude Code writes such lines for pasted images
#: and large tool results, which carry no usage).
LONG_LINE = 8 << 20
#: Bytes read at most before the tail gives up and the status line answers from the lake.
READ_CAP = 64 << 20


@dataclass(frozen=True)
class RequestUsage:
    """What a status line needs of one request: when, which model, its token counts (the 5m/1h
    split None where the record gives none)."""

    at: dt.datetime
    model: str | None
    cold: int
    read: int
    write: int
    write_5m: int | None
    write_1h: int | None
    output: int


@dataclass(frozen=True)
class TailRequest(RequestUsage):
    """One request of the transcript (``at``: the time of its last line, the response's end, near
    enough) and its deduplication key."""

    key: tuple[str | None, str | None] | int

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
        at,
        msg.model,
        usage.input_tokens or 0,
        usage.cache_read_input_tokens or 0,
        write,
        w5,
        w1,
        usage.output_tokens or 0,
        key,
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


class TranscriptUnread(OSError):
    """The transcript is not a regular file (a FIFO would block, ``/dev/zero`` never ends), or its
    tail would take more than :data:`READ_CAP` bytes to read: the caller answers from the lake."""

    def __init__(self, message: str, bytes_read: int = 0) -> None:
        super().__init__(message)
        self.bytes_read = bytes_read


@dataclass(frozen=True)
class Tail:
    """What :func:`read_tail` found, and the bytes it read to find it."""

    requests: list[TailRequest]
    bytes_read: int


def read_since(path: str | os.PathLike[str], since: dt.datetime, chunk: int = CHUNK) -> list[TailRequest]:
    """The requests of the transcript at ``path`` whose last line is at or after ``since``, deduplicated,
    in file order (:func:`read_tail`)."""
    return read_tail(path, since, chunk).requests


def read_tail(
    path: str | os.PathLike[str],
    since: dt.datetime,
    chunk: int = CHUNK,
    *,
    long_line: int = LONG_LINE,
    cap: int = READ_CAP,
) -> Tail:
    """The requests of the transcript at ``path`` whose last line is at or after ``since``, deduplicated,
    in file order. Reads from the end and stops once a whole chunk lies before ``since``.

    Linear in the bytes read: a line begun in earlier chunks is kept as pieces, joined once; a line
    longer than ``long_line`` is skipped, its bytes passed over, not kept (a pasted image, a large
    tool result). Past ``cap`` bytes read, and for anything but a regular file, it raises
    :class:`TranscriptUnread`.
    """
    found: list[list[TailRequest]] = []  # each chunk's requests, last chunk first
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, to be refused below
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TranscriptUnread(f"{os.fspath(path)} is not a regular file")
        end = info.st_size
        rest: list[bytes] = []  # the partial line after the chunk read last, in pieces (last first)
        kept = 0  # its bytes
        skipping = False  # that line is longer than long_line: its bytes are passed over
        read = 0
        while end > 0:
            start = max(0, end - chunk)
            if read + (end - start) > cap:
                raise TranscriptUnread(f"{os.fspath(path)}: more than {cap:,} bytes to read", read)
            block = os.pread(fd, end - start, start)
            read += len(block)
            end = start
            head = b""  # the partial first line of this chunk (its start lies further back)
            if start > 0:
                cut = block.find(b"\n")
                if cut < 0:  # no line starts in this chunk: all of it belongs to the line after
                    if not skipping:
                        rest.append(block)
                        kept += len(block)
                        if kept > long_line:
                            skipping, rest, kept = True, [], 0
                    continue
                head, block = block[: cut + 1], block[cut + 1 :]
            if skipping:  # the long line begins after this chunk's last newline: drop it
                block = block[: block.rfind(b"\n") + 1]
                skipping = False
            elif rest:
                block = b"".join([block, *reversed(rest)])
            rest, kept = ([head], len(head)) if head else ([], 0)
            requests = _lines(block, start + len(head))
            found.append(requests)
            if requests and all(r.at < since for r in requests):
                break
    finally:
        os.close(fd)
    kept_requests: dict[tuple[str | None, str | None] | int, TailRequest] = {}
    for r in (r for requests in reversed(found) for r in requests):
        old = kept_requests.get(r.key)
        if old is None or r.total >= old.total:
            kept_requests[r.key] = r
    return Tail([r for r in kept_requests.values() if r.at >= since], read)
