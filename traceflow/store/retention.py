"""Retention and forgetting: drop the partitions past an age, remove one user's or session's rows.

``retain`` removes whole ``dt=`` partitions of every table whose day ended before the cut-off (no
file is rewritten). ``forget`` rewrites each published file holding a named user's or session's rows
without them, as compaction does (:meth:`traceflow.store.lake.Lake.finish_compaction`): the new file
is written in staging, published into the same partition, then the old file removed, so a reader
sees every other row at every moment (the views keep one copy of a row stored twice for a moment);
a file that a collector publishes meanwhile is not touched. Both hold the lake's maintenance lock
(:mod:`traceflow.store.maintenance`), as ``compact`` does, so none undoes another. Both record what
they removed in the ``audit`` table (:data:`traceflow.schema.AUDIT`, readable with ``traceflow
sql``) and store the derived views again (``request_steps``, ``request_rollup``: their stored files
name the request files they were computed from, so they are stale once one is removed).
docs/lake.md#personal-data.

The audit table names a forgotten user or session by the SHA-256 of the id only: a removal does not
keep the id it removed, yet ``sha256(id)`` tells whether an id was forgotten.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError
from traceflow.schema import AUDIT, SPANS, TABLES
from traceflow.store.maintenance import maintenance
from traceflow.store.sql import sql_string

if TYPE_CHECKING:
    import duckdb

    from traceflow.store.lake import Lake


@dataclass(frozen=True)
class Removal:
    """The rows of one table's partition that a removal takes away (or would, on a dry run)."""

    table: str
    partition: str  # dt=YYYY-MM-DD
    rows: int
    files_removed: int
    files_written: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "partition": self.partition,
            "rows_removed": self.rows,
            "files_removed": self.files_removed,
            "files_written": self.files_written,
        }


