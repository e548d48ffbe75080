"""``--by`` groupings: one table of what each name groups on, for mix, misses, gaps and sessions.

Two kinds of grouping:

* **Columns** (``agent``, ``model``, ``session``, ``day``, ``week``, ``month``, ``user``, ``source``,
  ``version``;
  ``kind`` for gaps): an expression over a ``requests`` row (``mix``) and one over the rows of the
  per-stream queries (``misses.sql``, ``gaps.sql``, ``sessions.sql``: ``root_session_id``,
  ``started_at``, ...). The periods (``day``, ``week``: the ISO week, labelled by its Monday,
  ``month``) are taken in the selection's zone (``Selection.zone``, :mod:`traceflow.store.zones`;
  :data:`COLUMNS` holds their UTC form, :func:`column_exprs` the one in a given zone).
* **Attribution** (``project``, ``host``, ``subagent_type``, ``attr:NAME``): read off each request's
  own ``attributes`` (its record's and its resource's). Only a request that carries no value
  inherits one from its *stream* (``session_id``, ``parent_session_id``; a sub-agent is its own
  stream), deterministically: the value of the nearest earlier request of the stream that carries
  one, else of the earliest later one, in the order (request time, ``seq``, ``event_id``), over the
  whole lake (not only the selection; :func:`attributed_sql`). A request without a session has only
  its own value. For ``subagent_type`` a stream that carries none anywhere takes the ``agent_type``
  of its ``subagent_completed`` event (the smallest, should there be several). ``mix`` groups each
  request by its value; the per-stream queries (``misses``, ``gaps``) take the stream's value, which
  is the value of its first request in that order (:func:`lookup_sql`), and ``sessions`` the value of
  the session's main stream. The same rule on every engine and every run.

  - ``project``: the resource attribute the ``project_attribute`` setting names
    (``TRACEFLOW_PROJECT_ATTRIBUTE``, default ``project``; OTLP), else ``attributes.project``
    (TraceLab), else ``attributes.cwd``: the session's working directory (Claude Code and Codex
    transcripts).
  - ``host``: the resource attribute ``host.name`` (OTLP), else ``attributes.host``.
  - ``subagent_type``: ``attributes.subagent_type`` of the requests (kv-cache-tester), else the
    ``agent_type`` of the stream's ``subagent_completed`` event (Claude Code OTLP); NULL for a main
    stream. Not offered by ``sessions``, which folds a session's sub-agents in.
  - ``attr:NAME``: the resource attribute ``NAME`` (e.g. ``team.id`` from ``OTEL_RESOURCE_ATTRIBUTES``),
    else the row's own attribute ``NAME`` (e.g. ``git_branch`` of a Claude Code transcript).
* **Tools** (``tool``): the ``tool_name`` of the ``tool_result`` events (Claude Code OTLP, TraceLab)
  of a request's stream that fell after the previous request of the stream ended and no later than
  the request started: the tools whose results the request carried back to the model
  (:func:`tool_lookup_sql`). A request after results of several tools is in each tool's group (the
  groups overlap: their sums can exceed the total); a request after no tool result is in the NULL
  group. ``sessions`` puts a session in the group of every tool its streams called. Sources without
  tool events (Claude Code and Codex transcripts, kv-cache-tester, the public traces) have only the
  NULL group. ``tool`` is a grouping of its own rather than an attribution: the value belongs to a
  request, not to its stream.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from traceflow import config
from traceflow.errors import UsageError
from traceflow.store import zones
from traceflow.store.measures import REQUEST_TIME

#: Names of the column groupings, with their expression over a requests row and over a row of the
#: per-stream queries; ``kind`` (gaps only) has no request expression.
COLUMNS: dict[str, tuple[str | None, str]] = {
    "agent": ("agent", "agent"),
    "model": ("model", "model"),
    "session": ("coalesce(parent_session_id, session_id)", "root_session_id"),
    "day": (
        f"strftime({REQUEST_TIME} AT TIME ZONE 'UTC', '%Y-%m-%d')",
        "strftime(started_at AT TIME ZONE 'UTC', '%Y-%m-%d')",
    ),
    "week": (zones.period_sql("week", REQUEST_TIME, "UTC"), zones.period_sql("week", "started_at", "UTC")),
    "month": (zones.period_sql("month", REQUEST_TIME, "UTC"), zones.period_sql("month", "started_at", "UTC")),
    "user": ("user_id", "user_id"),
    "source": ("source", "source"),
    "version": ("agent_version", "agent_version"),  # the agent's client version, per request
    "kind": (None, "kind"),
}

#: The attribution groupings (``attr:NAME`` is any resource attribute besides these).
ATTRIBUTION = ("project", "host", "subagent_type")

_ATTR_NAME = re.compile(r"^[A-Za-z0-9_.\-/]+$")

#: The relation of the per-stream attribution values, joined as this alias.
ALIAS = "attribution"
#: The grouping by the tool whose result a request followed, and the alias its lookup is joined as.
TOOL = "tool"
TOOL_ALIAS = "tools"


def _json(path: str, col: str = "attributes") -> str:
    return f"json_extract_string({col}, '{path}')"


def _resource(name: str, col: str = "attributes") -> str:
    return _json(f'$.resource."{name}"', col)


def project_attribute() -> str:
    """The resource attribute that names the project (the ``project_attribute`` setting)."""
    name = (config.get("project_attribute") or "project").strip()
    if not _ATTR_NAME.match(name):
        raise UsageError(
            f"TRACEFLOW_PROJECT_ATTRIBUTE={name!r} is not an attribute name (letters, digits, . _ - /)"
        )
    return name


def request_expr(name: str, col: str = "attributes") -> str:
    """The expression of an attribution grouping over one ``requests`` row (its ``attributes``)."""
    if name == "project":
        return (
            f"coalesce({_resource(project_attribute(), col)}, {_json('$.project', col)}, "
            f"{_json('$.cwd', col)})"
        )
    if name == "host":
        return f"coalesce({_resource('host.name', col)}, {_json('$.host', col)})"
    if name == "subagent_type":
        return _json("$.subagent_type", col)
    attr = name.removeprefix("attr:")
    own = _json('$."' + attr + '"', col)
    return f"coalesce({_resource(attr, col)}, {own})"


def ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (``attr:team.id`` is not a bare one)."""
    return '"' + name.replace('"', '""') + '"'


