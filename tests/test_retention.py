"""``traceflow retain`` and ``traceflow forget``: exactly the rows named go, every other row stays,
``--dry-run`` removes nothing, the audit table lists each removal; also while ``serve`` writes, and on
an object store. The expected counts are computed here from the rows the tests write, never by the
code under test."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from time import time_ns
from typing import Any

import httpx
import orjson
import pytest

from tests.collectors_support import Server, api_request_logs
from tests.conftest import s3_test_server
from traceflow.schema import TABLES
from traceflow.store.lake import ROLLUP_VIEW, Lake
from traceflow.store.retention import forget, retain, subject_hash

NOW = dt.datetime(2026, 9, 1, 12, tzinfo=dt.UTC)
DAY_US = 86_400_000_000
USERS = ("alice", "bob", "carol")
AGES = (200, 120, 91, 89, 30, 0)  # days before NOW of each day's rows


def _us(t: dt.datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def _rows() -> dict[str, list[dict[str, Any]]]:
    """Two requests, one event, one metric point and one span per user and day; each user's session
    per day is ``<user>-<age>``."""
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    for age in AGES:
        t = _us(NOW) - age * DAY_US - 3_600_000_000
        for user in USERS:
            session = f"{user}-{age}"
            common = {"source": "test", "agent": "claude-code", "session_id": session}
            for k in range(2):
                out["requests"].append(
                    {
                        **common,
                        "event_id": f"r-{session}-{k}",
                        "user_id": user,
                        "started_at": t + k * 1_000_000,
                        "model": "m",
                        "cold_input_tokens": 1,
                        "cache_read_tokens": 100 + k,
                        "cache_write_tokens": 10,
                        "output_tokens": 5,
                        "attributes": {"user.email": f"{user}@example.com"},
                    }
                )
            out["events"].append(
                {**common, "event_id": f"e-{session}", "user_id": user, "name": "user_prompt", "timestamp": t}
            )
            out["metric_points"].append(
                {
                    **common,
                    "event_id": f"m-{session}",
                    "user_id": user,
                    "name": "tokens",
                    "time": t,
                    "value": 1.0,
                }
            )
            out["spans"].append(
                {**common, "event_id": f"s-{session}", "span_id": session, "name": "llm", "started_at": t}
            )
    return out


def _fill(lake: Lake) -> dict[str, list[dict[str, Any]]]:
    rows = _rows()
    for table, table_rows in rows.items():
        lake.append(table, table_rows)
    lake.compact("requests")  # a deduplicated base with stored derived views ...
    lake.append("requests", rows["requests"][:3])  # ... and copies written since
    return rows


def _ids(lake: Lake, table: str) -> list[str]:
    con = lake.connect([table])
    try:
        return sorted(r[0] for r in con.execute(f"SELECT event_id FROM {table}").fetchall())
    finally:
        con.close()


def _all_rows(lake: Lake, table: str) -> dict[str, tuple[Any, ...]]:
    """Every column of every row of a view, by id (to see that kept rows are unchanged)."""
    con = lake.connect([table])
    try:
        cols = ", ".join(TABLES[table].columns)
        return {r[0]: r for r in con.execute(f"SELECT {cols} FROM {table}").fetchall()}
    finally:
        con.close()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(tmp_path / "data")


def test_retain_drops_exactly_the_days_past_the_age(lake: Lake) -> None:
    rows = _fill(lake)
    before = {t: _all_rows(lake, t) for t in TABLES}
    removals = retain(lake, 90 * 86_400, now=NOW)
    # rows 200, 120 and 91 days old sit in days that ended more than 90 days before NOW
    old = {f"{u}-{age}" for u in USERS for age in AGES if age > 90}
    for table, table_rows in rows.items():
        expected = sorted({r["event_id"] for r in table_rows if r["session_id"] not in old})
        assert _ids(lake, table) == expected, table
        kept = _all_rows(lake, table)
        assert kept == {i: before[table][i] for i in expected}, table
    # removed stored rows: 3 days x 3 users x (2 requests | 1 row); the 3 requests copied again
    # after compaction are the 200-day-old ones, stored twice
    removed = {(r.table): 0 for r in removals}
    for r in removals:
        removed[r.table] += r.rows
    assert removed == {"requests": 3 * 3 * 2 + 3, "events": 9, "metric_points": 9, "spans": 9}
    assert lake.fresh_derived(ROLLUP_VIEW) is not None  # stored again over what is left


def test_forget_user_removes_their_rows_and_spans_of_their_sessions(lake: Lake) -> None:
    rows = _fill(lake)
    before = {t: _all_rows(lake, t) for t in TABLES}
    forget(lake, user="bob", now=NOW)
    for table, table_rows in rows.items():
        expected = sorted({r["event_id"] for r in table_rows if not r["session_id"].startswith("bob-")})
        assert _ids(lake, table) == expected, table
        assert _all_rows(lake, table) == {i: before[table][i] for i in expected}, table
    # no stored copy of bob's rows is left, not even one the views would hide
    for table in TABLES:
        con = lake.connect([table])
        files = lake.file_names(table)
        (n,) = con.execute(
            f"SELECT count(*) FROM read_parquet({files!r}, union_by_name = true) "
            "WHERE session_id LIKE 'bob-%'"
        ).fetchone() or (0,)
        assert n == 0, table
    # the derived views read no stale stored file: their sums leave bob out
    con = lake.connect(["requests"])
    (total,) = con.execute(f"SELECT sum(cache_read_tokens) FROM {ROLLUP_VIEW}").fetchone() or (0,)
    # 2 users x 6 days x (100 + 101) cache-read tokens
    assert total == 2 * len(AGES) * 201
    # once compacted, forgetting stores the views again over the rewritten base
    lake.compact("requests")
    forget(lake, user="carol", now=NOW)
    assert lake.fresh_derived(ROLLUP_VIEW) is not None
    con = lake.connect(["requests"])
    (total,) = con.execute(f"SELECT sum(cache_read_tokens) FROM {ROLLUP_VIEW}").fetchone() or (0,)
    assert total == len(AGES) * 201


def test_forget_session_and_the_audit_table(lake: Lake, tmp_path: Path) -> None:
    rows = _fill(lake)
    forget(lake, session="carol-30", now=NOW)
    for table, table_rows in rows.items():
        assert _ids(lake, table) == sorted(
            {r["event_id"] for r in table_rows if r["session_id"] != "carol-30"}
        )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceflow",
            "sql",
            "SELECT action, subject, table_name, sum(rows_removed)::BIGINT AS n FROM audit "
            "GROUP BY ALL ORDER BY table_name",
            "--data",
            str(lake.root),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    audit = orjson.loads(r.stdout)
    audit = audit["rows"] if isinstance(audit, dict) else audit
    subject = f"session {subject_hash('carol-30')}"
    assert [(a["action"], a["subject"], a["table_name"], a["n"]) for a in audit] == [
        ("forget", subject, "events", 1),
        ("forget", subject, "metric_points", 1),
        ("forget", subject, "requests", 2),
        ("forget", subject, "spans", 1),
    ]
    assert "carol-30" not in r.stdout  # the audit keeps no id it removed


@pytest.mark.parametrize(
    "args",
    [["forget", "--user", "alice"], ["forget", "--session", "bob-0"], ["retain", "--older-than", "1d"]],
)
def test_dry_run_removes_nothing(lake: Lake, args: list[str]) -> None:
    _fill(lake)
    lake.clean_staging(0)
    tree = _tree(lake.root)
    r = subprocess.run(
        [sys.executable, "-m", "traceflow", *args, "--dry-run", "--data", str(lake.root), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = orjson.loads(r.stdout)
    assert out["dry_run"] is True and out["partitions"]
    assert sum(p["rows_removed"] for p in out["partitions"]) > 0
    assert _tree(lake.root) == tree


def test_cli_forget_counts_match_sql(lake: Lake) -> None:
    rows = _fill(lake)
    copies = [lake.base / "_cache" / "results" / "k.bin", lake.state_dir / "imports" / "usage-ledger.json"]
    for f in copies:  # what this machine computed from the rows: a cached result, the usage ledger
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("alice")
    r = subprocess.run(
        [sys.executable, "-m", "traceflow", "forget", "--user", "alice", "--data", str(lake.root)],
        capture_output=True,
        text=True,
        check=True,
    )
    # stored rows of alice: 12 requests (2 of them stored twice), 6 events, 6 metric points, 6 spans
    assert "removed 32 stored rows" in r.stdout
    assert all(not i.startswith(("r-alice", "e-alice")) for t in TABLES for i in _ids(lake, t))
    assert len(_ids(lake, "requests")) == len(rows["requests"]) - 12
    assert not any(f.exists() for f in copies)


def test_forget_needs_a_subject_and_retain_a_positive_age(lake: Lake) -> None:
    from traceflow.errors import UsageError

    with pytest.raises(UsageError, match="--user ID or --session ID"):
        forget(lake)
    with pytest.raises(UsageError, match="positive"):
        retain(lake, 0)


# -- while serve writes ---------------------------------------------------------------------------
def _user_logs(user: str, n: int, start_ns: int) -> tuple[bytes, list[str]]:
    req, ids = api_request_logs(n, start_ns=start_ns, tag=user.split("@")[0])
    for rec in req.resource_logs[0].scope_logs[0].log_records:
        for kv in rec.attributes:
            if kv.key == "user.id":
                kv.value.string_value = user
    return req.SerializeToString(), ids


def test_forget_while_serve_writes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    pb = {"Content-Type": "application/x-protobuf"}
    acked: list[str] = []
    with Server(data, "--roll-interval", "0.2") as srv:
        url = srv.http_url + "/v1/logs"
        gone: list[str] = []
        t0 = dt.datetime(2026, 8, 20, 12, tzinfo=dt.UTC)
        for day in range(3):  # the user to forget, over three days, with others beside
            for user in ("leaver", "stayer"):
                body, ids = _user_logs(user, 20, int((t0.timestamp() + day * 86_400) * 1e9))
                assert httpx.post(url, content=body, headers=pb).status_code == 200
                (gone if user == "leaver" else acked).extend(ids)
        lake = Lake(data)
        assert _wait_rows(srv, lake, len(gone) + len(acked))
        stop = threading.Event()

        def send() -> None:  # others' records keep arriving during the forget
            i = 0
            while not stop.is_set():
                body, ids = _user_logs(f"live{i % 3}", 5, int((t0.timestamp() + (i % 3) * 86_400) * 1e9 + i))
                if httpx.post(url, content=body, headers=pb).status_code == 200:
                    acked.extend(ids)
                i += 1

        sender = threading.Thread(target=send)
        sender.start()
        try:
            from tests.collectors_support import wait_for

            assert wait_for(lambda: len(acked) >= len(gone) + 15, 60)  # the sender is under way
            during = len(acked)
            r = subprocess.run(
                [sys.executable, "-m", "traceflow", "forget", "--user", "leaver", "--data", str(data)],
                capture_output=True,
                text=True,
                timeout=300,
            )
            during = len(acked) - during  # acknowledged while forget ran
        finally:
            stop.set()
            sender.join(60)
        assert r.returncode == 0, r.stderr
        assert during > 0
        assert srv.stop() == 0
    ids = set(_request_ids(lake))
    assert not ids & set(gone)
    assert set(acked) <= ids


def _request_ids(lake: Lake) -> list[str]:
    con = lake.connect(["requests"])
    try:
        return [r[0] for r in con.execute("SELECT request_id FROM requests").fetchall()]
    finally:
        con.close()


def _wait_rows(srv: Server, lake: Lake, n: int) -> bool:
    from tests.collectors_support import wait_while_working

    return wait_while_working(srv, lambda: len(_request_ids(lake)) >= n)


# -- on an object store -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with s3_test_server(tmp_path_factory.mktemp("state")) as env:
        yield env


def test_retain_and_forget_on_an_object_store(s3_env: dict[str, str]) -> None:
    import boto3  # type: ignore[import-untyped]

    name = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    lake = Lake(f"s3://{name}/traceflow")
    rows = _fill(lake)
    before = {t: _all_rows(lake, t) for t in TABLES}
    forget(lake, user="bob", now=NOW)
    retain(lake, 90 * 86_400, now=NOW)
    old = {f"{u}-{age}" for u in USERS for age in AGES if age > 90}
    for table, table_rows in rows.items():
        expected = sorted(
            {
                r["event_id"]
                for r in table_rows
                if r["session_id"] not in old and not r["session_id"].startswith("bob-")
            }
        )
        assert _ids(lake, table) == expected, table
        assert _all_rows(lake, table) == {i: before[table][i] for i in expected}, table
    con = lake.connect()
    actions = con.execute(
        "SELECT action, count(DISTINCT subject) FROM audit GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert actions == [("forget", 1), ("retain", 1)]
    assert lake.fresh_derived(ROLLUP_VIEW) is not None


# -- serve: retention each day, attributes dropped or hashed at ingest ------------------------------
SALT = "a-test-key-of-sixteen-or-more"


def test_serve_drops_and_hashes_attributes_and_retains(tmp_path: Path) -> None:
    import hashlib
    import hmac

    from tests.collectors_support import wait_while_working

    data = tmp_path / "data"
    lake = Lake(data)
    rows = _rows()
    lake.append("requests", rows["requests"])  # rows 0 to 200 days old, before NOW (2026-09-01)
    today = dt.datetime.now(dt.UTC)
    age_days = (today - NOW).days + 90  # --retain: keeps from 90 days before NOW on
    env = {"TRACEFLOW_HASH_SALT": SALT}
    args = ("--drop-attr", "terminal.type", "--hash-attr", "user.id", "--retain", f"{age_days}d")
    with Server(data, "--roll-interval", "0.2", *args, env=env) as srv:
        body, ids = _user_logs("leaver@example.com", 4, time_ns())
        assert (
            httpx.post(
                srv.http_url + "/v1/logs", content=body, headers={"Content-Type": "application/x-protobuf"}
            ).status_code
            == 200
        )
        assert wait_while_working(srv, lambda: set(ids) <= set(_quietly(_request_ids, lake)))
        # the retention ran at start: only the rows of the days 90 days before NOW or later are left
        kept = {
            r["event_id"] for r in rows["requests"] if r["session_id"].rsplit("-", 1)[1] in ("89", "30", "0")
        }
        assert wait_while_working(
            srv, lambda: set(_quietly(_ids, lake, "requests")) == kept | set(_quietly(_otlp_ids, lake))
        )
        assert srv.stop() == 0
    expected = "hmac:" + hmac.new(SALT.encode(), b"leaver@example.com", hashlib.sha256).hexdigest()[:32]
    con = lake.connect()
    stored = con.execute("SELECT user_id, attributes FROM requests WHERE source = 'otlp'").fetchall()
    assert len(stored) == 4
    for user_id, attributes in stored:
        attrs = orjson.loads(attributes)
        assert user_id == expected and attrs["user.id"] == expected
        assert "terminal.type" not in attrs and "leaver@example.com" not in attributes
        assert attrs["query_source"] == "sdk"  # other attributes kept
    audit = con.execute("SELECT action, sum(rows_removed)::BIGINT FROM audit GROUP BY 1").fetchall()
    assert audit == [("retain", 3 * 3 * 2)]  # 200, 120 and 91 days before NOW: 3 users x 2 requests


def test_serve_hash_attr_needs_a_salt(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "traceflow", "serve", "--data", str(tmp_path), "--hash-attr", "user.id"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TRACEFLOW_HASH_SALT"},
    )
    assert r.returncode == 2 and "TRACEFLOW_HASH_SALT" in r.stderr


def _quietly(read: Any, *args: Any) -> list[str]:
    """``read(*args)``, or nothing when a file it listed was removed before it read it (a query that
    overlaps a removal, as one that overlaps a compaction, is run again)."""
    import duckdb

    try:
        return list(read(*args))
    except duckdb.IOException:
        return []


def _otlp_ids(lake: Lake) -> set[str]:
    con = lake.connect(["requests"])
    try:
        return {r[0] for r in con.execute("SELECT event_id FROM requests WHERE source = 'otlp'").fetchall()}
    finally:
        con.close()


def test_attribute_policy_reaches_nested_attributes_and_the_user_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hashlib
    import hmac

    import polars as pl

    from traceflow.collectors.attribute_policy import AttributePolicy, PolicyError

    monkeypatch.delenv("TRACEFLOW_HASH_SALT", raising=False)
    with pytest.raises(PolicyError, match="TRACEFLOW_HASH_SALT"):
        AttributePolicy.from_settings([], ["user.email"])
    monkeypatch.setenv("TRACEFLOW_HASH_SALT", SALT)
    policy = AttributePolicy.from_settings(["host.name"], ["user.email"])
    attrs = {"user.email": "a@example.com", "keep": 1, "resource": {"host.name": "laptop-a", "os": "linux"}}
    frame = pl.DataFrame(
        {"user_id": ["a@example.com", "other"], "attributes": [orjson.dumps(attrs).decode(), '{"keep": 2}']}
    )
    out = policy.frame(frame)
    digest = "hmac:" + hmac.new(SALT.encode(), b"a@example.com", hashlib.sha256).hexdigest()[:32]
    assert out["user_id"].to_list() == [digest, "other"]
    assert orjson.loads(out["attributes"][0]) == {
        "user.email": digest,
        "keep": 1,
        "resource": {"os": "linux"},
    }
    assert out["attributes"][1] == '{"keep": 2}'  # a row without those attributes is left as it was
