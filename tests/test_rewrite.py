"""The DuckDB -> Spark SQL translation (traceflow.engines.rewrite), rule by rule, the constructs it
refuses, and every SQL text traceflow generates; no Spark needed (tests/test_differential.py runs
the results on both engines)."""

from __future__ import annotations

import re

import pytest

from traceflow.engines.rewrite import to_spark
from traceflow.errors import QueryError
from traceflow.replay.requests import requests_sql
from traceflow.store import groups, sql
from traceflow.store.quantiles import Quantile, grouped_sql
from traceflow.store.selection import Selection

CASES = [
    ("SELECT $since, $ttl_s", "SELECT :since, :ttl_s"),
    ("SELECT CAST($since AS TIMESTAMPTZ)", "SELECT CAST(:since AS TIMESTAMP)"),
    ("SELECT epoch_us(started_at)", "SELECT unix_micros(started_at)"),
    (  # traceflow.store.measures' macros, expanded (DuckDB substitutes the arguments the same way)
        "SELECT reuse_ratio(sum(a), sum(b + c)), token_share(x, t)",
        "SELECT ((sum(a)) / CAST(nullif((sum(b + c)), 0) AS DOUBLE)), ((x) / CAST(nullif((t), 0) AS DOUBLE))",
    ),
    ("SELECT total(a) FROM t", "SELECT (CAST(bround(coalesce(sum((a)), 0)) AS BIGINT)) FROM t"),
    (
        "SELECT to_timestamp(b * 60.0)",
        "SELECT timestamp_micros(CAST(bround((b * 60.0D) * 1000000.0D) AS BIGINT))",
    ),
    ("SELECT strftime(t, '%Y-%m-%d')", "SELECT date_format(t, 'yyyy-MM-dd')"),
    (
        "SELECT strftime(t AT TIME ZONE 'UTC', '%Y-%m-%d'), CAST(t AT TIME ZONE 'UTC' AS DATE)",
        "SELECT date_format(CAST(t AS TIMESTAMP_NTZ), 'yyyy-MM-dd'), CAST(CAST(t AS TIMESTAMP_NTZ) AS DATE)",
    ),
    (
        "SELECT date_trunc('hour', t AT TIME ZONE 'UTC'), date_trunc('day', t)",
        "SELECT CAST(date_trunc('HOUR', t) AS TIMESTAMP_NTZ), date_trunc('DAY', t)",
    ),
    (
        "SELECT arg_min(x, y), arg_max(x, y) FROM t",
        "SELECT min_by(x, CASE WHEN NOT x IS NULL THEN y END), "
        "max_by(x, CASE WHEN NOT x IS NULL THEN y END) FROM t",
    ),
    (
        "SELECT last_value(x IGNORE NULLS) OVER (ORDER BY t), first_value(x) OVER (ORDER BY t) FROM t",
        "SELECT last_value(x, TRUE) OVER (ORDER BY t NULLS LAST), "
        "first_value(x) OVER (ORDER BY t NULLS LAST) FROM t",
    ),
    (
        "SELECT * FROM t QUALIFY row_number() OVER (PARTITION BY a ORDER BY b DESC) = 1",
        "SELECT * FROM t QUALIFY row_number() OVER (PARTITION BY a ORDER BY b DESC NULLS LAST) = 1",
    ),
    (
        "SELECT a, unnest(l) AS x, generate_subscripts(l, 1) AS i FROM t WHERE a > 1",
        "SELECT a, _px._val AS x, _px._pos + 1 AS i FROM t "
        "LATERAL VIEW posexplode(l) _px AS _pos, _val WHERE a > 1",
    ),
    ("SELECT unnest(hash_ids) AS h FROM t", "SELECT explode(hash_ids) AS h FROM t"),
    ("SELECT len(hash_ids), length(s), x % 2 FROM t", "SELECT size(hash_ids), length(s), x % 2 FROM t"),
    ("SELECT r.*, p.n FROM r LEFT JOIN p USING (k)", "SELECT r.*, p.n FROM r LEFT JOIN p USING (k)"),
    ("SELECT CAST(NULL AS VARCHAR), bool_or(b) FROM t", "SELECT CAST(NULL AS STRING), bool_or(b) FROM t"),
    ("SELECT rank() OVER (ORDER BY b) FROM t", "SELECT rank() OVER (ORDER BY b NULLS LAST) FROM t"),
    ("SELECT strftime(t, '%Y-%m-%dT%H:%M:%S')", "SELECT date_format(t, 'yyyy-MM-dd\\'T\\'HH:mm:ss')"),
    (
        "SELECT unnest(generate_series(lo, hi)) FROM g",
        "SELECT explode(CASE WHEN lo <= hi THEN sequence(lo, hi) END) FROM g",
    ),
    ("SELECT hash(session_id, parent_session_id)", "SELECT xxhash64(session_id, parent_session_id)"),
    ("SELECT json_extract_string(attributes, '$.stop')", "SELECT get_json_object(attributes, '$.stop')"),
    ("SELECT CASE WHEN x THEN error('too many') END", "SELECT CASE WHEN x THEN raise_error('too many') END"),
    ("SELECT q_all[1] AS p50_s", "SELECT try_element_at(q_all, 1) AS p50_s"),
    ("SELECT q_all[0]", "SELECT NULL"),
    (
        "SELECT avg(CASE WHEN g > 300.0 THEN 1.0 ELSE 0.0 END)",
        "SELECT avg(CASE WHEN g > 300.0D THEN 1.0D ELSE 0.0D END)",
    ),
    ("SELECT x * 1e6, k.res_s, sel_0", "SELECT x * 1e6D, k.res_s, sel_0"),
    ("SELECT CAST(x AS BIGINT)", "SELECT CAST(bround(x) AS BIGINT)"),
    ("SELECT 1 LIMIT CAST($limit AS BIGINT)", "SELECT 1 LIMIT CAST(bround(:limit) AS INT)"),
    ("WITH s AS NOT MATERIALIZED (SELECT 1) SELECT * FROM s", "WITH s AS (SELECT 1) SELECT * FROM s"),
    ('SELECT "kind" FROM t', "SELECT `kind` FROM t"),
    ("SELECT * FROM requests WHERE (true)", "SELECT * FROM requests WHERE true AND (TRUE)"),
    ("SELECT 'it''s $x 1.5 hash(' AS s", "SELECT 'it\\'s $x 1.5 hash(' AS s"),  # strings stay strings
    ("SELECT 'C:\\dir' AS s", "SELECT 'C:\\\\dir' AS s"),  # a backslash escapes on Spark
    ("SELECT 1 -- the view's $x\nFROM t", "SELECT 1 FROM t"),  # comments are dropped
    ("SELECT any_value(x) FROM t", "SELECT any_value(x, TRUE) FROM t"),
    ("SELECT fma(a, b, c)", "SELECT CAST(java_method('java.lang.Math', 'fma', a, b, c) AS DOUBLE)"),
    (
        "SELECT floor(x)",
        "SELECT CASE WHEN isnan(x) OR abs(x) >= 4503599627370496.0D THEN CAST(x AS DOUBLE) "
        "ELSE CAST(floor(x) AS DOUBLE) END",
    ),
    (
        "SELECT a FROM t ORDER BY a, b DESC, c NULLS FIRST",
        "SELECT a FROM t ORDER BY a NULLS LAST, b DESC NULLS LAST, c NULLS FIRST",
    ),
    (
        "SELECT row_number() OVER (PARTITION BY k ORDER BY t, seq) AS p FROM x",
        "SELECT row_number() OVER (PARTITION BY k ORDER BY t NULLS LAST, seq NULLS LAST) AS p FROM x",
    ),
    (
        "SELECT 1 AS a, 2 AS b UNION ALL BY NAME SELECT 3 AS b, 4 AS c",
        "SELECT `a`, `b`, NULL AS `c` FROM (SELECT 1 AS a, 2 AS b) AS _u UNION ALL "
        "SELECT NULL AS `a`, `b`, `c` FROM (SELECT 3 AS b, 4 AS c) AS _u",
    ),
]