def is_attribution(name: str) -> bool:
    return name in ATTRIBUTION or name.startswith("attr:")


@dataclass(frozen=True)
class Keys:
    """What a query needs to group its rows by some names.

    ``select``: ``"expr AS name, ..., "`` (empty without names); ``join``: a ``LEFT JOIN`` of the
    attribution values (empty when no attribution name is asked for); ``group``: ``GROUP BY 1, 2
    ORDER BY 1, 2`` (empty without names); ``names`` and ``exprs``: each name and its ``expr``, in
    order (for a query that groups in steps, :mod:`traceflow.store.quantiles`); ``relation``: what a
    query over requests reads in place of ``requests`` (:func:`request_keys`: the requests with their
    attribution, :func:`attributed_sql`).
    """

    select: str
    join: str
    group: str
    names: tuple[str, ...] = ()
    exprs: tuple[str, ...] = ()
    relation: str = "requests"


def column_exprs(*, requests: bool, zone: str) -> dict[str, str]:
    """:data:`COLUMNS`' expressions over a requests row (``requests``) or a per-stream query's row,
    the periods (:data:`traceflow.store.zones.PERIODS`) taken in ``zone`` (``Selection.zone``)."""
    pick = 0 if requests else 1
    out: dict[str, str] = {}
    for name, pair in COLUMNS.items():
        expr = pair[pick]
        if expr is not None:
            out[name] = expr
    for period in zones.PERIODS:
        if period in out:
            out[period] = zones.period_sql(period, REQUEST_TIME if requests else "started_at", zone)
    return out


def check(by: Sequence[str], allowed: Sequence[str]) -> None:
    """UsageError naming the choices when a name in ``by`` is not one of ``allowed`` (``attr:NAME``
    stands for every ``attr:`` name)."""
    bad = []
    for b in by:
        if b.startswith("attr:"):
            if "attr:NAME" not in allowed or not _ATTR_NAME.match(b[5:]):
                bad.append(b)
        elif b not in allowed:
            bad.append(b)
    if bad:
        raise UsageError(f"cannot group by {', '.join(bad)}; choose from: {', '.join(allowed)}")


def choices(*, requests: bool, subagents: bool = True, kind: bool = False) -> list[str]:
    """The ``--by`` names a query offers."""
    out = [n for n, (req, _) in COLUMNS.items() if n != "kind" and (req is not None or not requests)]
    if kind:
        out.append("kind")
    out += ["project", "host", *(["subagent_type"] if subagents else []), "attr:NAME", TOOL]
    return out


