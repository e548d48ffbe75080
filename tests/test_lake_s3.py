"""The lake on an object store: an S3 test server (moto) started here, written by imports and by
collectors, read back with the same results as the same data on local disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest

from tests.collectors_support import Server, api_request_logs, wait_for, wait_while_working
from tests.conftest import EXAMPLES, FULL, TESTDATA, s3_test_server
from traceflow.store.lake import Lake

PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with s3_test_server(tmp_path_factory.mktemp("state")):
        yield {**os.environ}


@pytest.fixture
def bucket(s3_env: dict[str, str]) -> str:
    """A fresh bucket's lake URL."""
    import boto3  # type: ignore[import-untyped]

    name = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return f"s3://{name}/traceflow"


def _traceflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "traceflow", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return r


def _read(env: dict[str, str], *args: str) -> str:
    """What ``traceflow ARGS`` prints, run in this process (the lake is written by subprocesses)."""
    from typer.testing import CliRunner

    from traceflow.cli.app import app, register_all

    register_all()
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0 and result.exception is None, (result.exception, result.stderr)
    return result.stdout


def _same(env: dict[str, str], data: str, other: str, *command: str) -> bool:
    """``traceflow COMMAND --format json`` prints the same on both lakes."""
    args = [*command, "--format", "json", "--data"]
    return _read(env, *args, data) == _read(env, *args, other)


def _mix(env: dict[str, str], data: str) -> object:
    return orjson.loads(_read(env, "mix", "--data", data, "--format", "json"))


#: The Mooncake requests each import here reads: the whole conversation trace on CI (``FULL``, about
#: 12,000 requests), its first 2,000 in a local run (each import of the whole trace is a subprocess
#: that costs seconds of CPU, and the S3 lake's behaviour does not depend on the count).
MOONCAKE_REQUESTS = None if FULL else 2_000


def _mooncake(folder: Path) -> str:
    """The Mooncake conversation trace, or its first :data:`MOONCAKE_REQUESTS` requests in ``folder``."""
    trace = TESTDATA / "mooncake_conversation_trace.jsonl"
    if MOONCAKE_REQUESTS is None:
        return str(trace)
    path = folder / trace.name
    with trace.open("rb") as src:
        path.write_bytes(b"".join(line for _, line in zip(range(MOONCAKE_REQUESTS), src, strict=False)))
    return str(path)


def _raw(lake: Lake, sql: str) -> list[tuple[object, ...]]:
    """``sql`` over every stored row of ``requests`` (no dedup), as ``raw``."""
    import duckdb

    con = duckdb.connect()
    lake._register(con)
    files = lake.file_names("requests")
    con.execute(f"CREATE VIEW raw AS SELECT * FROM read_parquet({files!r}, union_by_name = true)")
    return con.execute(sql).fetchall()


def test_import_compact_and_mix_on_s3_match_local_disk(
    s3_env: dict[str, str], bucket: str, tmp_path: Path
) -> None:
    local = str(tmp_path / "local")
    trace = _mooncake(tmp_path)
    otlp = str(EXAMPLES / "claude-otlp-logs.json")
    for data in (local, bucket):
        _traceflow(s3_env, "import", "mooncake", trace, "--data", data)
        _traceflow(s3_env, "import", "otlp-json", otlp, "--data", data)
    lake = Lake(bucket)
    assert lake.file_names("requests") and all(
        f.startswith(bucket + "/v1/requests/dt=") for f in lake.file_names("requests")
    )
    assert not any(lake.store.list(bucket + "/v1/_staging/"))  # staging stays on local disk
    # the import offsets are this machine's: a second import adds nothing, the store is unchanged
    before = lake.file_names("requests")
    _traceflow(s3_env, "import", "mooncake", trace, "--data", bucket)
    assert lake.file_names("requests") == before
    assert _mix(s3_env, bucket) == _mix(s3_env, local)
    assert _same(s3_env, bucket, local, "gaps") and _same(s3_env, bucket, local, "sessions")

    for data in (local, bucket):
        _traceflow(s3_env, "compact", "--data", data)
    assert lake._deduped("requests") == set(lake.file_names("requests"))
    assert lake.fresh_derived("request_steps") is not None  # stored on the store, fresh
    con = lake.connect()
    row = con.execute("SELECT comment FROM duckdb_views() WHERE view_name = 'request_steps'").fetchone()
    assert row is not None and row[0]  # the analyses read the stored view
    con.close()
    assert _mix(s3_env, bucket) == _mix(s3_env, local)
    assert _same(s3_env, bucket, local, "gaps") and _same(s3_env, bucket, local, "sessions")
    # compacting again changes nothing; markers are new objects, never overwritten, two kept
    assert lake.compact("requests") == (len(lake.file_names("requests")),) * 2
    _traceflow(
        s3_env,
        "import",
        "otlp-json",
        str(EXAMPLES / "codex-otlp-logs.json"),
        "--data",
        bucket,
    )
    lake.compact("requests")
    lake.compact("requests")
    assert len(lake._marker_names("deduped", "requests")) == 2


