"""The Parquet lake: atomic publishing, deduplicating views, compaction, snapshots."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from traceflow.errors import LakeError
from traceflow.schema import TABLES
from traceflow.store.lake import Lake
from traceflow.store.user_sql import snapshot

T0 = int(dt.datetime(2026, 8, 1, 12, tzinfo=dt.UTC).timestamp() * 1_000_000)


def req(event_id: str, output: int, *, day_offset: int = 0, **extra: object) -> dict[str, object]:
    return {
        "event_id": event_id,
        "source": "test",
        "agent": "claude-code",
        "session_id": "s1",
        "started_at": T0 + day_offset * 86_400_000_000,
        "model": "m",
        "cold_input_tokens": 1,
        "cache_read_tokens": 100,
        "cache_write_tokens": 10,
        "output_tokens": output,
        **extra,
    }


def count(lake: Lake, table: str = "requests") -> int:
    (n,) = lake.connect().execute(f"SELECT count(*) FROM {table}").fetchone() or (0,)
    return int(n)


def test_empty_lake_has_typed_empty_views(lake: Lake) -> None:
    con = lake.connect()
    for name, table in TABLES.items():
        cur = con.execute(f"SELECT * FROM {name}")
        assert cur.fetchall() == []
        assert [d[0] for d in cur.description][: len(table.columns)] == list(table.columns)


def test_append_partitions_by_day_and_leaves_no_staging_files(lake: Lake) -> None:
    lake.append("requests", [req("a", 5), req("b", 5, day_offset=1)])
    parts = sorted(p.parent.name for p in lake.files("requests"))
    assert parts == ["dt=2026-08-01", "dt=2026-08-02"]
    assert list(lake.staging.iterdir()) == []
    assert count(lake) == 2


def test_view_keeps_the_most_complete_copy_of_a_request(lake: Lake) -> None:
    # A placeholder copy (output 1) and the final one (output 260), written in either order.
    lake.append("requests", [req("x", 260)])
    lake.append("requests", [req("x", 1)])
    lake.append("requests", [req("y", 1)])
    lake.append("requests", [req("y", 260)])
    got = lake.connect().execute("SELECT event_id, output_tokens FROM requests ORDER BY 1").fetchall()
    assert got == [("x", 260), ("y", 260)]


def test_unknown_columns_are_refused(lake: Lake) -> None:
    with pytest.raises(LakeError, match="unknown column"):
        lake.append("requests", [{"event_id": "a", "input_tokens": 3}])


def test_compaction_merges_files_and_keeps_every_row(lake: Lake) -> None:
    for i in range(5):
        lake.append("requests", [req(f"e{i}", i + 1), req("dup", 7 + i)])
    assert len(lake.files("requests")) == 5
    before = (
        lake.connect().execute("SELECT * EXCLUDE (ingested_at) FROM requests ORDER BY event_id").fetchall()
    )
    assert lake.compact("requests") == (5, 1)
    assert len(lake.files("requests")) == 1
    after = (
        lake.connect().execute("SELECT * EXCLUDE (ingested_at) FROM requests ORDER BY event_id").fetchall()
    )
    assert after == before
    raw = (
        duckdb.connect()
        .execute(f"SELECT count(*) FROM read_parquet({lake.file_names('requests')})")
        .fetchone()
    )
    assert raw == (6,)  # physically deduplicated: 5 distinct ids + 1 "dup"


def test_timestamps_round_trip_in_utc(lake: Lake) -> None:
    aware = dt.datetime(2026, 8, 1, 14, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    lake.append("requests", [req("a", 1, ended_at=aware)])
    (ended,) = lake.connect().execute("SELECT epoch_us(ended_at) FROM requests").fetchone() or (0,)
    assert ended == int(aware.timestamp() * 1_000_000)


def test_snapshot_writes_a_standalone_duckdb_file(lake: Lake, tmp_path: Path) -> None:
    lake.append("requests", [req("a", 1), req("a", 2), req("b", 3)])
    out = tmp_path / "snap.duckdb"
    counts = snapshot(lake, out)
    assert counts["requests"] == 2
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT sum(output_tokens)::BIGINT FROM requests").fetchone() == (5,)
    # the ratio macros travel with the tables: the packaged queries run on the file as they are
    assert con.execute("SELECT reuse_ratio(1, 4), token_share(3, 0)").fetchone() == (0.25, None)


def test_a_data_dir_with_a_quote_in_its_name_works_end_to_end(tmp_path: Path) -> None:
    # every path the lake writes into its SQL is a string literal: an apostrophe must not end it
    lake = Lake(tmp_path / "bob's lake")
    for i in range(3):
        lake.append("requests", [req(f"e{i}", i + 1), req("dup", 7 + i)])
    assert count(lake) == 4
    assert lake.compact("requests") == (3, 1)
    lake.materialise_derived()
    assert count(lake) == 4
    assert count(lake, "request_rollup") == 1
    counts = snapshot(lake, tmp_path / "it's a snapshot.duckdb")
    assert counts["requests"] == 4


def test_unwritable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(LakeError, match="--data DIR"):
        Lake(blocker / "data").append("requests", [req("a", 1)])


def test_compaction_dedups_across_partitions_and_later_copies_still_win(lake: Lake) -> None:
    # The same request stored under two days (e.g. an estimated vs a reported start time).
    lake.append("requests", [req("x", 5), req("y", 1)])
    lake.append("requests", [req("x", 9, day_offset=1), req("z", 2, day_offset=1)])
    assert lake.compact("requests")[0] == 2
    assert {p.name for p in lake.files("requests")} == {p.name for p in lake.deduped_files("requests")}
    raw = (
        duckdb.connect()
        .execute(f"SELECT count(*) FROM read_parquet({lake.file_names('requests')})")
        .fetchone()
    )
    assert raw == (3,)
    got = dict(lake.connect().execute("SELECT event_id, output_tokens FROM requests").fetchall())
    assert got == {"x": 9, "y": 1, "z": 2}
    # Rows written after the compaction go through the dedup together with the base rows they repeat.
    lake.append("requests", [req("y", 7), req("z", 1), req("w", 3)])
    got = dict(lake.connect().execute("SELECT event_id, output_tokens FROM requests").fetchall())
    assert got == {"x": 9, "y": 7, "z": 2, "w": 3}
    # Compacting again is idempotent on the result.
    lake.compact("requests")
    assert dict(lake.connect().execute("SELECT event_id, output_tokens FROM requests").fetchall()) == got
    assert lake.compact("requests") == (len(lake.files("requests")),) * 2
    assert list(lake.staging.iterdir()) == []
