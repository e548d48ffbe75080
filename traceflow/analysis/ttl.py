"""The cache-TTL what-if and advisor (docs/forensics.md#traceflow-ttl): what a shorter or longer
prompt-cache TTL would cost.

Model (``queries/ttl.sql``), per session stream (gaps as in :mod:`traceflow.analysis.gaps`):

* a request's *prefix* is what the previous request of its stream left in the cache: that request's
  context plus its output (the next request resends both), at most this request's context (after a
  compaction less is reusable); the previous request is the stream's in the whole lake, whatever the
  selection (the first request of a ``--since`` window is no cold start), so the tokens and costs of
  disjoint windows add up;
* under TTL ``T`` a request whose idle gap exceeds ``T`` finds the prefix expired and writes it again
  (``rewrite_tokens``); otherwise it reads the prefix and writes only the rest of its context;
  a stream's first request writes its whole context;
* cost = reads x base input x read multiplier + writes x base input x the TTL's write multiplier +
  output x base output, per model (:class:`~traceflow.prices.PriceModel`); ``expiry_cost_usd`` is
  what the expiries add over reading those prefixes.

Uncached input is priced as a write (the model does not separate the few uncached tokens), and a
cache refresh on every hit is assumed (Anthropic's caches refresh their TTL when read). The best TTL
is the cheapest. :func:`ttl_validation` shows what the data itself says: the cache tokens requests
actually wrote after short, medium and long gaps (``queries/ttl_validation.sql``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceflow.prices import PriceModel
from traceflow.store import sql
from traceflow.units import format_duration

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

#: The providers' TTLs, always compared.
PROVIDER_TTLS: tuple[float, ...] = (300.0, 3600.0)

#: The cost columns of the what-if (USD; null for requests without a model name, which are not priced).
COSTS = ("cost_read_usd", "cost_write_usd", "cost_output_usd", "cost_usd", "expiry_cost_usd")

#: Columns of :func:`ttl_whatif`, in order (JSON keys are a contract).
COLUMNS = (
    "ttl_s",
    "ttl",
    "requests",
    "expired_requests",
    "share_requests_expired",
    "context_tokens",
    "rewrite_tokens",
    "share_tokens_rewritten",
    "read_tokens",
    "write_tokens",
    "output_tokens",
    "cost_read_usd",
    "cost_write_usd",
    "cost_output_usd",
    "cost_usd",
    "expiry_cost_usd",
    "cost_vs_best",
    "best",
)


def ttl_list(extra: Sequence[float] = ()) -> list[float]:
    """5 min and 1 h plus ``extra``, sorted, without duplicates."""
    return sorted({*PROVIDER_TTLS, *(float(t) for t in extra)})


def ttl_tokens(
    con: duckdb.DuckDBPyConnection, selection: Selection | None = None, ttls: Sequence[float] = PROVIDER_TTLS
) -> pl.DataFrame:
    """``queries/ttl.sql`` for several TTLs in one pass: one row per (TTL, model)."""
    if not ttls:
        raise ValueError("at least one TTL")
    values = ", ".join(f"({float(t)!r})" for t in ttls)
    block, params = sql.selection_block(selection)
    return sql.run(
        con,
        "ttl",
        params,
        blocks={
            "selection": block,
            "ttls": f"SELECT CAST(v.ttl_s AS DOUBLE) AS ttl_s FROM (VALUES {values}) AS v(ttl_s)",
        },
    )


def price_tokens(tokens: pl.DataFrame, prices: PriceModel) -> pl.DataFrame:
    """Add USD costs to ``ttl_tokens`` rows (per TTL and model) under ``prices``."""
    import polars as pl

    rows = []
    for r in tokens.to_dicts():
        w = prices.write_multiplier(r["ttl_s"])
        p = prices.priced(r["model"])
        if p is None:  # a request without a model name is not priced: its costs are null
            rows.append({**r, "write_multiplier": w, **dict.fromkeys(COSTS)})
            continue
        per_in = p.input / 1e6
        cost_read = r["read_tokens"] * per_in * prices.read_multiplier
        cost_write = r["write_tokens"] * per_in * w
        cost_output = r["output_tokens"] * p.output / 1e6
        rows.append(
            {
                **r,
                "write_multiplier": w,
                "cost_read_usd": cost_read,
                "cost_write_usd": cost_write,
                "cost_output_usd": cost_output,
                "cost_usd": cost_read + cost_write + cost_output,
                "expiry_cost_usd": r["rewrite_tokens"] * per_in * (w - prices.read_multiplier),
            }
        )
    schema = dict(tokens.schema)
    schema.update({k: pl.Float64() for k in ("write_multiplier", *COSTS)})
    return pl.DataFrame(rows, schema=schema)


def summarise(priced: pl.DataFrame, ttls: Sequence[float] | None = None) -> pl.DataFrame:
    """One row per TTL (models summed) with shares, ``cost_vs_best`` and ``best``; columns :data:`COLUMNS`."""
    import polars as pl

    sums = [
        "requests",
        "expired_requests",
        "context_tokens",
        "rewrite_tokens",
        "read_tokens",
        "write_tokens",
        "output_tokens",
    ]
    costs = list(COSTS)
    wanted = [float(t) for t in (ttls if ttls is not None else priced["ttl_s"].unique().sort().to_list())]
    # a cost is null where no request of the TTL was priced (only requests without a model name)
    grouped = (
        priced.group_by("ttl_s").agg(
            [pl.col(c).sum() for c in sums]
            + [pl.when(pl.col(c).count() > 0).then(pl.col(c).sum()).alias(c) for c in costs]
        )
        if priced.height
        else None
    )
    base = pl.DataFrame({"ttl_s": wanted}, schema={"ttl_s": pl.Float64})
    if grouped is None:
        frame = base.with_columns(
            [pl.lit(0, pl.Int64).alias(c) for c in sums] + [pl.lit(0.0).alias(c) for c in costs]
        )
    else:
        frame = base.join(grouped, on="ttl_s", how="left").with_columns(
            [pl.col(c).fill_null(0).cast(pl.Int64) for c in sums]
        )
    best_cost = frame["cost_usd"].min() if frame.height else None
    frame = frame.sort("ttl_s").with_columns(
        pl.col("ttl_s").map_elements(format_duration, return_dtype=pl.String).alias("ttl"),
        (pl.col("expired_requests") / pl.col("requests")).fill_nan(None).alias("share_requests_expired"),
        (pl.col("rewrite_tokens") / pl.col("context_tokens")).fill_nan(None).alias("share_tokens_rewritten"),
        (pl.col("cost_usd") / best_cost if best_cost else pl.lit(None, pl.Float64)).alias("cost_vs_best"),
    )
    # The cheapest TTL is the best; among equal costs the shortest (it holds the least memory).
    best_idx = None
    costs_list = frame["cost_usd"].to_list()
    priced_idx = [i for i, c in enumerate(costs_list) if c is not None]
    if frame.height and frame["requests"].sum() > 0 and priced_idx:
        best_idx = min(priced_idx, key=lambda i: (round(costs_list[i], 9), i))
    frame = frame.with_columns(
        pl.Series("best", [i == best_idx for i in range(frame.height)], dtype=pl.Boolean)
    )
    return frame.select(COLUMNS)


def ttl_whatif(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    ttls: Sequence[float] = PROVIDER_TTLS,
    prices: PriceModel | None = None,
) -> pl.DataFrame:
    """Per TTL: requests and tokens whose prefix expired, tokens read/written, cost, and the best TTL."""
    priced = price_tokens(ttl_tokens(con, selection, ttls), prices or PriceModel())
    return summarise(priced, ttls)


def observed_cost(
    con: duckdb.DuckDBPyConnection, selection: Selection | None = None, prices: PriceModel | None = None
) -> pl.DataFrame:
    """What the requests actually cost under the price model, per model (``queries/tokens_by_model.sql``).

    Cold input at the cold multiplier, cache reads at the read multiplier, 5-minute writes at the
    300 s multiplier, 1-hour writes at the 3600 s one, writes without a TTL split as 5-minute
    writes; ``reported_cost_usd`` is the sum of the agents' own ``cost_usd`` (NULL where none).
    """
    import polars as pl

    pm = prices or PriceModel()
    block, params = sql.selection_block(selection)
    frame = sql.run(con, "tokens_by_model", params, blocks={"selection": block})
    w5, w1h = pm.write_multiplier(300.0), pm.write_multiplier(3600.0)
    costs: list[float | None] = []
    for r in frame.to_dicts():
        p = pm.priced(r["model"])
        if p is None:  # no model name: not priced
            costs.append(None)
            continue
        per_in = p.input / 1e6
        unsplit = r["cache_write_tokens"] - r["cache_write_5m_tokens"] - r["cache_write_1h_tokens"]
        costs.append(
            r["cold_input_tokens"] * per_in * pm.cold_multiplier
            + r["cache_read_tokens"] * per_in * pm.read_multiplier
            + (r["cache_write_5m_tokens"] + max(unsplit, 0)) * per_in * w5
            + r["cache_write_1h_tokens"] * per_in * w1h
            + r["output_tokens"] * p.output / 1e6
        )
    return frame.with_columns(pl.Series("cost_usd", costs, dtype=pl.Float64))


def ttl_validation(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    short_s: float = 300.0,
    long_s: float = 3600.0,
) -> pl.DataFrame:
    """Observed cache writes after short (<= ``short_s``), medium and long (> ``long_s``) gaps, with
    ``write_vs_short``: the mean write per request relative to the short-gap class."""
    import polars as pl

    block, params = sql.selection_block(selection)
    frame = sql.run(
        con, "ttl_validation", {**params, "short_s": short_s, "long_s": long_s}, blocks={"selection": block}
    )
    short = frame.filter(pl.col("gap_class") == "short")["mean_cache_write_tokens"]
    base = short[0] if len(short) and short[0] else None
    return frame.with_columns(
        (pl.col("mean_cache_write_tokens") / base if base else pl.lit(None, pl.Float64)).alias(
            "write_vs_short"
        )
    )


@dataclass(frozen=True)
class TtlResult:
    """Everything ``traceflow ttl`` shows."""

    whatif: pl.DataFrame  # one row per TTL (COLUMNS)
    by_model: pl.DataFrame  # one row per (TTL, model), priced
    observed: pl.DataFrame  # per model: the tokens as reported, priced
    validation: pl.DataFrame  # observed writes after short/medium/long gaps
    prices: PriceModel

    @property
    def best_ttl_s(self) -> float | None:
        best = self.whatif.filter(self.whatif["best"])
        return float(best["ttl_s"][0]) if best.height else None

    def as_dict(self) -> dict[str, Any]:
        """The ``traceflow ttl --format json`` object (stable keys)."""
        best = self.best_ttl_s
        priced = self.observed["cost_usd"].drop_nulls() if self.observed.height else None
        # null where nothing was priced (only requests without a model name)
        observed_total = float(priced.sum()) if priced is not None and len(priced) else None
        reported = self.observed["reported_cost_usd"].drop_nulls()
        return {
            "best_ttl_s": best,
            "best_ttl": format_duration(best) if best is not None else None,
            "ttls": self.whatif.to_dicts(),
            "by_model": self.by_model.to_dicts(),
            "observed": {
                "cost_usd": observed_total,
                "reported_cost_usd": float(reported.sum()) if len(reported) else None,
                "by_model": self.observed.to_dicts(),
            },
            "validation": self.validation.to_dicts(),
            "prices": self.prices.as_dict(),
        }


def ttl_report(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    ttls: Sequence[float] = PROVIDER_TTLS,
    prices: PriceModel | None = None,
) -> TtlResult:
    """The what-if per TTL and per model, the observed cost and the validation."""
    pm = prices or PriceModel()
    priced = price_tokens(ttl_tokens(con, selection, ttls), pm)
    return TtlResult(
        whatif=summarise(priced, ttls),
        by_model=priced,
        observed=observed_cost(con, selection, pm),
        validation=ttl_validation(con, selection),
        prices=pm,
    )
