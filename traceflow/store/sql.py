"""Named queries: the packaged ``queries/*.sql`` files, listed, loaded and run with ``$name`` parameters.

Each file is one statement over the views (``requests``, ``events``, ``metric_points``, ``spans``) and
starts with a header comment::

    -- gaps: one line saying what the query answers.
    -- More lines of explanation (definitions, caveats).
    -- params:  $since TIMESTAMPTZ = NULL   only requests at or after this time
    --          $ttl_s DOUBLE = 300         a parameter with a default
    --          $session VARCHAR            a parameter without a default must be given
    -- returns: col_a, col_b, ...

A parameter without a default raises :class:`~traceflow.errors.MissingParameter` when it is not given;
a name the file does not take raises :class:`~traceflow.errors.UsageError`. Values may be strings
(the SQL casts each parameter to its type), so ``--param since=2026-08-01`` works from the CLI.

The analysis modules run the same files, replacing *blocks* marked ``/*@name*/ ... /*@end*/``: the
``selection`` block (the time filter the file applies by default) becomes the full
:class:`~traceflow.store.selection.Selection` predicate. Outside traceflow the markers are plain comments, so
each file runs as it is in any DuckDB that has the views and the macros of
:data:`traceflow.store.measures.MACROS` (:meth:`~traceflow.store.lake.Lake.connect` defines both).

The per-request window (each request's stream, position, gap, kind and reusable prefix) is written
once, in ``queries/steps.sql``; the per-stream queries read its rows as ``request_steps``
(:data:`STEPS`). The window always runs over the whole lake, and each per-stream query applies its
``selection`` block to the rows of ``request_steps`` afterwards: a selection narrows what is reported,
never what a request is compared with (the first request of a window keeps its previous request), so
figures summed over requests add up over disjoint windows. :func:`statement` supplies the rows: the
steps stored by ``traceflow compact`` while they are fresh (for any selection), else ``steps.sql``
over the whole lake, composed as the query's first CTE. In a bare DuckDB, ``CREATE TEMP TABLE
request_steps AS`` the steps file first (``queries/steps.sql`` says how).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from traceflow.errors import MissingParameter, QueryError, UnknownQuery, UsageError
from traceflow.store.measures import REQUEST_TIME, STEPS

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

_T = TypeVar("_T")
_PARAM_LINE = re.compile(r"^\$(\w+)\s+([A-Za-z][\w\[\]]*)(?:\s*=\s*('(?:[^']|'')*'|\S+))?\s*(.*)$")
_SENTENCE = re.compile(r"^(.*?[.!?])(?:\s+|$)(.*)$", re.S)
_BLOCK = re.compile(r"/\*@(\w+)\*/(.*?)/\*@end\*/", re.S)
_LINE_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'(?:[^']|'')*'")
_PARAM_USE = re.compile(r"\$([A-Za-z_]\w*)")


@dataclass(frozen=True)
class Param:
    """One ``$name`` a query takes."""

    name: str
    type: str
    default: Any
    has_default: bool
    doc: str


@dataclass(frozen=True)
class Query:
    """A packaged query: its header and its SQL text."""

    name: str
    summary: str
    description: str
    params: tuple[Param, ...]
    returns: tuple[str, ...]
    text: str

    def sql(self, blocks: Mapping[str, str] | None = None) -> str:
        """The statement with the given blocks replaced, without a trailing semicolon."""
        wanted = dict(blocks or {})
        seen: set[str] = set()

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in wanted:
                seen.add(name)
                return f"/*@{name}*/ {wanted[name]} /*@end*/"
            return m.group(0)

        text = _BLOCK.sub(sub, self.text)
        missing = sorted(set(wanted) - seen)
        if missing:
            raise QueryError(f"query {self.name!r} has no block(s) {missing} to replace")
        return text.strip().rstrip(";").rstrip()

    def block(self, name: str) -> str:
        """The text the file itself has in its block ``name`` (what :meth:`sql` keeps by default)."""
        for m in _BLOCK.finditer(self.text):
            if m.group(1) == name:
                return m.group(2).strip()
        raise QueryError(f"query {self.name!r} has no block {name!r}")


def _dir() -> Any:
    return files("traceflow.queries")


def names() -> list[str]:
    """The packaged queries' names, sorted."""
    return sorted(p.name[:-4] for p in _dir().iterdir() if p.name.endswith(".sql"))


def _parse_default(text: str | None) -> tuple[Any, bool]:
    if text is None:
        return None, False
    if text.upper() == "NULL":
        return None, True
    if text.startswith("'"):
        return text[1:-1].replace("''", "'"), True
    for kind in (int, float):
        try:
            return kind(text), True
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true", True
    return text, True