def tool_lookup_sql() -> str:
    """One row per (request, tool): ``k_session``, ``k_parent``, ``k_start`` (the request's start,
    ``request_time``), ``tool`` and ``calls``: how many ``tool_result`` events of
    that tool the stream logged after its previous request ended and no later than this one started."""
    start = REQUEST_TIME
    return f"""
SELECT r.session_id AS k_session, r.parent_session_id AS k_parent, r.t_start AS k_start,
       json_extract_string(e.attributes, '$.tool_name') AS tool, count(*)::BIGINT AS calls
FROM (SELECT session_id, parent_session_id, {start} AS t_start,
             lag(recorded_time) OVER (
                 PARTITION BY session_id, parent_session_id ORDER BY {start}, seq) AS prev_end
      FROM requests WHERE session_id IS NOT NULL AND {start} IS NOT NULL) AS r
JOIN events AS e
  ON e.name = 'tool_result' AND e.session_id = r.session_id
 AND e.parent_session_id IS NOT DISTINCT FROM r.parent_session_id
 AND e.timestamp <= r.t_start AND (r.prev_end IS NULL OR e.timestamp > r.prev_end)
GROUP BY ALL"""


def _tool_join(session: str, parent: str, start: str) -> str:
    return (
        f"LEFT JOIN ({tool_lookup_sql()}) AS {TOOL_ALIAS} ON {TOOL_ALIAS}.k_session = {session} "
        f"AND {TOOL_ALIAS}.k_parent IS NOT DISTINCT FROM {parent} AND {TOOL_ALIAS}.k_start = {start}"
    )


def _session_tools_join() -> str:
    return (
        f"LEFT JOIN (SELECT DISTINCT coalesce(parent_session_id, session_id) AS k_root, "
        f"json_extract_string(attributes, '$.tool_name') AS tool FROM events "
        f"WHERE name = 'tool_result' AND session_id IS NOT NULL) AS {TOOL_ALIAS} "
        f"ON {TOOL_ALIAS}.k_root = root_session_id"
    )


#: The stream order of attribution (a total order: ``event_id`` is unique in the view).
STREAM_ORDER = f"{REQUEST_TIME} NULLS LAST, seq NULLS LAST, event_id NULLS LAST"
_STREAM = "PARTITION BY session_id, parent_session_id"


def attributed_sql(names: Sequence[str]) -> str:
    """The ``requests`` rows, each with ``attr_g0``, ``attr_g1``, ... : its value of each attribution
    name in ``names`` (its own, else inherited from its stream as the module says; a request without
    a session keeps its own). Read as a relation in place of ``requests``."""
    cols = []
    for i, n in enumerate(names):
        own = request_expr(n)
        earlier = f"last_value({own} IGNORE NULLS) OVER ({_STREAM} ORDER BY {STREAM_ORDER} " + (
            "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
        )
        later = f"first_value({own} IGNORE NULLS) OVER ({_STREAM} ORDER BY {STREAM_ORDER} " + (
            "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)"
        )
        inherited = f"coalesce({own}, {earlier}, {later})"
        cols.append(f"CASE WHEN session_id IS NULL THEN {own} ELSE {inherited} END AS attr_g{i}")
    return f"(SELECT *, {', '.join(cols)} FROM requests)"


def _agent_types_sql() -> str:
    """One row per stream (``k_session``, ``k_parent``) with the ``agent_type`` of its
    ``subagent_completed`` event (the smallest, should there be several) as ``agent_type``."""
    return (
        "SELECT session_id AS k_session, parent_session_id AS k_parent, "
        "min(json_extract_string(attributes, '$.agent_type')) AS agent_type "
        "FROM events WHERE name = 'subagent_completed' AND session_id IS NOT NULL "
        "GROUP BY session_id, parent_session_id"
    )


