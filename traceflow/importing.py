"""Run an importer over files and add what is new to the lake, durably and idempotently.

For every file we remember (in ``<data>/v1/_state/imports/<importer>.json``) its size, mtime, a
hash of its first bytes, how far it was read, and the importer's carry-over state. A second import
of an unchanged file reads nothing; a file that has grown is read from where the last import
stopped (complete lines only); a file that was replaced (its head changed or it shrank) is read
again from the start, and the lake's ``event_id`` dedup absorbs the rows seen before.

The bookkeeping is written only after the rows are published, so a crash in between re-imports
(harmlessly) rather than losing rows. Large imports parse files in worker processes, which write
their own staging files; the parent publishes them.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import fcntl
import hashlib
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import importers
from .errors import MissingPath
from .importers.base import FileContext, Importer, LineError, Parsed, finish
from .lake import Lake, frame_from_rows
from .schema import TABLES

_HEAD_BYTES = 4096
_PARALLEL_MIN_BYTES = 32 << 20  # below this, worker start-up costs more than it saves
_BATCH_BYTES = 32 << 20  # input bytes parsed per worker task (bounds memory)
_FLUSH_ROWS = 2_000_000  # rows held in memory before they are written
_CHUNK_BYTES = 32 << 20  # a line file is parsed in pieces of about this size
_SETTLED_S = 2  # a file unchanged this long has no line still being written
MAX_REPORTED_ERRORS = 50


@dataclass
class FilePlan:
    path: str
    start: int
    first_line: int
    carry: dict[str, Any]
    size: int
    mtime_ns: int
    head: str
    head_len: int


@dataclass
class ImportSummary:
    """What an import did, for people (``str``) and for scripts (``as_dict``)."""

    source: str
    files_seen: int = 0
    files_read: int = 0
    bytes_read: int = 0
    rows: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TABLES})
    skipped: int = 0
    errors: list[LineError] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "files_seen": self.files_seen,
            "files_read": self.files_read,
            "bytes_read": self.bytes_read,
            "rows": dict(self.rows),
            "skipped": self.skipped,
            "errors": [str(e) for e in self.errors],
        }

    def __str__(self) -> str:
        parts = [f"{n} {t}" for t, n in self.rows.items() if n]
        text = (
            f"imported {self.source}: {self.files_read} of {self.files_seen} files read "
            f"({self.bytes_read / 1e6:.1f} MB), {', '.join(parts) or 'no new rows'}"
        )
        if self.skipped:
            text += f"; {self.skipped} record(s) skipped (see above)"
        return text


def _head(path: Path, length: int) -> str:
    """A hash of a file's first ``length`` bytes: tells a grown file from a replaced one."""
    with open(path, "rb") as fh:
        return hashlib.blake2b(fh.read(length), digest_size=12).hexdigest()


def _state_path(lake: Lake, importer: Importer) -> Path:
    return lake.state_dir / "imports" / f"{importer.name}.json"


@contextlib.contextmanager
def _locked_state(lake: Lake, importer: Importer) -> Iterator[dict[str, Any]]:
    """The importer's bookkeeping, locked against a concurrent import of the same source."""
    path = _state_path(lake, importer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state: dict[str, Any] = orjson.loads(path.read_bytes()) if path.exists() else {}
        yield state
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(state))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


def plan(importer: Importer, files: Sequence[Path], state: dict[str, Any]) -> list[FilePlan]:
    """Which files need reading, and from where."""
    plans = []
    for path in files:
        key = str(path.resolve())
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        rec = state.get(key)
        if rec and rec["size"] == st.st_size and rec["mtime_ns"] == st.st_mtime_ns:
            continue
        head_len = min(st.st_size, _HEAD_BYTES)
        head = _head(path, head_len)
        resume = (
            rec is not None
            and not importer.whole_file
            and st.st_size >= rec["offset"]
            and rec["head"] == _head(path, rec["head_len"])
        )
        if resume and rec is not None:
            plans.append(
                FilePlan(
                    key, rec["offset"], rec["line"], rec["carry"], st.st_size, st.st_mtime_ns, head, head_len
                )
            )
        else:
            plans.append(FilePlan(key, 0, 1, {}, st.st_size, st.st_mtime_ns, head, head_len))
    return plans


def _chunks(plan: FilePlan, whole_file: bool) -> Iterator[tuple[bytes, int, int]]:
    """The unread part of a file as ``(data, first line number, end offset)`` pieces.

    Line files come in pieces of about :data:`_CHUNK_BYTES` cut after a newline, so memory stays
    bounded on multi-gigabyte traces. A last line without a newline is taken when it is whole: it
    parses as JSON, or the file has not changed for :data:`_SETTLED_S` seconds (a CSV's last row);
    otherwise it is still being written and waits for the next import.
    """
    with open(plan.path, "rb") as fh:
        fh.seek(plan.start)
        if whole_file:
            data = fh.read(plan.size - plan.start)
            yield data, plan.first_line, plan.start + len(data)
            return
        offset, line = plan.start, plan.first_line
        remaining = plan.size - plan.start
        carry = b""
        while remaining > 0:
            block = fh.read(min(_CHUNK_BYTES, remaining))
            if not block:
                break
            remaining -= len(block)
            data = carry + block
            cut = data.rfind(b"\n") + 1 if remaining > 0 else len(data)
            if remaining <= 0 and not data.endswith(b"\n"):
                cut = data.rfind(b"\n") + 1
                if _whole_last_line(data[cut:], plan.mtime_ns) or _is_json(data):
                    cut = len(data)  # complete: a settled last row, or one pretty-printed document
            piece, carry = data[:cut], data[cut:]
            if piece:
                yield piece, line, offset + len(piece)
                offset += len(piece)
                line += piece.count(b"\n")


