"""The checked walk over a SQLGlot tree that :mod:`traceflow.engines.rewrite` drives: every node is
in :data:`SAME` (means the same on Spark once its children are translated), has a rule in
:data:`RULES`, or is refused (:func:`refuse`). This module holds the walk and the rules for the
statement's structure (literals, parameters, casts, ``LIMIT``, ``ORDER BY``, unions, CTEs, joins,
``SELECT``); the rules for functions are :mod:`traceflow.engines.rewrite`'s, which registers them in
:data:`RULES` and prints the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from traceflow.errors import QueryError

#: Cast targets: DuckDB type -> Spark type (others are refused).
TYPES = {
    exp.DataType.Type.BIGINT: "BIGINT",
    exp.DataType.Type.INT: "INT",
    exp.DataType.Type.DOUBLE: "DOUBLE",
    exp.DataType.Type.DATE: "DATE",
    exp.DataType.Type.TIMESTAMPTZ: "TIMESTAMP",
}


_INTEGER_TYPES = (exp.DataType.Type.BIGINT, exp.DataType.Type.INT)


#: Nodes that mean the same in both dialects once their children are translated (SQLGlot's Spark
#: generator prints them). Everything else has a rule in :data:`RULES` or is refused.
SAME = (
    exp.Select, exp.From, exp.Where, exp.Group, exp.Having, exp.Order, exp.Table, exp.TableAlias,
    exp.Subquery, exp.With, exp.Column, exp.Identifier, exp.Boolean, exp.Null, exp.Paren,
    exp.Tuple, exp.Values, exp.Alias, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.EQ, exp.NEQ,
    exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.Is, exp.NullSafeEQ,
    exp.NullSafeNEQ, exp.Between, exp.DPipe, exp.Case, exp.If, exp.Filter, exp.WindowSpec,
    exp.Coalesce, exp.Greatest, exp.Least, exp.Abs, exp.Ln, exp.IsNan, exp.Count, exp.Sum,
    exp.Min, exp.Max, exp.Avg, exp.Nullif, exp.RowNumber, exp.Rank, exp.DenseRank, exp.Lag, exp.Lead,
    exp.Grouping,
    exp.GroupingSets, exp.Contains, exp.Array, exp.Distinct, exp.Var, exp.Qualify, exp.Mod,
)  # fmt: skip


def refuse(node: exp.Expression, why: str = "") -> QueryError:
    """The error for a construct with no exact Spark translation here."""
    text = node.sql(dialect="duckdb")
    if len(text) > 120:
        text = text[:117] + "..."
    reason = f": {why}" if why else ""
    return QueryError(
        f"{type(node).__name__} `{text}` has no exact Spark translation in traceflow{reason}; "
        "this SQL runs on DuckDB only (--engine duckdb)"
    )


def call(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def double(number: str) -> exp.Expression:
    return exp.Literal.number(number)


def cast(node: exp.Expression, to: str) -> exp.Cast:
    return exp.Cast(this=node, to=exp.DataType.build(to, dialect="spark"))


def only(node: exp.Expression, *allowed: str) -> None:
    """Refuse ``node`` if it carries an argument outside ``allowed`` (a modifier with no rule)."""
    extra = [k for k, v in node.args.items() if v not in (None, False, []) and k not in allowed]
    if extra:
        raise refuse(node, f"its {', '.join(extra)} is not supported")


def _literal(node: exp.Expression) -> exp.Expression:
    only(node, "this", "is_string")
    if node.is_string:
        return node
    text = node.name
    if re.fullmatch(r"\d+", text):
        return node
    if re.fullmatch(r"\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+", text):
        return double(f"{text}D")  # DOUBLE on both engines
    raise refuse(node, "an unknown number literal")


def _placeholder(node: exp.Expression) -> exp.Expression:
    only(node, "this", "kind")
    name = node.args.get("this")
    if name is not None and not re.fullmatch(r"[A-Za-z_]\w*", str(name)):
        raise refuse(node, "a parameter is named ($name) or positional (?)")
    return node


def _union(node: exp.Expression) -> exp.Expression:
    only(node, "this", "expression", "distinct", "by_name")
    if node.args.get("by_name"):
        return _union_by_name(node)
    return same(node)


def _names(select: exp.Expression) -> list[str]:
    inner = select.this if isinstance(select, exp.Subquery) else select
    if not isinstance(inner, exp.Select):
        raise refuse(select, "UNION BY NAME needs a SELECT on each side")
    names = []
    for e in inner.expressions:
        if isinstance(e, exp.Star) or not e.alias_or_name or isinstance(e.this, exp.Star):
            raise refuse(select, "UNION BY NAME needs every column named (no *)")
        names.append(e.alias_or_name)
    return names


def _union_by_name(node: exp.Expression) -> exp.Expression:
    left, right = node.this, node.expression
    lnames, rnames = _names(left), _names(right)
    order = lnames + [n for n in rnames if n not in lnames]
    sides = []
    for side, names in ((left, lnames), (right, rnames)):
        cols = [
            exp.column(n, quoted=True) if n in names else exp.alias_(exp.null(), n, quoted=True)
            for n in order
        ]
        sides.append(
            exp.select(*cols).from_(exp.Subquery(this=translate(side), alias=exp.TableAlias(this="_u")))
        )
    return exp.Union(this=sides[0], expression=sides[1], distinct=bool(node.args.get("distinct")))


def _cast_rule(node: exp.Expression) -> exp.Expression:
    only(node, "this", "to")
    to = node.args["to"]
    text = (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR)
    if isinstance(to, exp.DataType) and to.this in text and not to.expressions:
        if not isinstance(node.this, exp.Null) and not (
            isinstance(node.this, exp.Literal) and node.this.is_string
        ):
            raise refuse(
                node, "a cast to VARCHAR of anything but NULL or a string formats numbers differently"
            )
        return cast(translate(node.this), "STRING")
    if not isinstance(to, exp.DataType) or to.this not in TYPES or to.expressions:
        raise refuse(node, f"casts to {to.sql(dialect='duckdb')} are not supported")
    x = translate(node.this)
    if to.this in _INTEGER_TYPES and not (isinstance(x, exp.Literal) and x.is_string):
        x = call("bround", x)  # DuckDB rounds half to even, Spark truncates
    return cast(x, TYPES[to.this])


def _limit(node: exp.Expression) -> exp.Expression:
    only(node, "expression")
    x = node.expression
    value: exp.Expression
    if isinstance(x, exp.Cast) and x.to.this in _INTEGER_TYPES and isinstance(x.this, exp.Placeholder):
        value = cast(call("bround", _placeholder(x.this)), "INT")  # LIMIT takes an INT
    elif isinstance(x, exp.Literal) and re.fullmatch(r"\d+", x.name) and not x.is_string:
        value = x
    elif isinstance(x, exp.Placeholder):
        value = _placeholder(x)
    else:
        raise refuse(node, "LIMIT takes a number or a parameter")
    return exp.Limit(expression=value)


def _ordered(node: exp.Expression) -> exp.Expression:
    only(node, "this", "desc", "nulls_first")
    return exp.Ordered(
        this=translate(node.this),
        desc=bool(node.args.get("desc")),
        nulls_first=bool(node.args.get("nulls_first")),
    )


def _unaliased(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, exp.Alias) else e


def _is_subscripts(e: exp.Expression) -> bool:
    inner = _unaliased(e)
    return isinstance(inner, exp.Anonymous) and inner.name.lower() == "generate_subscripts"


def _with_subscripts(node: exp.Select) -> exp.Expression:
    """``SELECT ..., unnest(l) AS x, generate_subscripts(l, 1) AS i FROM ...`` (DuckDB zips the two)
    -> ``SELECT ..., _px._val AS x, _px._pos + 1 AS i FROM ... LATERAL VIEW posexplode(l) _px``."""
    items = node.expressions
    unnests = [e for e in items if isinstance(_unaliased(e), exp.Explode)]
    subs = [e for e in items if _is_subscripts(e)]
    clauses = ("group", "having", "qualify", "windows", "distinct")  # ORDER BY, LIMIT come after both
    if len(unnests) != 1 or len(subs) != 1 or any(node.args.get(c) for c in clauses):
        raise refuse(node, "generate_subscripts() pairs with one unnest() of the same list, nothing else")
    lst = _unaliased(unnests[0]).this
    args = _unaliased(subs[0]).expressions
    one = len(args) == 2 and isinstance(args[1], exp.Literal) and args[1].name == "1"
    if isinstance(lst, exp.GenerateSeries) or not one or args[0] != lst:
        raise refuse(node, "generate_subscripts(l, 1) pairs with unnest(l) of the same list")
    out = node.copy()
    out.set(
        "expressions",
        [
            exp.alias_(exp.column("_val", "_px"), e.alias_or_name)
            if e is unnests[0]
            else exp.alias_(
                exp.Add(this=exp.column("_pos", "_px"), expression=exp.Literal.number(1)), e.alias_or_name
            )
            if e is subs[0]
            else e
            for e in items
        ],
    )
    translated = same(out)
    view = exp.Lateral(
        this=call("posexplode", translate(lst)),
        view=True,
        alias=exp.TableAlias(
            this=exp.to_identifier("_px"), columns=[exp.to_identifier("_pos"), exp.to_identifier("_val")]
        ),
    )
    translated.set("laterals", [view])
    return translated


def _cte(node: exp.Expression) -> exp.Expression:
    only(node, "this", "alias", "materialized")
    return exp.CTE(this=translate(node.this), alias=translate(node.args["alias"]))


def _join(node: exp.Expression) -> exp.Expression:
    only(node, "this", "on", "kind", "side", "using")
    select = node.parent
    star = isinstance(select, exp.Select) and any(isinstance(e, exp.Star) for e in select.expressions)
    if node.args.get("using") and star:
        raise refuse(node, "SELECT * over JOIN ... USING orders its columns otherwise on Spark")
    kind, side = node.args.get("kind"), node.args.get("side")
    if kind not in (None, "CROSS", "SEMI", "ANTI", "INNER", "OUTER") or side not in (
        None,
        "LEFT",
        "RIGHT",
        "FULL",
    ):
        raise refuse(node, f"{side or ''} {kind or ''} JOIN is not supported")
    return same(node)


def _star(node: exp.Expression) -> exp.Expression:
    only(node)  # EXCLUDE, REPLACE, RENAME
    return node.copy()


def _window(node: exp.Expression) -> exp.Expression:
    only(node, "this", "partition_by", "order", "spec", "alias", "over")
    return same(node)


def _select(node: exp.Expression) -> exp.Expression:
    only(
        node,
        "expressions",
        "from_",
        "from",
        "joins",
        "where",
        "group",
        "having",
        "order",
        "limit",
        "with_",
        "with",
        "distinct",
        "windows",
        "kind",
        "qualify",
    )
    distinct = node.args.get("distinct")
    if isinstance(distinct, exp.Distinct) and distinct.args.get("on"):
        raise refuse(node, "DISTINCT ON is not supported")
    if isinstance(node, exp.Select) and any(_is_subscripts(e) for e in node.expressions):
        return _with_subscripts(node)
    return same(node)


def _in(node: exp.Expression) -> exp.Expression:
    # x IN (list) and x IN (SELECT ...): the same three-valued logic on both engines (a --where on an
    # attribution is an IN sub-query in a WHERE, traceflow.store.filters)
    only(node, "this", "expressions", "query")
    return same(node)


def _group(node: exp.Expression) -> exp.Expression:
    only(node, "expressions", "all", "grouping_sets")
    return same(node)


#: Node type -> its rule (the structural ones here; :mod:`traceflow.engines.rewrite` adds the functions).
RULES: dict[type[exp.Expression], Callable[[exp.Expression], exp.Expression]] = {
    exp.Literal: _literal,
    exp.Placeholder: _placeholder,
    exp.Cast: _cast_rule,
    exp.Limit: _limit,
    exp.Ordered: _ordered,
    exp.Union: _union,
    exp.CTE: _cte,
    exp.Join: _join,
    exp.Star: _star,
    exp.Window: _window,
    exp.Select: _select,
    exp.In: _in,
    exp.Group: _group,
}


def same(node: exp.Expression) -> exp.Expression:
    """``node`` with its children translated."""
    out = node.copy()
    for key, value in node.args.items():
        if isinstance(value, exp.Expression):
            out.set(key, translate(value))
        elif isinstance(value, list):
            out.set(key, [translate(v) if isinstance(v, exp.Expression) else v for v in value])
    return out


def translate(node: exp.Expression) -> exp.Expression:
    rule = RULES.get(type(node))
    if rule is not None:
        return rule(node)
    if type(node) in SAME:
        return same(node)
    raise refuse(node)
