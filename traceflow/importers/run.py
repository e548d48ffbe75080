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
import gc
import hashlib
import io
import multiprocessing
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from traceflow import importers
from traceflow.errors import MissingPath, UsageError
from traceflow.importers.base import FileContext, Importer, finish, whole_last_line
from traceflow.importers.compressed import is_packed, open_input
from traceflow.importers.interrupt import (
    ImportInterrupted,
    interruptible,
    remove_staged,
    staging_names,
    worker_pids,
)
from traceflow.importers.wrong_input import (
    LOOKS_LIKE,
    first_record,
    no_default_location,
    no_files_of_format,
    nothing_in_default_location,
    reads,
)
from traceflow.paths import max_document_bytes, max_line_bytes, too_large
from traceflow.rows import LineError, Parsed
from traceflow.schema import TABLES
from traceflow.store.lake import Lake, frame_from_rows

_HEAD_BYTES = 4096
_PARALLEL_MIN_BYTES = 32 << 20  # below this, worker start-up costs more than it saves
_BATCH_BYTES = 32 << 20  # input bytes parsed per worker task (bounds memory)
_FLUSH_ROWS = 2_000_000  # rows held in memory before they are written
_CHUNK_BYTES = 32 << 20  # a line file is parsed in pieces of about this size
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
    conflicts: int | None = None  # ids with copies that disagree on user or session (Lake.conflicts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "files_seen": self.files_seen,
            "files_read": self.files_read,
            "bytes_read": self.bytes_read,
            "rows": dict(self.rows),
            "skipped": self.skipped,
            "errors": [str(e) for e in self.errors],
            "conflicting_requests": self.conflicts,
        }

    def __str__(self) -> str:
        from traceflow.units import format_size

        parts = [f"{n:,} {t}" for t, n in self.rows.items() if n]
        text = (
            f"imported {self.source}: {self.files_read:,} of {self.files_seen:,} files read "
            f"({format_size(self.bytes_read)}), {', '.join(parts) or 'no new rows'}"
        )
        if self.skipped:
            text += f"; {self.skipped:,} record(s) skipped (see above)"
        if self.conflicts:  # replayed traffic, say: one copy of each is kept
            text += f"; {self.conflicts:,} request id(s) have copies that disagree on user or session"
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
    """Which files need reading, and from where.

    A file read from its start gets its head hash from the process that reads it
    (:func:`_parse_batch`, ``head == ""`` here): the planning parent does one ``lstat`` per file.
    """
    plans = []
    dirs: dict[Path, str] = {}  # resolved directories
    for path in files:
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                key = str(path.resolve())
                st = path.stat()
            else:
                key = _resolved(path, dirs)
        except FileNotFoundError:
            continue
        rec = state.get(key)
        if rec and rec["size"] == st.st_size and rec["mtime_ns"] == st.st_mtime_ns:
            continue
        head_len = min(st.st_size, _HEAD_BYTES)
        resume = (
            rec is not None
            and not importer.whole_file
            and st.st_size >= rec["offset"]
            and rec["head"] == _head(path, rec["head_len"])
        )
        if resume and rec is not None:
            plans.append(
                FilePlan(
                    key,
                    rec["offset"],
                    rec["line"],
                    rec["carry"],
                    st.st_size,
                    st.st_mtime_ns,
                    _head(path, head_len),
                    head_len,
                )
            )
        else:
            plans.append(FilePlan(key, 0, 1, {}, st.st_size, st.st_mtime_ns, "", head_len))
    return plans


def _resolved(path: Path, dirs: dict[Path, str]) -> str:
    """``str(path.resolve())`` for a path that is not a symbolic link, resolving each directory once."""
    name = path.name
    if name in ("", ".", ".."):
        return str(path.resolve())
    parent = path.parent
    base = dirs.get(parent)
    if base is None:
        base = dirs[parent] = str(parent.resolve())
    return os.path.join(base, name)