def lookup_sql(names: Sequence[str]) -> str:
    """One row per stream (``k_session``, ``k_parent``) with the value of each attribution name of
    its first request in stream order (:func:`attributed_sql`: its own or inherited, so the first that
    carries one) and, for ``subagent_type``, else its ``subagent_completed`` event's, as ``g0``,
    ``g1``, ... in the order of ``names``."""
    firsts = ", ".join(f"max(CASE WHEN attr_n = 1 THEN attr_g{i} END) AS g{i}" for i in range(len(names)))
    numbered = (
        f"SELECT *, row_number() OVER ({_STREAM} ORDER BY {STREAM_ORDER}) AS attr_n "
        f"FROM {attributed_sql(names)} AS a WHERE session_id IS NOT NULL"
    )
    text = (
        f"SELECT session_id AS k_session, parent_session_id AS k_parent, {firsts} "
        f"FROM ({numbered}) AS n GROUP BY session_id, parent_session_id"
    )
    if "subagent_type" not in names:
        return text
    i = list(names).index("subagent_type")
    cols = ", ".join(
        f"coalesce(s.g{j}, e.agent_type) AS g{j}" if j == i else f"s.g{j} AS g{j}" for j in range(len(names))
    )
    return (
        f"SELECT coalesce(s.k_session, e.k_session) AS k_session, "
        f"CASE WHEN s.k_session IS NULL THEN e.k_parent ELSE s.k_parent END AS k_parent, {cols} "
        f"FROM ({text}) AS s FULL JOIN ({_agent_types_sql()}) AS e "
        "ON e.k_session = s.k_session AND e.k_parent IS NOT DISTINCT FROM s.k_parent"
    )


def _keys(
    by: Sequence[str], expr: dict[str, str], join: str, tool_join: str, relation: str = "requests"
) -> Keys:
    if not by:
        return Keys("", "", "")
    expr = {**expr, TOOL: f"{TOOL_ALIAS}.tool"}
    select = "".join(f"{expr[b]} AS {ident(b)}, " for b in by)
    if TOOL in by:
        join = (join + " " + tool_join).strip()
    positions = ", ".join(str(i + 1) for i in range(len(by)))
    group = f"GROUP BY {positions} ORDER BY {positions}"
    return Keys(select, join, group, tuple(by), tuple(expr[b] for b in by), relation)


def request_keys(by: Sequence[str], table: str = "r", *, zone: str) -> Keys:
    """Grouping over ``requests`` (read as :attr:`Keys.relation`, aliased ``table``): the ``mix``
    groupings, the periods in ``zone``, each request attributed by its own values (:func:`attributed_sql`)."""
    check(by, choices(requests=True))
    attribution = [b for b in by if is_attribution(b)]
    expr = column_exprs(requests=True, zone=zone)
    join = ""
    for i, b in enumerate(attribution):
        expr[b] = f"{table}.attr_g{i}"
        if b == "subagent_type":  # a stream that carries none: its subagent_completed event's
            event = f"coalesce({expr[b]}, {ALIAS}.agent_type)"
            expr[b] = f"CASE WHEN {table}.session_id IS NULL THEN {expr[b]} ELSE {event} END"
            join = (
                f"LEFT JOIN ({_agent_types_sql()}) AS {ALIAS} ON {ALIAS}.k_session = {table}.session_id "
                f"AND {ALIAS}.k_parent IS NOT DISTINCT FROM {table}.parent_session_id"
            )
    tools = _tool_join(
        f"{table}.session_id", f"{table}.parent_session_id", f"coalesce({table}.started_at, {table}.ended_at)"
    )
    relation = attributed_sql(attribution) if attribution else "requests"
    return _keys(by, expr, join, tools, relation)


def row_keys(by: Sequence[str], *, zone: str, sessions: bool = False, kind: bool = False) -> Keys:
    """Grouping over the rows of a per-stream query: one row per request (``misses.sql``,
    ``gaps.sql``: with ``session_id`` and ``parent_session_id``) or, with ``sessions``, one per
    session (``sessions.sql``: attribution by the session's main stream); the periods in ``zone``."""
    check(by, choices(requests=False, subagents=not sessions, kind=kind))
    attribution = [b for b in by if is_attribution(b)]
    expr = column_exprs(requests=False, zone=zone)
    for i, b in enumerate(attribution):
        expr[b] = f"{ALIAS}.g{i}"
    if sessions:
        on = f"{ALIAS}.k_session = root_session_id AND {ALIAS}.k_parent IS NULL"
        tools = _session_tools_join()
    else:
        on = f"{ALIAS}.k_session = session_id AND {ALIAS}.k_parent IS NOT DISTINCT FROM parent_session_id"
        tools = _tool_join("session_id", "parent_session_id", "started_at")
    join = f"LEFT JOIN ({lookup_sql(attribution)}) AS {ALIAS} ON {on}" if attribution else ""
    return _keys(by, expr, join, tools)
