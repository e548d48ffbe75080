"""The selection every analysis takes: a time window and filters, turned into a SQL predicate.

A request's time is the requests view's ``request_time`` (docs/definitions.md); ``--since`` is
inclusive and ``--until`` exclusive, both in UTC unless they carry an offset (:func:`parse_time`; the
CLI reads one without an offset in the selection's zone); a date alone as ``--until`` includes that
whole day (:func:`parse_end`: ``--until 2026-11-05`` ends at the 6th's midnight, as ccusage reads
it). Values travel as DuckDB parameters, never spliced into the SQL text.

The selection also carries the **zone** (``zone``, an IANA name; default
:func:`traceflow.store.zones.default_zone`) in which its requests' days, weeks and months are grouped
and their times printed: an analysis receives it here, never from process state (``docs/zones.md``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError
from traceflow.store import measures, zones
from traceflow.units import parse_duration

if TYPE_CHECKING:
    from traceflow.store.filters import Condition

#: The time of a request, as analyses group and filter it (the column of the requests view).
REQUEST_TIME = measures.REQUEST_TIME


def parse_time(value: str, option: str) -> dt.datetime:
    """``2026-08-01``, ``2026-08-01T12:00``, ``2026-08-01 12:00:00+02:00``, or an age: ``7d``, ``12h``."""
    text = value.strip()
    if text[-1:].isalpha():  # an age (7d, 1.5h), unless it is an ISO time ending in Z
        age = None
        with contextlib.suppress(UsageError):
            age = parse_duration(text, option, zero=True)
        if age is not None:
            try:
                return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age)
            except OverflowError:
                raise UsageError(
                    f"{option} {value!r} reaches before the year 1; give a shorter age such as 30d"
                ) from None
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {value!r} is not a time; use an ISO date or time such as 2026-08-01 or "
            "2026-08-01T12:00Z, or a relative age such as 7d, 12h, 30m"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def parse_end(value: str, option: str) -> dt.datetime:
    """The end of a window: :func:`parse_time`, except that a date alone (``2026-11-05``,
    ``20261105``) ends at the next midnight, so that the day it names is included."""
    parsed = parse_time(value, option)
    try:
        dt.date.fromisoformat(value.strip())
    except ValueError:
        return parsed
    return parsed + dt.timedelta(days=1)


@dataclass(frozen=True)
class Selection:
    """Which requests an analysis looks at, and the zone (``zone``) its periods and times are in."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    agents: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    #: ``--where`` conditions on the ``--by`` keys (:mod:`traceflow.store.filters`), ANDed
    conditions: tuple[Condition, ...] = ()
    #: agents left out (an analysis that needs a kind they do not record: store/recorded.py)
    without_agents: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    zone: str = field(default_factory=zones.default_zone)

    def __post_init__(self) -> None:
        # an IANA name, UTC or local, resolved once (a bad name is a usage error naming the fix)
        object.__setattr__(self, "zone", zones.resolve(self.zone, "zone"))

    def named_lists(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The list filters by the name a reader knows them by, each with its values (maybe none)."""
        return (
            ("agent", self.agents),
            ("model", self.models),
            ("session", self.sessions),
            ("user", self.users),
            ("source", self.sources),
        )

    def where(self, time_expr: str = REQUEST_TIME) -> tuple[str, list[Any]]:
        """A ``WHERE`` body (``true`` when nothing is filtered) and its positional parameters."""
        clauses: list[str] = []
        params: list[Any] = []
        if self.since is not None:
            clauses.append(f"{time_expr} >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append(f"{time_expr} < ?")
            params.append(self.until)
        more, more_params = self.filter_clauses()
        return (" AND ".join(clauses + more) or "true"), params + more_params

    def filter_clauses(
        self, session: str = "coalesce(parent_session_id, session_id)"
    ) -> tuple[list[str], list[Any]]:
        """The ``IN`` clauses of the filters (not the time window) and their parameters; ``session``
        is the expression a session filter compares (the view's, or a rollup's column). The
        ``--where`` conditions (:func:`traceflow.store.filters.clauses`) need a row of the requests
        view or of ``request_steps`` (its ``event_id`` and columns)."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, values in (
            ("agent", self.agents),
            ("model", self.models),
            (session, self.sessions),
            ("user_id", self.users),
            ("source", self.sources),
        ):
            if values:
                clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
                params.extend(values)
        if self.without_agents:
            clauses.append(f"coalesce(agent, '') NOT IN ({', '.join('?' for _ in self.without_agents)})")
            params.extend(self.without_agents)
        if self.conditions:
            from traceflow.store import filters  # filters reads groups, which reads this module

            more, more_params = filters.clauses(self.conditions)
            clauses += more
            params += more_params
        return clauses, params


def zone_of(selection: Selection | None) -> str:
    """The zone of ``selection`` (no selection: :func:`traceflow.store.zones.default_zone`)."""
    return selection.zone if selection is not None else zones.default_zone()
