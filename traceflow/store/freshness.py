"""How fresh a lake fed by ``traceflow serve`` is: its newest record's time, and that record's age.

A local agent log is brought up to date before each read command (:mod:`traceflow.store.local_logs`);
a collector's lake cannot be: it holds what the agents sent, and stops growing when they (or the
collector) stop. So every table, JSON document and report read from such a lake says how old its
newest record is (``docs/freshness.md``). A lake is **fed by serve** when the collector's folder
(``<data>/v1/_state/collector``: its write-ahead log and locks) is there.

The newest record is found in each table's newest ``dt=`` partition only (a row's partition is the
day of its time, ``traceflow.schema``), so it costs a read of one day's files, not of the lake.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from traceflow.schema import TABLES
from traceflow.store.lake import Lake
from traceflow.store.sql import sql_string
from traceflow.units import format_elapsed


@dataclass(frozen=True)
class Freshness:
    """The newest record of a lake (None: no rows yet) as of ``now``."""

    newest: dt.datetime | None
    now: dt.datetime

    @property
    def age_s(self) -> float | None:
        return None if self.newest is None else (self.now - self.newest).total_seconds()

    def line(self) -> str:
        """One line for a table's footer or a report's header."""
        if self.newest is None or self.age_s is None:
            return "fresh as of: no records yet (a lake fed by `traceflow serve`)"
        when = self.newest.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        age = max(self.age_s, 0.0)
        return (
            f"fresh as of: newest record {when}, {format_elapsed(age)} ago (a lake fed by `traceflow serve`)"
        )

    def as_dict(self) -> dict[str, Any]:
        """The ``freshness`` member of a JSON document."""
        return {
            "fed_by": "serve",
            "newest_record": self.newest.isoformat() if self.newest else None,
            "age_s": None if self.age_s is None else round(self.age_s, 3),
        }


def serve_fed(lake: Lake) -> bool:
    """Whether ``traceflow serve`` writes into ``lake`` (its collector folder is there)."""
    return (lake.state_dir / "collector").is_dir()


def newest_record(lake: Lake) -> dt.datetime | None:
    """The latest time of any row of the lake (requests, events, metric points, spans), from each
    table's newest ``dt=`` partition; None for an empty lake."""
    import duckdb

    best: dt.datetime | None = None
    con = duckdb.connect()
    try:
        for table in TABLES.values():
            names = lake.file_names(table.name)
            if not names:
                continue
            newest_day = max(name.rsplit("/", 2)[-2] for name in names)
            files = [n for n in names if n.rsplit("/", 2)[-2] == newest_day]
            when = (
                "coalesce(" + ", ".join(table.partition_by) + ")"
                if len(table.partition_by) > 1
                else table.partition_by[0]
            )
            listed = "[" + ", ".join(sql_string(f) for f in files) + "]"
            row = con.execute(
                f"SELECT max(epoch_us({when})) FROM read_parquet({listed}, union_by_name = true)"
            ).fetchone()
            if row and row[0] is not None:
                t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(row[0]))
                best = t if best is None or t > best else best
    finally:
        con.close()
    return best


def of(lake: Lake, now: dt.datetime | None = None) -> Freshness | None:
    """The :class:`Freshness` of a lake fed by serve; None for any other lake (it needs none)."""
    if lake.url is not None or not serve_fed(lake):
        return None
    return Freshness(newest_record(lake), now or dt.datetime.now(dt.UTC))
