"""Exact quantiles by rank (traceflow.store.quantiles) against DuckDB's own quantile_cont, bit for bit.

The rank SQL runs on DuckDB here (it is DuckDB's dialect; Spark gets it through the rewrite), with an
``fma`` registered, so every test compares two independent computations in one database: DuckDB's
``quantile_cont`` and the histogram / rank / interpolation passes that the Spark engine runs.
"""

from __future__ import annotations

import math
import random
import struct
from fractions import Fraction
from typing import Any

import duckdb
import pytest

from traceflow.engines.rewrite import to_spark
from traceflow.store.groups import Keys, row_keys
from traceflow.store.quantiles import Quantile, bucket_sql, grouped_sql

#: Values that break careless arithmetic: zeros of both signs, extremes, subnormals, infinities, NaN.
ADVERSARIAL = [
    0.0,
    -0.0,
    1e308,
    -1e308,
    1.7976931348623157e308,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1e-300,
    1.0,
    1.0,
    1.0,
    2.5,
    0.1,
    0.2,
    0.30000000000000004,
    1 / 3,
    -7.0,
    123456789.123,
    2.0**53,
    2.0**53 + 2,
    math.inf,
    -math.inf,
]
FRACTIONS = (0.0, 0.001, 0.1, 1 / 3, 0.5, 0.9, 0.99, 0.999, 1.0)


def _fma(a: float, b: float, c: float) -> float:
    """a * b + c rounded once (finite operands; the macro below handles the rest)."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    try:
        return float(exact)
    except OverflowError:
        return math.copysign(math.inf, exact)


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.create_function("_fma_exact", _fma, ["DOUBLE", "DOUBLE", "DOUBLE"], "DOUBLE", side_effects=False)
    # a Python UDF gives NULL for NaN: only finite operands reach it
    con.execute(
        "CREATE MACRO fma(a, b, c) AS CASE WHEN isfinite(a) AND isfinite(b) AND isfinite(c) "
        "THEN _fma_exact(a, b, c) ELSE a * b + c END"
    )
    return con


def _bits(v: Any) -> Any:
    """A value as its bit pattern (NaN as one pattern, -0.0 as 0.0: zeros' signs are ties)."""
    if isinstance(v, (list, tuple)):
        return [_bits(u) for u in v]
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return struct.pack("<d", v + 0.0).hex()
    return v


def _compare(con: duckdb.DuckDBPyConnection, keys: Keys, columns: list[tuple[str, Any]], source: str) -> int:
    want = con.sql(grouped_sql(keys, columns).replace("{q}", source)).fetchall()
    got = con.sql(grouped_sql(keys, columns, by_rank=True).replace("{q}", source)).fetchall()
    assert len(got) == len(want)
    for w, g in zip(want, got, strict=True):
        assert _bits(g) == _bits(w), (w, g)
    return len(want)


def _table(con: duckdb.DuckDBPyConnection, rows: list[tuple[Any, ...]]) -> None:
    con.execute("CREATE OR REPLACE TABLE t (grp VARCHAR, kind VARCHAR, x DOUBLE, i BIGINT)")
    if rows:
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)


KEYS = Keys('grp AS "grp", ', "", "GROUP BY 1 ORDER BY 1", ("grp",), ("grp",))
COLUMNS: list[tuple[str, Any]] = [
    ("n", "count(*)"),
    ("q_all", Quantile("x", FRACTIONS)),
    ("mean", "avg(x)"),
    ("q_human", Quantile("x", FRACTIONS, "kind = 'human'")),
    ("p90_agent", Quantile("x", 0.9, "kind = 'agent'")),
    ("q_int", Quantile("i", (0.25, 0.5, 0.75))),
]


def test_interpolation_is_duckdbs_fused_multiply_add() -> None:
    """DuckDB interpolates lo * (1 - d) + hi * d with one rounding (its build contracts it to an FMA):
    an independent recomputation in exact arithmetic agrees on every draw, the unfused forms do not."""
    con = duckdb.connect()
    rng = random.Random(7)
    unfused = 0
    for _ in range(400):
        lo = rng.choice([rng.uniform(-1, 1), rng.lognormvariate(0, 8) * rng.choice([1, -1])])
        hi = lo + abs(rng.lognormvariate(0, 8))
        n = rng.randint(2, 500)
        p = rng.choice([rng.random(), 1 / 3, 0.9, 0.99])
        h = (n - 1) * p
        lo_rank = math.floor(h)
        if lo_rank == math.ceil(h):
            continue
        values = [lo] * (lo_rank + 1) + [hi] * (n - lo_rank - 1)
        got = con.execute(f"SELECT quantile_cont(x, {p!r}) FROM (SELECT unnest(?) AS x)", [values]).fetchone()
        assert got is not None
        d = h - lo_rank
        assert got[0] == _fma(lo, 1.0 - d, hi * d), (lo, hi, n, p)
        unfused += got[0] != lo * (1.0 - d) + hi * d
    assert unfused > 0  # the draws do tell the fused form from the unfused one


