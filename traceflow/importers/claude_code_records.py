"""The Claude Code transcript lines the importer reads, as typed msgspec structs.

Every line is decoded by :data:`DECODER` into one of these records (tagged by the line's
``"type"``): :class:`Assistant`, :class:`User`, :class:`System`, or :class:`Ignored` for the record
types that never carry tokens or turn boundaries (:data:`IGNORED_TYPES`). msgspec validates the
whole line as it goes (structure, escapes, numbers, truncation, trailing bytes) and checks the types
of the fields declared here; fields not declared are skipped (still validated as JSON). A line of
another record type is decoded again by :data:`ANY_RECORD`, which only checks that it is a JSON
object. msgspec does not check the UTF-8 of strings it skips: :func:`invalid_utf8_lines` does.
"""

from __future__ import annotations

import codecs
import datetime as dt
from typing import Annotated, Any, Union

import msgspec

#: A token count: an integer in ``[0, 2**60)`` (so that the sum of four fits a 64-bit integer).
Count = Annotated[int, msgspec.Meta(ge=0, lt=2**60)]

#: Record types that never carry tokens or turn boundaries.
IGNORED_TYPES = (
    "file-history-snapshot",
    "summary",
    "attachment",
    "queue-operation",
    "progress",
    "api-request",
    "api-request-blob",
    "api-request-shape",
    "atis-latch",
    "tools-used",
    "last-prompt",
    "mode",
    "custom-title",
    "agent-name",
    "pr-link",
)


class CacheCreation(msgspec.Struct):
    """``usage.cache_creation``: the cache write split by TTL."""

    ephemeral_5m_input_tokens: Count | None = None
    ephemeral_1h_input_tokens: Count | None = None


class OutputDetails(msgspec.Struct):
    """``usage.output_tokens_details``."""

    thinking_tokens: Count | None = None


class Usage(msgspec.Struct):
    """``message.usage`` of an assistant line."""

    input_tokens: Count | None = None
    cache_read_input_tokens: Count | None = None
    cache_creation_input_tokens: Count | None = None
    output_tokens: Count | None = None
    cache_creation: CacheCreation | None = None
    output_tokens_details: OutputDetails | None = None
    speed: str | None = None
    service_tier: str | None = None

    def ttl_split(self) -> tuple[int | None, int | None]:
        """The cache write's (5-minute, 1-hour) tokens; (None, None) where the line has no split."""
        split = self.cache_creation
        if split is None:
            return None, None
        return split.ephemeral_5m_input_tokens or 0, split.ephemeral_1h_input_tokens or 0


class Block(msgspec.Struct):
    """One content block of a message; only its type matters here."""

    type: str | None = None


class Message(msgspec.Struct):
    """The ``message`` of an assistant or user line."""

    id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None
    content: str | list[Block] | None = None


class _Line(msgspec.Struct, tag_field="type"):
    """The fields every record type the importer reads may carry."""

    timestamp: dt.datetime | None = None
    sessionId: str | None = None
    agentId: str | None = None
    isSidechain: bool | None = None
    version: str | None = None
    uuid: str | None = None


class Assistant(_Line, tag="assistant"):
    """A model response's content block (one line per block, each with the whole usage)."""

    requestId: str | None = None
    message: Message | None = None
    costUSD: float | None = None
    cwd: str | None = None
    gitBranch: str | None = None
    isApiErrorMessage: bool | None = None
    apiErrorStatus: Any = None
    apiErrorType: Any = None
    error: Any = None


class User(_Line, tag="user"):
    """A prompt, or a tool result (``message.content`` holds a ``tool_result`` block)."""

    promptId: str | None = None
    isMeta: bool | None = None
    message: Message | None = None


class CompactMetadata(msgspec.Struct):
    """``compactMetadata`` of a ``compact_boundary`` system line."""

    preTokens: Count | None = None
    trigger: str | None = None


class System(_Line, tag="system"):
    """A system line: ``turn_duration`` and ``compact_boundary`` become events."""

    subtype: str | None = None
    durationMs: float | None = None
    compactMetadata: CompactMetadata | None = None


class CostState(msgspec.Struct, tag="cost-state", tag_field="type"):
    """The running totals the client writes as its process exits (2.1.332; nothing is read of it): a
    prompt after one is the first of a new process, a ``--continue`` or ``--resume``."""


class Ignored(msgspec.Struct):
    """A record of one of :data:`IGNORED_TYPES` (validated, nothing read)."""


class AnyRecord(msgspec.Struct):
    """Any JSON object; ``type`` if it is text (other record types are skipped)."""

    type: Any = None


#: One struct per ignored record type, so that those lines are decoded once too.
_IGNORED = tuple(
    msgspec.defstruct(f"Ignored_{i}", [], bases=(Ignored,), tag=name, tag_field="type")
    for i, name in enumerate(IGNORED_TYPES)
)

#: Everything :data:`DECODER` may return.
DECODER: msgspec.json.Decoder[Assistant | User | System | CostState | Ignored] = msgspec.json.Decoder(
    Union[(Assistant, User, System, CostState, *_IGNORED)]
)
ANY_RECORD = msgspec.json.Decoder(AnyRecord)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_UTC = dt.UTC


def micros(ts: dt.datetime) -> int:
    """Microseconds since the epoch (a time without a zone means UTC)."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=_UTC)
    delta = ts - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def invalid_utf8_lines(data: bytes) -> set[int]:
    """The offsets of the lines of ``data`` that are not valid UTF-8 (usually none).

    ASCII data is valid; other data is checked in one go by polars (a vectorised check, about twice
    as fast as Python's decoder here), and only data that fails is searched line by line.
    """
    if data.isascii():
        return set()
    import polars as pl

    try:
        pl.Series([data], dtype=pl.Binary).cast(pl.String, strict=True)
        return set()
    except (pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError):
        pass
    bad: set[int] = set()
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        try:
            codecs.utf_8_decode(view[pos:], "strict", True)
            break
        except UnicodeDecodeError as e:
            at = pos + e.start
            start = data.rfind(b"\n", 0, at) + 1
            bad.add(start)
            nl = data.find(b"\n", at)
            if nl < 0:
                break
            pos = nl + 1
    return bad
