"""The sealer: turns closed WAL segments into lake Parquet, in its own process.

``traceflow serve`` starts it as ``python -m traceflow.collectors.sealer DATA`` and talks to it over
pipes: the sealer reads ``stop`` on stdin (seal everything left, then exit) and writes one JSON line
of statistics on stdout after each seal. Running apart from the receivers lets the mapping use the
second core and keeps a payload that crashes the mapper away from the servers.

One seal, for a run of consecutive closed segments (up to ``batch_bytes``):

1. decode and map every record (``traceflow.otlp.decode.map_request_chunks``, with the persisted
   ``MetricState``), ``CHUNK_RECORDS`` log records at a time, each chunk's rows made a frame at once
   (the row dicts of a large request never exist together: docs/collector.md, memory); the Claude
   Code ``api_request`` records of a protobuf logs request go from its bytes to a frame without a
   dict per record (``traceflow.otlp.logs_columnar``, numba), the dict path being the fallback;
2. write one staged Parquet file per table and partition, publish them (``Lake.write_staged`` +
   ``Lake.publish``: fsynced, atomic renames);
3. save the metric state (a journal line of what changed: ``collectors/metric_state_file.py``), then
   delete the segments.

A crash between 2 and 3 replays the segments: the same records map to the same ``event_id``s (the
lake's views keep one row per id) and, with the state as it was, to the same metric deltas.

**Poison.** The collector refuses at acknowledgement what the lake cannot store, and the mapping
never raises on what it accepted (``traceflow/otlp/limits.py``). Should a payload still fail (its
mapping raises, or its rows cannot be made into frames), the failure is isolated: payload by
payload, then record by record; only the failing record (or a payload that cannot be split) goes
to the quarantine (``collectors/quarantine.py``, content stripped unless kept) with its reason, and
everything else is sealed. A segment that made the sealer *process* die three times in a row is
sealed record by record; a record that killed it three times alone is quarantined alone.

**Storage failures are not poison.** When writing the lake fails (disk full, permissions, a quota,
an object store's error: polars reports a full disk as a ``ComputeError``, not an ``OSError``), the
rows are encoded to Parquet in memory: if every payload's rows encode, the fault is the storage's
(:class:`StorageError`). Then nothing is quarantined and no attempt is counted: the segments stay in
the WAL, this seal's staging files are removed (they hold space the disk lacks), the cause is logged
and reported to the server (a ``{"storage_error": ...}`` line: ``serve``'s summary and ``GET
/status``), and the seal is retried with a growing delay (``STORAGE_RETRY_S``) until it succeeds.
Only a record whose rows cannot be encoded even in memory is quarantined, record by record.

The sealer does not compact: each seal publishes one small file per table and day, so a collector
that runs for days wants ``traceflow compact`` from a timer (readers stay correct either way).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import logging
import os
import select
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from traceflow.collectors import allocator, spool
from traceflow.collectors.attribute_policy import AttributePolicy
from traceflow.collectors.metric_state_file import MetricStateFile, max_streams_from_settings
from traceflow.collectors.quarantine import Quarantine
from traceflow.collectors.storage_errors import StorageError as StorageError  # re-exported
from traceflow.collectors.storage_errors import storage_error
from traceflow.otlp import decode as otlp
from traceflow.otlp.logs_columnar import map_logs_columnar
from traceflow.otlp.logs_columnar import warm as columnar_warm
from traceflow.rows import Parsed
from traceflow.schema import TABLES
from traceflow.store.lake import Lake, frame_from_rows

_logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
#: the delay before retrying a seal the storage refused: the first, and the longest (doubling between)
STORAGE_RETRY_S = (1.0, 30.0)
PROTOBUF = "application/x-protobuf"
NICENESS = 5
#: log records mapped at a time: each chunk's rows become a frame before the next is mapped
CHUNK_RECORDS = 8192


@dataclass
class SealStats:
    segments: int = 0
    records: int = 0  # WAL records (requests) sealed
    rows: Counter[str] = field(default_factory=Counter)  # rows written per table
    rejected: Counter[str] = field(default_factory=Counter)  # records the mapper rejected, per signal
    quarantined: int = 0
    overflow: int = 0  # metric points beyond the per-resource stream cap (stored without a delta)
    seconds: float = 0.0

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "segments": self.segments,
                "records": self.records,
                "rows": dict(self.rows),
                "rejected": dict(self.rejected),
                "quarantined": self.quarantined,
                "overflow": self.overflow,
                "seconds": round(self.seconds, 3),
            }
        )


class Sealer:
    """Seals closed segments of one data directory's WAL into its lake."""

    def __init__(
        self,
        data: Path | str,
        *,
        wal_dir: Path | None = None,
        batch_bytes: int = 16 << 20,
        policy: AttributePolicy | None = None,
        started_ns: int | None = None,  # when the server began receiving (MetricStateFile)
    ) -> None:
        self.lake = Lake(data)
        self.policy = policy or AttributePolicy()  # serve --drop-attr / --hash-attr
        self.dir = spool.collector_dir(data, wal_dir)
        self.wal_dir = self.dir / "wal"
        self.state_file = MetricStateFile(self.dir, started_ns)
        self.attempts_path = self.dir / "sealing.json"
        self.quarantine = Quarantine(self.dir / "quarantine", policy=self.policy)
        self.batch_bytes = batch_bytes
        self.state = self._load_state()
        #: map Claude Code api_request records as columns (traceflow.otlp.logs_columnar) where it can
        self.columnar = True

    # -- metric state ---------------------------------------------------------------------------
    def _load_state(self) -> otlp.MetricState:
        state = self.state_file.load()
        state.max_streams_per_resource = max_streams_from_settings()
        return state

    def _save_state(self) -> None:
        self.state_file.save(self.state)

    # -- poison segments ------------------------------------------------------------------------
    # ``sealing.json`` counts attempts at the batch being sealed, so that a payload that kills the
    # sealer *process* (it never gets to raise) is found: after a failed attempt one segment at a
    # time, and after MAX_ATTEMPTS on one segment, its records one at a time (``"next"``: the record
    # being tried, ``"record_attempts"``: how often); a record that died MAX_ATTEMPTS times alone is
    # quarantined alone, every other record of the segment is sealed.
    def _read_attempts(self) -> dict[str, Any]:
        try:
            prev = orjson.loads(self.attempts_path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return {}
        return prev if isinstance(prev, dict) else {}

    def _write_attempts(self, progress: dict[str, Any]) -> None:
        self.attempts_path.write_bytes(orjson.dumps(progress))

    def _note_attempt(self, paths: list[Path]) -> tuple[list[Path], dict[str, Any] | None]:
        """Count an attempt at sealing ``paths``: (the segments to seal now, or the progress of
        sealing the first one record by record)."""
        names = [p.name for p in paths]
        prev = self._read_attempts()
        same = prev.get("segments", [None])[:1] == names[:1]
        if same and "next" in prev:
            return paths[:1], prev  # record by record, where the last attempt was
        attempts = int(prev.get("attempts", 0)) + 1 if same else 1
        if attempts > MAX_ATTEMPTS:
            return paths[:1], {"segments": names[:1], "attempts": attempts, "next": 0, "record_attempts": 0}
        # a single segment per attempt after a failure narrows down the poison
        if attempts > 1:
            paths, names = paths[:1], names[:1]
        self._write_attempts({"segments": names, "attempts": attempts})
        return paths, None

    def _seal_by_record(self, path: Path, progress: dict[str, Any]) -> SealStats:
        """Seal the records of ``path`` one at a time from ``progress["next"]``, quarantining a
        record that killed the sealer MAX_ATTEMPTS times; then delete the segment."""
        t0 = time.perf_counter()
        scan = spool.scan_segment(path)
        stats = SealStats(segments=1)
        i = int(progress.get("next", 0))
        tries = int(progress.get("record_attempts", 0))
        while i < len(scan.records):
            rec = scan.records[i]
            tries += 1
            if tries > MAX_ATTEMPTS:
                self.quarantine.put(
                    [rec],
                    f"record {i} of WAL segment {path.name}: the sealer died {MAX_ATTEMPTS} times on it",
                )
                stats.quarantined += 1
            else:
                self._write_attempts({**progress, "next": i, "record_attempts": tries})
                stats.records += 1
                self._write([self._map(rec, stats)], stats)
            i, tries = i + 1, 0
        self._write_attempts({**progress, "next": i, "record_attempts": 0})
        if not scan.intact:
            self.quarantine.put(
                [],
                f"corrupt record inside a closed segment: its intact prefix was sealed, the "
                f"{scan.total_bytes - scan.valid_bytes} bytes after it are not kept",
                name=path.name[: -len(spool.CLOSED_SUFFIX)],
            )
            stats.quarantined += 1
        path.unlink(missing_ok=True)
        stats.seconds = time.perf_counter() - t0
        return stats

    # -- sealing ----------------------------------------------------------------------------------
    def pending(self) -> list[Path]:
        return spool.closed_segments(self.wal_dir)

    def seal_available(self) -> SealStats | None:
        """Seal the oldest run of closed segments; None when there is nothing to seal."""
        segments = self.pending()
        if not segments:
            return None
        batch: list[Path] = []
        size = 0
        for path in segments:
            n = path.stat().st_size
            if batch and size + n > self.batch_bytes:
                break
            batch.append(path)
            size += n
        try:
            batch, by_record = self._note_attempt(batch)
        except OSError as e:  # the attempts file cannot be written: the disk again
            raise storage_error(e, self._local_folder()) from e
        try:
            stats = self.seal(batch) if by_record is None else self._seal_by_record(batch[0], by_record)
        except (OSError, StorageError) as e:
            # the disk, not the data: never count it towards quarantining a segment
            self.attempts_path.unlink(missing_ok=True)
            self._remove_own_staging()
            raise storage_error(e, self._local_folder()) from e
        self.attempts_path.unlink(missing_ok=True)
        return stats

    def seal(self, paths: list[Path]) -> SealStats:
        """Map, publish, persist the state, delete: see the module docstring."""
        t0 = time.perf_counter()
        stats = SealStats(segments=len(paths))
        broken: list[Path] = []
        payloads: list[_Payload] = []
        for path in paths:
            scan = spool.scan_segment(path)
            if not scan.intact:
                broken.append(path)
            for rec in scan.records:
                stats.records += 1
                payloads.append(self._map(rec, stats))
        self._write(payloads, stats)
        for path in paths:
            if path in broken:
                # the intact prefix is sealed; the damaged rest cannot be stripped of content: not kept
                scan = spool.scan_segment(path)
                self.quarantine.put(
                    [],
                    f"corrupt record inside a closed segment: its intact prefix was sealed, the "
                    f"{scan.total_bytes - scan.valid_bytes} bytes after it are not kept",
                    name=path.name[: -len(spool.CLOSED_SUFFIX)],
                )
                path.unlink(missing_ok=True)
                stats.quarantined += 1
            else:
                path.unlink(missing_ok=True)
        stats.seconds = time.perf_counter() - t0
        return stats

    def seal_records(self, records: list[spool.WalRecord]) -> SealStats:
        """Map and write ``records`` (``traceflow quarantine reseal``): what fails is quarantined anew."""
        t0 = time.perf_counter()
        stats = SealStats(records=len(records))
        self._write([self._map(rec, stats) for rec in records], stats)
        stats.seconds = time.perf_counter() - t0
        return stats

    def _write(self, payloads: list[_Payload], stats: SealStats) -> None:
        try:
            self._publish(payloads, stats)
            return
        except Exception as e:
            # The storage or the data? Encode every payload's rows in memory: those that fail are
            # isolated to their records (and quarantined); when none fails, the storage did.
            bad = [
                (p, why)
                for p in payloads
                if p.parsed is not None and (why := _unframable(p.parsed)) is not None
            ]
            if not bad:
                self.state = self._load_state()  # the in-memory state ran ahead of what is stored
                raise storage_error(e, self._local_folder()) from e
            _logger.warning(
                "sealing %d payloads failed (%s: %s); isolating %d of them",
                len(payloads),
                type(e).__name__,
                e,
                len(bad),
            )
            for p, why in bad:
                p.parsed, p.error = None, why
        try:
            self._publish(payloads, stats)
        except Exception as e:  # every row left encodes: the storage failed
            self.state = self._load_state()
            raise storage_error(e, self._local_folder()) from e

    def _local_folder(self) -> Path | None:
        """Where a probe write finds the reason of a failed local write (None for an object store)."""
        return self.lake.staging if self.lake.url is None else None

    def _remove_own_staging(self) -> None:
        """Remove the staging files this process left (a failed seal's: they hold space the disk lacks)."""
        if not self.lake.staging.exists():
            return
        with contextlib.suppress(OSError):
            for f in self.lake.staging.glob(f"*-{os.getpid()}-*.parquet"):
                f.unlink(missing_ok=True)

    def _publish(self, payloads: list[_Payload], stats: SealStats) -> None:
        """Isolate the payloads that failed (record by record), then write all rows, then the state."""
        for p in payloads:
            if p.parsed is None:
                p.parsed = self._isolate(p, stats)
        parsed = Parsed()
        for p in payloads:
            if p.parsed is not None:
                parsed.extend(p.parsed)
        staged = []
        rows: Counter[str] = Counter()
        for name, frame in _frames(parsed).items():
            staged += self.lake.write_staged(name, self.policy.frame(frame))
            rows[name] += frame.height
        self.lake.publish(staged)
        self._save_state()
        stats.rows.update(rows)

    def _isolate(self, p: _Payload, stats: SealStats) -> Parsed:
        """The rows of the records of ``p`` that can be stored; each other record is quarantined alone
        (the whole payload when it cannot be split: metrics, or a body that does not decode)."""
        rec = p.rec
        out = Parsed()
        try:
            msg = otlp.parse_body(rec.signal, rec.body, rec.content_type)
            singles = list(otlp.one_record_requests(rec.signal, msg))
        except Exception as e:
            singles, p.error = [], f"{p.error}; {type(e).__name__}: {e}"
        if not singles:
            self.quarantine.put([rec], p.error)
            stats.quarantined += 1
            return out
        self.state.clock_ns = rec.received_ns or None
        for _, i, one in singles:
            why = "nested too deeply to copy"
            if one is not None:
                try:
                    mapped = otlp.map_request(
                        rec.signal, one, state=self.state, keep_content=rec.keep_content
                    )
                    why = _unframable(mapped.parsed) or ""
                except Exception as e:
                    why = f"the mapping failed: {type(e).__name__}: {e}"
                if not why:
                    out.extend(mapped.parsed)
                    stats.rejected[rec.signal] += mapped.rejected
                    continue
            body = one.SerializeToString() if one is not None else b""
            single = spool.WalRecord(rec.signal, PROTOBUF, body, rec.keep_content, rec.received_ns)
            self.quarantine.put([single], f"record {i} of a {rec.signal} payload: {why}")
            stats.quarantined += 1
        return out

    def _map(self, rec: spool.WalRecord, stats: SealStats) -> _Payload:
        """Map ``rec`` ``CHUNK_RECORDS`` records at a time, each chunk's rows made a frame at once:
        the row dicts of a large request never exist all at once."""
        self.state.clock_ns = rec.received_ns or None  # staleness on the collector's clock
        out = Parsed()
        try:
            msg = otlp.parse_body(rec.signal, rec.body, rec.content_type)
            columnar = self._columnar(rec, msg)
            if columnar is not None:  # the api_request rows as columns, the other records as dicts
                requests, chunks = columnar
                out.frames.setdefault("requests", []).append(requests)
            else:
                chunks = otlp.map_request_chunks(
                    rec.signal, msg, state=self.state, keep_content=rec.keep_content, records=CHUNK_RECORDS
                )
            for mapped in chunks:
                for name, rows in mapped.parsed.tables().items():
                    if rows:
                        out.frames.setdefault(name, []).append(frame_from_rows(TABLES[name], rows))
                if mapped.rejected:
                    stats.rejected[rec.signal] += mapped.rejected
                    _logger.info(
                        "mapper rejected %d %s records: %s", mapped.rejected, rec.signal, mapped.message
                    )
                if mapped.overflow:
                    stats.overflow += mapped.overflow
                    _logger.warning("metrics: %s", mapped.message)
        except Exception as e:  # isolated to its records (and quarantined) before the rest is written
            _logger.warning(
                "could not map a %s payload from the WAL: %s: %s", rec.signal, type(e).__name__, e
            )
            return _Payload(rec, None, f"the mapping failed: {type(e).__name__}: {e}")
        return _Payload(rec, out)

    def _columnar(self, rec: spool.WalRecord, msg: Any) -> tuple[Any, Any] | None:
        """``traceflow.otlp.logs_columnar`` of a protobuf logs record (None: the dict path maps it,
        also when the columnar path fails, which is then logged)."""
        if not self.columnar or rec.signal != "logs" or not otlp.is_protobuf(rec.content_type):
            return None
        try:
            return map_logs_columnar(
                msg, rec.body, keep_content=rec.keep_content, source="otlp", records=CHUNK_RECORDS
            )
        except Exception as e:
            _logger.warning("columnar mapping failed, mapping with dicts: %s: %s", type(e).__name__, e)
            return None

    def seal_all(self) -> SealStats:
        """Seal until no closed segment is left."""
        total = SealStats()
        while (stats := self.seal_available()) is not None:
            _merge(total, stats)
        return total


@dataclass
class _Payload:
    """One WAL record and its rows (None until isolated, when mapping or framing it failed)."""

    rec: spool.WalRecord
    parsed: Parsed | None
    error: str = ""


def _table_frame(parsed: Parsed, name: str) -> Any:
    """One frame of ``parsed``'s rows and frames of table ``name`` (None when it has none)."""
    import polars as pl

    frames = [f for f in parsed.frames.get(name, []) if f.height]
    rows = parsed.tables()[name]
    if rows:
        frames.append(frame_from_rows(TABLES[name], rows))
    if not frames:
        return None
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=False)


