"""What every importer provides, and the small helpers they share.

An importer turns the bytes of one file into rows of the lake's tables (``traceflow.schema``).
Line-oriented importers get only complete, not yet imported lines (``data`` starts at the offset
where the previous import of that file stopped and ends with a newline), plus ``ctx.state``: a
JSON-serialisable dict they may use to carry context (the current prompt, cumulative totals) from
one import of a growing file to the next. Whole-file importers (``whole_file = True``) get the
whole file each time it changes; the lake's ``event_id`` dedup absorbs the repeats.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import orjson

from traceflow.importers.compressed import plain_path
from traceflow.rows import LineError, Parsed


@dataclass
class FileContext:
    """Where the bytes handed to :meth:`Importer.parse` come from."""

    path: Path
    first_line: int = 1  # 1-based number of the first line in ``data``
    state: dict[str, Any] = field(default_factory=dict)  # carried between imports of this file
    #: An importer that counted the lines of ``data`` may set the number of the line after them
    #: (``first_line + data.count(b"\n")``), which spares the caller counting them again.
    next_line: int | None = None

    @property
    def plain(self) -> Path:
        """``path`` without a ``.gz``/``.zst`` suffix: the name importers read meaning from."""
        return plain_path(self.path)


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


def iter_lines(data: bytes, first_line: int) -> list[tuple[int, bytes]]:
    """Non-blank lines of ``data`` with their 1-based line numbers."""
    out = []
    for i, line in enumerate(data.split(b"\n")):
        if line.strip():
            out.append((first_line + i, line))
    return out


def json_records(
    data: bytes, ctx: FileContext, errors: list[LineError], invalid: str = "invalid JSON ({}); line skipped"
) -> Iterator[tuple[int, bytes, Any]]:
    """``(line number, raw line, decoded value)`` for each non-blank line of a JSON-lines chunk; a line
    that is not JSON becomes an error in ``errors`` (``invalid`` with the decoder's message in ``{}``)."""
    path = str(ctx.path)
    for no, line in iter_lines(data, ctx.first_line):
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            errors.append(LineError(path, no, invalid.format(e)))
            continue
        yield no, line, rec


SETTLED_S = 2  # a file unchanged this long has no line still being written


def whole_last_line(tail: bytes, mtime_ns: int) -> bool:
    """The importers' rule for a last line without its newline: read once it is JSON, or once the
    file (modified at ``mtime_ns``) has not changed for :data:`SETTLED_S` seconds."""
    if not tail.strip():
        return True
    try:
        orjson.loads(tail)
    except orjson.JSONDecodeError:
        return time.time_ns() - mtime_ns > SETTLED_S * 1_000_000_000
    return True