def parse(name: str, text: str) -> Query:
    """Read the header comment of a query file (see the module docstring for its layout)."""
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header.append(line[2:].strip())
    if not header or ":" not in header[0]:
        raise QueryError(f"query {name!r} must start with a '-- {name}: what it answers' comment")
    title, _, summary = header[0].partition(":")
    if title.strip() != name:
        raise QueryError(f"query file {name}.sql names itself {title.strip()!r} in its header")
    description: list[str] = []
    params: list[Param] = []
    returns: list[str] = []
    section = "description"
    for line in header[1:]:
        if line.startswith("params:"):
            section, line = "params", line[len("params:") :].strip()
        elif line.startswith("returns:"):
            section, line = "returns", line[len("returns:") :].strip()
        if not line:
            continue
        if section == "description":
            description.append(line)
        elif section == "params":
            m = _PARAM_LINE.match(line)
            if m is None:
                if line.lower() != "none" and params:  # continuation of the previous parameter's doc
                    p = params[-1]
                    params[-1] = Param(p.name, p.type, p.default, p.has_default, f"{p.doc} {line}".strip())
                continue
            default, has_default = _parse_default(m.group(3))
            params.append(Param(m.group(1), m.group(2), default, has_default, m.group(4).strip()))
        else:
            returns.extend(c.strip() for c in line.split(",") if c.strip())
    # the summary is the first sentence (it may run over several lines); the rest is the description
    prose = " ".join([summary.strip(), *description]).strip()
    m = _SENTENCE.match(prose)
    first, rest = (m.group(1), m.group(2)) if m else (prose, "")
    return Query(name, first.strip(), rest.strip(), tuple(params), tuple(returns), text)


def load(name: str) -> Query:
    """The packaged query ``name``; :class:`UnknownQuery` lists the known ones otherwise."""
    known = names()
    if name not in known:
        raise UnknownQuery(f"no query named {name!r}; known: {', '.join(known)}")
    return parse(name, (_dir() / f"{name}.sql").read_text())


def _code(sql: str) -> str:
    """``sql`` without comments and string literals."""
    return _STRING.sub("''", _LINE_COMMENT.sub("", re.sub(r"/\*.*?\*/", " ", sql, flags=re.S)))


def used_params(sql: str) -> list[str]:
    """The ``$names`` a statement uses, in order of first use (comments and strings ignored)."""
    seen: dict[str, None] = {}
    for m in _PARAM_USE.finditer(_code(sql)):
        seen.setdefault(m.group(1), None)
    return list(seen)


