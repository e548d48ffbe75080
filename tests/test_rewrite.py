"""The DuckDB -> Spark SQL rewrites (traceflow.engines.rewrite), rule by rule; no Spark needed."""

from __future__ import annotations

import re

import pytest

from traceflow.engines.rewrite import RULES, nulls_last, to_spark
from traceflow.errors import QueryError
from traceflow.store import sql

CASES = [
    ("SELECT $since, $ttl_s", "SELECT :since, :ttl_s"),
    ("CAST($since AS TIMESTAMPTZ)", "CAST(:since AS TIMESTAMP)"),
    ("epoch_us(started_at)", "unix_micros(started_at)"),
    ("to_timestamp(b * 60.0)", "timestamp_seconds(b * 60.0D)"),
    ("strftime(t AT TIME ZONE 'UTC', '%Y-%m-%d')", "date_format(t, 'yyyy-MM-dd')"),
    ("SELECT unnest(generate_series(min(b), max(b)))", "SELECT explode(sequence(min(b), max(b)))"),
    ("hash(session_id, parent_session_id)", "xxhash64(session_id, parent_session_id)"),
    ("json_extract_string(attributes, '$.stop')", "get_json_object(attributes, '$.stop')"),
    ("quantile_cont(gap_s, [0.5, 0.9])", "percentile(gap_s, array(0.5D, 0.9D))"),
    ("THEN error('too many buckets')", "THEN raise_error('too many buckets')"),
    ("q_all[1] AS p50_s", "element_at(q_all, 1) AS p50_s"),
    ("avg(CASE WHEN g > 300.0 THEN 1.0 ELSE 0.0 END)", "avg(CASE WHEN g > 300.0D THEN 1.0D ELSE 0.0D END)"),
    ("x * 1e6, k.res_s, sel_0", "x * 1e6, k.res_s, sel_0"),
    ("SELECT 1 LIMIT CAST($limit AS BIGINT)", "SELECT 1 LIMIT CAST(:limit AS INT)"),
    ("WITH s AS NOT MATERIALIZED (SELECT 1) SELECT * FROM s", "WITH s AS (SELECT 1) SELECT * FROM s"),
    ('SELECT "kind" FROM t', "SELECT `kind` FROM t"),
    ("SELECT * FROM requests WHERE (true)", "SELECT * FROM requests WHERE true AND (true)"),
    ("SELECT 'it''s $x 1.5 hash(' AS s", "SELECT 'it''s $x 1.5 hash(' AS s"),  # strings are left alone
    ("SELECT 1 -- the view's $x\nFROM t", "SELECT 1 \nFROM t"),  # comments are dropped
]


@pytest.mark.parametrize(("duck", "spark"), CASES)
def test_rewrite(duck: str, spark: str) -> None:
    assert to_spark(duck) == spark


def test_nulls_last() -> None:
    assert nulls_last("ORDER BY a, b DESC") == "ORDER BY a NULLS LAST, b DESC NULLS LAST"
    assert nulls_last("ORDER BY model NULLS FIRST") == "ORDER BY model NULLS FIRST"
    got = nulls_last("OVER (PARTITION BY k ORDER BY t, seq) AS p")
    assert got == "OVER (PARTITION BY k ORDER BY t NULLS LAST, seq NULLS LAST) AS p"
    got = nulls_last("OVER (ORDER BY f.bucket ROWS UNBOUNDED PRECEDING)")
    assert got == "OVER (ORDER BY f.bucket NULLS LAST ROWS UNBOUNDED PRECEDING)"
    assert nulls_last("ORDER BY coalesce(a, b) LIMIT 5") == "ORDER BY coalesce(a, b) NULLS LAST LIMIT 5"


def test_other_time_zones_and_unsupported_functions_fail() -> None:
    with pytest.raises(QueryError, match="only UTC"):
        to_spark("SELECT t AT TIME ZONE 'Europe/Paris'")
    with pytest.raises(QueryError, match="histogram"):
        to_spark("SELECT histogram(x) FROM t")


@pytest.mark.parametrize("name", sql.names())
def test_every_packaged_query_rewrites_to_spark(name: str) -> None:
    """No DuckDB-only construct is left in any packaged query (the Spark run is tests/test_conformance.py)."""
    text = to_spark(sql.load(name).sql())
    code = re.sub(r"'(?:[^']|'')*'", "''", text)  # a JSON path literal ('$.key') is no parameter
    for left in ("$", "TIMESTAMPTZ", "epoch_us", "strftime", "generate_series", "NOT MATERIALIZED"):
        assert left not in code, (name, left)
    assert "hash(" not in text.replace("xxhash64(", ""), name


def test_rules_have_names() -> None:
    assert len({r.name for r in RULES}) == len(RULES)