def subject_hash(value: str) -> str:
    """How the audit table names a forgotten id: ``sha256:`` and its first 16 hex digits."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]


def _partition(name: str) -> str:
    return name.rsplit("/", 2)[-2]


def _connect(lake: Lake) -> duckdb.DuckDBPyConnection:
    import duckdb  # here, not at the top: the collector imports this module without DuckDB's cost

    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    lake._register(con)
    return con


def _row_counts(
    con: duckdb.DuckDBPyConnection, files: list[str], where: str, params: list[Any]
) -> dict[str, int]:
    """Rows matching ``where`` per file of ``files`` (files with none left out)."""
    if not files:
        return {}
    listing = ", ".join(sql_string(f) for f in files)
    rows = con.execute(
        f"SELECT filename, count(*) FROM read_parquet([{listing}], union_by_name = true, "
        f"hive_partitioning = false, filename = true) WHERE {where} GROUP BY filename",
        params,
    ).fetchall()
    return {str(name): int(n) for name, n in rows if n}


# -- retain -----------------------------------------------------------------------------------------
def cutoff_day(older_than_s: float, now: dt.datetime) -> dt.date:
    """The first day kept: a partition is dropped when its whole day is older than ``older_than_s``
    (it ended at or before ``now - older_than_s``)."""
    return (now - dt.timedelta(seconds=older_than_s)).astimezone(dt.UTC).date()


def retain(
    lake: Lake,
    older_than_s: float,
    *,
    now: dt.datetime | None = None,
    dry_run: bool = False,
    wait: bool = True,
) -> list[Removal]:
    """Drop every table's ``dt=`` partitions whose day ended ``older_than_s`` seconds before ``now``
    or earlier (the ``dt=unknown`` partition of rows without a time is kept). Returns what went.
    Holds the lake's maintenance lock (:mod:`traceflow.store.maintenance`); without ``wait``, a lake
    busy with another run raises :class:`~traceflow.store.maintenance.LakeBusy`."""
    if older_than_s <= 0:
        raise UsageError("--older-than must be a positive age, e.g. 90d")
    with maintenance(lake, "retain", wait=wait):
        return _retain(lake, older_than_s, now or dt.datetime.now(dt.UTC), dry_run)


def _retain(lake: Lake, older_than_s: float, now: dt.datetime, dry_run: bool) -> list[Removal]:
    first_kept = cutoff_day(older_than_s, now).isoformat()
    plan: dict[tuple[str, str], list[str]] = {}
    for table in TABLES:
        for name in lake.file_names(table):
            part = _partition(name)
            day = part.removeprefix("dt=")
            if day != "unknown" and day < first_kept:
                plan.setdefault((table, part), []).append(name)
    if not plan:
        return []
    con = _connect(lake)
    try:
        counts = _row_counts(con, [f for files in plan.values() for f in files], "true", [])
    finally:
        con.close()
    removals = [
        Removal(table, part, sum(counts.get(f, 0) for f in files), len(files), 0)
        for (table, part), files in sorted(plan.items())
    ]
    if dry_run:
        return removals
    for files in plan.values():
        lake.remove_compacted(files)
    days = round(older_than_s / 86_400, 3)
    _audit(lake, "retain", f"older than {days:g}d (before {first_kept})", removals, now)
    lake.materialise_derived()
    return removals


#: At most this many looks for rows to forget (:func:`forget`).
FORGET_PASSES = 3


# -- forget -----------------------------------------------------------------------------------------
def _where(
    table: str, user: str | None, session: str | None, user_sessions: list[str]
) -> tuple[str, list[Any]]:
    """The rows of ``table`` to forget, as a condition and its parameters (values never in the text)."""
    columns = TABLES[table].columns
    terms: list[str] = []
    params: list[Any] = []
    if user is not None:
        if "user_id" in columns:
            terms.append("user_id = ?")
            params.append(user)
        elif user_sessions:  # spans carry no user id: the user's sessions' spans
            terms.append("list_contains(?, session_id)")
            params.append(user_sessions)
    if session is not None and "session_id" in columns:
        terms.append("session_id = ?")
        params.append(session)
    return (" OR ".join(f"({t})" for t in terms) or "false"), params


def _user_sessions(con: duckdb.DuckDBPyConnection, lake: Lake, user: str) -> list[str]:
    """The sessions the user's requests, events and metric points name (their spans go with them)."""
    sessions: set[str] = set()
    for table, spec in TABLES.items():
        files = lake.file_names(table)
        if table == SPANS.name or not files or "user_id" not in spec.columns:
            continue
        listing = ", ".join(sql_string(f) for f in files)
        rows = con.execute(
            f"SELECT DISTINCT session_id FROM read_parquet([{listing}], union_by_name = true, "
            "hive_partitioning = false) WHERE user_id = ? AND session_id IS NOT NULL",
            [user],
        ).fetchall()
        sessions.update(str(r[0]) for r in rows)
    return sorted(sessions)