def _chunks(plan: FilePlan, whole_file: bool) -> Iterator[tuple[bytes, int]]:
    """The unread part of a file as ``(data, end offset)`` pieces.

    Line files come in pieces of about :data:`_CHUNK_BYTES` cut after a newline, so memory stays
    bounded on multi-gigabyte traces. A last line without a newline is taken when it is whole: it
    parses as JSON, or the file has not changed for :data:`.base.SETTLED_S` seconds (a CSV's last row);
    otherwise it is still being written and waits for the next import. A plan without its head hash
    (``head == ""``, read from the start) gets it from the first bytes read.

    A compressed file (:mod:`traceflow.importers.compressed`) is decompressed as it is read, to its
    end; its offsets count decompressed bytes, and its head hash is the compressed file's.
    """
    with open_input(plan.path) as fh:
        packed = is_packed(fh)  # offsets count decompressed bytes
        if packed:
            _skip(fh, plan.start)
        else:
            fh.seek(plan.start)
        if whole_file:
            most = max_document_bytes()
            if not packed and plan.size - plan.start > most:
                raise too_large(plan.path, "a document", most, "max_document_bytes")
            data = fh.read(most + 1) if packed else fh.read(plan.size - plan.start)
            if len(data) > most:
                raise too_large(plan.path, "the decompressed document", most, "max_document_bytes")
            if not packed:
                _take_head(plan, data)
            yield data, plan.start + len(data)
            return
        offset = plan.start
        remaining = plan.size - plan.start
        longest = max_line_bytes()
        step = min(_CHUNK_BYTES, longest)  # a line longer than the limit then spans two blocks
        carry: list[bytes] = []  # the line begun in earlier blocks, in pieces: joined once, when it ends
        carried = 0
        more = packed or remaining > 0
        while more:
            block = fh.read(step if packed else min(step, remaining))
            if not block:
                break
            remaining -= len(block)
            if packed:
                more = bool(fh.peek(1))  # type: ignore[attr-defined]
            else:
                _take_head(plan, block)
                more = remaining > 0
            if carry:
                ends = block.find(b"\n")
                if carried + (ends + 1 if ends >= 0 else len(block)) > longest:
                    raise too_large(plan.path, f"a line (from byte {offset:,})", longest, "max_line_bytes")
                if ends < 0 and more:
                    carry.append(block)
                    carried += len(block)
                    continue
            data = b"".join([*carry, block]) if carry else block
            cut = data.rfind(b"\n") + 1 if more else len(data)
            if not more and not data.endswith(b"\n"):
                cut = data.rfind(b"\n") + 1
                if packed or whole_last_line(data[cut:], plan.mtime_ns) or _is_json(data):
                    # complete: a compressed file (written whole), a settled last row, or one
                    # pretty-printed document
                    cut = len(data)
            piece, rest = data[:cut], data[cut:]
            carry, carried = ([rest], len(rest)) if rest else ([], 0)
            if piece:
                yield piece, offset + len(piece)
                offset += len(piece)


def _skip(fh: BinaryIO, n: int) -> None:
    """Read and drop the first ``n`` bytes of a decompressing stream (it cannot seek)."""
    while n > 0:
        got = len(fh.read(min(n, _CHUNK_BYTES)))
        if not got:
            return
        n -= got


def _take_head(plan: FilePlan, first: bytes) -> None:
    """Set a read-from-the-start plan's missing head hash from the first bytes read (see :func:`_head`)."""
    if not plan.head and plan.start == 0 and len(first) >= plan.head_len:
        plan.head = hashlib.blake2b(first[: plan.head_len], digest_size=12).hexdigest()


