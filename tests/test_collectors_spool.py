"""The collector's write-ahead log: framing, group commit, rolling, crash recovery."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from traceflow.collectors import spool
from traceflow.collectors.spool import Wal, WalRecord


def _rec(i: int, size: int = 100) -> WalRecord:
    return WalRecord(
        "logs", "application/x-protobuf", bytes([i % 256]) * size, keep_content=i % 2 == 0, received_ns=i
    )


def test_records_round_trip_through_a_segment(tmp_path: Path) -> None:
    wal = Wal(tmp_path, roll_interval_s=60)
    wal.start()
    recs = [_rec(i, size=i * 10) for i in range(20)] + [
        WalRecord("metrics", "application/json", b"{}"),
        WalRecord("traces", "application/x-protobuf", b""),
    ]
    for r in recs:
        wal.append_blocking(r)
    wal.close()
    (seg,) = spool.closed_segments(tmp_path)
    scan = spool.scan_segment(seg)
    assert scan.intact
    assert scan.records == recs


def test_concurrent_appends_share_fsyncs(tmp_path: Path) -> None:
    wal = Wal(tmp_path, roll_interval_s=60)
    wal.start()

    async def main() -> None:
        await asyncio.gather(*(wal.append(_rec(i, 10_000)) for i in range(400)))

    asyncio.run(main())
    wal.close()
    assert wal.stats.records == 400
    assert wal.stats.commits < 400  # group commit: one fdatasync acknowledged several requests
    assert sum(len(spool.scan_segment(p).records) for p in spool.closed_segments(tmp_path)) == 400


def test_blocking_appends_from_threads(tmp_path: Path) -> None:
    wal = Wal(tmp_path, roll_interval_s=60)
    wal.start()
    threads = [
        threading.Thread(target=lambda k=k: [wal.append_blocking(_rec(k * 100 + i)) for i in range(50)])
        for k in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wal.close()
    assert wal.stats.records == 400


def test_segments_roll_by_size_and_by_time(tmp_path: Path) -> None:
    wal = Wal(tmp_path, segment_bytes=1000, roll_interval_s=0.2)
    wal.start()
    for i in range(5):
        wal.append_blocking(_rec(i, 600))  # each append closes the segment (over 1000 bytes by then)
    assert len(spool.closed_segments(tmp_path)) >= 2
    wal.append_blocking(_rec(9, 10))
    time.sleep(0.6)  # idle: the open segment is closed by age
    assert not list(tmp_path.glob("*.open"))
    wal.close()
    total = [r for p in spool.closed_segments(tmp_path) for r in spool.scan_segment(p).records]
    assert [r.received_ns for r in total] == [0, 1, 2, 3, 4, 9]


def test_recovery_cuts_a_torn_tail_and_closes_the_segment(tmp_path: Path) -> None:
    recs = [_rec(i) for i in range(3)]
    seg = tmp_path / f"{7:020d}.open"
    data = b"".join(spool.encode_header(r) + r.body for r in recs)
    torn = spool.encode_header(_rec(3)) + _rec(3).body[:10]
    seg.write_bytes(data + torn)
    cut = spool.recover(tmp_path)
    assert cut == len(torn)
    (closed,) = spool.closed_segments(tmp_path)
    assert closed.name == f"{7:020d}.wal"
    assert spool.scan_segment(closed).records == recs
    # a new writer continues after the highest sequence number
    wal = Wal(tmp_path)
    wal.start()
    wal.append_blocking(_rec(5))
    wal.close()
    assert [p.name for p in spool.closed_segments(tmp_path)] == [f"{7:020d}.wal", f"{8:020d}.wal"]


def test_corruption_stops_the_scan(tmp_path: Path) -> None:
    recs = [_rec(i) for i in range(3)]
    raw = bytearray(b"".join(spool.encode_header(r) + r.body for r in recs))
    second = spool.HEADER.size + 100
    raw[second + spool.HEADER.size + 5] ^= 0xFF  # flip a byte in the second body: CRC mismatch
    seg = tmp_path / "00000000000000000001.wal"
    seg.write_bytes(bytes(raw))
    scan = spool.scan_segment(seg)
    assert scan.records == recs[:1]
    assert not scan.intact


def test_an_empty_open_segment_is_removed(tmp_path: Path) -> None:
    (tmp_path / f"{3:020d}.open").write_bytes(b"")
    spool.recover(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_append_after_close_is_refused(tmp_path: Path) -> None:
    wal = Wal(tmp_path)
    wal.start()
    wal.close()
    with pytest.raises(RuntimeError):
        wal.append_blocking(_rec(1))


def test_lock_file_is_exclusive(tmp_path: Path) -> None:
    first = spool.lock_file(tmp_path / "x.lock", blocking=False)
    assert first is not None
    assert spool.lock_file(tmp_path / "x.lock", blocking=False) is None
    first.close()
    again = spool.lock_file(tmp_path / "x.lock", blocking=False)
    assert again is not None
    again.close()
