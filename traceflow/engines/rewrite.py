"""DuckDB SQL -> Spark SQL through a parsed syntax tree: what is exact is translated, the rest refused.

The packaged ``queries/*.sql`` and the SQL the analyses generate (``traceflow.store``: ``--by``
groupings, quantiles by rank, the replay's request scan) are written in DuckDB's dialect.
:func:`to_spark` parses a statement with SQLGlot's DuckDB parser, checks **every node** of the tree
against a list of constructs known to mean the same on Spark 4 (with the session pinned to UTC and
ANSI mode on, :data:`traceflow.engines.spark.SETTINGS`), translates the ones that are spelled or
behave differently, and prints the tree with SQLGlot's Spark generator. A node that is on no list
raises :class:`~traceflow.errors.QueryError` naming it: nothing passes through unchecked. The walk
and the rules for a statement's structure are in :mod:`traceflow.engines.sqltree`; the rules for
functions, the dialects and :func:`to_spark` here.

Translated (DuckDB -> Spark), each to the same values:

- ``$name`` -> ``:name`` (named parameters); ``"ident"`` -> ```ident```; strings re-escaped
- ``ORDER BY x`` -> ``ORDER BY x NULLS LAST`` (DuckDB sorts NULLs last by default, Spark first in
  ascending order): every sort key gets an explicit ``NULLS FIRST``/``NULLS LAST``
- ``1.5`` -> ``1.5D`` (a decimal literal would keep Spark's arithmetic in DECIMAL: its averages
  round; DuckDB turns the literal to DOUBLE next to a DOUBLE, and the packaged SQL uses them there)
- ``CAST(x AS BIGINT|INTEGER)`` -> ``CAST(bround(x) AS ...)`` (DuckDB rounds a fraction half to even,
  Spark truncates); ``TIMESTAMPTZ`` -> ``TIMESTAMP`` (an instant; the session zone is UTC);
  ``LIMIT CAST(x AS BIGINT)`` -> ``LIMIT CAST(bround(x) AS INT)``; ``CAST(NULL AS VARCHAR)``
- ``x AT TIME ZONE 'UTC'`` -> ``CAST(x AS TIMESTAMP_NTZ)`` (DuckDB's naive local time; UTC only);
  ``date_trunc('hour', x)`` -> ``date_trunc('HOUR', x)`` (naive again where ``x`` was)
- ``strftime(x, '%Y-%m-%d')`` -> ``date_format(x, 'yyyy-MM-dd')``: the directives of
  :data:`STRFTIME` (``%Y %m %d %H %M %S``) and the separators ``- : space T``; a format that is not
  a literal or holds another directive is refused
- ``epoch_us(x)`` -> ``unix_micros(x)``; ``to_timestamp(s)`` ->
  ``timestamp_micros(CAST(bround(s * 1000000.0D) AS BIGINT))`` (DuckDB rounds to the microsecond
  half to even; Spark's ``timestamp_seconds`` truncates)
- ``floor(x)``, ``ceil(x)`` -> the same as a DOUBLE (DuckDB's type), exact for every double: Spark's
  are BIGINT, so NaN and magnitudes of 2^52 and more (already whole) are passed through as they are
- ``json_extract_string(j, '$.a."b.c"')`` (and ``->>``) -> ``get_json_object(j, '$.a['b.c']')``: the
  path re-spelled for Spark's parser (a quoted key in a DuckDB path is NULL on Spark as written)
- ``list[i]`` -> ``try_element_at(list, CAST(nullif(i, 0) AS INT))`` for every index expression
  (DuckDB lists are 1-based and give NULL out of range, index 0 included; Spark's ``[]`` is 0-based);
  ``len(list)`` of a lake list column (``hash_ids``) -> ``size(list)``, of a string ``length``
- ``[a, b]`` -> ``array(a, b)``; ``unnest(generate_series(a, b))`` -> ``explode(CASE WHEN a <= b THEN
  sequence(a, b) END)`` (Spark counts down where ``a > b``; DuckDB gives no rows); ``unnest(l)`` ->
  ``explode(l)``, and with ``generate_subscripts(l, 1)`` beside it a ``LATERAL VIEW posexplode(l)``
- ``any_value(x)`` -> ``any_value(x, true)`` (DuckDB skips NULLs; Spark's may return one);
  ``first_value``/``last_value(x IGNORE NULLS)`` -> ``...(x, true)``; ``arg_min(x, y)`` ->
  ``min_by(x, CASE WHEN x IS NOT NULL THEN y END)`` (DuckDB skips a NULL ``x``), ``arg_max`` alike;
  ``bool_or``, ``bool_and``
- ``hash(...)`` -> ``xxhash64(...)``: 64-bit like DuckDB's (Spark's ``hash`` is 32-bit and collides).
  The *values* differ: hashes are keys inside a query (equal where the inputs are equal), never
  results (``tests/conformance_support.py``: ``HASHED``)
- ``fma(a, b, c)`` -> ``CAST(java_method('java.lang.Math', 'fma', a, b, c) AS DOUBLE)`` (one
  rounding; DuckDB has no ``fma``: :mod:`traceflow.store.quantiles` sends it to Spark only)
- ``error(msg)`` -> ``raise_error(msg)``; ``random()`` -> ``rand()``
- the macros of :data:`traceflow.store.measures.MACROS` (``reuse_ratio(read, context)``, ...) -> their
  body with the arguments in place of the parameters, translated
- ``UNION ALL BY NAME`` -> ``UNION ALL`` with each side's columns put in the first side's order, a
  column one side lacks as NULL (Spark SQL has no ``BY NAME``); every column must be named
- ``AS [NOT] MATERIALIZED (`` -> ``AS (`` (a planning hint); nested ``WITH`` stays nested
- ``WHERE (a) ...`` -> ``WHERE true AND (a) ...`` (Spark reads ``WHERE (`` after a table as an alias)
- ``QUALIFY``, ``FILTER (WHERE ...)``, ``GROUP BY ALL``, ``GROUPING SETS``, named windows, ``SEMI``
  and ``ANTI`` joins, ``JOIN ... USING`` (not under an unqualified ``*``: Spark orders the columns
  otherwise), ``IS [NOT] DISTINCT FROM``, ``x IN (SELECT ...)``: as they are

Refused (:class:`QueryError`), among others: ``quantile_cont`` and the other DuckDB aggregates
without an exact Spark twin (the analyses compute quantiles by rank, :mod:`traceflow.store.quantiles`),
``round(x, n)`` (Spark rounds the exact decimal, DuckDB the scaled double), casts to VARCHAR (number
formatting differs) and to naive TIMESTAMP, time zones other than UTC, ``* EXCLUDE``, ``DISTINCT
ON``, intervals, slices, a JSON path that is not a literal, any function not listed here.

Known bounds (documented, not checked): an attribute's JSON number is returned as each engine
prints it (equal for the integers and the shortest-form decimals collectors write); ``ln`` of 0
or less is an error on DuckDB and NULL on Spark; a division by zero is ``inf`` on DuckDB and an
error on Spark (ANSI); SQL that DuckDB accepts by implicit casts Spark may refuse (an error, never a
different number). ``tests/test_rewrite.py`` checks each rule; ``tests/test_differential.py``
requires both engines to give the same results for generated lakes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ErrorLevel, SqlglotError
from sqlglot.generators.spark import SparkGenerator

from traceflow.engines.sqltree import RULES, call, cast, double, only, refuse, translate
from traceflow.errors import QueryError
from traceflow.schema import TABLES
from traceflow.store.measures import MACROS

#: strftime directives and their Spark ``date_format`` letters.
STRFTIME = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss"}


_SEPARATORS = {"-": "-", ":": ":", " ": " ", "T": "'T'"}


#: DuckDB functions (parsed as calls SQLGlot does not know) and their Spark names, by arity
#: (None: any).
CALLS: dict[str, tuple[str, int | None]] = {
    "hash": ("xxhash64", None),
    "epoch_us": ("unix_micros", 1),
    "error": ("raise_error", 1),
}


_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_TWO52 = "4503599627370496.0D"  # doubles this large are whole numbers


class _DuckDBAsWritten(DuckDB):
    """DuckDB's dialect with list indexes kept as written (1-based): SQLGlot shifts a literal
    index to 0-based but leaves an expression as it is, so the two would need telling apart."""

    INDEX_OFFSET = 0


class _SparkExplicit(Spark):
    """Spark's dialect printing ``NULLS FIRST``/``NULLS LAST`` on every sort key and keeping a
    ``WITH`` where it is (SQLGlot hoists nested ones to the top, where two CTEs may share a name)."""

    class Generator(SparkGenerator):
        EXPRESSIONS_WITHOUT_NESTED_CTES: ClassVar[set[type[exp.Expr]]] = set()  # Spark nests them
        # no rewriting of SELECTs: Spark 4 has QUALIFY (SQLGlot's subquery for it leaks a column);
        # DISTINCT ON, UNNEST and ANY, which the others rewrite, are refused before this
        TRANSFORMS: ClassVar[dict[Any, Any]] = {
            k: v for k, v in SparkGenerator.TRANSFORMS.items() if k is not exp.Select
        }

        def ordered_sql(self, expression: exp.Ordered) -> str:
            desc = " DESC" if expression.args.get("desc") else ""
            nulls = " NULLS FIRST" if expression.args.get("nulls_first") else " NULLS LAST"
            return f"{self.sql(expression, 'this')}{desc}{nulls}"

        def where_sql(self, expression: exp.Where) -> str:
            text = self.sql(expression, "this")
            if text.startswith("("):
                text = f"true AND {text}"
            return f"{self.seg('WHERE')}{self.sep()}{text}"


def _strftime_pattern(node: exp.Expression) -> str:
    fmt = node.args.get("format")
    if not isinstance(fmt, exp.Literal) or not fmt.is_string:
        raise refuse(node, "the format must be a string literal")
    text, out, i = fmt.name, [], 0
    while i < len(text):
        two = text[i : i + 2]
        if two in STRFTIME:
            out.append(STRFTIME[two])
            i += 2
        elif text[i] in _SEPARATORS:
            out.append(_SEPARATORS[text[i]])
            i += 1
        else:
            raise refuse(node, f"the format {text!r} has {text[i : i + 2]!r} (known: {' '.join(STRFTIME)})")
    return "".join(out)


def _json_path(node: exp.Expression) -> str:
    path = node.args.get("expression")
    if not isinstance(path, exp.JSONPath):
        raise refuse(node, "the JSON path must be a string literal")
    parts = path.expressions
    if not parts or not isinstance(parts[0], exp.JSONPathRoot):
        raise refuse(node, "the JSON path must start at $")
    out = ["$"]
    for part in parts[1:]:
        if isinstance(part, exp.JSONPathKey) and isinstance(part.this, str):
            key = part.this
            if _KEY.match(key):
                out.append(f".{key}")
            elif "'" in key or "]" in key or "[" in key:
                raise refuse(node, f"Spark's JSON paths cannot spell the key {key!r}")
            else:
                out.append(f"['{key}']")
        elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int) and part.this >= 0:
            out.append(f"[{part.this}]")
        else:
            raise refuse(node, f"the JSON path step {part.sql(dialect='duckdb')!r} is not supported")
    return "".join(out)


def _floor_ceil(name: str) -> Callable[[exp.Expression], exp.Expression]:
    def rule(node: exp.Expression) -> exp.Expression:
        only(node, "this")
        x = translate(node.this)
        passthrough = exp.or_(
            call("isnan", x.copy()), exp.GTE(this=exp.Abs(this=x.copy()), expression=double(_TWO52))
        )
        return exp.Case(
            ifs=[exp.If(this=passthrough, true=cast(x.copy(), "DOUBLE"))],
            default=cast(call(name, x), "DOUBLE"),
        )

    return rule


def _utc_instant(node: exp.Expression) -> exp.Expression:
    """The instant under ``x AT TIME ZONE 'UTC'`` (the session zone is UTC)."""
    only(node, "this", "zone")
    zone = node.args.get("zone")
    if not (isinstance(zone, exp.Literal) and zone.is_string and zone.name == "UTC"):
        raise refuse(node, "only UTC (the session zone) is supported")
    inner = node.this
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.AtTimeZone):
        raise refuse(node, "AT TIME ZONE twice")
    return translate(node.this)


def _at_utc(node: exp.Expression) -> exp.Expression:
    """``x AT TIME ZONE 'UTC'``: DuckDB's local (naive) time in UTC, Spark's ``TIMESTAMP_NTZ``."""
    return cast(_utc_instant(node), "TIMESTAMP_NTZ")


def _explode(node: exp.Expression) -> exp.Expression:
    """``unnest(x)`` in a SELECT list: rows per element on both engines (none for NULL or empty)."""
    only(node, "this")
    series = node.this
    if not isinstance(node.parent, exp.Select | exp.Alias):
        raise refuse(node, "unnest() is supported as a SELECT column only")
    if not isinstance(series, exp.GenerateSeries):
        return call("explode", translate(series))
    only(series, "start", "end", "is_end_exclusive")
    if series.args.get("is_end_exclusive"):
        raise refuse(node, "range() is not supported")
    a, b = translate(series.args["start"]), translate(series.args["end"])
    seq = exp.Case(
        ifs=[exp.If(this=exp.LTE(this=a.copy(), expression=b.copy()), true=call("sequence", a, b))]
    )
    return call("explode", seq)


#: The lake's list columns (``hash_ids``): ``length`` of one is its size, of anything else the
#: string's length in characters (on both engines).
LIST_COLUMNS = frozenset(c for t in TABLES.values() for c, ty in t.columns.items() if ty.endswith("[]"))


def _length(node: exp.Expression) -> exp.Expression:
    only(node, "this")
    x = node.this
    if isinstance(node, exp.ArraySize) or (isinstance(x, exp.Column) and x.name in LIST_COLUMNS):
        return call("size", translate(x))  # NULL for NULL with ANSI on (not -1)
    return call("length", translate(x))


#: Aggregates and window functions that take Spark's ``ignore NULLs`` flag: DuckDB's
#: ``any_value`` always skips NULLs; ``first_value``/``last_value`` do with ``IGNORE NULLS``.
_NULL_FLAG: dict[type[exp.Expression], str] = {
    exp.AnyValue: "any_value",
    exp.FirstValue: "first_value",
    exp.LastValue: "last_value",
}


def _ignore_nulls(node: exp.Expression) -> exp.Expression:
    skip = isinstance(node, exp.IgnoreNulls)
    inner = node.this if skip else node
    name = _NULL_FLAG.get(type(inner))
    if name is None:
        raise refuse(node, "IGNORE NULLS is supported on any_value, first_value and last_value")
    only(inner, "this")
    if name == "any_value" or skip:
        return call(name, translate(inner.this), exp.true())
    return call(name, translate(inner.this))


def _arg_min_max(node: exp.Expression) -> exp.Expression:
    """DuckDB's ``arg_min(x, y)`` skips rows where ``x`` or ``y`` is NULL; Spark's ``min_by`` only
    those where ``y`` is: the order value is NULLed where ``x`` is."""
    only(node, "this", "expression")
    x, y = translate(node.this), translate(node.expression)
    known = exp.If(this=exp.Not(this=exp.Is(this=x.copy(), expression=exp.null())), true=y)
    name = "min_by" if isinstance(node, exp.ArgMin) else "max_by"
    return call(name, x, exp.Case(ifs=[known]))


#: ``date_trunc`` units (the same boundaries on both engines in UTC; weeks start on Monday).
TRUNC_UNITS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND")


def _trunc(node: exp.Expression) -> exp.Expression:
    only(node, "this", "unit")
    unit = node.args.get("unit")
    name = unit.name.upper() if isinstance(unit, exp.Var | exp.Literal) else ""
    if name not in TRUNC_UNITS:
        raise refuse(node, f"date_trunc units are {', '.join(TRUNC_UNITS).lower()}")
    x = node.this
    if isinstance(x, exp.AtTimeZone):  # DuckDB truncates the local time and keeps it local
        return cast(call("date_trunc", exp.Literal.string(name), _utc_instant(x)), "TIMESTAMP_NTZ")
    return call("date_trunc", exp.Literal.string(name), translate(x))


def _logical(node: exp.Expression) -> exp.Expression:
    only(node, "this")
    return call("bool_or" if isinstance(node, exp.LogicalOr) else "bool_and", translate(node.this))


def _bracket(node: exp.Expression) -> exp.Expression:
    only(node, "this", "expressions", "offset", "safe")
    if len(node.expressions) != 1 or isinstance(node.expressions[0], exp.Slice):
        raise refuse(node, "slices and multiple indexes are not supported")
    index = node.expressions[0]
    if isinstance(index, exp.Literal) and index.is_string:
        raise refuse(node, "a struct or map key is not supported")
    if isinstance(index, exp.Literal) and re.fullmatch(r"\d+", index.name):
        if int(index.name) == 0:
            return exp.null()  # DuckDB's list[0] is NULL; Spark's element_at(list, 0) an error
        return call("try_element_at", translate(node.this), index.copy())
    position = exp.Nullif(this=translate(index), expression=exp.Literal.number(0))
    return call("try_element_at", translate(node.this), cast(position, "INT"))  # Spark's index is an INT


def _macro(node: exp.Expression) -> exp.Expression:
    """A call of one of :data:`traceflow.store.measures.MACROS`, expanded: its body with the arguments in
    place of the parameters (DuckDB substitutes them the same way), then translated."""
    macro = MACROS[node.name.lower()]
    if len(node.expressions) != len(macro.params):
        raise refuse(node, f"{node.name}() takes {len(macro.params)} argument(s)")
    values = dict(zip(macro.params, node.expressions, strict=True))

    def substitute(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in values:
            return exp.Paren(this=values[n.name].copy())
        return n

    body = sqlglot.parse_one(macro.body, read=_DuckDBAsWritten).transform(substitute)
    return exp.Paren(this=translate(body))


def _anonymous(node: exp.Expression) -> exp.Expression:
    name = node.name.lower()
    if name in MACROS:
        return _macro(node)
    args = [translate(a) for a in node.expressions]
    if name == "fma" and len(args) == 3:
        return cast(
            call("java_method", exp.Literal.string("java.lang.Math"), exp.Literal.string("fma"), *args),
            "DOUBLE",
        )
    if name not in CALLS:
        raise refuse(
            node,
            f"{node.name}() is not one of the functions translated ({', '.join(sorted([*CALLS, 'fma']))})",
        )
    spark, arity = CALLS[name]
    if arity is not None and len(args) != arity:
        raise refuse(node, f"{node.name}() takes {arity} argument(s) here")
    return call(spark, *args)


def _round(node: exp.Expression) -> exp.Expression:
    only(node, "this")  # round(x, n) rounds the exact decimal on Spark, the scaled double on DuckDB
    return exp.Round(this=translate(node.this))


def _unix_to_time(node: exp.Expression) -> exp.Expression:
    only(node, "this")
    micros = exp.Mul(this=exp.Paren(this=translate(node.this)), expression=double("1000000.0D"))
    return call("timestamp_micros", cast(call("bround", micros), "BIGINT"))


def _time_to_str(node: exp.Expression) -> exp.Expression:
    only(node, "this", "format")
    return call("date_format", translate(node.this), exp.Literal.string(_strftime_pattern(node)))


def _json(node: exp.Expression) -> exp.Expression:
    only(node, "this", "expression", "only_json_types", "scalar_only")
    return call("get_json_object", translate(node.this), exp.Literal.string(_json_path(node)))


def _rand(node: exp.Expression) -> exp.Expression:
    only(node)
    return call("rand")


RULES.update(
    {
        exp.AtTimeZone: _at_utc,
        exp.TimeToStr: _time_to_str,
        exp.UnixToTime: _unix_to_time,
        exp.JSONExtractScalar: _json,
        exp.Explode: _explode,
        exp.Length: _length,
        exp.ArraySize: _length,
        exp.AnyValue: _ignore_nulls,
        exp.FirstValue: _ignore_nulls,
        exp.LastValue: _ignore_nulls,
        exp.IgnoreNulls: _ignore_nulls,
        exp.ArgMin: _arg_min_max,
        exp.ArgMax: _arg_min_max,
        exp.TimestampTrunc: _trunc,
        exp.LogicalOr: _logical,
        exp.LogicalAnd: _logical,
        exp.Bracket: _bracket,
        exp.Anonymous: _anonymous,
        exp.Floor: _floor_ceil("floor"),
        exp.Ceil: _floor_ceil("ceil"),
        exp.Round: _round,
        exp.Rand: _rand,
    }
)


def parse(sql: str) -> exp.Expression:
    """The one DuckDB statement in ``sql`` as a tree; QueryError if it is none or several."""
    try:
        trees = [t for t in sqlglot.parse(sql, read=_DuckDBAsWritten) if isinstance(t, exp.Expression)]
    except SqlglotError as e:
        raise QueryError(f"cannot translate this SQL to Spark: {str(e).splitlines()[0]}") from None
    if len(trees) != 1:
        raise QueryError(f"cannot translate to Spark: expected one statement, found {len(trees)}")
    return trees[0]


def to_spark(sql: str) -> str:
    """The Spark SQL text of a DuckDB statement (see the module docstring for what changes)."""
    tree = translate(parse(sql))
    try:
        return tree.sql(
            dialect=_SparkExplicit,
            comments=False,
            normalize_functions="lower",
            unsupported_level=ErrorLevel.RAISE,
        )
    except SqlglotError as e:
        raise QueryError(f"cannot translate this SQL to Spark: {str(e).splitlines()[0]}") from None