def _is_json(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
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
    #: From a worker process: the frames as Arrow IPC bytes per table (the parent needs no polars).
    ipc: dict[str, bytes] = field(default_factory=dict)


def _parse_batch(importer_name: str, plans: list[FilePlan]) -> BatchResult:
    """Parse a batch of files into one frame per table (runs in a worker process for large imports)."""
    # Parsing allocates millions of objects and frees them by reference counting; the cycle
    # collector's passes over them would find nothing and cost a tenth of the time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _parse_files(importer_name, plans)
    finally:
        if collecting:
            gc.enable()


def _parse_files(importer_name: str, plans: list[FilePlan]) -> BatchResult:
    importer = importers.get(importer_name)
    merged = Parsed()
    records: dict[str, Any] = {}
    nbytes = 0
    for p in plans:
        ctx = FileContext(path=Path(p.path), first_line=p.first_line, state=dict(p.carry))
        end, line = p.start, p.first_line
        try:
            for data, piece_end in _chunks(p, importer.whole_file):
                end = piece_end
                nbytes += len(data)
                ctx.first_line = line
                ctx.next_line = None
                merged.extend(importer.parse(data, ctx))
                line = line + data.count(b"\n") if ctx.next_line is None else ctx.next_line
            if not p.head:  # nothing read (an empty file), or less than planned
                p.head = _head(Path(p.path), p.head_len)
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


def _parse_batch_ipc(importer_name: str, plans: list[FilePlan]) -> BatchResult:
    """:func:`_parse_batch` in a worker process: its frames travel back as Arrow IPC bytes."""
    result = _parse_batch(importer_name, plans)
    for table, frame in result.frames.items():
        buf = io.BytesIO()
        frame.write_ipc(buf, compression="uncompressed")
        result.ipc[table] = buf.getvalue()
    result.frames = {}
    return result


def _write_share(root: str, ipc: dict[str, list[bytes]], share: int, shares: int) -> list[tuple[Path, str]]:
    """Stage this worker's share of the days of each table (runs in a worker process).

    Every worker reads all the frames and splits the days among the ``shares`` workers the same
    way (largest first, to the least loaded), so each day is written once, in one file, with its
    rows in the order the frames came: the files :meth:`Lake.append_many` writes, in parallel.
    """
    import polars as pl

    from traceflow.store.lake import _partition_values

    lake = Lake(root)
    staged: list[tuple[Path, str]] = []
    for table, blobs in ipc.items():
        frames = [pl.read_ipc(io.BytesIO(b)) for b in blobs]
        frame = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
        days = _partition_values(TABLES[table], frame)
        sizes = days.value_counts(name="n").sort(["n", days.name], descending=[True, False])
        loads = [0] * shares
        mine = []
        for day, n in sizes.iter_rows():
            least = loads.index(min(loads))
            loads[least] += n
            if least == share:
                mine.append(day)
        staged += lake.write_staged(table, frame.filter(days.is_in(mine)))
    return staged


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


def default_jobs() -> int:
    """The processes an import uses when ``--jobs`` is not given: the CPUs, or 1 when less than one
    CPU is free (the load average over 1 minute above the CPUs less one).

    Without a free CPU, worker processes only add their own start, a second polars and a second write
    pass: on a 2-CPU machine at load 1.3-2, 0.5 s of CPU more and a slower import than one process;
    at load 8-13, 1 s more. The rows imported are the same either way (the batches do not depend on
    the processes).
    """
    cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0] > cpus - 1
    except OSError:  # no load average on this platform
        busy = False
    return 1 if busy else cpus


def run_import(
    lake: Lake,
    importer: Importer,
    paths: Sequence[Path] | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    jobs: int | None = None,
    files: Sequence[Path] | None = None,
) -> ImportSummary:
    """Import what is new under ``paths`` (or the agent's default locations) into ``lake``.

    ``progress(done_bytes, total_bytes)`` is called as files are parsed. ``files`` instead of
    ``paths``: these files, found already (a refresh passes those that changed), not looked for.
    """
    if files is not None:
        return _run(lake, importer, list(files), progress, jobs)
    roots = list(paths) if paths else importer.default_paths()
    if not paths and not roots:
        raise no_default_location(importer)
    for root in roots:
        if not root.exists():
            raise MissingPath(
                f"{root} does not exist; pass the path of a {importer.name} log file or directory"
            )
    listed: list[Path] = []
    seen: set[Path] = set()
    for root in roots:
        found = importer.discover(root)
        if not found and paths:
            raise no_files_of_format(importer, root)
        for f in found:
            if f not in seen:
                seen.add(f)
                listed.append(f)
    if not paths and not listed:  # the default folders are there, but hold no logs
        raise nothing_in_default_location(importer, roots)
    return _run(lake, importer, listed, progress, jobs)


def _run(
    lake: Lake,
    importer: Importer,
    files: list[Path],
    progress: Callable[[int, int], None] | None,
    jobs: int | None,
) -> ImportSummary:
    summary = ImportSummary(source=importer.name, files_seen=len(files))
    lake.ensure()
    lake.clean_staging()  # what an import killed at its staging step left
    writers = {os.getpid()}  # the processes whose staging files are this import's
    before = set(staging_names(lake))
    try:
        _import_files(lake, importer, files, summary, writers, progress, jobs)
    except KeyboardInterrupt:
        removed = remove_staged(lake, before, writers)
        raise ImportInterrupted(importer.name, removed) from None
    return summary


