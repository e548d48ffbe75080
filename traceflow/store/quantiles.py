"""Exact ``quantile_cont`` by rank: DuckDB's result in bounded memory on an engine without a cheap
exact quantile (Spark's ``percentile`` keeps every distinct value of a group in one task).

The analyses aggregate a per-row query as ``SELECT keys, aggregates FROM {q} GROUP BY keys``
(:func:`grouped_sql`). Their quantiles are :class:`Quantile` columns: on DuckDB, ``quantile_cont``
inline, as always; with ``by_rank`` (the analyses pass it for another engine), every quantile is
computed from two values picked by rank, in plain SQL that parallelises and whose every step is a
shuffle, a grouped count or a sorted window (all of which spill to disk):

1. a histogram pass: per group, quantile and *bucket* of the value, the count of non-NULL values;
   the bucket is :func:`bucket_sql`, a monotone step function of the value (256 buckets per factor of
   e, so a bucket is 0.4 % wide), and a running sum over the buckets gives each bucket's first rank;
2. the ranks DuckDB reads: for ``n`` values and a fraction ``p``, ``h = (n - 1) * p`` (in double),
   ranks ``floor(h)`` and ``ceil(h)`` (0-based, ascending), each found in the one bucket whose
   rank range holds it;
3. a selection pass: only the values in those buckets, counted per distinct value and numbered by a
   running sum in value order, give the value at each rank;
4. DuckDB's interpolation (``InterpolateOperator`` for doubles, which integers are cast to first:
   ``lo * (1 - d) + hi * d`` with ``d = h - floor(h)``; ``lo`` itself when ``floor(h) = ceil(h)``).
   The DuckDB wheel (2.0.1, x86-64) computes that sum as a fused multiply-add, its compiler having
   contracted it: ``fma(lo, 1 - d, hi * d)``, one rounding
   (``tests/test_quantiles.py`` checks that against the installed DuckDB), so the SQL calls
   ``fma``: Java's ``Math.fma`` on Spark (the ``fma`` rule of :mod:`traceflow.engines.rewrite`); DuckDB
   has no ``fma``, so the tests register one. The result is bit-identical (a zero's sign aside:
   ``-0.0`` and ``0.0`` are one value here, and either may be DuckDB's).

No step holds a group's values in memory at once: the largest state is the sort of one bucket's
distinct values (a window, which spills), not the whole group. The per-row query is computed once
(on Spark, a shuffle to disk that each pass reads), the other aggregates from it too. The SQL is
DuckDB's dialect (:func:`traceflow.engines.rewrite.to_spark` translates it), so the tests also run it
on DuckDB and compare it with ``quantile_cont`` (``tests/test_quantiles.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from traceflow.store.groups import Keys, ident

#: Buckets per factor of e of a value's magnitude in the histogram pass (a bucket is 0.4 % wide).
BUCKETS_PER_E = 256


@dataclass(frozen=True)
class Quantile:
    """``quantile_cont(value, probs) FILTER (WHERE where)``: one fraction gives a DOUBLE, a tuple a
    list of DOUBLEs (NULL for a group without values, as DuckDB gives)."""

    value: str
    probs: float | tuple[float, ...]
    where: str | None = None

    @property
    def fractions(self) -> tuple[float, ...]:
        return self.probs if isinstance(self.probs, tuple) else (self.probs,)

    def duckdb(self) -> str:
        """The DuckDB aggregate."""
        probs = (
            "[" + ", ".join(_literal(p) for p in self.probs) + "]"
            if isinstance(self.probs, tuple)
            else _literal(self.probs)
        )
        where = f" FILTER (WHERE {self.where})" if self.where else ""
        return f"quantile_cont({self.value}, {probs}){where}"


#: A column of :func:`grouped_sql`: its name and an aggregate expression or a :class:`Quantile`.
Column = tuple[str, str | Quantile]


def _literal(p: float) -> str:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a quantile's fraction must be between 0 and 1, not {p!r}")
    return repr(float(p))


def bucket_sql(x: str) -> str:
    """A BIGINT that never decreases as ``x`` grows (NaN counted greatest, as both engines sort it):
    0 for zero, else ``±(10^6 + floor(ln|x| * 256))`` (``ln`` is monotone; |ln| < 710 for doubles)."""
    scaled = f"floor(least(ln(abs({x})), 800.0) * {BUCKETS_PER_E}.0)"
    return (
        f"CAST(CASE WHEN isnan({x}) THEN 3000000 WHEN {x} = 0 THEN 0 "
        f"WHEN {x} > 0 THEN 1000000 + {scaled} ELSE -1000000 - {scaled} END AS BIGINT)"
    )


def grouped_sql(keys: Keys, columns: Sequence[Column], *, by_rank: bool = False) -> str:
    """``SELECT keys, columns FROM {q} AS g ... GROUP BY keys ORDER BY keys``: a ``wrap`` for
    :func:`traceflow.store.sql.run`, its columns the names of ``keys`` then ``columns``.

    Without ``by_rank`` the quantiles are DuckDB's ``quantile_cont``; with it they are computed by
    rank in bounded memory (the module docstring), the other columns by the same grouping.
    """
    if not by_rank or not any(isinstance(c, Quantile) for _, c in columns):
        cols = ", ".join(f"{c.duckdb() if isinstance(c, Quantile) else c} AS {name}" for name, c in columns)
        return f"SELECT {keys.select}{cols} FROM {{q}} AS g {keys.join} {keys.group}".rstrip()
    return _by_rank(keys, columns)


def _by_rank(keys: Keys, columns: Sequence[Column]) -> str:
    names = keys.names
    ks = [f"_k{i}" for i in range(len(names))]
    kl = "".join(f"{k}, " for k in ks)  # "_k0, _k1, " (empty without keys)

    def of(alias: str) -> str:  # "alias._k0, alias._k1, "
        return "".join(f"{alias}.{k}, " for k in ks)

    def on(a: str, b: str) -> str:
        return "".join(f" AND {a}.{k} IS NOT DISTINCT FROM {b}.{k}" for k in ks)

    quantiles = [(name, c) for name, c in columns if isinstance(c, Quantile)]
    plain = [(name, c) for name, c in columns if not isinstance(c, Quantile)]
    src_keys = "".join(f"{e} AS {k}, " for e, k in zip(keys.exprs, ks, strict=True))
    cases = " ".join(
        f"WHEN {i} THEN " + (f"CASE WHEN {q.where} THEN {q.value} END" if q.where else q.value)
        for i, (_, q) in enumerate(quantiles)
    )
    specs = ", ".join(f"({i})" for i in range(len(quantiles)))
    fractions = ", ".join(
        f"({i}, {j}, {_literal(p)})" for i, (_, q) in enumerate(quantiles) for j, p in enumerate(q.fractions)
    )
    h = "CAST(_n._n - 1 AS DOUBLE) * _p._p"
    group_plain = "GROUP BY ALL" if ks else ""
    ctes = [
        # random() keeps _src one relation on Spark (it inlines a deterministic CTE at each of its
        # references, which would run the per-row query once per pass): computed once, its rows
        # shuffled to disk and read by both passes and the other aggregates
        f"_src AS (SELECT {src_keys}g.*, random() AS _once FROM {{q}} AS g {keys.join})",
        # every (row, quantile) pair whose value counts: the value as a DOUBLE (DuckDB interpolates
        # integers as doubles too) and its histogram bucket
        f"_vals AS (SELECT {kl}_spec, _x, {bucket_sql('_x')} AS _bucket FROM ("
        f"SELECT {kl}_s._spec, CAST(CASE _s._spec {cases} END AS DOUBLE) AS _x "
        f"FROM _src CROSS JOIN (VALUES {specs}) AS _s(_spec)) AS _l WHERE _x IS NOT NULL)",
        # pass 1: the histogram, each bucket's rank range [_upto - _c, _upto) and the group's count
        f"_hist AS (SELECT *, sum(_c) OVER (PARTITION BY {kl}_spec ORDER BY _bucket "
        f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _upto, "
        f"sum(_c) OVER (PARTITION BY {kl}_spec) AS _n "
        f"FROM (SELECT {kl}_spec, _bucket, count(*) AS _c FROM _vals GROUP BY ALL) AS _h)",
        f"_n AS (SELECT DISTINCT {kl}_spec, CAST(_n AS BIGINT) AS _n FROM _hist)",
        f"_p AS (SELECT * FROM (VALUES {fractions}) AS _p(_spec, _j, _p))",
        # the ranks DuckDB's Interpolator reads: floor and ceil of h = (n - 1) * p
        f"_ranks AS (SELECT DISTINCT {of('_n')}_n._spec, "
        f"CAST(CASE _e._side WHEN 0 THEN floor({h}) ELSE ceil({h}) END AS BIGINT) AS _r "
        f"FROM _n JOIN _p ON _p._spec = _n._spec CROSS JOIN (VALUES (0), (1)) AS _e(_side))",
        f"_want AS (SELECT {of('_ranks')}_ranks._spec, _ranks._r, _hist._bucket, "
        f"_ranks._r - (_hist._upto - _hist._c) AS _r_in FROM _ranks JOIN _hist "
        f"ON _hist._spec = _ranks._spec{on('_hist', '_ranks')} "
        f"AND _hist._upto - _hist._c <= _ranks._r AND _ranks._r < _hist._upto)",
        # pass 2: the distinct values of the wanted buckets only, numbered by a running count
        f"_picked AS (SELECT *, sum(_c) OVER (PARTITION BY {kl}_spec, _bucket ORDER BY _x "
        f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _upto "
        f"FROM (SELECT {of('_vals')}_vals._spec, _vals._bucket, _vals._x, count(*) AS _c "
        f"FROM _vals SEMI JOIN (SELECT DISTINCT {kl}_spec, _bucket FROM _want) AS _w "
        f"ON _w._spec = _vals._spec AND _w._bucket = _vals._bucket{on('_w', '_vals')} GROUP BY ALL) AS _d)",
        f"_at AS (SELECT {of('_want')}_want._spec, _want._r, _picked._x "
        f"FROM _want JOIN _picked ON _picked._spec = _want._spec AND _picked._bucket = _want._bucket"
        f"{on('_picked', '_want')} "
        f"AND _picked._upto - _picked._c <= _want._r_in AND _want._r_in < _picked._upto)",
        # DuckDB's InterpolateOperator<double>: lo * (1 - d) + hi * d, fused, with d = h - floor(h); lo
        # where floor(h) = ceil(h)
        f"_q AS (SELECT {of('_n')}_n._spec, _p._j, "
        f"CASE WHEN _lo._r = _hi._r THEN _lo._x "
        f"ELSE CAST(fma(_lo._x, 1.0 - ({h} - floor({h})), _hi._x * ({h} - floor({h}))) AS DOUBLE) END AS _v "
        f"FROM _n JOIN _p ON _p._spec = _n._spec "
        f"JOIN _at AS _lo ON _lo._spec = _n._spec{on('_lo', '_n')} AND _lo._r = CAST(floor({h}) AS BIGINT) "
        f"JOIN _at AS _hi ON _hi._spec = _n._spec{on('_hi', '_n')} AND _hi._r = CAST(ceil({h}) AS BIGINT))",
    ]
    pivot = []
    for i, (name, q) in enumerate(quantiles):
        parts = [f"max(CASE WHEN _spec = {i} AND _j = {j} THEN _v END)" for j in range(len(q.fractions))]
        if isinstance(q.probs, tuple):
            present = f"max(CASE WHEN _spec = {i} THEN 1 END) = 1"
            pivot.append(f"if({present}, [{', '.join(parts)}], NULL) AS {name}")
        else:
            pivot.append(f"{parts[0]} AS {name}")
    ctes.append(f"_quantiles AS (SELECT {kl}{', '.join(pivot)} FROM _q {group_plain})")
    if plain:
        aggs = ", ".join(f"{c} AS {name}" for name, c in plain)
        ctes.append(f"_plain AS (SELECT {kl}{aggs} FROM _src {group_plain})")
    else:
        ctes.append(f"_plain AS (SELECT {kl}count(*) AS _rows FROM _src {group_plain})")
    outer = [f"_a.{k} AS {ident(n)}" for k, n in zip(ks, names, strict=True)]
    outer += [f"{'_b' if isinstance(c, Quantile) else '_a'}.{name}" for name, c in columns]
    join = f"LEFT JOIN _quantiles AS _b ON true{on('_a', '_b')}" if ks else "CROSS JOIN _quantiles AS _b"
    order = f" ORDER BY {', '.join(str(i + 1) for i in range(len(ks)))}" if ks else ""
    return f"WITH {', '.join(ctes)} SELECT {', '.join(outer)} FROM _plain AS _a {join}{order}"