@pytest.mark.parametrize(("duck", "spark"), CASES)
def test_rewrite(duck: str, spark: str) -> None:
    assert to_spark(duck) == spark


# -- the defects of the regular-expression rewrites (issue 22): each failed on the old code ---------


def test_a_quoted_json_key_is_a_spark_path() -> None:
    """``$.resource."project"`` (how ``--by project|host|attr:NAME`` read resource attributes) gave
    NULL on Spark for every request: Spark's paths know ``['key']``, not ``"key"``."""
    assert to_spark("SELECT json_extract_string(a, '$.resource.\"project\"')") == (
        "SELECT get_json_object(a, '$.resource.project')"
    )
    assert to_spark("SELECT json_extract_string(a, '$.resource.\"host.name\"')") == (
        "SELECT get_json_object(a, '$.resource[\\'host.name\\']')"
    )
    text = to_spark(groups.values_sql(["project", "host", "attr:team.id"]))
    assert '"' not in text and "$.resource.project" in text and "$.resource[\\'team.id\\']" in text


def test_an_index_expression_is_one_based() -> None:
    """``hash_ids[position]`` stayed ``[]`` (0-based on Spark: the next block's id)."""
    assert to_spark("SELECT hash_ids[position] FROM t") == (
        "SELECT try_element_at(hash_ids, CAST(nullif(position, 0) AS INT)) FROM t"
    )
    assert (
        to_spark("SELECT x[i + 1] FROM t") == "SELECT try_element_at(x, CAST(nullif(i + 1, 0) AS INT)) FROM t"
    )