def _is_json(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _whole_last_line(tail: bytes, mtime_ns: int) -> bool:
    if not tail.strip():
        return True
    try:
        orjson.loads(tail)
    except orjson.JSONDecodeError:
        return time.time_ns() - mtime_ns > _SETTLED_S * 1_000_000_000
    return True


@dataclass
class BatchResult:
    """What parsing a batch of files gave: frames to store and the files' new bookkeeping."""

    frames: dict[str, Any]
    records: dict[str, Any]
    counts: dict[str, int]
    errors: list[LineError]
    nerr: int
    nbytes: int


def _parse_batch(importer_name: str, plans: list[FilePlan]) -> BatchResult:
    """Parse a batch of files into one frame per table (runs in a worker process for large imports)."""
    importer = importers.get(importer_name)
    merged = Parsed()
    records: dict[str, Any] = {}
    nbytes = 0
    for p in plans:
        ctx = FileContext(path=Path(p.path), first_line=p.first_line, state=dict(p.carry))
        end, line = p.start, p.first_line
        try:
            for data, first_line, piece_end in _chunks(p, importer.whole_file):
                end = piece_end
                nbytes += len(data)
                ctx.first_line = first_line
                merged.extend(importer.parse(data, ctx))
                line = first_line + data.count(b"\n")
        except FileNotFoundError:
            continue  # deleted since it was listed (agents prune old logs): nothing to import
        records[p.path] = {
            "size": p.size,
            "mtime_ns": p.mtime_ns,
            "head": p.head,
            "head_len": p.head_len,
            "offset": end,
            "line": line,
            "carry": ctx.state,
        }
    finish(importer, merged)
    counts = {t: merged.count(t) for t in TABLES}
    errors = merged.errors
    return BatchResult(
        table_frames(merged), records, counts, errors[:MAX_REPORTED_ERRORS], len(errors), nbytes
    )


def table_frames(parsed: Parsed) -> dict[str, Any]:
    """One polars frame per table that has rows, from row dicts and ready-made frames alike."""
    import polars as pl

    out = {}
    for table, rows in parsed.tables().items():
        parts = list(parsed.frames.get(table, []))
        if rows:
            parts.append(frame_from_rows(TABLES[table], rows))
        parts = [p for p in parts if p.height]
        if parts:
            out[table] = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
    return out


def _batches(plans: list[FilePlan]) -> list[list[FilePlan]]:
    out: list[list[FilePlan]] = [[]]
    size = 0
    for p in plans:
        if out[-1] and size + (p.size - p.start) > _BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(p)
        size += p.size - p.start
    return [b for b in out if b]


def run_import(
    lake: Lake,
    importer: Importer,
    paths: Sequence[Path] | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    jobs: int | None = None,
) -> ImportSummary:
    """Import what is new under ``paths`` (or the agent's default locations) into ``lake``.

    ``progress(done_bytes, total_bytes)`` is called as files are parsed.
    """
    roots = list(paths) if paths else importer.default_paths()
    for root in roots:
        if not root.exists():
            raise MissingPath(
                f"{root} does not exist; pass the path of a {importer.name} log file or directory"
            )
    files: list[Path] = []
    seen: set[Path] = set()
    for root in roots:
        for f in importer.discover(root):
            if f not in seen:
                seen.add(f)
                files.append(f)
    summary = ImportSummary(source=importer.name, files_seen=len(files))
    lake.ensure()
    with _locked_state(lake, importer) as state:
        plans = plan(importer, files, state)
        summary.files_read = len(plans)
        total = sum(p.size - p.start for p in plans)
        jobs = jobs if jobs is not None else (os.cpu_count() or 1)
        batches = _batches(plans)
        pending: list[BatchResult] = []
        done = 0

        def flush() -> None:
            # Rows first, bookkeeping after: a crash in between re-imports instead of losing rows.
            _store(lake, pending)
            for result in pending:
                state.update(result.records)
            pending.clear()

        def take(result: BatchResult) -> None:
            nonlocal done
            pending.append(result)
            _account(summary, result)
            done += result.nbytes
            if progress:
                progress(done, total)
            if sum(f.height for r in pending for f in r.frames.values()) >= _FLUSH_ROWS:
                flush()

        if jobs > 1 and total >= _PARALLEL_MIN_BYTES and len(batches) > 1:
            # fork is cheap and safe while this process has not started polars' thread pool.
            method = "spawn" if "polars" in sys.modules else "fork"
            ctx = multiprocessing.get_context(method)
            with cf.ProcessPoolExecutor(max_workers=min(jobs, len(batches)), mp_context=ctx) as pool:
                for fut in cf.as_completed([pool.submit(_parse_batch, importer.name, b) for b in batches]):
                    take(fut.result())
        else:
            for batch in batches:
                take(_parse_batch(importer.name, batch))
        flush()
    return summary


def _store(lake: Lake, results: list[BatchResult]) -> None:
    """Write the batches' frames as one set of files per table and day, durably."""
    import polars as pl

    by_table: dict[str, list[Any]] = {}
    for result in results:
        for table, frame in result.frames.items():
            by_table.setdefault(table, []).append(frame)
    frames = {t: pl.concat(fs, how="vertical") if len(fs) > 1 else fs[0] for t, fs in by_table.items()}
    lake.append_many(frames)


def _account(summary: ImportSummary, result: BatchResult) -> None:
    for table, n in result.counts.items():
        summary.rows[table] += n
    summary.skipped += result.nerr
    room = MAX_REPORTED_ERRORS - len(summary.errors)
    summary.errors += result.errors[: max(room, 0)]
    summary.bytes_read += result.nbytes
