"""The collector's write-ahead log: OTLP payloads are durable here before they are acknowledged.

Layout (all under ``<data>/v1/_state/collector/``)::

    wal/<seq>.open        the segment being appended to (at most one)
    wal/<seq>.wal         closed segments, waiting for the sealer (collectors/ingest.py)
    quarantine/           segments the sealer could not read to the end (kept for inspection)
    metric_state.json     cumulative -> delta state of metric streams (written by the sealer)
    server.lock           held by the running server: one collector per data directory
    sealer.lock           held by the running sealer

A record is the raw request payload (signal, content type, decompressed body) behind a 24-byte
header with a CRC. Appends go through one writer thread doing *group commit*: every request waiting
while the previous ``fdatasync`` ran is written with one ``writev`` and made durable with one
``fdatasync``, then all of them are acknowledged. A segment is closed (renamed ``.open`` ->
``.wal``) after ``roll_interval_s`` or ``segment_bytes``, which hands it to the sealer.

After a crash, :func:`recover` truncates the ``.open`` segment to its last complete record (a torn
tail was never acknowledged: its fsync had not returned) and closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from traceflow.config import local_root
from traceflow.store.lake import fsync_path

_logger = logging.getLogger(__name__)

Signal = Literal["logs", "metrics", "traces"]
SIGNALS: tuple[Signal, ...] = ("logs", "metrics", "traces")
CONTENT_TYPES = ("application/x-protobuf", "application/json")

MAGIC = b"TFW1"
#: magic, body length, crc32, signal, content type, flags, reserved, received (ns since epoch)
HEADER = struct.Struct("<4sIIBBBBQ")
FLAG_KEEP_CONTENT = 1
OPEN_SUFFIX = ".open"
CLOSED_SUFFIX = ".wal"
_IOV_MAX = 512
#: fdatasync where the platform has it (Linux); macOS only has fsync
_datasync = getattr(os, "fdatasync", os.fsync)


@dataclass(frozen=True)
class WalRecord:
    """One acknowledged request as it was received (body already decompressed)."""

    signal: Signal
    content_type: str  # one of CONTENT_TYPES
    body: bytes
    keep_content: bool = False
    received_ns: int = 0


def encode_header(rec: WalRecord) -> bytes:
    """The header that precedes ``rec.body`` in a segment."""
    tail = struct.pack(
        "<BBBBQ",
        SIGNALS.index(rec.signal),
        CONTENT_TYPES.index(rec.content_type),
        FLAG_KEEP_CONTENT if rec.keep_content else 0,
        0,
        rec.received_ns,
    )
    crc = zlib.crc32(rec.body, zlib.crc32(tail))
    return struct.pack("<4sII", MAGIC, len(rec.body), crc) + tail


@dataclass
class SegmentScan:
    """What :func:`scan_segment` found in a segment file."""

    records: list[WalRecord]
    valid_bytes: int  # length of the intact prefix
    total_bytes: int

    @property
    def intact(self) -> bool:
        return self.valid_bytes == self.total_bytes


def scan_segment(path: Path) -> SegmentScan:
    """Read the records of a segment up to the first torn or corrupt one."""
    data = path.read_bytes()
    records: list[WalRecord] = []
    pos = 0
    view = memoryview(data)
    while pos + HEADER.size <= len(data):
        magic, length, crc, sig, ctype, flags, _, received = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + length
        if magic != MAGIC or end > len(data) or sig >= len(SIGNALS) or ctype >= len(CONTENT_TYPES):
            break
        body = view[pos + HEADER.size : end]
        if zlib.crc32(body, zlib.crc32(view[pos + 12 : pos + HEADER.size])) != crc:
            break
        records.append(
            WalRecord(
                SIGNALS[sig], CONTENT_TYPES[ctype], bytes(body), bool(flags & FLAG_KEEP_CONTENT), received
            )
        )
        pos = end
    return SegmentScan(records, pos, len(data))


def collector_dir(data: str | os.PathLike[str], wal_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<data>/v1/_state/collector`` (``wal_dir`` when given): the WAL, the metric state and the locks.

    Always on local disk: for an object-store lake ``<data>`` is :func:`traceflow.config.local_root`.
    """
    if wal_dir is not None:
        return Path(wal_dir).expanduser()
    return local_root(data) / "v1" / "_state" / "collector"