def _frames(parsed: Parsed) -> dict[str, Any]:
    """:func:`_table_frame` of each table that has rows."""
    return {name: f for name in parsed.tables() if (f := _table_frame(parsed, name)) is not None}


def _unframable(parsed: Parsed) -> str | None:
    """Why ``parsed``'s rows cannot be stored anywhere: made into frames and encoded as Parquet in
    memory, as the lake writes them (None when they can)."""
    for name in parsed.tables():
        try:
            frame = _table_frame(parsed, name)
            if frame is not None:
                frame.write_parquet(io.BytesIO(), compression="zstd", statistics=True)
        except Exception as e:
            return f"{name} rows cannot be stored: {type(e).__name__}: {e}"
    return None


def _merge(total: SealStats, stats: SealStats) -> None:
    total.segments += stats.segments
    total.records += stats.records
    total.rows.update(stats.rows)
    total.rejected.update(stats.rejected)
    total.quarantined += stats.quarantined
    total.overflow += stats.overflow
    total.seconds += stats.seconds


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL us when the server dies (kill -9 included); elsewhere, poll getppid."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def _emit(stats: SealStats) -> None:
    _emit_line(stats.to_json())


def _emit_line(line: bytes) -> None:
    with contextlib.suppress(OSError):  # the server is gone: PR_SET_PDEATHSIG ends us
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()


