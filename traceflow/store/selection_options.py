"""The :class:`~traceflow.store.selection.Selection` that the selection options describe.

``--since``, ``--until``, ``--agent``, ``--model``, ``--session``, ``--user``, ``--source``,
``--where`` and ``--tz`` as the command line gives them (strings), turned into one selection: the
CLI (``traceflow.cli.options.with_selection``) and the dashboard's JSON API
(``traceflow.dashboards.explorer.api``, whose query parameters have the same names) both build it
here, so that ``GET /api/mix?where=...`` selects what ``traceflow mix --where ...`` selects.
"""

from __future__ import annotations

import datetime as dt

from traceflow.errors import UsageError
from traceflow.store import filters, zones
from traceflow.store.selection import Selection, parse_end, parse_time


def build_selection(
    since: str | None = None,
    until: str | None = None,
    agent: list[str] | None = None,
    model: list[str] | None = None,
    session: list[str] | None = None,
    user: list[str] | None = None,
    source: list[str] | None = None,
    tz: str | None = None,
    where: list[str] | None = None,
) -> Selection:
    """The :class:`Selection` the selection options describe; ``tz`` (``--tz``, else
    :func:`traceflow.store.zones.default_zone`) becomes its zone, in which a ``--since`` or
    ``--until`` without an offset is read."""
    conditions = filters.parse(where)
    zone = zones.default_zone() if tz is None else zones.resolve(tz)
    start = parse_zoned(since, "--since", zone) if since else None
    end = parse_zoned(until, "--until", zone, end=True) if until else None
    if start is not None and end is not None and start >= end:
        raise UsageError(
            f"--since {since} is not before --until {until}, so nothing is selected; swap them or "
            "widen the window"
        )
    return Selection(
        since=start,
        until=end,
        agents=tuple(agent or ()),
        models=tuple(model or ()),
        sessions=tuple(session or ()),
        users=tuple(user or ()),
        sources=tuple(source or ()),
        conditions=conditions,
        zone=zone,
    )


def parse_zoned(value: str, option: str, zone: str, *, end: bool = False) -> dt.datetime:
    """:func:`traceflow.store.selection.parse_time`, a date or time without an offset read in ``zone``
    (``2026-08-01`` with ``--tz Asia/Tokyo``: Tokyo's midnight). With ``end`` (``--until``) a date
    alone means the end of that day (:func:`traceflow.store.selection.parse_end`)."""
    parsed = (parse_end if end else parse_time)(value, option)
    text = value.strip().replace("Z", "+00:00")
    try:
        naive = dt.datetime.fromisoformat(text).tzinfo is None
    except ValueError:  # an age (7d): relative to now, no zone
        return parsed
    return parsed.replace(tzinfo=zones.tzinfo(zone)) if naive else parsed
