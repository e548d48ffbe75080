"""DuckDB SQL -> Spark SQL: the few mechanical rewrites the packaged queries need, as a table.

The packaged ``queries/*.sql`` and the analyses' wrappers are written in DuckDB's dialect. Spark 4
reads nearly all of it as it is (``::`` casts, ``GROUP BY ALL``, ``FILTER``, named ``WINDOW``,
``QUALIFY``, ``SEMI``/``ANTI JOIN``, ``IS NOT DISTINCT FROM``); :func:`to_spark` applies the rest,
each rule a regular expression over the code with comments removed and string literals set aside:

- ``$name`` -> ``:name`` (Spark's named parameters)
- ``TIMESTAMPTZ`` -> ``TIMESTAMP`` (the session time zone is pinned to UTC)
- ``x AT TIME ZONE 'UTC'`` -> ``x`` (the same, for the UTC zone only)
- ``epoch_us(`` -> ``unix_micros(``, ``to_timestamp(`` -> ``timestamp_seconds(`` (keeps microseconds)
- ``strftime(x, '%Y-%m-%d')`` -> ``date_format(x, 'yyyy-MM-dd')``
- ``unnest(generate_series(a, b))`` -> ``explode(sequence(a, b))``
- ``hash(`` -> ``xxhash64(`` (64-bit like DuckDB's; Spark's ``hash`` is 32-bit murmur3 and collides)
- ``json_extract_string(`` -> ``get_json_object(`` (a JSON path's value as text, NULL where absent)
- ``quantile_cont(x, [p, q])`` -> ``percentile(x, array(p, q))`` (exact, never ``percentile_approx``;
  but ``percentile`` keeps every distinct value of a group in one task's memory and interpolates with
  other roundings than DuckDB, so the analyses do not send ``quantile_cont`` to Spark: they compute
  their quantiles by rank, :mod:`traceflow.store.quantiles`, in bounded memory and bit-identically)
- ``fma(a, b, c)`` -> ``java_method('java.lang.Math', 'fma', a, b, c)`` (``a * b + c`` rounded once,
  as text: the caller casts it to DOUBLE; DuckDB has no ``fma``, :mod:`traceflow.store.quantiles`
  needs it on Spark only)
- ``name[i]`` -> ``element_at(name, i)`` (DuckDB lists are 1-based, Spark's ``[]`` is 0-based)
- ``1.5`` -> ``1.5D`` (a decimal literal is DECIMAL in Spark: its averages would round)
- ``LIMIT CAST(x AS BIGINT)`` -> ``LIMIT CAST(x AS INT)``
- ``AS NOT MATERIALIZED (`` -> ``AS (`` (a CTE hint Spark does not parse)
- ``"name"`` -> ```name``` (double quotes make a string in Spark, an identifier in DuckDB)
- ``FROM t WHERE (a) ...`` -> ``FROM t WHERE true AND (a) ...`` (Spark reads ``WHERE (a)`` after a
  table as an alias with a column list)
- ``ORDER BY a, b DESC`` -> ``ORDER BY a NULLS LAST, b DESC NULLS LAST`` (DuckDB sorts NULLs last,
  Spark first)

Everything else is an error rather than a silent difference: :data:`UNSUPPORTED` lists the DuckDB
functions that have no exact Spark twin here (``histogram``). SQLGlot is not used at run time: it
transpiled these queries wrongly (it kept ``hash`` and ``epoch_us`` and truncated ``to_timestamp``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from traceflow.errors import QueryError

#: Comments and string literals, found left to right so that a quote inside a comment is no string.
_TOKENS = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.S)
_PLACEHOLDER = "\x00{}\x00"
_PLACEHOLDER_RE = re.compile(r"\x00(\d+)\x00")

#: strftime formats and their Spark ``date_format`` patterns.
FORMATS = {"%Y-%m-%d": "yyyy-MM-dd", "%Y-%m-%d %H:%M:%S": "yyyy-MM-dd HH:mm:ss", "%Y-%m": "yyyy-MM"}

#: DuckDB functions with no exact Spark equivalent through a text rewrite.
UNSUPPORTED = ("histogram", "list", "string_agg", "quantile_disc", "approx_quantile")


@dataclass(frozen=True)
class Rule:
    """One rewrite: ``pattern`` (over the code, strings masked) -> ``replacement``."""

    name: str
    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]


def _rule(name: str, pattern: str, replacement: str | Callable[[re.Match[str]], str]) -> Rule:
    return Rule(name, re.compile(pattern, re.I), replacement)


#: The rewrites, applied in this order (see the module docstring).
RULES: tuple[Rule, ...] = (
    _rule("named parameter", r"\$([A-Za-z_]\w*)", r":\1"),
    _rule("timestamptz", r"\bTIMESTAMPTZ\b", "TIMESTAMP"),
    _rule("epoch_us", r"\bepoch_us\s*\(", "unix_micros("),
    _rule("to_timestamp", r"\bto_timestamp\s*\(", "timestamp_seconds("),
    _rule("strftime", r"\bstrftime\s*\(", "date_format("),
    _rule("generate_series", r"\bunnest\s*\(\s*generate_series\s*\(", "explode(sequence("),
    _rule("hash", r"(?<![\w.])hash\s*\(", "xxhash64("),
    _rule("json_extract_string", r"\bjson_extract_string\s*\(", "get_json_object("),
    _rule("quantile_cont", r"\bquantile_cont\s*\(", "percentile("),
    _rule("fma", r"(?<![\w.])fma\s*\(", "java_method('java.lang.Math', 'fma', "),
    _rule("error", r"(?<![\w.])error\s*\(", "raise_error("),
    _rule("list index", r"\b([A-Za-z_]\w*)\[\s*(\d+)\s*\]", r"element_at(\1, \2)"),
    _rule("list literal", r"(?<![\w\])\s])(\s*)\[([^\[\]]*)\]", r"\1array(\2)"),
    _rule("decimal literal", r"(?<![\w.])(\d+\.\d+(?:[eE][+-]?\d+)?)(?![\w.])", r"\1D"),
    _rule("limit cast", r"\bLIMIT\s+CAST\s*\(([^()]*?)\s+AS\s+BIGINT\s*\)", r"LIMIT CAST(\1 AS INT)"),
    _rule("not materialized", r"\bAS\s+NOT\s+MATERIALIZED\s*\(", "AS ("),
    _rule("quoted identifier", r'"([^"]*)"', r"`\1`"),
    _rule("where parenthesis", r"\bWHERE\s+\(", "WHERE true AND ("),
)

_AT_UTC = re.compile(r"\s+AT\s+TIME\s+ZONE\s+\x00(\d+)\x00", re.I)
_ORDER_BY = re.compile(r"\bORDER\s+BY\b", re.I)
_ORDER_END = re.compile(r"\b(?:LIMIT|OFFSET|ROWS|RANGE|GROUPS|WINDOW|UNION|EXCEPT|INTERSECT)\b", re.I)
_NULLS = re.compile(r"\bNULLS\s+(?:FIRST|LAST)\s*$", re.I)


def _mask(sql: str) -> tuple[str, list[str]]:
    """``sql`` without comments, its string literals replaced by numbered placeholders."""
    strings: list[str] = []

    def sub(m: re.Match[str]) -> str:
        text = m.group(0)
        if text.startswith("'"):
            strings.append(text)
            return _PLACEHOLDER.format(len(strings) - 1)
        return " " if text.startswith("/*") else ""

    return _TOKENS.sub(sub, sql), strings


def _unmask(code: str, strings: list[str]) -> str:
    return _PLACEHOLDER_RE.sub(lambda m: strings[int(m.group(1))], code)


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def nulls_last(code: str) -> str:
    """Every ``ORDER BY`` item without a ``NULLS`` clause gets ``NULLS LAST`` (DuckDB's default)."""
    out: list[str] = []
    pos = 0
    for m in _ORDER_BY.finditer(code):
        if m.start() < pos:
            continue
        out.append(code[pos : m.end()])
        # the clause runs to a closing parenthesis, a keyword that ends it, or the end of the text
        depth, end = 0, len(code)
        i = m.end()
        while i < len(code):
            ch = code[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    end = i
                    break
                depth -= 1
            elif ch == ";" and depth == 0:
                end = i
                break
            elif depth == 0 and (kw := _ORDER_END.match(code, i)) and (i == 0 or not code[i - 1].isalnum()):
                end = kw.start()
                break
            i += 1
        items = _split_top(code[m.end() : end])
        fixed = []
        for item in items:
            body = item.rstrip()
            tail = item[len(body) :]
            fixed.append(body if _NULLS.search(body) else f"{body} NULLS LAST{tail}")
        out.append(",".join(fixed))
        if not out[-1].endswith((" ", "\n")) and code[end : end + 1] not in ("", ")", ";"):
            out.append(" ")
        pos = end
    out.append(code[pos:])
    return "".join(out)


def to_spark(sql: str) -> str:
    """The Spark SQL text of a DuckDB statement (see the module docstring for what changes)."""
    code, strings = _mask(sql)
    for name in UNSUPPORTED:
        if re.search(rf"(?<![\w.]){name}\s*\(", code, re.I):
            raise QueryError(f"{name}() has no exact Spark equivalent; this query runs on DuckDB only")

    def at_utc(m: re.Match[str]) -> str:
        zone = strings[int(m.group(1))]
        if zone.upper() != "'UTC'":
            raise QueryError(f"AT TIME ZONE {zone}: only UTC is supported on Spark (the session zone)")
        return ""

    code = _AT_UTC.sub(at_utc, code)
    for rule in RULES:
        code = rule.pattern.sub(rule.replacement, code)
    code = nulls_last(code)
    strings = [f"'{FORMATS[s[1:-1]]}'" if s[1:-1] in FORMATS else s for s in strings]
    return _unmask(code, strings).strip()