def adversarial_rows() -> list[tuple[Any, ...]]:
    """(grp, kind, x, i) rows: 4000 random ones over :data:`ADVERSARIAL` and wide lognormal values, in
    three groups, and small groups (one value, two, NaN, only NULLs, equal values, extremes)."""
    rng = random.Random(1)
    rows: list[tuple[Any, ...]] = []
    for _ in range(4000):
        r = rng.random()
        x = rng.choice(ADVERSARIAL) if r < 0.3 else (rng.lognormvariate(0, 6) * rng.choice([1, -1]))
        rows.append(
            (
                rng.choice(["a", "b", None]),
                rng.choice(["human", "agent", "unknown"]),
                None if r > 0.95 else x,
                rng.randint(-(2**62), 2**62),
            )
        )
    rows += [("one", "human", 42.5, 7), ("two", "human", 1.0, 1), ("two", "agent", 2.0, 2)]
    rows += [("nan", "agent", math.nan, 1), ("nan", "agent", 1.0, 1), ("nan", "human", 2.0, 1)]
    rows += [("nulls", "human", None, None), ("same", "human", 3.0, 3), ("same", "human", 3.0, 3)]
    rows += [("huge", "human", 1.7976931348623157e308, 2**62), ("huge", "human", -1.7976931348623157e308, 0)]
    rows += [("tiny", "human", 5e-324, 1), ("tiny", "human", 1e-323, 1), ("tiny", "agent", -5e-324, 1)]
    return rows


def test_by_rank_equals_quantile_cont_on_adversarial_values() -> None:
    con = _connect()
    _table(con, adversarial_rows())
    assert _compare(con, KEYS, COLUMNS, "(SELECT * FROM t)") == 10
    assert _compare(con, Keys("", "", ""), COLUMNS, "(SELECT * FROM t)") == 1


@pytest.mark.parametrize("n", [1, 2, 3, 10, 1001])
def test_small_and_repeated_groups(n: int) -> None:
    con = _connect()
    rng = random.Random(n)
    pool = [rng.uniform(-5, 5) for _ in range(max(1, n // 3))]  # repeats
    _table(con, [("g", rng.choice(["human", "agent"]), rng.choice(pool), i) for i in range(n)])
    _compare(con, KEYS, COLUMNS, "(SELECT * FROM t)")
    _compare(con, Keys("", "", ""), COLUMNS, "(SELECT * FROM t)")


def test_empty_input_gives_null_quantiles() -> None:
    con = _connect()
    _table(con, [])
    assert _compare(con, Keys("", "", ""), COLUMNS, "(SELECT * FROM t)") == 1
    rows = con.sql(grouped_sql(Keys("", "", ""), COLUMNS, by_rank=True).replace("{q}", "t")).fetchall()
    assert rows == [(0, None, None, None, None, None)]


def test_many_values_in_one_bucket() -> None:
    """Values 1 ulp apart all share a bucket: the selection pass ranks them all."""
    con = _connect()
    x = 1.0
    rows = []
    for i in range(2000):
        rows.append(("g", "human", x, i))
        x = math.nextafter(x, 2.0)
    _table(con, rows)
    _compare(con, KEYS, COLUMNS, "(SELECT * FROM t)")


def test_bucket_never_decreases() -> None:
    con = duckdb.connect()
    values = [*sorted({v for v in ADVERSARIAL if not math.isnan(v)}), math.nan]
    con.execute("CREATE TABLE v (i INTEGER, x DOUBLE)")
    con.executemany("INSERT INTO v VALUES (?, ?)", list(enumerate(values)))
    buckets = [b for (b,) in con.sql(f"SELECT {bucket_sql('x')} FROM v ORDER BY i").fetchall()]
    assert buckets == sorted(buckets)


def test_grouped_sql_on_duckdb_is_quantile_cont() -> None:
    keys = row_keys(["model"], zone="UTC")
    sql = grouped_sql(keys, [("n", "count(*)"), ("p50", Quantile("gap_s", 0.5, "kind = 'human'"))])
    assert "quantile_cont(gap_s, 0.5) FILTER (WHERE kind = 'human') AS p50" in sql
    assert "fma" not in sql


def test_by_rank_translates_for_spark() -> None:
    keys = row_keys(["model"], zone="UTC")
    text = to_spark(grouped_sql(keys, COLUMNS, by_rank=True).replace("{q}", "(SELECT * FROM t)"))
    assert "quantile_cont" not in text and "percentile" not in text
    assert "java_method('java.lang.Math', 'fma', " in text
    assert "if(max(CASE WHEN _spec = 0 THEN 1 END) = 1, array(" in text
