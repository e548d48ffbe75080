"""The explorer's JSON API: each endpoint answers exactly what the CLI prints with ``--format json``.

``GET /api/mix?by=day&where=attr:team.id%3Dpayments`` is ``traceflow mix --by day --where
attr:team.id=payments --format json``: the query parameters are the command's options without their
dashes (``by``, ``where``, ``since``, ``until``, ``agent``, ``model``, ``session``, ``user``,
``source``, ``tz``; a repeatable option is a repeated parameter, a flag such as ``list`` is
``list=1``), the selection is built by :func:`traceflow.store.selection_options.build_selection` and
the answer by the library functions the command calls, rendered as it renders them. A viewer signed
in for one team gets that team's rows only: ``attr:team.id=TEAM`` is added to the selection's
``--where`` conditions (:func:`restrict`), so it is a bound parameter like any other filter.

What the CLI reads from files (``--prices``, ``--data``) is the server's, never a parameter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError
from traceflow.store.filters import Condition

if TYPE_CHECKING:
    from traceflow.output import Display
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection

#: The query parameters that make the selection (the selection options of the CLI).
SELECTION = ("since", "until", "agent", "model", "session", "user", "source", "tz", "where")
#: Those of them that may repeat (repeatable options).
_REPEATED = ("agent", "model", "session", "user", "source", "where")
#: The ``--where`` key of a team.
TEAM_KEY = "attr:team.id"

Params = Mapping[str, Sequence[str]]


def _one(params: Params, name: str) -> str | None:
    values = params.get(name) or []
    if len(values) > 1:
        raise UsageError(f"parameter {name!r} given {len(values)} times; give it once")
    return values[0] if values else None


def _flag(params: Params, name: str) -> bool:
    value = (_one(params, name) or "0").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise UsageError(f"parameter {name}={value!r} is not a flag; give {name}=1 or {name}=0")


def _number(params: Params, name: str, kind: Callable[[str], Any], default: Any) -> Any:
    value = _one(params, name)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"parameter {name}={value!r} is not a {kind.__name__}") from None


def _by(params: Params) -> list[str]:
    from traceflow.store.sql import split_by

    return split_by(list(params.get("by") or []))


def check_names(params: Params, allowed: Sequence[str]) -> None:
    """A usage error naming the parameters an endpoint does not take."""
    unknown = sorted(set(params) - set(SELECTION) - set(allowed))
    if unknown:
        raise UsageError(
            f"unknown parameter(s) {', '.join(unknown)}; this endpoint takes: "
            f"{', '.join((*allowed, *SELECTION))}"
        )


def restrict(selection: Selection, base: Selection | None, team: str | None) -> Selection:
    """``selection`` within ``base`` (the dashboard's own selection options: both windows, both
    filters, ``base``'s lists as ``--where`` conditions) and, for a viewer of one ``team``, within
    that team's rows."""
    conditions = list(selection.conditions)
    if base is not None:
        conditions += base.conditions
        for key, values in (
            ("agent", base.agents),
            ("model", base.models),
            ("user", base.users),
            ("source", base.sources),
        ):
            if values:
                conditions.append(Condition(key, values))
        since = max((t for t in (selection.since, base.since) if t is not None), default=None)
        until = min((t for t in (selection.until, base.until) if t is not None), default=None)
        selection = dataclasses.replace(selection, since=since, until=until)
    if team is not None:
        conditions.append(Condition(TEAM_KEY, (team,)))
    return dataclasses.replace(selection, conditions=tuple(conditions))


def selection_of(params: Params, base: Selection | None, team: str | None) -> Selection:
    """The selection the query parameters describe, restricted to ``base`` and ``team``."""
    from traceflow.store.selection_options import build_selection

    options: dict[str, Any] = {}
    for name in SELECTION:
        if name in _REPEATED:
            options[name] = list(params.get(name) or []) or None
        else:
            options[name] = _one(params, name)
    if options["tz"] is None and base is not None:
        options["tz"] = base.zone
    return restrict(build_selection(**options), base, team)


def json_text(value: Any, zone: str, display: Display, *, single: bool = False) -> str:
    """``value`` as the CLI prints it in ``--format json`` (``traceflow.cli.options.echo``): its times
    shown in ``zone``, a table as a list of records (one object with ``single``)."""
    from traceflow.output import document, render, to_json
    from traceflow.store import zones

    value = zones.localise(value, zone)
    if hasattr(value, "columns"):
        return render(value, "json", single=single, display=display)
    return to_json(document(value, display))


def display_of(lake: Lake) -> Display:
    """What the CLI's ``open_lake`` shows with every document: a lake fed by serve says how fresh."""
    from traceflow.output import PLAIN, Display
    from traceflow.store import freshness

    fresh = freshness.of(lake) if freshness.serve_fed(lake) else None
    return PLAIN if fresh is None else Display(freshness=(fresh.line(), fresh.as_dict()))


def _miss_options(params: Params) -> Any:
    from traceflow.analysis.misses import MissOptions
    from traceflow.prices import PriceModel

    return MissOptions(
        prices=PriceModel.load(None),
        miss_tokens=_number(params, "miss_tokens", int, 1024),
        compaction_drop=_number(params, "compaction_drop", float, 0.5),
    )


def mix(lake: Lake, params: Params, selection: Selection) -> str:
    """``traceflow mix [--by ...] --format json``."""
    from traceflow.analysis.mix import token_mix_rows
    from traceflow.output import render
    from traceflow.prices import PriceModel

    check_names(params, ("by",))
    groups = _by(params)
    result = token_mix_rows(lake.connect(["requests", "events"]), selection, groups, PriceModel.load(None))
    return render(result, "json", single=not groups, display=display_of(lake))


def sessions(lake: Lake, params: Params, selection: Selection) -> str:
    """``traceflow sessions [--by ...] [--list [--limit N]] --format json``."""
    from traceflow.analysis import sessions as s
    from traceflow.units import parse_duration

    check_names(params, ("by", "list", "limit", "idle_after", "compaction_drop"))
    groups = _by(params)
    idle_s = parse_duration(_one(params, "idle_after") or "15m", "--idle-after")
    drop = _number(params, "compaction_drop", float, 0.5)
    con = lake.connect(["requests", "events"])
    display = display_of(lake)
    if _flag(params, "list"):
        limit = _number(params, "limit", int, None)
        return json_text(s.sessions(con, selection, idle_s, drop, limit), selection.zone, display)
    frame = s.session_summary(con, selection, groups, idle_s, drop)
    return json_text(frame, selection.zone, display, single=not groups)


def misses(lake: Lake, params: Params, selection: Selection) -> str:
    """``traceflow misses [--by ...] [--list] --format json``."""
    from traceflow.analysis import misses as m
    from traceflow.store import recorded

    check_names(params, ("by", "list", "miss_tokens", "compaction_drop"))
    groups = _by(params)
    options = _miss_options(params)
    con = lake.connect(["requests", "events", "metric_points"])
    display = display_of(lake)
    selection, left = recorded.narrow(con, selection, "misses")
    if _flag(params, "list"):
        if groups:
            raise UsageError("--list prints one row per miss; it takes no --by")
        frame = m.miss_rows(con, selection, options, misses_only=True).drop("miss")
        return json_text(frame, selection.zone, display)
    if groups:
        return json_text(m.miss_groups(con, selection, groups, options), selection.zone, display)
    report = m.miss_report(con, selection, options)
    return json_text({**report, "left_out": left.as_json()}, selection.zone, display)


def timeline(lake: Lake, params: Params, session: str, team: str | None) -> str:
    """``traceflow timeline SESSION --format json``; for a viewer of one ``team``, only a session
    whose every request is that team's (else the same error as a session the lake does not hold)."""
    from traceflow.analysis import timeline as t
    from traceflow.analysis.mix import token_mix_rows
    from traceflow.store import zones
    from traceflow.store.selection import Selection

    unknown = sorted(set(params) - {"miss_tokens", "compaction_drop"})
    if unknown:
        raise UsageError(
            f"unknown parameter(s) {', '.join(unknown)}; this endpoint takes: miss_tokens, compaction_drop"
        )
    con = lake.connect(["requests", "events", "metric_points"])
    if team is not None:
        whole = Selection(sessions=(session,))
        ours = restrict(whole, None, team)
        counts = [token_mix_rows(con, s).records()[0]["requests"] for s in (whole, ours)]
        if counts[0] != counts[1]:
            raise UsageError(
                f"no requests of session {session!r} in the lake; `traceflow sessions --list` lists the "
                "sessions"
            )
    records = t.timeline(con, session, _miss_options(params))
    return json_text(records, zones.default_zone(), display_of(lake))


#: The endpoints that take a selection, by name (``/api/NAME``).
ENDPOINTS: dict[str, Callable[[Lake, Params, Selection], str]] = {
    "mix": mix,
    "sessions": sessions,
    "misses": misses,
}