class _StorageOutage:
    """The lake writes failing since ``since``: the retry delay, and what the server was told."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.delay = STORAGE_RETRY_S[0]

    def failed(self, e: StorageError, pending: int) -> float:
        """Log and report ``e``; returns the seconds to wait before the next try."""
        now = time.time()
        if self.since is None:
            self.since, self.delay = now, STORAGE_RETRY_S[0]
        else:
            self.delay = min(self.delay * 2, STORAGE_RETRY_S[1])
        _logger.error(
            "%s; nothing is quarantined: %d WAL segments wait, sealing again in %.0f s",
            e,
            pending,
            self.delay,
        )
        _emit_line(
            orjson.dumps(
                {"storage_error": str(e), "since": self.since, "retry_in_s": self.delay, "segments": pending}
            )
        )
        return self.delay

    def recovered(self) -> None:
        if self.since is not None:
            _logger.warning(
                "the lake can be written again after %.0f s; sealing the backlog", time.time() - self.since
            )
            _emit_line(orjson.dumps({"storage_error": None}))
        self.since = None


#: How long ``serve --retain`` waits before trying again when another maintenance run holds the lake.
RETAIN_RETRY_S = 600.0


def _retain(lake: Lake, retain_s: float | None, due: float) -> float:
    """``serve --retain``: drop the day partitions older than ``retain_s`` once ``due`` (a monotonic
    time) has come, then once a day (:func:`traceflow.store.retention.retain`); the next due time."""
    now = time.monotonic()
    if retain_s is None or now < due:
        return due
    from traceflow.store.maintenance import LakeBusy
    from traceflow.store.retention import retain

    try:
        removals = retain(lake, retain_s, wait=False)  # sealing never waits for a compaction
    except LakeBusy as e:
        _logger.info("retention postponed by %.0f s: %s", RETAIN_RETRY_S, e)
        return now + RETAIN_RETRY_S
    except Exception:  # the next day's run tries again; sealing goes on
        _logger.exception("retention (--retain) failed")
    else:
        if removals:
            _logger.info(
                "retention: dropped %d partitions (%d stored rows) older than %.0f days",
                len(removals),
                sum(r.rows for r in removals),
                retain_s / 86_400,
            )
    return now + 86_400


def _warm_columnar(sealer: Sealer) -> None:
    """Load the columnar mapping's kernels, then let ``sealer`` use them."""
    try:
        cpu = columnar_warm()
    except Exception as e:  # the dict path still maps everything
        _logger.warning("columnar mapping unavailable: %s: %s", type(e).__name__, e)
        return
    _logger.info("columnar mapping ready (%.2f CPU s to load)", cpu)
    sealer.columnar = True


