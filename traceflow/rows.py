"""The row types every producer of lake rows shares: the OTLP decoder, the file importers and the
collector's sealer all hand :class:`Parsed` results to the lake.

A :data:`Row` is one row of a lake table (``traceflow.schema``) as a dict; helpers coerce the values
agents send and build the deterministic ids that make re-delivery idempotent.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

Row = dict[str, Any]


class Tokens(NamedTuple):
    """The four token kinds of one request, exclusive of each other (docs/schemas.md#the-four-token-kinds:
    ``context_tokens =
    cold_input + cache_read + cache_write``); None is a count the record does not give.

    Agents that report an input count *including* the cached tokens (OpenAI, Gemini, OTel GenAI)
    are split with :func:`split_inclusive`; Anthropic's counts are already exclusive.
    """

    cold_input: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    output: int | None = None

    def columns(self) -> dict[str, int | None]:
        """The ``requests`` columns of these counts, in table order.

        >>> Tokens(7, 3, 0, 5).columns()
        {'cold_input_tokens': 7, 'cache_read_tokens': 3, 'cache_write_tokens': 0, 'output_tokens': 5}
        """
        return {
            "cold_input_tokens": self.cold_input,
            "cache_read_tokens": self.cache_read,
            "cache_write_tokens": self.cache_write,
            "output_tokens": self.output,
        }


def split_inclusive(
    input: int, cached: int | None, written: int | None = 0, output: int | None = None
) -> Tokens:
    """Split an ``input`` count that includes the cache reads (``cached``) and writes (``written``)
    into the exclusive :class:`Tokens`: the read is clamped to the input, the write to what the read
    leaves, and the rest is cold, so ``cold_input + cache_read + cache_write == input`` always.
    Counts are non-negative (callers clamp what agents send); a ``cached`` or ``written`` of None
    (the record does not say) stays None and counts as 0.

    >>> split_inclusive(100, 30, 20, 5)
    Tokens(cold_input=50, cache_read=30, cache_write=20, output=5)
    >>> split_inclusive(100, 150, 20)  # more cached than input: all of it is a read
    Tokens(cold_input=0, cache_read=100, cache_write=0, output=None)
    >>> split_inclusive(100, 70, 50)  # the write gets what the read leaves
    Tokens(cold_input=0, cache_read=70, cache_write=30, output=None)
    >>> split_inclusive(100, None, None, 8)
    Tokens(cold_input=100, cache_read=None, cache_write=None, output=8)
    """
    read = None if cached is None else min(cached, input)
    left = input - (read or 0)
    write = None if written is None else min(written, left)
    return Tokens(left - (write or 0), read, write, output)


def anthropic_cache_write(total: int | None, write_5m: int | None, write_1h: int | None) -> int | None:
    """The cache write of one Anthropic ``usage`` (every path that reads one calls this: the OTLP
    ``api_request`` event, the transcript importer, the status line's transcript tail).

    Anthropic's counts are exclusive as they come (:class:`Tokens`: ``input_tokens`` is the cold
    input, ``cache_read_input_tokens`` the read, ``cache_creation_input_tokens`` the write), and the
    5-minute/1-hour split (``cache_creation.ephemeral_{5m,1h}_input_tokens``, OTLP
    ``cache_creation_{5m,1h}_tokens``) is a breakdown of the write. The precedence:

    * a non-zero ``total`` is the write, whatever the split says: the API bills the total, and a
      split that disagrees with it is kept as reported in ``cache_write_5m_tokens`` and
      ``cache_write_1h_tokens`` (where it can be seen), not used to change the total;
    * a ``total`` of 0 or missing beside a split with tokens is the split's sum: old Claude Code
      versions reported ``cache_creation_input_tokens = 0`` with a non-zero breakdown;
    * otherwise ``total`` as given (0, or None when the record says nothing).

    >>> anthropic_cache_write(100, 60, 0)  # the split disagrees: the total is the write
    100
    >>> anthropic_cache_write(0, 60, 40), anthropic_cache_write(None, 0, 40)
    (100, 40)
    >>> anthropic_cache_write(0, 0, 0), anthropic_cache_write(None, None, None)
    (0, None)
    """
    if total:
        return total
    split = (write_5m or 0) + (write_1h or 0)
    return split if split > 0 else total


@dataclass
class LineError:
    """One record that could not be imported."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Parsed:
    """What one importer call produced."""

    requests: list[Row] = field(default_factory=list)
    events: list[Row] = field(default_factory=list)
    metric_points: list[Row] = field(default_factory=list)
    spans: list[Row] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)
    #: Rows already built as polars frames with the table's exact schema (fast importers).
    frames: dict[str, list[Any]] = field(default_factory=dict)
    #: Importer-private accumulations turned into rows or frames by ``finish`` (once per batch).
    raw: list[Any] = field(default_factory=list)

    def extend(self, other: Parsed) -> None:
        self.requests += other.requests
        self.events += other.events
        self.metric_points += other.metric_points
        self.spans += other.spans
        self.errors += other.errors
        for table, frames in other.frames.items():
            self.frames.setdefault(table, []).extend(frames)
        self.raw += other.raw

    def count(self, table: str) -> int:
        """Rows of ``table`` in this result, as dicts and as frames."""
        return len(self.tables()[table]) + sum(int(f.height) for f in self.frames.get(table, []))

    def tables(self) -> dict[str, list[Row]]:
        return {
            "requests": self.requests,
            "events": self.events,
            "metric_points": self.metric_points,
            "spans": self.spans,
        }


def stable_id(*parts: object) -> str:
    """A deterministic event id: the same parts always give the same id (dedup key)."""
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(b"\x1f")
        h.update(str(p).encode())
    return h.hexdigest()


def iso_micros(value: str) -> int:
    """Microseconds since the epoch of an ISO-8601 timestamp (``Z`` or offset; naive means UTC)."""
    ts = dt.datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    delta = ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def text_micros(value: object) -> int | None:
    """:func:`iso_micros` of a timestamp written as text; None for anything else, and for text that
    is not a timestamp."""
    try:
        return iso_micros(value) if isinstance(value, str) else None
    except ValueError:
        return None


def record_micros(value: object, missing: str, bad: type[ValueError] = ValueError) -> int:
    """:func:`iso_micros` of a record's timestamp; ``bad(missing)`` when it is not text, and
    ``bad("bad timestamp <value>")`` when the text is not a timestamp."""
    if not isinstance(value, str):
        raise bad(missing)
    try:
        return iso_micros(value)
    except ValueError as exc:
        raise bad(f"bad timestamp {value!r}") from exc


def as_int(value: Any) -> int | None:
    """Coerce a token count that may arrive as int, float or numeric string; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return int(float(value))


def as_float(value: Any) -> float | None:
    if value is None or value == "":
        return None
    return float(value)