def _import_files(
    lake: Lake,
    importer: Importer,
    files: list[Path],
    summary: ImportSummary,
    writers: set[int],
    progress: Callable[[int, int], None] | None,
    jobs: int | None,
) -> None:
    with _locked_state(lake, importer) as state:
        plans = plan(importer, files, state)
        summary.files_read = len(plans)
        total = sum(p.size - p.start for p in plans)
        jobs = jobs if jobs is not None else default_jobs()
        batches = _batches(plans)
        pending: list[BatchResult] = []
        done = 0

        def flush(store: Callable[[list[BatchResult]], None] | None) -> None:
            # Rows first, bookkeeping after: a crash in between re-imports instead of losing rows.
            if store is None:
                _store(lake, pending)
            else:
                store(pending)
            for result in pending:
                state.update(result.records)
            pending.clear()

        def take(result: BatchResult, store: Callable[[list[BatchResult]], None] | None) -> None:
            nonlocal done
            pending.append(result)
            _account(summary, result)
            done += result.nbytes
            if progress:
                progress(done, total)
            if sum(n for r in pending for n in r.counts.values()) >= _FLUSH_ROWS:
                flush(store)

        if jobs > 1 and total >= _PARALLEL_MIN_BYTES and len(batches) > 1:
            # The same batches as in-process: a request whose block lines span two batches gets a
            # row from each (the lake's views pick one), so the batches decide some started_at.
            workers = min(jobs, len(batches))
            # fork is cheap and safe while this process has not started polars' thread pool; it
            # never does here: the workers parse, and write the parquet files too (_write_share).
            method = "spawn" if "polars" in sys.modules else "fork"
            ctx = multiprocessing.get_context(method)
            with interruptible(cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)) as pool:

                def store(results: list[BatchResult]) -> None:
                    ipc: dict[str, list[bytes]] = {}
                    for result in results:
                        for table, blob in result.ipc.items():
                            ipc.setdefault(table, []).append(blob)
                    if ipc:
                        shares = [
                            pool.submit(_write_share, lake.location, ipc, i, workers) for i in range(workers)
                        ]
                        writers.update(worker_pids(pool))
                        lake.publish([staged for share in shares for staged in share.result()])

                queued = iter(batches)
                running: set[cf.Future[BatchResult]] = set()
                while True:
                    # A few batches ahead, not all: a flush's writes then start soon, and results
                    # wait in memory only for the batches in flight.
                    for batch in queued:
                        running.add(pool.submit(_parse_batch_ipc, importer.name, batch))
                        writers.update(worker_pids(pool))
                        if len(running) >= 2 * workers:
                            break
                    if not running:
                        break
                    finished, running = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                    for fut in finished:
                        take(fut.result(), store)
                flush(store)
        else:
            for batch in batches:
                take(_parse_batch(importer.name, batch), None)
            flush(None)
        # Raised before the bookkeeping is saved: the files count as unread for the right importer.
        _check_format(importer, summary, plans)


def _check_format(importer: Importer, summary: ImportSummary, plans: list[FilePlan]) -> None:
    """A usage error when what was read is not the importer's format: no row came of it, and every
    record was rejected, or (for the agent formats that skip unknown lines) a file read from its
    start does not look like one."""
    if sum(summary.rows.values()) or not summary.bytes_read or any(p.start for p in plans):
        return  # rows came of it, or nothing was read, or a grown file's new lines were (skipped records)
    fix = f"pass {reads(importer)}, or import these files with their own importer (`traceflow import --help`)"
    if summary.skipped:
        raise UsageError(
            f"nothing imported: all {summary.skipped} record(s) read were rejected, so these are not "
            f"{importer.name} files (e.g. {summary.errors[0]}); {fix}"
        )
    looks_like = LOOKS_LIKE.get(importer.name)
    if looks_like is None:
        return
    strangers = [p.path for p in plans if (rec := first_record(p.path)) is not None and not looks_like(rec)]
    if strangers and len(strangers) == len(plans):
        raise UsageError(
            f"nothing imported: {strangers[0]}"
            + (f" (and {len(strangers) - 1} more)" if len(strangers) > 1 else "")
            + f" is not a {importer.name} file (its first line is none of the records "
            f"`import {importer.name}` reads); {fix}"
        )


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