def _seq(path: Path) -> int:
    return int(path.name.split(".", 1)[0])


def closed_segments(wal_dir: Path) -> list[Path]:
    """Closed segments in the order they were written."""
    if not wal_dir.exists():
        return []
    return sorted(wal_dir.glob("*" + CLOSED_SUFFIX), key=_seq)


def recover(wal_dir: Path) -> int:
    """Close the segments a crashed writer left open; returns how many torn bytes were cut off."""
    cut = 0
    for path in sorted(wal_dir.glob("*" + OPEN_SUFFIX), key=_seq):
        scan = scan_segment(path)
        if not scan.intact:
            cut += scan.total_bytes - scan.valid_bytes
            _logger.warning(
                "WAL segment %s: dropping a torn tail of %d bytes (never acknowledged)",
                path.name,
                scan.total_bytes - scan.valid_bytes,
            )
            with open(path, "r+b") as fh:
                fh.truncate(scan.valid_bytes)
                fh.flush()
                os.fsync(fh.fileno())
        if scan.valid_bytes == 0:
            path.unlink()
        else:
            os.replace(path, path.with_suffix(CLOSED_SUFFIX))
    fsync_path(wal_dir)
    return cut


def lock_file(path: Path, *, blocking: bool) -> IO[bytes] | None:
    """Hold an exclusive ``flock`` on ``path`` for as long as the returned file stays open.

    Returns None when ``blocking`` is False and another process holds the lock.
    """
    fh = open(path, "a+b")  # noqa: SIM115 - the caller keeps it open as the lock
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        fh.close()
        return None
    return fh


def _write_all(fd: int, buffers: list[bytes]) -> int:
    """``writev`` every buffer completely (short writes retried); returns the bytes written."""
    total = 0
    i = 0
    while i < len(buffers):
        chunk = buffers[i : i + _IOV_MAX]
        want = sum(len(b) for b in chunk)
        done = os.writev(fd, chunk)
        total += done
        if done < want:  # rare on regular files (signals, quotas): finish this chunk byte-wise
            skip = done
            for b in chunk:
                if skip >= len(b):
                    skip -= len(b)
                    continue
                view = memoryview(b)[skip:]
                skip = 0
                while view:
                    n = os.write(fd, view)
                    total += n
                    view = view[n:]
        i += _IOV_MAX
    return total


Done = Callable[[BaseException | None], None]


@dataclass
class WalStats:
    records: int = 0
    bytes: int = 0
    commits: int = 0  # fdatasync calls that acknowledged at least one record
    segments: int = 0  # segments closed
    sync_seconds: float = 0.0  # time spent in fdatasync

    def line(self) -> str:
        per = self.records / self.commits if self.commits else 0.0
        ms = self.sync_seconds / self.commits * 1000 if self.commits else 0.0
        return (
            f"WAL {self.records} payloads in {self.commits} commits ({per:.1f} per fsync, "
            f"{ms:.1f} ms per fsync), {self.segments} segments"
        )


