"""``compact`` against ``forget`` and ``retain`` at the same time (traceflow.store.maintenance): a
compaction that read the files before they were rewritten or dropped must not publish their rows
again. The compaction is held between reading and publishing (where a large lake's takes minutes),
the removal started meanwhile; the rows expected after both are worked out from the rows written."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.test_retention import NOW, _fill, _ids
from traceflow.schema import TABLES
from traceflow.store.lake import Lake
from traceflow.store.maintenance import LakeBusy, maintenance
from traceflow.store.retention import forget, retain


def _stored(lake: Lake, table: str, where: str) -> int:
    """Rows of ``table``'s published files matching ``where``, duplicates included."""
    files = lake.file_names(table)
    if not files:
        return 0
    con = lake.connect([table])
    try:
        row = con.execute(
            f"SELECT count(*) FROM read_parquet({files!r}, union_by_name = true) WHERE {where}"
        ).fetchone()
    finally:
        con.close()
    return int(row[0]) if row else 0


def _run(name: str, work: Callable[[], Any], errors: list[BaseException]) -> threading.Thread:
    def target() -> None:
        try:
            work()
        except BaseException as e:  # reported by the test, not lost in the thread
            errors.append(e)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


REMOVALS: dict[str, tuple[Callable[[Lake], Any], Callable[[dict[str, Any]], bool]]] = {
    # what each removal takes away, as a predicate on the rows the test wrote
    "forget": (lambda lake: forget(lake, user="bob", now=NOW), lambda r: r["session_id"].startswith("bob-")),
    "retain": (
        lambda lake: retain(lake, 90 * 86_400, now=NOW),
        lambda r: int(r["session_id"].rsplit("-", 1)[1]) > 90,  # the days 91, 120 and 200 days old
    ),
}


@pytest.mark.parametrize("removal", sorted(REMOVALS))
def test_a_compaction_cannot_bring_back_what_was_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, removal: str
) -> None:
    lake = Lake(tmp_path / "data")
    rows = _fill(lake)  # a compacted base and copies written since: the compaction has work
    remove, removed = REMOVALS[removal]
    read, go = threading.Event(), threading.Event()
    finish = Lake.finish_compaction

    def held(self: Lake, table: str, out: Path, files: list[str]) -> tuple[int, int]:
        if threading.current_thread().name == "compact":  # it has read every file of the table
            read.set()
            go.wait(60)
        return finish(self, table, out, files)

    monkeypatch.setattr(Lake, "finish_compaction", held)
    errors: list[BaseException] = []
    compactor = _run("compact", lambda: Lake(lake.root).compact("requests"), errors)
    assert read.wait(60), errors
    remover = _run(removal, lambda: remove(Lake(lake.root)), errors)
    remover.join(3)  # unlocked, the removal ends here while the compaction holds what it read
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
    # the kept rows are there once each: the rewritten copies and the compacted base do not overlap
    kept = [r for r in rows["requests"] if not removed(r)]
    con = lake.connect(list(TABLES))
    try:
        row = con.execute("SELECT count(*), sum(cache_read_tokens) FROM requests").fetchone()
    finally:
        con.close()
    assert row == (len(kept), sum(r["cache_read_tokens"] for r in kept))


def test_a_run_that_does_not_wait_is_told_the_lake_is_busy(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "data")
    with (
        maintenance(lake, "compact"),
        pytest.raises(LakeBusy, match="busy with another compact, retain or forget"),
        maintenance(lake, "retain", wait=False),
    ):
        pass
    with maintenance(lake, "retain", wait=False):  # released with its block
        pass
