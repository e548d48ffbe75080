"""What every importer provides, and the small helpers they share.

An importer turns the bytes of one file into rows of the lake's tables (``traceflow.schema``).
Line-oriented importers get only complete, not yet imported lines (``data`` starts at the offset
where the previous import of that file stopped and ends with a newline), plus ``ctx.state``: a
JSON-serialisable dict they may use to carry context (the current prompt, cumulative totals) from
one import of a growing file to the next. Whole-file importers (``whole_file = True``) get the
whole file each time it changes; the lake's ``event_id`` dedup absorbs the repeats.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

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


@dataclass
class FileContext:
    """Where the bytes handed to :meth:`Importer.parse` come from."""

    path: Path
    first_line: int = 1  # 1-based number of the first line in ``data``
    state: dict[str, Any] = field(default_factory=dict)  # carried between imports of this file
    #: An importer that counted the lines of ``data`` may set the number of the line after them
    #: (``first_line + data.count(b"\n")``), which spares the caller counting them again.
    next_line: int | None = None


class Importer(Protocol):
    """A named source of rows: ``traceflow import <name> [PATH...]``."""

    name: ClassVar[str]  # CLI name, e.g. "claude-code"
    whole_file: ClassVar[bool]  # True: parse() always gets the whole file

    def default_paths(self) -> list[Path]:
        """Where the agent keeps its logs when no PATH is given."""
        ...

    def discover(self, root: Path) -> list[Path]:
        """The files to import under ``root`` (``[root]`` for a file), in a stable order."""
        ...

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        """Rows from ``data``; bad records become ``Parsed.errors`` and are skipped."""
        ...


def finish(importer: Importer, parsed: Parsed) -> Parsed:
    """Let an importer turn what its ``parse`` calls accumulated in ``parsed.raw`` into rows.

    Importers that build polars frames do it once per batch of files here rather than once per file
    (a frame costs milliseconds to set up). An importer opts in by defining ``finish(parsed)``.
    """
    hook = getattr(importer, "finish", None)
    if hook is not None and parsed.raw:
        hook(parsed)
    return parsed


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


def iter_lines(data: bytes, first_line: int) -> list[tuple[int, bytes]]:
    """Non-blank lines of ``data`` with their 1-based line numbers."""
    out = []
    for i, line in enumerate(data.split(b"\n")):
        if line.strip():
            out.append((first_line + i, line))
    return out
