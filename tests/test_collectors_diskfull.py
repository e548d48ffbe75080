"""A lake that cannot be written (disk full, file size limit) is never a reason to quarantine.

Two real limits, no fakes: ``RLIMIT_FSIZE`` on a sealer subprocess (any user, any machine) makes every
Parquet write fail with ``EFBIG``; a small tmpfs (needs root: skipped elsewhere) fills and frees again
under a running ``traceflow serve``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from collectors_support import Server, api_request_logs, count_requests, wait_for

from traceflow.collectors import spool
from traceflow.collectors.quarantine import Quarantine
from traceflow.collectors.sealer import MAX_ATTEMPTS, Sealer

PB = "application/x-protobuf"

_LIMITED_SEAL = """
import resource, signal, sys
from traceflow.collectors.sealer import Sealer, StorageError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))
try:
    Sealer(sys.argv[1]).seal_available()
except StorageError as e:
    print("storage error:", e)
    sys.exit(3)
print("sealed")
"""


def _write_wal(data: Path, bodies: list[bytes]) -> None:
    wal = spool.Wal(spool.collector_dir(data) / "wal", roll_interval_s=3600)
    wal.start()
    for body in bodies:
        wal.append_blocking(spool.WalRecord("logs", PB, body))
    wal.close()


def test_a_lake_that_cannot_be_written_keeps_the_wal_and_quarantines_nothing(tmp_path: Path) -> None:
    requests = [api_request_logs(20) for _ in range(3)]
    _write_wal(tmp_path, [req.SerializeToString() for req, _ in requests])
    wal_dir = spool.collector_dir(tmp_path) / "wal"
    segments = spool.closed_segments(wal_dir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(MAX_ATTEMPTS + 2):  # more failures than it takes to quarantine a crashing segment
        done = subprocess.run(
            [sys.executable, "-c", _LIMITED_SEAL, str(tmp_path)],
            capture_output=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 3, done.stdout + done.stderr
        assert b"storage error:" in done.stdout
        assert spool.closed_segments(wal_dir) == segments
        assert not Quarantine.of(tmp_path).entries()
    staging = tmp_path / "v1" / "_staging"
    assert not staging.exists() or not list(staging.iterdir()), "a failed seal leaves no staging file"
    stats = Sealer(tmp_path).seal_all()  # the limit is gone: everything is sealed
    assert stats.quarantined == 0
    ids = [rid for _, rids in requests for rid in rids]
    assert count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == len(ids) == 60
    assert not spool.closed_segments(wal_dir)


# -- a tmpfs that fills and frees again under a running collector ----------------------------------------
@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "fs"
    mnt.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("no mount(8) here")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=20)


def _fill(fs: Path) -> Path:
    """Fill ``fs`` to the last byte; returns the filler to remove."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 16, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def _post(client: httpx.Client, url: str, body: bytes) -> httpx.Response:
    return client.post(url + "/v1/logs", content=body, headers={"content-type": PB})


def test_a_full_disk_loses_and_quarantines_nothing_acknowledged(tmp_path: Path, small_fs: Path) -> None:
    """The lake on a full tmpfs (the WAL elsewhere): acknowledged payloads wait in the WAL, the
    collector says why (status, log), answers 503 + Retry-After once the backlog bound is reached, and
    seals everything when space returns."""
    data = small_fs / "lake"
    wal_dir = tmp_path / "wal"
    acked: list[str] = []
    throttled = 0
    with Server(
        data,
        *("--wal-dir", str(wal_dir), "--max-backlog-bytes", "64KiB"),
        *("--roll-interval", "0.05", "--summary-interval", "0.5"),
    ) as srv:
        client = httpx.Client(timeout=30)
        first, ids = api_request_logs(5)
        assert _post(client, srv.http_url, first.SerializeToString()).status_code == 200
        acked += ids
        assert wait_for(lambda: count_requests(data) == 5, 30)
        filler = _fill(small_fs)
        for _ in range(40):
            req, ids = api_request_logs(20)
            r = _post(client, srv.http_url, req.SerializeToString())
            if r.status_code == 200:
                acked += ids
            else:
                assert r.status_code == 503 and int(r.headers["retry-after"]) > 0, r.text
                throttled += 1
            time.sleep(0.05)
        assert throttled, "a backlog the full lake cannot take is answered 503"
        assert len(acked) > 5

        def failing() -> bool:
            status = orjson.loads(client.get(srv.http_url + "/status").content)
            return bool(status["lake"]["error"])

        assert wait_for(failing, 30), "the status says the lake cannot be written"
        status = orjson.loads(client.get(srv.http_url + "/status").content)
        assert "No space left on device" in status["lake"]["error"], status
        time.sleep(3)  # several failed seals: MAX_ATTEMPTS of them used to quarantine the segment
        assert not Quarantine(spool.collector_dir(data, wal_dir) / "quarantine").entries()
        filler.unlink()
        assert wait_for(lambda: count_requests(data) == len(acked), 60), (count_requests(data), len(acked))
        assert wait_for(
            lambda: not orjson.loads(client.get(srv.http_url + "/status").content)["lake"]["error"], 30
        )
        client.close()
    assert srv.proc is not None and srv.proc.returncode == 0
    log = srv.stderr()
    assert "No space left on device" in log and "nothing is quarantined" in log  # the sealer's line
    assert "LAKE WRITES FAILING since" in log  # the summary line
    assert "the lake can be written again" in log
    assert count_requests(data, "list_contains(?, request_id)", [acked]) == len(acked)
    assert not Quarantine(spool.collector_dir(data, wal_dir) / "quarantine").entries()


def test_a_full_disk_under_the_wal_too_answers_503_and_loses_nothing(tmp_path: Path, small_fs: Path) -> None:
    """Lake and write-ahead log on one full tmpfs: requests get 503 + Retry-After (nothing is
    acknowledged that is not durable), a batch torn by the full disk is cut off (not quarantined as
    damage), and once space returns every acknowledged record is stored."""
    data = small_fs / "lake"
    acked: list[str] = []
    throttled = 0
    with Server(data, "--roll-interval", "3") as srv:  # one segment takes the acked and the torn
        client = httpx.Client(timeout=30)
        filler = _fill(small_fs)
        os.truncate(filler, filler.stat().st_size - (48 << 10))  # room for half a payload: torn writes
        small, ids = api_request_logs(5)
        assert _post(client, srv.http_url, small.SerializeToString()).status_code == 200
        acked += ids
        for _ in range(5):
            req, ids = api_request_logs(200)  # ~100 KB: more than is left
            r = _post(client, srv.http_url, req.SerializeToString())
            if r.status_code == 200:
                acked += ids
            else:
                assert r.status_code == 503 and int(r.headers["retry-after"]) > 0, r.text
                throttled += 1
        assert throttled
        filler.unlink()
        for _ in range(10):
            req, ids = api_request_logs(20)
            r = _post(client, srv.http_url, req.SerializeToString())
            assert r.status_code == 200, r.text
            acked += ids
        assert wait_for(lambda: count_requests(data) >= len(acked), 60), (count_requests(data), len(acked))
        client.close()
    assert count_requests(data, "list_contains(?, request_id)", [acked]) == len(acked)
    assert not Quarantine.of(data).entries()