def test_a_strftime_format_not_known_is_refused() -> None:
    """``%j`` (day of the year) passed through to ``date_format``, where it means something else."""
    with pytest.raises(QueryError, match="'%j'"):
        to_spark("SELECT strftime(t, '%j') FROM x")
    with pytest.raises(QueryError, match="string literal"):
        to_spark("SELECT strftime(t, fmt) FROM x")


def test_a_format_literal_outside_strftime_is_left_alone() -> None:
    """Every ``'%Y-%m-%d'`` string was rewritten, even a value compared with a column."""
    assert to_spark("SELECT '%Y-%m-%d' AS f FROM t WHERE s = '%Y-%m'") == (
        "SELECT '%Y-%m-%d' AS f FROM t WHERE s = '%Y-%m'"
    )


def test_dashes_inside_a_quoted_identifier_are_no_comment() -> None:
    """``"a--b"`` lost everything after ``--`` to the comment stripper."""
    assert to_spark('SELECT count(*) AS "a--b", 1 AS "c/*d" FROM t') == (
        "SELECT count(*) AS `a--b`, 1 AS `c/*d` FROM t"
    )


# -- refused ------------------------------------------------------------------------------------

REFUSED = [
    ("SELECT quantile_cont(x, 0.5) FROM t", "quantile"),
    ("SELECT histogram(x) FROM t", "histogram"),
    ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM t", ""),
    ("SELECT round(x, 2) FROM t", "round"),
    ("SELECT CAST(x AS VARCHAR) FROM t", "VARCHAR"),
    ("SELECT CAST(x AS TIMESTAMP) FROM t", "TIMESTAMP"),
    ("SELECT t AT TIME ZONE 'Europe/Paris' FROM x", "only UTC"),
    ("SELECT * EXCLUDE (a) FROM t", "Star"),
    ("SELECT * FROM a JOIN b USING (k)", "using"),
    ("SELECT list_sum(x) FROM t", "list_sum"),
    ("SELECT json_extract_string(a, p) FROM t", "literal"),
    ("SELECT x[1:2] FROM t", "slice"),
    ("SELECT s['k'] FROM t", "key"),
    ("SELECT t + INTERVAL 1 DAY FROM x", "Interval"),
    ("SELECT $1", "parameter"),
    ("SELECT 1; SELECT 2", "one statement"),
    ("SELECT 1 + unnest(x) FROM t", "SELECT column"),
    ("SELECT unnest(l), generate_subscripts(m, 1) FROM t", "same list"),
    ("SELECT lag(x IGNORE NULLS) OVER (ORDER BY t) FROM t", "IGNORE NULLS"),
    ("SELECT date_trunc('millennium', t) FROM x", "date_trunc"),
    ("SELECT reuse_ratio(a) FROM t", "takes 2 argument"),
    ("SELECT (t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' FROM x", "twice"),
    ("SELECT * FROM generate_series(1, 3)", ""),
    ("SELECT * FROM read_parquet('x.parquet')", ""),
]


