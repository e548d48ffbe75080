"""The selection every analysis takes: a time window and filters, turned into a SQL predicate.

A request's time is the requests view's ``request_time`` (:data:`traceflow.store.measures.REQUEST_COLUMNS`);
``--since`` is inclusive and ``--until`` exclusive, both in UTC unless they carry an offset. Values
travel as DuckDB parameters, never spliced into the SQL text.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from traceflow.errors import UsageError
from traceflow.store import measures
from traceflow.units import parse_duration

#: The time of a request, as analyses group and filter it (the column of the requests view).
REQUEST_TIME = measures.REQUEST_TIME


def parse_time(value: str, option: str) -> dt.datetime:
    """``2026-08-01``, ``2026-08-01T12:00``, ``2026-08-01 12:00:00+02:00``, or an age: ``7d``, ``12h``."""
    text = value.strip()
    if text[-1:].isalpha():  # an age (7d, 1.5h), unless it is an ISO time ending in Z
        with contextlib.suppress(UsageError):
            return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=parse_duration(text, option, zero=True))
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {value!r} is not a time; use an ISO date or time such as 2026-08-01 or "
            "2026-08-01T12:00Z, or a relative age such as 7d, 12h, 30m"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class Selection:
    """Which requests an analysis looks at."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    agents: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

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
        is the expression a session filter compares (the view's, or a rollup's column)."""
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
        return clauses, params
