"""What a lake holds, in one look (``traceflow status``, docs/lake.md#traceflow-status).

* **requests**: the requests the views count (one per ``event_id``, the copy
  :func:`traceflow.store.measures.dedup_order` keeps);
* **sources**: the same per ``source`` and ``agent``, with each one's newest request time;
* **newest record**: the latest time of any row (requests, events, metric points, spans;
  :func:`traceflow.store.freshness.newest_record`) and its age at ``now``;
* **conflicting requests**: the request ids stored with copies that disagree on ``user_id`` or
  ``session_id`` (:meth:`traceflow.store.lake.Lake.conflicts`): each counts once, for the user and
  session of the copy kept, so a replay stored under the same ids is not counted again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from traceflow.store import freshness
from traceflow.store.lake import Lake
from traceflow.store.measures import REQUEST_TIME
from traceflow.units import format_elapsed


@dataclass(frozen=True)
class Source:
    """The requests of one ``source`` and ``agent``."""

    source: str | None
    agent: str | None
    requests: int
    newest_request: dt.datetime | None


@dataclass(frozen=True)
class LakeStatus:
    """The state of one lake as of ``now`` (see the module docstring)."""

    location: str
    requests: int
    sources: tuple[Source, ...]
    newest_record: dt.datetime | None
    conflicting_requests: int
    now: dt.datetime

    @property
    def age_s(self) -> float | None:
        """Seconds from the newest record to ``now`` (None: no records)."""
        return None if self.newest_record is None else (self.now - self.newest_record).total_seconds()

    def as_dict(self) -> dict[str, Any]:
        """The ``traceflow status --format json`` object."""
        return {
            "lake": self.location,
            "requests": self.requests,
            "sources": [
                {
                    "source": s.source,
                    "agent": s.agent,
                    "requests": s.requests,
                    "newest_request": s.newest_request,
                }
                for s in self.sources
            ],
            "newest_record": self.newest_record,
            "age_s": None if self.age_s is None else round(self.age_s, 3),
            "conflicting_requests": self.conflicting_requests,
        }

    def lines(self) -> list[str]:
        """The lines the table format prints above the sources."""
        if self.newest_record is None or self.age_s is None:
            newest = "none (the lake holds no records)"
        else:
            when = self.newest_record.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            newest = f"{when}, {format_elapsed(max(self.age_s, 0.0))} ago"
        conflicts = f"{self.conflicting_requests:,}"
        if self.conflicting_requests:
            conflicts += " (copies disagree on user or session; one copy of each is counted)"
        return [
            f"lake: {self.location}",
            f"requests: {self.requests:,}",
            f"newest record: {newest}",
            f"conflicting request ids: {conflicts}",
        ]


def status(lake: Lake, now: dt.datetime | None = None) -> LakeStatus:
    """The :class:`LakeStatus` of ``lake`` at ``now`` (default: the current time)."""
    con = lake.connect(["requests"])
    try:
        rows = con.execute(
            f"SELECT source, agent, count(*)::BIGINT, max({REQUEST_TIME}) FROM requests "
            "GROUP BY ALL ORDER BY 3 DESC, 1 NULLS LAST, 2 NULLS LAST"
        ).fetchall()
    finally:
        con.close()
    sources = tuple(Source(r[0], r[1], int(r[2]), r[3]) for r in rows)
    return LakeStatus(
        location=lake.url if lake.url is not None else str(lake.root),
        requests=sum(s.requests for s in sources),
        sources=sources,
        newest_record=freshness.newest_record(lake),
        conflicting_requests=lake.conflicts(),
        now=now or dt.datetime.now(dt.UTC),
    )