@pytest.mark.parametrize(("duck", "why"), REFUSED)
def test_refused(duck: str, why: str) -> None:
    with pytest.raises(QueryError, match=re.compile(re.escape(why), re.I)) as info:
        to_spark(duck)
    assert "DuckDB only" in str(info.value) or "cannot translate" in str(info.value)


# -- everything traceflow sends ------------------------------------------------------------------


def _ordered_keys_explicit(text: str) -> None:
    """Every sort key of ``text`` says where its NULLs go."""
    for clause in re.findall(r"ORDER BY (.*?)(?:\)|$| LIMIT| ROWS| RANGE)", text):
        depth, start = 0, 0
        for i, ch in enumerate(clause + ","):
            depth += ch == "("
            depth -= ch == ")"
            if ch == "," and depth == 0:
                assert re.search(r"NULLS (FIRST|LAST)\s*$", clause[start:i]), (clause, text[:200])
                start = i + 1


@pytest.mark.parametrize("name", sql.names())
def test_every_packaged_query_translates(name: str) -> None:
    text = to_spark(sql.load(name).sql())
    code = re.sub(r"'(?:[^'\\]|\\.)*'", "''", text)  # Spark's string literals (backslash escapes) aside
    for left in ("$", "TIMESTAMPTZ", "epoch_us", "strftime", "generate_series", "MATERIALIZED", '"'):
        assert left not in code, (name, left)
    assert "hash(" not in text.replace("xxhash64(", ""), name
    _ordered_keys_explicit(text)


BY = [
    "agent",
    "model",
    "session",
    "day",
    "week",
    "month",
    "user",
    "source",
    "version",
    "project",
    "host",
    "subagent_type",
    "attr:team.id",
]


@pytest.mark.parametrize("by", [[b] for b in BY] + [BY[:3], ["project", "host", "attr:git_branch", "tool"]])
def test_every_grouping_translates(by: list[str]) -> None:
    from traceflow.analysis.mix import mix_sql

    where, _ = Selection(models=("a",)).where()
    for text in (
        mix_sql(by, where, zone="UTC"),
        sql.load("misses").sql(),
        sql.load("sessions").sql(
            {"selection": where, **groups.session_blocks(by, sql.load("steps").returns)}
        ),
        grouped_sql(
            groups.row_keys([b for b in by if b != "subagent_type"] + ["kind"], zone="UTC", kind=True),
            [("n", "count(*)"), ("p", Quantile("gap_s", (0.5, 0.9)))],
            by_rank=True,
        ).replace("{q}", "(SELECT 1)"),
    ):
        _ordered_keys_explicit(to_spark(text))


def test_the_replay_scan_translates() -> None:
    for keys in (False, True):
        text, _ = requests_sql(None, extras=True, limit=10, keys=keys)
        assert "xxhash64(" in to_spark(text) or not keys