def test_files_are_never_overwritten(s3_env: dict[str, str], bucket: str) -> None:
    lake = Lake(bucket)
    lake.store.put(bucket + "/x.json", b"1")
    with pytest.raises(FileExistsError):
        lake.store.put(bucket + "/x.json", b"2")
    assert lake.store.read(bucket + "/x.json") == b"1"


def test_two_importers_at_once_lose_and_duplicate_nothing(
    s3_env: dict[str, str], bucket: str, tmp_path: Path
) -> None:
    sources = [
        ("mooncake", _mooncake(tmp_path)),
        ("mooncake", str(TESTDATA / "mooncake_synthetic_trace.jsonl")),
    ]
    # two machines: each its own local state (import offsets, staging)
    procs = []
    for i, (source, path) in enumerate(sources):
        env = {**s3_env, "XDG_STATE_HOME": str(tmp_path / f"machine{i}")}
        cmd = [sys.executable, "-m", "traceflow", "import", source, path, "--data", bucket]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    local = str(tmp_path / "local")
    for source, path in sources:
        _traceflow(s3_env, "import", source, path, "--data", local)
    lake = Lake(bucket)
    ((rows, ids),) = _raw(lake, "SELECT count(*), count(DISTINCT event_id) FROM raw")
    ((local_rows,),) = _raw(Lake(local), "SELECT count(*) FROM raw")
    assert rows == ids == local_rows
    assert _mix(s3_env, bucket) == _mix(s3_env, local)


def _send(url: str, n: int, tag: str) -> list[str]:
    req, ids = api_request_logs(n, tag=tag)
    assert httpx.post(url + "/v1/logs", content=req.SerializeToString(), headers=PB).status_code == 200
    return ids


def test_two_collectors_and_compaction_while_they_write(
    s3_env: dict[str, str], bucket: str, tmp_path: Path
) -> None:
    servers = [
        Server(Path(bucket), "--wal-dir", str(tmp_path / f"wal{i}"), env=s3_env).start() for i in range(2)
    ]
    lake = Lake(bucket)
    sent: list[str] = []
    stop = threading.Event()

    def writer(srv: Server, tag: str) -> None:
        k = 0
        while not stop.is_set():
            sent.extend(_send(srv.http_url, 25, f"{tag}{k}x"))
            k += 1
            time.sleep(0.05)

    threads = [threading.Thread(target=writer, args=(s, f"c{i}")) for i, s in enumerate(servers)]
    try:
        for t in threads:
            t.start()
        for _ in range(3):  # compaction with both collectors publishing
            time.sleep(1.0)
            lake.compact("requests")
        stop.set()
        for t in threads:
            t.join()
        for s in servers:
            assert s.stop() == 0  # seals everything acknowledged
    finally:
        stop.set()
        for s in servers:
            s.kill()
    assert len(sent) == len(set(sent)) > 100
    ((_, distinct),) = _raw(lake, "SELECT count(*), count(DISTINCT request_id) FROM raw")
    assert distinct == len(sent)  # nothing lost
    con = lake.connect(["requests"])
    assert con.execute("SELECT count(*), count(DISTINCT request_id) FROM requests").fetchone() == (
        len(sent),
        len(sent),
    )
    con.close()
    lake.compact("requests")
    assert _raw(lake, "SELECT count(*), count(DISTINCT request_id) FROM raw") == [(len(sent), len(sent))]


