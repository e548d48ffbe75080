"""The row types every producer of lake rows shares: the OTLP decoder, the file importers and the
collector's sealer all hand :class:`Parsed` results to the lake.

A :data:`Row` is one row of a lake table (``traceflow.schema``) as a dict; helpers coerce the values
agents send and build the deterministic ids that make re-delivery idempotent.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]


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
