"""The derived measures of a request and the rules that pick a row: each written once, here.

Every other module takes them from this table (``docs/definitions.md`` lists them with their home):

* :data:`REQUEST_COLUMNS`: the columns the ``requests`` view adds to the stored ones, on DuckDB
  (:meth:`traceflow.store.lake.Lake.view_sql`) and on Spark (:func:`traceflow.engines.spark.register`),
  so a query reads ``request_time``, ``context_tokens`` and ``total_tokens`` instead of spelling them:

  - ``request_time``: when a request happened, ``started_at``, else ``ended_at`` (a record that only
    gives its end); what ``--since``/``--until`` filter and ``--by day`` groups;
  - ``recorded_time``: when the agent recorded it, ``ended_at``, else ``started_at``: where the
    ccusage-compatible period views file a request, and a request's end in the per-stream window;
  - ``context_tokens``: the prompt, ``cold_input + cache_read + cache_write`` (the counts are
    exclusive, :class:`traceflow.rows.Tokens`; a count the record lacks is 0);
  - ``total_tokens``: the context and the output.

* :data:`COMPLETENESS` (:func:`completeness` in Python): how complete one copy of a request is, its
  token total. :func:`dedup_order` is the **total order** that picks the one copy of an ``event_id``
  every engine keeps (the views, ``compact`` on DuckDB and on Spark): the most complete, then the
  newest ``ingested_at``, then the one stored first (its file's name, its row in the file), so no
  two stored rows tie and the pick is the same on every run and engine. :data:`CONFLICTS` counts
  the ids whose copies disagree on ``user_id`` or ``session_id`` (one request replayed as another
  user's): the import summary reports them, since only one copy survives.

* :data:`MACROS`: the ratios, as SQL macros the lake's DuckDB connections define
  (:func:`macros_sql`) and the Spark rewrite expands: ``reuse_ratio(read, context)``, the
  token-weighted share of the context read from the cache (pass sums: ``reuse_ratio(sum(
  cache_read_tokens), sum(context_tokens))``), and ``token_share(part, whole)``, a kind's share of
  all tokens. :func:`ratio` is their Python twin (NULL, None, where the whole is 0). Beside them
  ``total(count)``, a count summed over a group's rows (0, not NULL, where none has it), and
  ``grid_end(query, lo, hi, max_buckets, resolution_s)``: the last bucket of a time grid from bucket
  ``lo`` to ``hi``, an error naming ``query`` when that is ``max_buckets`` or more (``load``,
  ``working_set``).

* :data:`PERIODS`: the label of the day, week (its ISO Monday) or month a time falls in, from
  which both :func:`traceflow.store.zones.period_sql` and :func:`~traceflow.store.zones.period_of`
  are built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from traceflow.schema import REQUESTS

#: The four exclusive token kinds of a request, in table order.
TOKEN_COLUMNS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
#: The kinds that make up the prompt (the context a cache can serve).
CONTEXT_COLUMNS = TOKEN_COLUMNS[:3]


def _sum(columns: tuple[str, ...]) -> str:
    return " + ".join(f"coalesce({c}, 0)" for c in columns)


#: The derived columns of the ``requests`` view: name -> expression over the stored columns.
REQUEST_COLUMNS: Mapping[str, str] = {
    "request_time": "coalesce(started_at, ended_at)",
    "recorded_time": "coalesce(ended_at, started_at)",
    "context_tokens": _sum(CONTEXT_COLUMNS),
    "total_tokens": _sum(TOKEN_COLUMNS),
}
#: The column a request's time is read from (the view's; ``t_start`` in ``request_steps``).
REQUEST_TIME = "request_time"
#: The column of the time the agent recorded a request (its end, else its start): what ccusage files
#: a request at, and so the period views (``daily``… ``session``, ``blocks --json``) and a stream's end.
RECORDED_TIME = "recorded_time"

#: The relation the per-stream queries read: ``queries/steps.sql``'s rows, one per request in stream
#: order; the lake's view of this name holds them for the whole lake (stored by compaction).
STEPS = "request_steps"
#: How complete one stored copy of a request is: among the copies of an ``event_id`` the largest wins.
COMPLETENESS = REQUEST_COLUMNS["total_tokens"]


def request_columns_sql() -> str:
    """The derived columns as a ``SELECT`` list (``expr AS name, ...``), for a view of ``requests``."""
    return ", ".join(f"{expr} AS {name}" for name, expr in REQUEST_COLUMNS.items())


def context(cold: int | None, read: int | None, write: int | None) -> int:
    """``context_tokens`` in Python (a count the record lacks is 0).

    >>> context(2, 15030, None)
    15032
    """
    return (cold or 0) + (read or 0) + (write or 0)


def completeness(cold: int | None, read: int | None, write: int | None, output: int | None) -> int:
    """:data:`COMPLETENESS` of one copy in Python (the importers' in-batch dedup): its token total,
    ``total_tokens``.

    >>> completeness(2, 15030, 1200, 45)
    16277
    """
    return context(cold, read, write) + (output or 0)


#: Where a stored row is, as each engine gives it while deduplicating: its file (DuckDB: the file's
#: rank among the table's files by name; Spark: the name itself, the same order) and its row's
#: position in that file (from 0).
SOURCE_FILE = "_file"
SOURCE_ROW = "_row"


def dedup_order(table: str) -> str:
    """The ``ORDER BY`` of the window that keeps one row per ``event_id`` (the first): a total order.

    ``requests`` puts the most complete copy (:data:`COMPLETENESS`) first; every table then the
    newest ``ingested_at``; then the copy stored first: the file whose name sorts first (files are
    named ``<time_ns>-<pid>-<random>.parquet`` and never change), the earlier row in it. No two
    stored rows tie, so the same lake gives the same copy on every run and engine.
    """
    keys = [f"{COMPLETENESS} DESC"] if table == REQUESTS.name else []
    keys += ["ingested_at DESC NULLS LAST", f"{SOURCE_FILE} ASC", f"{SOURCE_ROW} ASC"]
    return ", ".join(keys)


#: The ``event_id``\\ s of the stored requests whose copies disagree on ``user_id`` or
#: ``session_id`` (over the stored rows before deduplication, ``{rows}``).
CONFLICTS = """
SELECT count(*)::BIGINT FROM (
    SELECT event_id FROM {rows}
    GROUP BY event_id
    HAVING count(DISTINCT coalesce(user_id, '')) > 1 OR count(DISTINCT coalesce(session_id, '')) > 1
)"""


class Macro(NamedTuple):
    """A SQL macro: its parameters and its body over them."""

    params: tuple[str, ...]
    body: str


#: The macros (see the module docstring): name -> parameters and body.
MACROS: Mapping[str, Macro] = {
    "reuse_ratio": Macro(("read", "context"), "read / nullif(context, 0)::DOUBLE"),
    "token_share": Macro(("part", "whole"), "part / nullif(whole, 0)::DOUBLE"),
    "total": Macro(("count",), "coalesce(sum(count), 0)::BIGINT"),
    "grid_end": Macro(
        ("query", "lo", "hi", "max_buckets", "resolution_s"),
        "CASE WHEN hi - lo >= max_buckets THEN error(query || ': more than ' || max_buckets || ' buckets of '"
        " || resolution_s || ' s; give a coarser resolution') ELSE hi END",
    ),
}


def macros_sql(database: str | None = None) -> list[str]:
    """The statements that define :data:`MACROS` in a DuckDB connection: temporary macros, or stored
    in the attached ``database`` (a snapshot file)."""
    kind, prefix = ("MACRO", f"{database}.") if database else ("TEMP MACRO", "")
    return [
        f"CREATE OR REPLACE {kind} {prefix}{name}({', '.join(m.params)}) AS {m.body}"
        for name, m in MACROS.items()
    ]


def ratio(part: float, whole: float) -> float | None:
    """The macros' division in Python: ``part / whole``, None where ``whole`` is 0.

    >>> ratio(15030, 20040), ratio(0, 0)
    (0.75, None)
    """
    return part / whole if whole else None


class Period(NamedTuple):
    """How a period's label is written: the wall-clock time truncated to ``trunc`` (None: as it
    is), formatted with ``fmt`` (strftime)."""

    trunc: str | None
    fmt: str


#: The period groupings (``--by day|week|month``): a week is labelled by its ISO Monday.
PERIODS: Mapping[str, Period] = {
    "day": Period(None, "%Y-%m-%d"),
    "week": Period("week", "%Y-%m-%d"),
    "month": Period(None, "%Y-%m"),
}


def period_label_sql(period: str, local: str) -> str:
    """The SQL label of the ``period`` that ``local`` (a wall-clock TIMESTAMP or a DATE) falls in.

    >>> period_label_sql("week", "CAST(day AS DATE)")
    "strftime(date_trunc('week', CAST(day AS DATE)), '%Y-%m-%d')"
    """
    spec = PERIODS.get(period)
    if spec is None:
        raise ValueError(f"not a period: {period}")
    if spec.trunc is not None:
        local = f"date_trunc('{spec.trunc}', {local})"
    return f"strftime({local}, '{spec.fmt}')"