def forget(
    lake: Lake,
    *,
    user: str | None = None,
    session: str | None = None,
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> list[Removal]:
    """Remove every stored row of ``user`` (with the spans of their sessions) and of ``session`` from
    every table; the files holding them are rewritten without them. Returns what went. Holds the
    lake's maintenance lock (:mod:`traceflow.store.maintenance`): a compaction cannot publish again
    what it read before the rewrite."""
    if user is None and session is None:
        raise UsageError("name what to forget: --user ID or --session ID")
    for flag, value in (("--user", user), ("--session", session)):
        if value is not None and not value.strip():
            raise UsageError(f"{flag} is empty; give the id as `traceflow sql` shows it")
    with maintenance(lake, "forget"):
        return _forget(lake, user, session, dry_run, now or dt.datetime.now(dt.UTC))


def _forget(
    lake: Lake, user: str | None, session: str | None, dry_run: bool, now: dt.datetime
) -> list[Removal]:
    """:func:`forget` under the lock."""
    if not dry_run:  # the files compactions replaced hold copies of the rows too: no grace for them
        for table in TABLES:
            lake.remove_retired(table, grace_s=0)
    con = _connect(lake)
    removals: list[Removal] = []
    try:
        # another pass finds what a writer published meanwhile (the collector sealing the user's
        # last records from its write-ahead log; a compaction waits for the lock): rare, so a few
        # passes end it
        for _ in range(1 if dry_run else FORGET_PASSES):
            found = _forget_pass(con, lake, user, session, dry_run)
            removals += found
            if not found:
                break
    finally:
        con.close()
    if dry_run or not removals:
        return removals
    subject = " and ".join(
        f"{kind} {subject_hash(v)}" for kind, v in (("user", user), ("session", session)) if v is not None
    )
    _audit(lake, "forget", subject, removals, now)
    lake.materialise_derived()
    return removals


def _forget_pass(
    con: duckdb.DuckDBPyConnection, lake: Lake, user: str | None, session: str | None, dry_run: bool
) -> list[Removal]:
    """One look at every published file: those holding the rows are rewritten without them."""
    user_sessions = _user_sessions(con, lake, user) if user is not None else []
    by_part: dict[tuple[str, str], list[tuple[str, str, list[Any], int]]] = {}
    for table in TABLES:
        where, params = _where(table, user, session, user_sessions)
        if where == "false":
            continue
        for name, n in _row_counts(con, lake.file_names(table), where, params).items():
            by_part.setdefault((table, _partition(name)), []).append((name, where, params, n))
    removals = []
    for (table, part), files in sorted(by_part.items()):
        written = 0
        if not dry_run:
            for name, where, params, _ in files:
                written += _rewrite(con, lake, table, name, where, params)
        removals.append(Removal(table, part, sum(f[3] for f in files), len(files), written))
    return removals


def _rewrite(
    con: duckdb.DuckDBPyConnection, lake: Lake, table: str, name: str, where: str, params: list[Any]
) -> int:
    """Replace the published file ``name`` by a copy without the rows matching ``where``: written in
    staging, published into the same partition, then the old file removed and the deduplicated base
    told (a compacted file's copy is still one copy per id). Returns the files written (0 or 1)."""
    staged = lake.staging_path()
    keep = con.execute(
        f"SELECT count(*) FROM read_parquet({sql_string(name)}, hive_partitioning = false) "
        f"WHERE ({where}) IS NOT TRUE",
        params,
    ).fetchone()
    kept = int(keep[0]) if keep else 0
    published: list[str] = []
    if kept:
        con.execute(
            f"COPY (SELECT * FROM read_parquet({sql_string(name)}, hive_partitioning = false) "
            f"WHERE ({where}) IS NOT TRUE) TO {sql_string(staged)} (FORMAT parquet, COMPRESSION zstd)",
            params,
        )
        _fsync(staged)
        # the copy sorts where the old file did among the files of its partition (its rows keep their
        # place in the dedup order): the old name with a suffix, never a name another writer uses
        old = name.rsplit("/", 1)[-1].removesuffix(".parquet")
        target = staged.with_name(f"{old}-f{time.time_ns()}{secrets.token_hex(2)}.parquet")
        os.replace(staged, target)
        out = lake.publish([(target, f"{table}/{_partition(name)}")])
        published = [lake._name(table, str(p.relative_to(lake.table_dir(table)))) for p in out]
    base = lake._deduped(table)
    lake.remove_compacted([name])
    if name in base:
        rels = sorted(lake._rel(table, n) for n in (base - {name}) | set(published))
        lake._write_marker("deduped", table, rels)
    return len(published)


def _fsync(path: os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the audit table --------------------------------------------------------------------------------
def _audit(lake: Lake, action: str, subject: str, removals: list[Removal], now: dt.datetime) -> None:
    """Append one audit row per table and partition of a removal."""
    at = int(now.timestamp() * 1_000_000)
    rows = [
        {
            "event_id": f"{action}-{time.time_ns()}-{secrets.token_hex(6)}",
            "removed_at": at,
            "action": action,
            "subject": subject,
            "table_name": r.table,
            "partition_dir": r.partition,
            "rows_removed": r.rows,
            "files_removed": r.files_removed,
            "files_written": r.files_written,
        }
        for r in removals
    ]
    lake.append(AUDIT.name, rows)
