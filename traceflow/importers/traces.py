"""What the public-trace importers share (Mooncake, Bailian, Azure, BurstGPT; kv-cache-tester uses
the helpers): finding files, a file's identity, relative time bases, record readers for JSON lines
and CSV, :class:`TraceImporter`, the base that turns each record into one request row and each
bad record into a ``path:line`` error, and :class:`HashedBlockImporter`, the base of the traces whose
reuse lives in block hash ids (Mooncake, Bailian).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext, json_records
from traceflow.importers.compressed import with_compressed
from traceflow.rows import LineError, Parsed, Row, as_int, stable_id

#: The absolute time that relative trace timestamps (Mooncake, kv-cache-tester, Bailian, BurstGPT)
#: are counted from: the Unix epoch, 1970-01-01T00:00:00Z. ``started_at - epoch`` is the offset.
RELATIVE_EPOCH_US = 0


def seconds_to_micros(seconds: float) -> int:
    """Whole microseconds of a (possibly fractional) number of seconds, rounded to nearest."""
    return round(seconds * 1_000_000)


def file_key(ctx: FileContext, first_record: bytes) -> str:
    """The identity of a line-oriented trace file: its name and a hash of its first data record.

    Computed once, at the first record, and kept in ``ctx.state`` so later imports of a grown file
    (which see only the new lines) use the same key.
    """
    key = ctx.state.get("file_key")
    if not isinstance(key, str):
        digest = hashlib.blake2b(first_record.strip(), digest_size=8).hexdigest()
        key = f"{ctx.plain.name}#{digest}"
        ctx.state["file_key"] = key
    return key


def discover_files(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """``[root]`` for a file, else the files under ``root`` with one of ``suffixes``, sorted."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(with_compressed(suffixes)))


def int_list(value: Any) -> list[int]:
    """A list of integer ids; ValueError for anything else."""
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError("hash_ids is not a list of integers")
    return value


def required_int(rec: dict[str, Any], key: str) -> int:
    value = as_int(rec.get(key))
    if value is None:
        raise ValueError(f"missing {key}")
    if value < 0:
        raise ValueError(f"negative {key}")
    return value