def bind(query: Query, sql: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter values for ``sql`` (the query's text after block replacement)."""
    declared = {p.name: p for p in query.params}
    unknown = sorted(set(given) - set(declared) - set(used_params(sql)))
    if unknown:
        takes = ", ".join(f"{p.name} ({p.type})" for p in query.params) or "no parameters"
        raise UsageError(f"query {query.name!r} has no parameter {', '.join(unknown)}; it takes {takes}")
    values: dict[str, Any] = {}
    for name in used_params(sql):
        if name in given:
            values[name] = given[name]
        elif name in declared and declared[name].has_default:
            values[name] = declared[name].default
        else:
            p = declared.get(name)
            kind = f" ({p.type}: {p.doc})" if p else ""
            raise MissingParameter(f"query {query.name!r} needs --param {name}=VALUE{kind}")
    return values


@runtime_checkable
class Engine(Protocol):
    """Another engine over the lake's views (``traceflow.engines``): what :func:`run` needs of it.

    Analyses take either a DuckDB connection (the default) or an engine; the SQL they send is DuckDB's,
    and the engine translates it (``traceflow.engines.rewrite``).
    """

    name: str

    def frame(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pl.DataFrame:
        """Run one DuckDB-dialect statement with ``$name`` or ``?`` parameters; the rows as polars."""
        ...

    def materialised(self, view: str) -> bool:
        """Whether the derived ``view`` reads stored files (see :func:`materialised`)."""
        ...


def run(
    con: duckdb.DuckDBPyConnection | Engine,
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    blocks: Mapping[str, str] | None = None,
    wrap: str | None = None,
) -> pl.DataFrame:
    """Run a packaged query and return a polars frame.

    ``blocks`` replaces marked blocks (see :meth:`Query.sql`); ``wrap`` is a statement with ``{q}``
    where the query goes as a subquery (how the analyses aggregate a per-row query without
    materialising it). Parameters in ``blocks`` and ``wrap`` are bound from ``params`` too. A query
    that reads :data:`STEPS` gets it from :func:`statement`.
    """
    if isinstance(con, Engine):
        return con.frame(*_prepared(con, name, params, blocks, wrap))
    return _fetched(query_frame, con, name, params, blocks, wrap)


def run_rows(
    con: duckdb.DuckDBPyConnection | Engine,
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    blocks: Mapping[str, str] | None = None,
    wrap: str | None = None,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """:func:`run`'s result as column names and row tuples: for a few rows (an aggregate a command
    prints), which need no frame library loaded (polars and pyarrow cost about 0.25 s of CPU to import)."""
    return _fetched(query_rows, con, name, params, blocks, wrap)


def _fetched(
    fetch: Callable[[Any, str, dict[str, Any]], _T],
    con: duckdb.DuckDBPyConnection | Engine,
    name: str,
    params: Mapping[str, Any] | None,
    blocks: Mapping[str, str] | None,
    wrap: str | None,
) -> _T:
    """``fetch`` (:func:`query_frame`, :func:`query_rows`) of the packaged query ``name`` as
    :func:`_prepared` writes it; a DuckDB error becomes a QueryError naming the query."""
    import duckdb

    try:
        return fetch(con, *_prepared(con, name, params, blocks, wrap))
    except duckdb.Error as e:
        raise QueryError(f"query {name!r} failed: {e}") from None


def _prepared(
    con: duckdb.DuckDBPyConnection | Engine,
    name: str,
    params: Mapping[str, Any] | None,
    blocks: Mapping[str, str] | None,
    wrap: str | None,
) -> tuple[str, dict[str, Any]]:
    """The statement and parameter values :func:`run` sends for the packaged query ``name``."""
    query = load(name)
    sql = statement(con, query, blocks, params)
    if wrap is not None:
        sql = wrap.replace("{q}", f"(\n{sql}\n)")
    return sql, bind(query, sql, params or {})


#: The comment a derived view of the lake carries while it reads the files stored by compaction
#: instead of running its query (see :func:`materialised`).
MATERIALISED = "materialised"


def sql_string(text: object) -> str:
    """``text`` (a path, say) as a SQL string literal: a quote in it stays part of the string.

    >>> sql_string("/data/bob's lake")
    "'/data/bob''s lake'"
    """
    return "'" + str(text).replace("'", "''") + "'"


def query_frame(
    con: duckdb.DuckDBPyConnection | Engine,
    sql: str,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
) -> pl.DataFrame:
    """Run a query and return a polars frame (DuckDB 2 dropped ``execute(...).pl()``)."""
    if isinstance(con, Engine):
        return con.frame(sql, params)
    frame: pl.DataFrame = con.sql(sql, params=params).pl()
    return frame


def query_rows(
    con: duckdb.DuckDBPyConnection | Engine,
    sql: str,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """:func:`query_frame`'s result as column names and row tuples (no frame library on DuckDB)."""
    if isinstance(con, Engine):
        frame = con.frame(sql, params)
        return list(frame.columns), frame.rows()
    relation = con.sql(sql, params=params)
    return list(relation.columns), relation.fetchall()


_READS_STEPS = re.compile(rf"\b{STEPS}\b")
_LEADING_WITH = re.compile(r"\A(?:\s+|--[^\n]*\n)*WITH\s", re.I)


def reads_steps(query: Query) -> bool:
    """Whether ``query`` reads :data:`STEPS` (the per-stream queries) rather than defining it."""
    return query.name != "steps" and bool(_READS_STEPS.search(_code(query.text)))


#: A request's time in the rows of :data:`STEPS` (``selection.REQUEST_TIME`` there).
STEPS_TIME = "t_start"


def steps_selection(block: str) -> str:
    """A ``selection`` block for the rows of :data:`STEPS`: the requests view's time expression
    (:data:`~traceflow.store.selection.REQUEST_TIME`, as :func:`selection_block` writes it) read as
    the steps' ``t_start`` (the same value); the filter columns (agent, model, session, user, source,
    version, and ``event_id`` for a ``--where`` on an attribution) have the same names there.

    >>> steps_selection("(request_time >= $sel_0 AND model IN ($sel_1))")
    '(t_start >= $sel_0 AND model IN ($sel_1))'
    """
    # only the window's bounds: a --where sub-query reads the requests view (traceflow.store.filters)
    return re.sub(rf"\b{REQUEST_TIME}(?= (?:>=|<) \$sel_\d)", STEPS_TIME, block)


def statement(
    con: duckdb.DuckDBPyConnection | Engine,
    query: Query,
    blocks: Mapping[str, str] | None = None,
    params: Mapping[str, Any] | None = None,
) -> str:
    """The statement :func:`run` executes for ``query`` with these blocks and parameters.

    A per-stream query (see :func:`reads_steps`) reads :data:`STEPS`: the lake's stored steps while
    they are fresh (:func:`uses_stored_steps`), otherwise ``queries/steps.sql`` over the whole lake
    (narrowed to the sessions with a selected request, :func:`roots_block`: the same rows), composed
    as the query's first CTE. Its ``selection`` block (written for the requests view, as
    :func:`selection_block` writes it; :func:`steps_selection`) filters the rows of :data:`STEPS`
    after the window. ``steps`` itself reads the stored steps in the same case, with the same filter.
    """
    wanted = dict(blocks or {})
    # "roots": a per-stream query whose selection is not its "selection" block (misses.sql's
    # "filter") names the requests whose sessions it reads, for the requests view (roots_block)
    narrow = wanted.pop(ROOTS, None)
    if query.name == "steps" or reads_steps(query):
        if "selection" in wanted:
            wanted["selection"] = steps_selection(wanted["selection"])
    else:
        return query.sql(wanted)
    stored = uses_stored_steps(con)
    # the narrowing is DuckDB's: on another engine the window runs over the whole lake (the same rows;
    # the IN-subquery has no exact Spark translation in traceflow.engines.rewrite)
    roots = "true" if isinstance(con, Engine) else (narrow or roots_block(blocks))
    if query.name == "steps":
        if not stored:
            return query.sql({**wanted, "roots": roots})
        where = wanted.get("selection") or query.block("selection")
        return f"SELECT * FROM {STEPS} -- stored by compaction\nWHERE {where}"
    sql = query.sql(wanted)
    if stored:
        return sql
    window = load("steps").sql({"selection": "true", "roots": roots})
    if not isinstance(con, Engine) and sharing_steps(con):
        whole = load("steps").sql({"selection": "true", "roots": "true"})
        return with_steps(sql, f"SELECT * FROM {_shared_steps(con, window, params or {}, whole)}")
    return with_steps(sql, window)


#: The temporary table whose presence tells :func:`statement` to share the window (:func:`share_steps`).
_SHARE_MARK = "_tf_share_steps"


def share_steps(con: duckdb.DuckDBPyConnection) -> None:
    """Let every per-stream query on ``con`` read one window: the first computes ``steps.sql`` (for its
    ``roots``) into a temporary table, as a compacted lake stores it, and the later ones with the same
    roots read that table instead of sorting the lake again. For a connection that runs many per-stream
    queries (``traceflow report``); one query alone reads the window composed into it (cheaper: DuckDB
    then computes only the columns the query reads). The connection is a snapshot of the lake's files
    (:meth:`traceflow.store.lake.Lake.connect`), so the table never goes stale."""
    con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_SHARE_MARK} (on_ BOOLEAN)")


def steps_table(con: duckdb.DuckDBPyConnection | Engine) -> bool:
    """Whether :data:`STEPS` is a table on ``con`` (stored by compaction, or shared by
    :func:`share_steps`) rather than the window composed into each query: reading it twice then costs
    two scans, not two sorts of the lake."""
    return uses_stored_steps(con) or (not isinstance(con, Engine) and sharing_steps(con))


def sharing_steps(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether :func:`share_steps` was called on ``con``."""
    return _temp_table(con, _SHARE_MARK)


def _temp_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND temporary", [name]
    ).fetchall()
    return bool(found and found[0][0])


def _shared_steps(
    con: duckdb.DuckDBPyConnection, window: str, params: Mapping[str, Any], whole: str | None = None
) -> str:
    """The temporary table holding ``window``'s rows (``steps.sql`` with its roots block), created on
    first use: one per distinct window and parameter values on the connection. Where the table of
    ``whole`` (the window over the whole lake) is there already, that one: its rows are every
    narrower window's, and more (a query selects its own rows after the window)."""
    import hashlib

    def table(text: str) -> tuple[str, dict[str, Any]]:
        values = {n: params[n] for n in used_params(text) if n in params}
        key = hashlib.sha256(repr((text, sorted(values.items(), key=lambda kv: kv[0]))).encode()).hexdigest()
        return f"_tf_steps_{key[:16]}", values

    name, values = table(window)
    if _temp_table(con, name):
        return name
    if whole is not None and whole != window and _temp_table(con, table(whole)[0]):
        return table(whole)[0]
    con.execute(f"CREATE TEMP TABLE {name} AS\n{window}", bind(load("steps"), window, values))
    return name


#: The pseudo-block of :func:`statement`: the selection (for the requests view) whose sessions a
#: per-stream query reads, when its own selection is not a ``selection`` block.
ROOTS = "roots"


def roots_block(blocks: Mapping[str, str] | None) -> str:
    """The ``roots`` block of ``steps.sql`` for a run with these blocks: the requests of the sessions
    that have a request the ``selection`` block selects (``true``: every request, without one).

    A session is ``coalesce(parent_session_id, session_id)`` with its sub-agents, a request without
    a session its own; every request of such a session is kept, so each selected request's stream is
    whole and its window row is the whole lake's. The block is written for the requests view, as
    :func:`selection_block` writes it.
    """
    selection = (blocks or {}).get("selection")
    if selection is None or selection.strip().strip("()").strip().lower() == "true":
        return "true"
    root = "coalesce(parent_session_id, session_id, event_id)"
    return (
        f"{root} IN (SELECT {root} FROM requests WHERE total_tokens > 0 AND "
        f"{REQUEST_TIME} IS NOT NULL AND {selection})"
    )


def with_steps(sql: str, steps: str) -> str:
    """``sql`` with ``steps`` (the window's statement) as its first CTE, named :data:`STEPS`.

    ``NOT MATERIALIZED``: a query that reads the window twice (``sessions.sql``) inlines it twice,
    and DuckDB drops the window from a read that uses none of its columns.
    """
    cte = f"WITH {STEPS} AS NOT MATERIALIZED (\n{steps}\n)"
    m = _LEADING_WITH.match(sql)
    if m is None:
        return f"{cte}\n{sql}"
    if re.match(r"RECURSIVE\b", sql[m.end() :].lstrip(), re.I):
        raise QueryError(f"a query reading {STEPS} cannot start WITH RECURSIVE")
    return f"{cte},\n{sql[m.end() :]}"


def uses_stored_steps(con: duckdb.DuckDBPyConnection | Engine) -> bool:
    """Whether the per-stream queries read the steps stored by compaction (fresh ones answer every
    selection: the window is the whole lake's either way)."""
    return materialised(con, STEPS)


def materialised(con: duckdb.DuckDBPyConnection | Engine, view: str) -> bool:
    """Whether the connection's derived ``view`` reads the files stored by compaction."""
    if isinstance(con, Engine):
        return con.materialised(view)
    rows = con.execute(
        "SELECT comment FROM duckdb_views() WHERE view_name = ? AND NOT internal", [view]
    ).fetchall()
    return bool(rows) and rows[0][0] == MATERIALISED


def selection_block(selection: Selection | None, time_expr: str | None = None) -> tuple[str, dict[str, Any]]:
    """The selection's predicate with named parameters (``$sel_0``, ...), for a ``selection`` block."""
    from traceflow.store.selection import REQUEST_TIME, Selection

    where, positional = (selection or Selection()).where(time_expr or REQUEST_TIME)
    parts = where.split("?")
    if len(parts) != len(positional) + 1:  # the predicate is generated: ? only marks parameters
        raise QueryError("unexpected '?' in a selection predicate")
    out = [parts[0]]
    params: dict[str, Any] = {}
    for i, (value, rest) in enumerate(zip(positional, parts[1:], strict=True)):
        out.append(f"$sel_{i}{rest}")
        params[f"sel_{i}"] = value
    return f"({''.join(out)})", params


def listing() -> pl.DataFrame:
    """Name, summary, parameters and result columns of every packaged query."""
    import polars as pl

    rows = []
    for name in names():
        q = load(name)
        rows.append(
            {
                "name": q.name,
                "summary": q.summary,
                "params": ", ".join(
                    f"{p.name}" + (f"={'NULL' if p.default is None else p.default}" if p.has_default else "")
                    for p in q.params
                ),
                "returns": ", ".join(q.returns),
            }
        )
    return pl.DataFrame(
        rows, schema={"name": pl.String, "summary": pl.String, "params": pl.String, "returns": pl.String}
    )


def parse_param_options(items: Sequence[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` from ``--param`` options -> ``{"k": "v"}``."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param {item!r} is not NAME=VALUE")
        out[key.strip().lstrip("$")] = value
    return out


def split_by(values: Sequence[str] | None) -> list[str]:
    """``--by a,b --by c`` -> ``["a", "b", "c"]`` (order kept, duplicates dropped)."""
    out: list[str] = []
    for item in values or ():
        for part in item.split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out