def run(
    data: str,
    *,
    parent: int,
    interval_s: float,
    wal_dir: Path | None = None,
    policy: AttributePolicy | None = None,
    retain_s: float | None = None,
    started_ns: int | None = None,
) -> int:
    """The sealer process's main loop (see the module docstring for the protocol)."""
    _die_with_parent(parent)
    allocator.return_freed_memory()
    # The server decides when we stop (``stop`` on stdin); a service manager's SIGTERM to the whole
    # group must not cut a seal short. If the server dies, PR_SET_PDEATHSIG ends us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Acknowledging (latency-bound) wins over sealing (throughput-bound, buffered by the WAL) when
    # the two compete for a core; the backlog bound turns a sealer that cannot keep up into 503s.
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    sealer = Sealer(data, wal_dir=wal_dir, policy=policy, started_ns=started_ns)
    retain_due = time.monotonic()
    lock = spool.lock_file(sealer.dir / "sealer.lock", blocking=True)
    assert lock is not None
    try:
        sealer.lake.clean_staging(older_than_s=3600)
    except OSError as e:  # leftovers of another writer are not ours to fail on
        _logger.warning("could not clean the lake's staging folder: %s", e)
    # the kernels load in the background (1-2 CPU s; seconds of wall time on a busy machine), the
    # dict path sealing meanwhile, so that the first records are in the lake within seconds
    sealer.columnar = False
    threading.Thread(target=_warm_columnar, args=(sealer,), name="columnar-warm", daemon=True).start()
    stopping = False
    stdin = sys.stdin.buffer
    outage = _StorageOutage()
    while True:
        wait = interval_s
        try:
            stats = sealer.seal_available()
        except StorageError as e:
            wait, stats = outage.failed(e, len(sealer.pending())), None
            if stopping:
                _logger.error("stopping with the WAL unsealed; it is sealed on the next start")
                return 1
        except Exception:
            _logger.exception("sealing failed; retrying in %.0f s", max(interval_s, 1.0))
            stats = None
            time.sleep(max(interval_s, 1.0))
        else:
            if stats is not None:
                allocator.trim()  # a large seal's frames and decoded messages are freed now
                outage.recovered()
                _emit(stats)
                continue  # more may be waiting
            outage.recovered()
            retain_due = _retain(sealer.lake, retain_s, retain_due)  # idle: nothing left to seal
        if stopping and outage.since is None:
            return 0
        ready, _, _ = select.select([stdin], [], [], wait)
        if ready:
            line = stdin.readline()
            if not line or line.strip() == b"stop":
                stopping = True  # seal what is left, then exit
        if os.getppid() != parent:
            stopping = True


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m traceflow.collectors.sealer", description=__doc__.split("\n")[0]
    )
    p.add_argument("data", help="data directory or s3://bucket/prefix")
    p.add_argument("--wal-dir", type=Path, default=None)
    p.add_argument("--parent", type=int, default=os.getppid())
    p.add_argument("--interval", type=float, default=0.2, help="seconds between looks for closed segments")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--drop-attr", action="append", default=[], help="attribute removed before storing")
    p.add_argument("--hash-attr", action="append", default=[], help="attribute stored as a keyed hash")
    p.add_argument("--retain", type=float, default=None, help="seconds: drop older partitions daily")
    p.add_argument("--started-ns", type=int, default=None, help="when the server began receiving")
    a = p.parse_args(argv)
    logging.basicConfig(
        level=a.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s traceflow.sealer: %(message)s"
    )
    policy = AttributePolicy.from_settings(a.drop_attr, a.hash_attr)
    return run(
        a.data,
        parent=a.parent,
        interval_s=a.interval,
        wal_dir=a.wal_dir,
        policy=policy,
        retain_s=a.retain,
        started_ns=a.started_ns,
    )


if __name__ == "__main__":
    sys.exit(_main())