def norm(name: str) -> str:
    """A column name compared without case, spaces or punctuation: ``Session ID`` -> ``sessionid``."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def csv_records(
    data: bytes, ctx: FileContext, default_header: list[str], required: str, errors: list[LineError]
) -> Iterator[tuple[int, bytes, dict[str, str]]]:
    """``(line number, raw line, {normalised column: value})`` for each data line of a CSV chunk.

    The header (the first line of the file, recognised by containing the ``required`` column) is
    stored in ``ctx.state["header"]``; a file without one is read with ``default_header``.
    """
    path = str(ctx.path)
    header = ctx.state.get("header")
    try:
        texts: list[str | None] = list(data.decode("utf-8").split("\n"))
    except UnicodeDecodeError:
        texts = []
        for raw in data.split(b"\n"):
            try:
                texts.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(None)
    raw_lines = data.split(b"\n")
    for i, text in enumerate(texts):
        no = ctx.first_line + i
        if text is None:
            errors.append(LineError(path, no, "not UTF-8 text; line skipped"))
            continue
        text = text.rstrip("\r")
        if no == 1:
            text = text.lstrip("\ufeff")
        if not text.strip():
            continue
        try:
            cells = next(csv.reader(io.StringIO(text))) if '"' in text else text.split(",")
        except (csv.Error, StopIteration) as e:
            errors.append(LineError(path, no, f"unreadable CSV line ({e}); line skipped"))
            continue
        if not isinstance(header, list):
            names = [norm(c) for c in cells]
            if required in names:
                header = names
                ctx.state["header"] = header
                continue
            header = list(default_header)
            ctx.state["header"] = header
        if len(cells) != len(header):
            errors.append(
                LineError(path, no, f"{len(cells)} fields where the header has {len(header)}; line skipped")
            )
            continue
        yield no, raw_lines[i], dict(zip(header, (c.strip() for c in cells), strict=True))


def count(value: str | None, column: str) -> int:
    """A non-negative token count from a CSV cell (``12``, ``12.0``)."""
    if value is None or value == "":
        raise ValueError(f"missing {column}")
    if value.isdigit():
        return int(value)
    number = float(value)
    if number < 0 or number != int(number):
        raise ValueError(f"{column} is not a token count: {value!r}")
    return int(number)


class TraceImporter:
    """A public trace with one record per line and no default location: each record becomes one
    request row (:meth:`row`); a record :meth:`row` cannot read is reported and skipped."""

    name: ClassVar[str]
    #: The rows' ``source``: the importer's name unless a subclass sets another.
    source: ClassVar[str]
    whole_file: ClassVar[bool] = False
    #: File name endings :meth:`discover` takes, and what a record is called in error messages
    #: ("not {label} record": "a Mooncake", "an Azure trace").
    suffixes: ClassVar[tuple[str, ...]] = (".jsonl",)
    label: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and "source" not in cls.__dict__:
            cls.source = cls.name

    def default_paths(self) -> list[Path]:
        return []

    def discover(self, root: Path) -> list[Path]:
        return discover_files(root, self.suffixes)

    def records(
        self, data: bytes, ctx: FileContext, errors: list[LineError]
    ) -> Iterator[tuple[int, bytes, Any]]:
        """The chunk's records; JSON lines unless a subclass reads another format."""
        return json_records(data, ctx, errors)

    def row(self, rec: Any, key: str, no: int, ctx: FileContext) -> Row:
        """The request row of one record; ValueError (or TypeError...) names what is wrong."""
        raise NotImplementedError

    def request(self, rec: Any, key: str, no: int, ctx: FileContext) -> tuple[Row, list[Row]]:
        """The request row of one record and its events: none, unless a subclass's records carry them."""
        return self.row(rec, key, no, ctx), []

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        path = str(ctx.path)
        for no, line, rec in self.records(data, ctx, out.errors):
            key = file_key(ctx, line)
            try:
                row, events = self.request(rec, key, no, ctx)
            except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as e:
                out.errors.append(LineError(path, no, f"not {self.label} record: {e}; line skipped"))
                continue
            out.requests.append(row)
            out.events.extend(events)
        return out


class HashedBlockImporter(TraceImporter):
    """A hashed-block trace (Mooncake, Bailian): one JSON object per request with a numeric
    ``timestamp`` from the trace start, ``input_length``, ``output_length`` and optional ``hash_ids``.

    The whole prompt is cold input; the reuse lives in ``hash_ids`` (blocks of :attr:`block_size`
    tokens, comparable within the file: ``attributes.hash_scope``). A subclass says what its
    timestamps count (:attr:`timestamp_us`) and which ids and attributes a record carries (:meth:`ids`).
    """

    block_size: ClassVar[int]
    #: Microseconds per unit of ``timestamp`` (1,000 for milliseconds, 1,000,000 for seconds).
    timestamp_us: ClassVar[int]
    #: Appended to the error for a record without a numeric ``timestamp``.
    timestamp_note: ClassVar[str] = ""

    def ids(self, rec: dict[str, Any], ctx: FileContext) -> tuple[dict[str, str | None], dict[str, Any]]:
        """The row's ``session_id`` and other id columns (in column order), and what goes to
        ``attributes`` after ``file`` and ``hash_scope``."""
        raise NotImplementedError

    def row(self, rec: Any, key: str, no: int, ctx: FileContext) -> Row:
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        ts = rec.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int | float):
            raise ValueError(f"missing or non-numeric timestamp{self.timestamp_note}")
        inp = required_int(rec, "input_length")
        outp = required_int(rec, "output_length")
        hashes = int_list(rec["hash_ids"]) if rec.get("hash_ids") is not None else None
        ids, extra = self.ids(rec, ctx)
        return {
            "event_id": stable_id(self.source, key, no),
            "source": self.source,
            **ids,
            "started_at": RELATIVE_EPOCH_US + round(ts * self.timestamp_us),
            "cold_input_tokens": inp,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "output_tokens": outp,
            "attributes": {"file": key.split("#", 1)[0], "hash_scope": f"{self.source}:{key}", **extra},
            "seq": no,
            "hash_ids": hashes,
            "block_size": self.block_size if hashes is not None else None,
        }
