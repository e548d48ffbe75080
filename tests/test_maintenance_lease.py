"""The maintenance lease of an ``s3://`` lake (traceflow.store.lease) against moto's S3 server: two
machines' ``compact``, ``retain`` and ``forget`` run one at a time. A "machine" is a Lake with a
local folder of its own (its staging files and, before the lease, its lock file) and an owner id of
its own; the lease object on the store is all they share."""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import s3_test_server
from tests.test_maintenance_lock import REMOVALS, _run, _stored
from tests.test_retention import _fill, _ids
from traceflow.errors import UsageError
from traceflow.schema import TABLES
from traceflow.store import retention
from traceflow.store.lake import Lake
from traceflow.store.lease import LEASE_NAME, Holder, Lease, LeaseLost, lease_seconds
from traceflow.store.maintenance import LakeBusy, maintenance


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with s3_test_server(tmp_path_factory.mktemp("state")) as env:
        yield env


@pytest.fixture
def url(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket's lake URL; leases of 1 s, so that a test sees several renewals and expiries."""
    import boto3  # type: ignore[import-untyped]

    name = f"lease-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    monkeypatch.setenv("TRACEFLOW_LEASE_SECONDS", "1")
    return f"s3://{name}/traceflow"


def _machine(url: str, folder: Path) -> Lake:
    """The lake as another machine sees it: the same store, its own local folder."""
    lake = Lake(url)
    lake.root = folder
    lake.base = folder / "v1"
    return lake


def _lease(lake: Lake) -> dict[str, Any]:
    data = lake.store.read(f"{lake.published_base}/_state/{LEASE_NAME}")
    assert data is not None
    value: dict[str, Any] = json.loads(data)
    return value


def test_the_second_machine_waits_until_the_first_releases(url: str, tmp_path: Path) -> None:
    first, second = _machine(url, tmp_path / "a"), _machine(url, tmp_path / "b")
    entered, errors = threading.Event(), []
    with maintenance(first, "compact"):
        holder = _lease(first)
        assert (holder["what"], holder["released"]) == ("compact", False)
        busy = re.escape(f"{holder['owner']} holds its maintenance lease for compact")
        with pytest.raises(LakeBusy, match=busy), maintenance(second, "retain", wait=False):
            pass
        waiter = _run("forget", lambda: _enter(second, entered), errors)
        # three lease lengths: the first machine renewed its lease, so it did not expire
        assert not entered.wait(3), "the second machine ran while the first held the lease"
        assert _lease(first)["owner"] == holder["owner"]
        assert _lease(first)["renewed"] != holder["renewed"]
    assert entered.wait(60), errors  # released: the second goes on at once
    waiter.join(60)
    assert errors == []
    after = _lease(first)
    assert after["owner"] != holder["owner"] and (after["what"], after["released"]) == ("forget", True)


def _enter(lake: Lake, entered: threading.Event) -> None:
    with maintenance(lake, "forget"):
        entered.set()


def test_an_expired_lease_is_taken_over(url: str, tmp_path: Path) -> None:
    lake = _machine(url, tmp_path / "a")
    crashed = {
        "owner": "crashed-host:1:0",
        "what": "compact",
        "seconds": 1,
        "renewed": "2026-01-01T00:00:00+00:00",
        "expires": "2026-01-01T00:00:01+00:00",
        "released": False,
    }
    assert lake.store.create(f"{lake.published_base}/_state/{LEASE_NAME}", json.dumps(crashed).encode())
    with maintenance(lake, "forget"):  # the crashed run's lease went unrenewed for its length
        assert _lease(lake)["owner"] not in ("", crashed["owner"])
    assert _lease(lake)["released"] is True


def test_of_machines_racing_for_a_lease_one_gets_it(url: str, tmp_path: Path) -> None:
    lake = _machine(url, tmp_path / "a")
    name = f"{lake.published_base}/_state/{LEASE_NAME}"
    clock = [0.0]
    racers = [Lease(lake.store, name, "compact", seconds=1, clock=lambda: clock[0]) for _ in range(6)]

    def race(contenders: list[Lease]) -> list[bool]:
        won: list[bool] = [False] * len(contenders)
        start = threading.Barrier(len(contenders))

        def go(i: int) -> None:
            start.wait()
            won[i] = contenders[i].try_take()

        threads = [threading.Thread(target=go, args=(i,)) for i in range(len(contenders))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return won

    first = race(racers)  # no lease object yet: If-None-Match lets one create it
    assert first.count(True) == 1
    holder = racers[first.index(True)]
    others = [r for r in racers if r is not holder]
    assert race(others).count(True) == 0  # held and not yet expired (no time passed on the clock)
    clock[0] = 5.0  # the holder stalled: five lease lengths without a renewal
    second = race(others)  # If-Match over the expired version lets one take it over
    assert second.count(True) == 1
    now = Holder.parse(lake.store.read(name) or b"")
    assert now is not None and (now.owner, now.released) == (others[second.index(True)].owner, False)
    assert not holder.renew() and holder.lost  # the stalled holder learns it lost the lease


def test_a_run_whose_lease_was_taken_over_is_told(url: str, tmp_path: Path) -> None:
    lake = _machine(url, tmp_path / "a")
    name = f"{lake.published_base}/_state/{LEASE_NAME}"
    lost = "another run took over the lake's maintenance lease"
    with pytest.raises(LeaseLost, match=lost), maintenance(lake, "compact"):
        version = lake.store.version(name)
        assert version is not None
        other = Lease(lake.store, name, "forget", owner="other-host:2:0", seconds=1)
        assert lake.store.swap(name, other._body(), version[0])  # as a takeover does
    assert _lease(lake)["owner"] == "other-host:2:0"  # the other's lease is left alone


@pytest.mark.parametrize("text", ["0.1", "0", "-5", "nan", "inf", "60s"])
def test_a_bad_lease_length_is_refused(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("TRACEFLOW_LEASE_SECONDS", text)
    with pytest.raises(UsageError, match=re.escape(f"TRACEFLOW_LEASE_SECONDS={text!r} is not a number")):
        lease_seconds()
    monkeypatch.setenv("TRACEFLOW_LEASE_SECONDS", "2.5")
    assert lease_seconds() == 2.5


@pytest.mark.parametrize("removal", sorted(REMOVALS))
def test_two_machines_compaction_cannot_bring_back_what_was_removed(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, removal: str
) -> None:
    """tests/test_maintenance_lock.py's scenario with the compaction and the removal on two machines:
    each machine's lock file is its own, only the lease keeps them apart."""
    lake = _machine(url, tmp_path / "a")
    rows = _fill(lake)
    remove, removed = REMOVALS[removal]
    read, go = threading.Event(), threading.Event()
    finish = Lake.finish_compaction

    def held(self: Lake, table: str, out: Path, files: list[str]) -> tuple[int, int]:
        if threading.current_thread().name == "compact":  # it has read every file of the table
            read.set()
            go.wait(60)
        return finish(self, table, out, files)

    monkeypatch.setattr(Lake, "finish_compaction", held)
    started = threading.Event()  # the removal's work under the lock began
    work = getattr(retention, f"_{removal}")

    def entered(*args: Any) -> Any:
        started.set()
        return work(*args)

    monkeypatch.setattr(retention, f"_{removal}", entered)
    errors: list[BaseException] = []
    compactor = _run("compact", lambda: _machine(url, tmp_path / "a").compact("requests"), errors)
    assert read.wait(60), errors
    remover = _run(removal, lambda: remove(_machine(url, tmp_path / "b")), errors)
    # three lease lengths: the compaction renewed its lease, and the removal still waits for it
    assert not started.wait(3), "the removal began while the compaction held the lease"
    go.set()
    compactor.join(120)
    remover.join(120)
    assert not compactor.is_alive() and not remover.is_alive()
    assert errors == [], [f"{type(e).__name__}: {e}"[:600] for e in errors]
    for table, table_rows in rows.items():
        expected = sorted({r["event_id"] for r in table_rows if not removed(r)})
        assert _ids(lake, table) == expected, table
    gone = ", ".join(f"'{r['event_id']}'" for r in rows["requests"] if removed(r))
    assert _stored(lake, "requests", f"event_id IN ({gone})") == 0  # not even a copy the views hide
    kept = [r for r in rows["requests"] if not removed(r)]
    con = lake.connect(list(TABLES))
    try:
        row = con.execute("SELECT count(*), sum(cache_read_tokens) FROM requests").fetchone()
    finally:
        con.close()
    assert row == (len(kept), sum(r["cache_read_tokens"] for r in kept))


def test_a_store_without_conditional_writes_falls_back_to_the_lock_file(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that answers *not implemented* to ``If-None-Match`` (as s3fs reports it): the run goes on
    under this machine's lock file, with a warning saying what it keeps apart."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    lake = _machine(url, tmp_path / "a")
    refusal = ClientError(
        {
            "Error": {
                "Code": "NotImplemented",
                "Message": "A header you provided implies functionality that is not implemented",
            }
        },
        "PutObject",
    )

    def call_s3(*args: Any, **kwargs: Any) -> Any:
        raise translate_boto_error(refusal)

    monkeypatch.setattr(lake.store.fs, "call_s3", call_s3)
    fallback = "does not support conditional writes.*this machine's runs only"
    with pytest.warns(UserWarning, match=fallback), maintenance(lake, "compact"):
        other = _machine(url, tmp_path / "a")  # the same machine's folder: the same lock file
        with (
            pytest.raises(LakeBusy, match="another run holds its lock file"),
            maintenance(other, "retain", wait=False),
        ):
            pass
    assert (tmp_path / "a" / "v1" / "_state" / "maintenance.lock").exists()
