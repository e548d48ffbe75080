"""A reader that opened the lake before a ``compact`` (its views name the files it listed then)
still reads every row once after the compaction replaced those files (issue 33: a ``traceflow sql``
query once failed with a DuckDB error while ``compact`` ran)."""

from __future__ import annotations

from pathlib import Path

from traceflow.store.lake import RETIRED_GRACE_S, Lake
from traceflow.store.retention import forget


def _requests(ids: range) -> list[dict[str, object]]:
    return [
        {
            "event_id": f"e{i}",
            "source": "test",
            "agent": "claude-code",
            "request_id": f"r{i}",
            "ended_at": 1_764_000_000_000_000 + i,
        }
        for i in ids
    ]


def _on_disk(lake: Lake) -> set[Path]:
    return set(lake.table_dir("requests").glob("dt=*/*.parquet"))


def test_a_reader_connected_before_a_compaction_reads_every_row_after_it(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.append("requests", _requests(range(0, 30)))
    lake.append("requests", _requests(range(20, 50)))  # 10 copies of the first file's ids
    con = lake.connect(["requests"])
    assert lake.compact("requests") == (2, 1)
    row = con.execute("select count(*), count(distinct event_id) from requests").fetchone()
    assert row == (50, 50)
    con.close()
    con = lake.connect(["requests"])  # and a reader opened after it
    assert con.execute("select count(*) from requests").fetchone() == (50,)


def test_the_replaced_files_go_after_the_grace_period_or_at_a_forget(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.append("requests", _requests(range(0, 30)))
    lake.append("requests", _requests(range(20, 50)))
    before = set(lake.files("requests"))
    lake.compact("requests")
    assert before < _on_disk(lake) and len(lake.files("requests")) == 1  # kept, no longer listed
    retired = lake._retired("requests")
    assert len(retired) == 2
    # as if the grace period had passed since: the next compaction removes them
    lake._write_marker("retired", "requests", {rel: at - RETIRED_GRACE_S for rel, at in retired.items()})
    lake.append("requests", _requests(range(50, 60)))
    lake.compact("requests")
    assert not before & _on_disk(lake)
    assert len(_on_disk(lake) - set(lake.files("requests"))) == 2
    forget(lake, user="nobody")  # nothing of theirs: the retired files go anyway
    assert _on_disk(lake) == set(lake.files("requests"))
    con = lake.connect(["requests"])
    assert con.execute("select count(*), count(distinct event_id) from requests").fetchone() == (60, 60)
