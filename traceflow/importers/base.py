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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import orjson

from traceflow.importers.compressed import plain_path
from traceflow.rows import LineError, Parsed, Row, Tokens


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


def json_objects(
    data: bytes, ctx: FileContext, errors: list[LineError], what: str
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each line of a JSON-lines chunk that is a JSON object; a line
    that is not JSON (``invalid JSON: <why>``) or not an object (``<what> is not a JSON object``)
    becomes an error in ``errors``."""
    for no, _, rec in json_records(data, ctx, errors, "invalid JSON: {}"):
        if isinstance(rec, dict):
            yield no, rec
        else:
            errors.append(LineError(str(ctx.path), no, f"{what} is not a JSON object"))


def parse_objects(
    data: bytes,
    ctx: FileContext,
    what: str,
    bad: type[ValueError],
    handle: Callable[[dict[str, Any], int, Parsed], None],
) -> Parsed:
    """The rows of a JSON-lines chunk whose lines are objects (:func:`json_objects`), each handed to
    ``handle(object, line number, rows so far)``; a line ``handle`` refuses (raises ``bad``) becomes
    an error at that line."""
    out = Parsed()
    for no, rec in json_objects(data, ctx, out.errors, what):
        try:
            handle(rec, no, out)
        except bad as exc:
            out.errors.append(LineError(str(ctx.path), no, str(exc)))
    return out


def request_row(
    event_id: str,
    source: str,
    agent: str,
    session: str,
    ended: int,
    model: str | None,
    tokens: Tokens,
    seq: int,
    attrs: dict[str, Any],
    cost_usd: float | None = None,
) -> Row:
    """The request row of one assistant message of an agent's own log that records no client
    version, no parent session and no reasoning split (all NULL): Amp, Codebuff, pi, OpenClaw."""
    return {
        "event_id": event_id,
        "source": source,
        "agent": agent,
        "agent_version": None,
        "session_id": session,
        "parent_session_id": None,
        "ended_at": ended,
        "model": model,
        **tokens.columns(),
        "reasoning_tokens": None,
        "cost_usd": cost_usd,
        "seq": seq,
        "attributes": attrs,
    }


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