def _sealer_of(srv: Server) -> int:
    """The pid of a collector's sealer process (its only child)."""
    assert srv.proc is not None
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == srv.proc.pid:
            children.append(int(stat.parent.name))
    assert len(children) == 1, children
    return children[0]


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot); None when there is none, or a zombie
    (dead, its reaper has not yet collected it). A pid is reused once the process is gone (pid_max
    may be 32768, and a busy machine goes through that many threads in seconds)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _holds_sealer_lock(pid: int) -> bool:
    """Whether sealer ``pid`` holds its ``sealer.lock``: it took it after asking Linux for SIGKILL
    when its server dies (PR_SET_PDEATHSIG, collectors/sealer.py ``run``)."""
    try:
        return any(os.readlink(fd).endswith("/sealer.lock") for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def _gone(pid: int, started: int) -> bool:
    """Whether the process that started at ``started`` as ``pid`` has died."""
    return _started(pid) != started


def _sigkilled(pid: int, started: int) -> bool:
    """Whether that process has died or has a SIGKILL pending (which it cannot block, ignore or catch: it
    never runs its own code again). Dying takes a process time of its own, its threads woken and its
    memory released, which a loaded machine gives a niced sealer late."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    if _gone(pid, started):  # status was read first: if still the same process, it was its status
        return True
    pending = 0
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd"):  # the thread's pending signals, the process's
            pending |= int(value, 16)
    return bool(pending & (1 << (signal.SIGKILL - 1)))


def test_three_collectors_one_killed_9_lose_and_duplicate_nothing(
    s3_env: dict[str, str], bucket: str, tmp_path: Path
) -> None:
    """3 collectors into one S3 lake under load; one is killed with SIGKILL while it holds
    acknowledged but unsealed records, and restarted on the same WAL: every acknowledged record is
    stored, and the views hold each once (a request in flight at the kill, retried, is stored twice
    and deduplicated)."""
    wals = [tmp_path / f"wal{i}" for i in range(3)]

    def start(i: int) -> Server:
        return Server(Path(bucket), "--wal-dir", str(wals[i]), "--roll-interval", "0.2", env=s3_env).start()

    with ThreadPoolExecutor(3) as pool:  # each start imports traceflow: in parallel
        servers = list(pool.map(start, range(3)))
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def exporter(i: int) -> None:
        """One request in flight; a failed one is sent again as it was, as the SDKs' exporters do."""
        k, body, ids = 0, b"", []
        with httpx.Client(timeout=10) as client:
            while not stop.is_set() or body:
                if not body:
                    req, ids = api_request_logs(20, tag=f"c{i}_{k}_")
                    body, k = req.SerializeToString(), k + 1
                try:
                    r = client.post(servers[i].http_url + "/v1/logs", content=body, headers=PB)
                except httpx.HTTPError:
                    time.sleep(0.05)  # the collector is down: retry the same payload
                    continue
                if r.status_code == 200 and r.content == b"":
                    with lock:
                        acked.extend(ids)
                    body = b""
                time.sleep(0.01)

    # daemons: one retrying a payload to a dead collector must not keep a failed run from ending
    threads = [threading.Thread(target=exporter, args=(i,), daemon=True) for i in range(3)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)
        # stop the victim's sealer so that what it acknowledges stays in its WAL, then kill -9
        sealer = _sealer_of(servers[0])
        started = _started(sealer)
        assert started is not None
        # a sealer stopped while still importing (seconds on a loaded machine) never asked for the
        # SIGKILL, and would stay stopped for ever: stop it once it runs
        assert wait_while_working(servers[0], lambda: _holds_sealer_lock(sealer))
        os.kill(sealer, signal.SIGSTOP)
        time.sleep(0.8)
        with lock:
            acked_by_victim = [r for r in acked if r.startswith("req_c0_")]
        assert servers[0].proc is not None
        servers[0].proc.kill()
        servers[0].proc.wait(10)
        # the server's death sends the sealer SIGKILL (PR_SET_PDEATHSIG) before wait() returns
        assert wait_for(lambda: _sigkilled(sealer, started), 10), "the sealer outlived its server"
        assert acked_by_victim and any(wals[0].glob("wal/*")), "nothing was left unsealed at the kill"
        servers[0] = start(0)  # same WAL: what it acknowledged and had not sealed is sealed now
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(30)
        with ThreadPoolExecutor(3) as pool:
            assert list(pool.map(Server.stop, servers)) == [0, 0, 0]  # seals everything acknowledged
    finally:
        stop.set()
        for s in servers:
            s.kill()
    assert wait_for(lambda: _gone(sealer, started), 60), "the killed sealer is still there"
    assert not any(any(w.glob("wal/*")) for w in wals)
    assert len(acked) == len(set(acked)) > 300
    lake = Lake(bucket)
    con = lake.connect(["requests"])
    stored = {r for (r,) in con.execute("SELECT request_id FROM requests").fetchall()}
    rows, events = con.execute("SELECT count(*), count(DISTINCT event_id) FROM requests").fetchone() or (0, 0)
    con.close()
    assert set(acked_by_victim) <= set(acked) <= stored  # acknowledged = stored
    assert rows == events == len(stored)  # no duplicates in the views
    assert stored == set(acked)  # every request was retried until acknowledged
    ((raw_rows, raw_events),) = _raw(lake, "SELECT count(*), count(DISTINCT event_id) FROM raw")
    assert raw_events == len(stored) and raw_rows >= raw_events  # retries may store a payload twice