class Wal:
    """An append-only log with group commit; open with :meth:`start`, close with :meth:`close`."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = 64 << 20,
        roll_interval_s: float = 1.0,
        on_roll: Callable[[Path], None] | None = None,
    ) -> None:
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.roll_interval_s = roll_interval_s
        self.on_roll = on_roll
        self.stats = WalStats()
        self._cond = threading.Condition()
        self._pending: list[tuple[WalRecord, Done]] = []
        self._closing = False
        self._thread: threading.Thread | None = None
        self._fd = -1
        self._path: Path | None = None
        self._size = 0
        self._opened_at = 0.0
        self._next_seq = 0

    # -- life cycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Recover what a crash left open and start the writer thread."""
        self.dir.mkdir(parents=True, exist_ok=True)
        recover(self.dir)
        seqs = [_seq(p) for p in self.dir.iterdir() if p.name.split(".", 1)[0].isdigit()]
        self._next_seq = max(seqs, default=0) + 1
        self._thread = threading.Thread(target=self._run, name="traceflow-wal", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Write what is pending, close the open segment and stop the writer thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- appending ------------------------------------------------------------------------------
    def submit(self, rec: WalRecord, done: Done) -> None:
        """Queue ``rec``; ``done(None)`` is called (from the writer thread) once it is durable."""
        with self._cond:
            if self._closing:
                raise RuntimeError("the write-ahead log is closed")
            self._pending.append((rec, done))
            self._cond.notify()

    async def append(self, rec: WalRecord) -> None:
        """Return once ``rec`` is durable (raises the ``OSError`` of a failed write)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def _resolve(err: BaseException | None) -> None:
            if not fut.done():
                if err is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(err)

        def _done(err: BaseException | None) -> None:  # runs in the writer thread
            loop.call_soon_threadsafe(_resolve, err)

        self.submit(rec, _done)
        await fut

    def append_blocking(self, rec: WalRecord) -> None:
        """Block the calling thread until ``rec`` is durable."""
        event = threading.Event()
        box: list[BaseException | None] = [None]

        def _done(err: BaseException | None) -> None:
            box[0] = err
            event.set()

        self.submit(rec, _done)
        event.wait()
        if box[0] is not None:
            raise box[0]

    # -- inspection -----------------------------------------------------------------------------
    def backlog_bytes(self) -> int:
        """Bytes in segments not yet sealed into the lake (closed and open)."""
        total = 0
        with contextlib.suppress(FileNotFoundError), os.scandir(self.dir) as it:
            for entry in it:
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
        return total

    # -- writer thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    if self._fd >= 0 and self._size:
                        left = self._opened_at + self.roll_interval_s - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    else:
                        self._cond.wait()
                batch, self._pending = self._pending, []
                closing = self._closing
            if batch:
                self._commit(batch)
            if self._fd >= 0 and (
                self._size >= self.segment_bytes
                or (self._size and time.monotonic() - self._opened_at >= self.roll_interval_s)
                or (closing and not batch)
            ):
                self._roll()
            if closing and not batch:
                with self._cond:
                    if not self._pending:
                        return

    def _open_segment(self) -> None:
        path = self.dir / f"{self._next_seq:020d}{OPEN_SUFFIX}"
        self._next_seq += 1
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        fsync_path(self.dir)  # the new name must survive a crash before anything in it is acked
        self._path = path
        self._size = 0
        self._opened_at = time.monotonic()

    def _commit(self, batch: list[tuple[WalRecord, Done]]) -> None:
        err: BaseException | None = None
        committed = self._size  # what the open segment held before this batch
        try:
            if self._fd < 0:
                self._open_segment()
                committed = 0
            buffers: list[bytes] = []
            for rec, _ in batch:
                buffers.append(encode_header(rec))  # the CRC is computed here, off the event loop
                buffers.append(rec.body)
            self._size += _write_all(self._fd, buffers)
            t0 = time.perf_counter()
            _datasync(self._fd)
            self.stats.sync_seconds += time.perf_counter() - t0
            self.stats.records += len(batch)
            self.stats.bytes += sum(len(b) for b in buffers)
            self.stats.commits += 1
        except OSError as e:
            _logger.error("write-ahead log append failed (requests answered 503): %s", e)
            err = e
            # After a failed write or fsync the file's state is unknown: cut off what this batch
            # wrote (a disk that filled midway leaves a torn record, which would read as damage) and
            # stop appending to it. The sealer keeps its intact prefix (records whose fsync failed may
            # be stored without an ack: harmless, a retry of the same payload has the same event ids).
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, committed)
                    self._size = committed
            with contextlib.suppress(OSError):
                self._roll()
        for _, done in batch:
            try:
                done(err)
            except Exception:  # a waiter that went away must not stop the writer
                _logger.exception("WAL completion callback failed")

    def _roll(self) -> None:
        if self._fd < 0 or self._path is None:
            return
        fd, path, size = self._fd, self._path, self._size
        self._fd, self._path, self._size = -1, None, 0
        os.close(fd)
        if size == 0:
            path.unlink()
            return
        closed = path.with_suffix(CLOSED_SUFFIX)
        os.replace(path, closed)
        fsync_path(self.dir)
        self.stats.segments += 1
        if self.on_roll is not None:
            self.on_roll(closed)
