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
  of its ``subagent_completed`` event (the smallest, should there be several). Every analysis groups
  each request by its own value (:func:`values_sql`, the one rule): ``mix`` a request's tokens,
  ``misses`` a request's miss, ``gaps`` a gap under the request that ends it, and ``sessions`` a
  session's requests (:func:`session_blocks`): a session whose requests carry several values is in
  each value's group, with the requests that carry it. The same rule on every engine and every run.

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
from traceflow.store.measures import REQUEST_TIME, STEPS

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

#: The relation of the per-request attribution values, joined as this alias.
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
    cols, owns = [], []
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
        owns.append(own)
    # only the streams with a request that carries no value need the window (the sort of the lake by
    # stream and time); every other request's value is its own. A stream is keyed by its hash: one
    # that collides with a lacking stream's only takes the window too, which gives it the same values
    lacking = (
        "(SELECT DISTINCT hash(session_id, parent_session_id) AS k_stream FROM requests "
        f"WHERE session_id IS NOT NULL AND ({' OR '.join(f'{o} IS NULL' for o in owns)}))"
    )
    on = "l.k_stream = hash(r.session_id, r.parent_session_id)"
    plain = ", ".join(f"{o} AS attr_g{i}" for i, o in enumerate(owns))
    return (
        f"(SELECT r.*, {plain} FROM requests r ANTI JOIN {lacking} l ON {on} "
        f"UNION ALL SELECT r.*, {', '.join(cols)} FROM requests r SEMI JOIN {lacking} l ON {on})"
    )


def _agent_types_sql() -> str:
    """One row per stream (``k_session``, ``k_parent``) with the ``agent_type`` of its
    ``subagent_completed`` event (the smallest, should there be several) as ``agent_type``."""
    return (
        "SELECT session_id AS k_session, parent_session_id AS k_parent, "
        "min(json_extract_string(attributes, '$.agent_type')) AS agent_type "
        "FROM events WHERE name = 'subagent_completed' AND session_id IS NOT NULL "
        "GROUP BY session_id, parent_session_id"
    )


def _agent_types_join(table: str, alias: str) -> str:
    """``LEFT JOIN`` the ``agent_type`` of the stream of each row of ``table`` as ``alias``."""
    return (
        f"LEFT JOIN ({_agent_types_sql()}) AS {alias} ON {alias}.k_session = {table}.session_id "
        f"AND {alias}.k_parent IS NOT DISTINCT FROM {table}.parent_session_id"
    )


def _value(i: int, name: str, table: str, alias: str) -> str:
    """A request's value of the attribution ``name`` (the ``i``-th asked for) over a row ``table`` of
    :func:`attributed_sql`: its own or inherited; for ``subagent_type``, where its stream carries
    none, its stream's ``subagent_completed`` event's (joined as ``alias``, :func:`_agent_types_join`)."""
    value = f"{table}.attr_g{i}"
    if name != "subagent_type":
        return value
    return f"CASE WHEN {table}.session_id IS NULL THEN {value} ELSE coalesce({value}, {alias}.agent_type) END"


def values_sql(names: Sequence[str]) -> str:
    """One row per request (``k_event``: its ``event_id``) with its value of each attribution name in
    ``names`` as ``g0``, ``g1``, ... (:func:`attributed_sql` and, for ``subagent_type``, the stream's
    event): what a row of a per-request query (``misses.sql``, ``gaps.sql``, ``steps.sql``) is
    grouped by."""
    cols = ", ".join(f"{_value(i, n, 'a', 'types')} AS g{i}" for i, n in enumerate(names))
    join = _agent_types_join("a", "types") if "subagent_type" in names else ""
    return f"SELECT a.event_id AS k_event, {cols} FROM {attributed_sql(names)} AS a {join}".rstrip()


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
    for i, b in enumerate(attribution):
        expr[b] = _value(i, b, table, ALIAS)
    join = _agent_types_join(table, ALIAS) if "subagent_type" in attribution else ""
    tools = _tool_join(
        f"{table}.session_id", f"{table}.parent_session_id", f"coalesce({table}.started_at, {table}.ended_at)"
    )
    relation = attributed_sql(attribution) if attribution else "requests"
    return _keys(by, expr, join, tools, relation)


def row_keys(by: Sequence[str], *, zone: str, sessions: bool = False, kind: bool = False) -> Keys:
    """Grouping over the rows of a per-request query: one row per request (``misses.sql``,
    ``gaps.sql``: with ``event_id``, ``session_id`` and ``parent_session_id``), each attributed by its
    own values (:func:`values_sql`), or, with ``sessions``, one per session and value
    (``sessions.sql`` run with :func:`session_blocks`); the periods in ``zone``."""
    check(by, choices(requests=False, subagents=not sessions, kind=kind))
    attribution = [b for b in by if is_attribution(b)]
    expr = column_exprs(requests=False, zone=zone)
    join = ""
    if sessions:
        for i, b in enumerate(attribution):
            expr[b] = f"attr_g{i}"  # session_blocks' key_columns
        tools = _session_tools_join()
    else:
        for i, b in enumerate(attribution):
            expr[b] = f"{ALIAS}.g{i}"
        if attribution:
            join = f"LEFT JOIN ({values_sql(attribution)}) AS {ALIAS} ON {ALIAS}.k_event = event_id"
        tools = _tool_join("session_id", "parent_session_id", "started_at")
    return _keys(by, expr, join, tools)


def session_blocks(by: Sequence[str], columns: Sequence[str]) -> dict[str, str]:
    """The blocks of ``sessions.sql`` that split each session by the attribution names in ``by``
    (none: ``{}``): its ``rows`` are the rows of ``request_steps`` (their ``columns``: ``steps.sql``'s)
    with each request's values (:func:`values_sql`) as ``attr_g0``, ... and ``root_key`` the
    session's and those values' hash, so a session is one row per combination of values its
    requests carry; ``keys`` and ``key_columns`` carry the values to its row (:func:`row_keys`)."""
    attribution = [b for b in by if is_attribution(b)]
    if not attribution:
        return {}
    n = range(len(attribution))
    kept = ", ".join(f"s.{c}" for c in columns if c != "root_key")
    # NULL and '' hash apart (a NULL is marked beside its value: Spark's xxhash64 skips NULLs)
    split = ", ".join(f"v.g{i}, v.g{i} IS NULL" for i in n)
    values = ", ".join(f"v.g{i} AS attr_g{i}" for i in n)
    rows = (
        f"(SELECT {kept}, hash(s.root_key, {split}) AS root_key, {values} FROM {STEPS} AS s "
        f"LEFT JOIN ({values_sql(attribution)}) AS v ON v.k_event = s.event_id) AS attributed"
    )
    return {
        "rows": rows,
        "keys": "".join(f"any_value(attr_g{i}) AS attr_g{i}, " for i in n),
        "key_columns": "".join(f"p.attr_g{i}, " for i in n),
    }
