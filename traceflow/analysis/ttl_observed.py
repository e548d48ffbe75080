"""The TTL in force (docs/forensics.md#traceflow-misses): the cache TTL the requests' writes asked for, per
UTC day, and its changes.

* A day's ``ttl_in_force_s`` is 3600 when most of its split write tokens (those the source reports
  as 5-minute or 1-hour writes) were 1-hour writes, else 300; ``share_1h_writes`` is that share.
* Where a day has no write split (Codex, OTLP without the breakdown, public traces), the TTL is
  inferred from the misses after gaps of 5 min to 1 h (:mod:`traceflow.analysis.misses`): 3600 when
  most of those requests hit the cache, 300 when most missed, NULL when there were none; a note says
  which days were inferred.
* A change is a day whose TTL differs from the previous day's (with traffic) in the same group;
  ``extra_cost_usd`` is what that day cost under the new TTL minus what it would have cost under the
  previous one, by the TTL what-if (:func:`traceflow.analysis.ttl.ttl_whatif`): positive when the
  change cost money.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from traceflow.analysis import misses, ttl
from traceflow.errors import UsageError
from traceflow.prices import PriceModel
from traceflow.store import zones
from traceflow.store.groups import column_exprs
from traceflow.store.selection import REQUEST_TIME, Selection

if TYPE_CHECKING:
    import duckdb

#: The selection filter each ``--by`` name narrows (``day`` is always a key here).
_FILTERS = {"agent": "agents", "model": "models", "session": "sessions", "user": "users", "source": "sources"}


def _day_sums(
    con: duckdb.DuckDBPyConnection, selection: Selection, by: Sequence[str]
) -> list[dict[str, Any]]:
    exprs = column_exprs(requests=True, zone=selection.zone)
    keys = "".join(f"{exprs[b]} AS {b}, " for b in by)
    where, params = selection.where()
    day = exprs["day"]
    cur = con.execute(
        f"""SELECT {keys}{day} AS day,
               coalesce(sum(cache_write_5m_tokens), 0)::BIGINT AS w5m,
               coalesce(sum(cache_write_1h_tokens), 0)::BIGINT AS w1h
           FROM requests
           WHERE total_tokens > 0 AND {REQUEST_TIME} IS NOT NULL AND {where}
           GROUP BY ALL ORDER BY ALL""",
        params,
    )
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _gap_evidence(
    con: duckdb.DuckDBPyConnection, selection: Selection, by: Sequence[str]
) -> dict[tuple[Any, ...], tuple[int, int]]:
    """(group..., day) -> (hits, misses) among requests after a gap of 5 min to 1 h."""
    keys = [*by, "day"]
    exprs = column_exprs(requests=False, zone=selection.zone)
    counts = misses._run(
        con,
        selection,
        wrap="SELECT "
        + "".join(f"{exprs[k]} AS {k}, " for k in keys)
        + "count(*) FILTER (WHERE NOT miss)::BIGINT AS hits, count(*) FILTER (WHERE miss)::BIGINT AS misses "
        "FROM {q} WHERE gap_s > 300 AND gap_s <= 3600 AND cause IS DISTINCT FROM 'model_switch' "
        "AND cause IS DISTINCT FROM 'compaction' GROUP BY ALL",
        ordered=False,
    )
    return {tuple(r[k] for k in keys): (r["hits"], r["misses"]) for r in counts.iter_rows(named=True)}


def _narrowed(selection: Selection, by: Sequence[str], key: Sequence[Any], day: str) -> Selection:
    start = dt.datetime.fromisoformat(day).replace(tzinfo=zones.tzinfo(selection.zone))
    end = start + dt.timedelta(days=1)
    since = max(start, selection.since) if selection.since else start
    until = min(end, selection.until) if selection.until else end
    changes: dict[str, Any] = {"since": since, "until": until}
    for name, value in zip(by, key, strict=True):
        changes[_FILTERS[name]] = (value,)
    return replace(selection, **changes)


def ttl_in_force(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    by: Sequence[str] = (),
    prices: PriceModel | None = None,
) -> dict[str, Any]:
    """``{"days": [{..by, "day", "ttl_in_force_s", "share_1h_writes"}], "changes": [{..by, "day",
    "from_s", "to_s", "extra_cost_usd"}], "notes": [...]}`` (the ``traceflow ttl --observed`` object)."""
    sel = selection or Selection()
    groups = [b for b in by if b != "day"]
    unknown = [b for b in groups if b not in _FILTERS]
    if unknown:
        raise UsageError(f"cannot group by {', '.join(unknown)}; choose from: day, {', '.join(_FILTERS)}")
    pm = prices or PriceModel()
    sums = _day_sums(con, sel, groups)
    evidence: dict[tuple[Any, ...], tuple[int, int]] | None = None
    days: list[dict[str, Any]] = []
    inferred: list[str] = []
    for r in sums:
        split = r["w5m"] + r["w1h"]
        share = r["w1h"] / split if split else None
        if share is not None:
            ttl_s: int | None = 3600 if share > 0.5 else 300
        else:
            if evidence is None:
                evidence = _gap_evidence(con, sel, groups)
            hits, missed = evidence.get((*(r[g] for g in groups), r["day"]), (0, 0))
            ttl_s = None if hits == missed == 0 else (3600 if hits > missed else 300)
            inferred.append(f"{r['day']}: {hits} hit(s), {missed} miss(es) after gaps of 5-60 min")
        days.append(
            {**{g: r[g] for g in groups}, "day": r["day"], "ttl_in_force_s": ttl_s, "share_1h_writes": share}
        )
    changes: list[dict[str, Any]] = []
    last: dict[tuple[Any, ...], int] = {}
    for d in days:
        key = tuple(d[g] for g in groups)
        now = d["ttl_in_force_s"]
        if now is None:
            continue
        before = last.get(key)
        last[key] = now
        if before is None or before == now:
            continue
        costs = ttl.ttl_whatif(con, _narrowed(sel, groups, key, d["day"]), [float(before), float(now)], pm)
        by_ttl = dict(zip(costs["ttl_s"].to_list(), costs["cost_usd"].to_list(), strict=True))
        changes.append(
            {
                **{g: d[g] for g in groups},
                "day": d["day"],
                "from_s": before,
                "to_s": now,
                "extra_cost_usd": by_ttl[float(now)] - by_ttl[float(before)],
            }
        )
    notes = []
    if inferred:
        notes.append(
            "no 5m/1h cache-write split on "
            + ("these days" if len(inferred) > 1 else "this day")
            + " (the source does not report it); the TTL is inferred from the misses after gaps of "
            "5 min to 1 h (3600 when most hit, 300 when most missed, null when there were none): "
            + "; ".join(inferred)
        )
    return {"days": days, "changes": changes, "notes": notes}
