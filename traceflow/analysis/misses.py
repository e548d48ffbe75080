"""Cache misses and their causes (docs/forensics.md#traceflow-misses): which requests missed the prompt
cache, and why.

Per request (``queries/misses.sql``, over the ``request_steps`` window):

* the *reusable prefix* is the smaller of the previous request's prompt (cold + read + write) and the
  request's own prompt;
* a request **misses** when it is the first of its stream, or when its cache read is more than
  ``miss_tokens`` (1,024) below its reusable prefix; its *missed tokens* are the reusable prefix minus
  the cache read (0 for a stream's first request: nothing of its own stream was there to reuse);
* the *TTL in force* is the TTL of the stream's last write before the request (1 h when most of that
  request's writes were 1-hour writes, else 5 min), carried across requests that wrote nothing;
* the cause of a miss, first match wins: ``first_request`` → ``model_switch`` → ``compaction`` (a
  compaction event of the stream, or a context drop of more than ``compaction_drop``) →
  ``ttl_expired`` (the idle gap exceeds the TTL in force) → ``restart`` (the first main-stream
  request after the agent process restarted: OTLP ``claude_code.session.count`` with ``start_type``
  resume/continue, a transcript's ``session_restart`` event; a point without its session's id, as
  ``--continue`` sends, is linked to the one session the other points of its export name, else
  left unlinked) → ``prefix_break`` (the read fell back to at most the stream's static prefix +
  ``prefix_tokens``, above zero: the prefix its trace records, kv-cache-tester's ``tool_tokens`` +
  ``system_tokens``, else the stream's first read) → ``unexplained``.

A request without a session (Mooncake, Bailian, Azure) has no stream, so it is never a
``first_request`` miss: where it has prefix block hashes it is judged from them instead
(``queries/block_misses.sql``: blocks an earlier request had, expired after :data:`BLOCK_TTL_S`, cause
``ttl_expired``); without them it is not judged at all, counted as ``not_applicable`` (and the miss
figures are null when no request of the selection could be judged).

What a miss costs, under the price model (:class:`~traceflow.prices.PriceModel`): its missed tokens
times the model's base input price times (the write multiplier of the TTL in force − the read
multiplier), what writing them again added over reading them.

Where the lake has no ``metric_points`` view (a connection opened without it), the OTLP restart
points are read as none; transcripts' restart events still count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError
from traceflow.prices import PriceModel
from traceflow.store import groups, sql
from traceflow.store.selection import zone_of

if TYPE_CHECKING:
    import datetime as dt

    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

#: Miss causes, in the order they are tested (first match wins).
CAUSES: tuple[str, ...] = (
    "first_request",
    "model_switch",
    "compaction",
    "ttl_expired",
    "restart",
    "prefix_break",
    "unexplained",
)
#: The columns a table of misses (``misses --list``) keeps to fit a narrow terminal, first named longest.
LIST_ESSENTIAL: tuple[str, ...] = (
    "started_at",
    "cause",
    "missed_tokens",
    "miss_cost_usd",
    "session_id",
    "model",
)
#: The causes a client (not the TTL, the model or the conversation) is to blame for: ``check`` and
#: ``compare`` watch their share.
CLIENT_CAUSES: tuple[str, ...] = ("restart", "prefix_break", "unexplained")

#: What a stream's request may fall short of its reusable prefix and still be a hit.
MISS_TOKENS = 1024
#: A context drop (share of the previous request's) that counts as a compaction, as in ``compactions``.
COMPACTION_DROP = 0.5
#: How far above the stream's static prefix (recorded, else its first cache read) a miss's read may be
#: and still be a prefix break.
PREFIX_TOKENS = 1024
#: The ``misses.sql`` block that reads the OTLP restart points, and what stands for it without them.
_NO_POINTS = (  # STRING: DuckDB's alias of VARCHAR, Spark's text type
    "SELECT CAST(NULL AS STRING) AS session_id, CAST(NULL AS STRING) AS user_id, "
    "CAST(NULL AS BIGINT) AS t_us, CAST(NULL AS STRING) AS start_type WHERE false"
)


@dataclass(frozen=True)
class MissOptions:
    """What counts as a miss and what it costs (the options of ``traceflow misses``)."""

    #: The price model of the costs (None: the built-in prices).
    prices: PriceModel | None = None
    #: What a request's cache read may fall short of its reusable prefix and still be a hit.
    miss_tokens: int = MISS_TOKENS
    #: A context drop (share of the previous request's) that counts as a compaction.
    compaction_drop: float = COMPACTION_DROP

    def __post_init__(self) -> None:
        if self.miss_tokens < 0:
            raise UsageError(
                f"--miss-tokens {self.miss_tokens} must be 0 or more (tokens a read may fall short)"
            )
        if not 0 < self.compaction_drop < 1:
            raise UsageError(
                f"--compaction-drop {self.compaction_drop} must be between 0 and 1 (a share of the context)"
            )


#: The TTL (seconds) a request without a session is judged under, from its block hashes: 5 minutes.
BLOCK_TTL_S = 300

#: The built-in prices and thresholds.
DEFAULT_MISS_OPTIONS = MissOptions()


def _run(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None,
    options: MissOptions = DEFAULT_MISS_OPTIONS,
    *,
    wrap: str | None = None,
    ordered: bool = True,
) -> pl.DataFrame:
    """misses.sql's rows (block_misses.sql's after them), under ``wrap``; ``ordered``: in the query's
    order (False where ``wrap`` only aggregates them: the sort is skipped)."""
    import polars as pl

    parts = [
        sql.run(con, name, params, blocks=blocks, wrap=w)
        for name, params, blocks, w in _parts(con, selection, options, wrap, ordered)
    ]
    # block_misses.sql has the columns of misses.sql that apply to a request without a stream
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")


def _run_rows(
    con: duckdb.DuckDBPyConnection, selection: Selection | None, options: MissOptions, wrap: str
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """:func:`_run`'s rows under ``wrap`` (an aggregate naming its columns: the same for both
    queries), unordered, as column names and tuples (no frame library)."""
    columns: list[str] = []
    rows: list[tuple[Any, ...]] = []
    for name, params, blocks, w in _parts(con, selection, options, wrap, False):
        cols, part = sql.run_rows(con, name, params, blocks=blocks, wrap=w)
        if columns and cols != columns:  # pragma: no cover - the wrap names every column
            raise ValueError(f"block_misses.sql's columns {cols} are not misses.sql's {columns}")
        columns = cols
        rows.extend(part)
    return columns, rows


def _parts(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None,
    options: MissOptions,
    wrap: str | None,
    ordered: bool,
) -> list[tuple[str, dict[str, Any], dict[str, str], str]]:
    """The queries of :func:`_run`: (name, parameters, blocks, wrap) of misses.sql, and of
    block_misses.sql where the selection has requests without a session."""
    block, params = sql.selection_block(selection, "t_start")
    params = {**params, "miss_tokens": options.miss_tokens}
    # the window over the sessions that have a selected request only (the same rows: each stream whole)
    roots = sql.roots_block({"selection": sql.selection_block(selection)[0]})
    blocks = {"filter": block, sql.ROOTS: roots, **({} if ordered else {"order": ""})}
    if not _has_view(con, "metric_points"):
        blocks["restart_points"] = _NO_POINTS
    if sql.steps_table(con):  # two scans of a table, rather than a copy of all its rows
        blocks["materialized"] = ""
    # requests with a session: their stream (misses.sql); without: their block hashes (block_misses.sql)
    parts = [
        (
            "misses",
            {**params, "compaction_drop": options.compaction_drop, "prefix_tokens": PREFIX_TOKENS},
            blocks,
            _only(wrap, "session_id IS NOT NULL"),
        )
    ]
    if _sessionless(con, selection):  # else block_misses.sql would sort every block hash for no row
        parts.append(
            (
                "block_misses",
                {**params, "ttl_s": BLOCK_TTL_S},
                {"filter": block},
                _only(wrap, "session_id IS NULL"),
            )
        )
    return parts


def _sessionless(con: duckdb.DuckDBPyConnection | sql.Engine, selection: Selection | None) -> bool:
    """Whether the selection has a request with tokens but no session (block_misses.sql's rows)."""
    from traceflow.store.selection import Selection

    where, params = (selection or Selection()).where()
    _, found = sql.query_rows(
        con,
        "SELECT count(*) AS n FROM (SELECT 1 FROM requests WHERE session_id IS NULL AND total_tokens > 0 "
        f"AND request_time IS NOT NULL AND ({where}) LIMIT 1)",
        params,
    )
    return bool(found[0][0])


def _has_view(con: duckdb.DuckDBPyConnection | sql.Engine, name: str) -> bool:
    """Whether ``con`` has the view ``name`` (another engine: among the tables it registered)."""
    if isinstance(con, sql.Engine):
        tables = getattr(con, "tables", None)
        return tables is None or name in tables
    found = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND NOT internal", [name]
    ).fetchall()  # all: a result left unread would hold the connection
    return bool(found and found[0][0])


def _only(wrap: str | None, condition: str) -> str:
    """``wrap`` (a statement around ``{q}``) over the rows of ``{q}`` that meet ``condition``."""
    return (wrap or "SELECT * FROM {q}").replace("{q}", f"(SELECT * FROM {{q}} WHERE {condition})")


def miss_cost(prices: PriceModel, model: str | None, ttl_s: float, missed_tokens: int | None) -> float | None:
    """What ``missed_tokens`` written again instead of read cost under ``prices`` (USD); None for a
    request without a model name (not priced) or one that was not judged."""
    rate = _miss_rate(prices, model, ttl_s)
    if rate is None or missed_tokens is None:
        return None
    per_in, multiplier = rate
    return missed_tokens * per_in * multiplier


def _miss_rate(prices: PriceModel, model: str | None, ttl_s: float) -> tuple[float, float] | None:
    """:func:`miss_cost`'s factors: the model's base input price per token and (the write multiplier
    of ``ttl_s`` − the read multiplier); None for a request without a model name."""
    price = prices.priced(model)
    if price is None:
        return None
    return price.input / 1e6, prices.write_multiplier(ttl_s) - prices.read_multiplier


def total_cost(by_cause: dict[str, dict[str, Any]]) -> float | None:
    """The cost of all misses (``by_cause`` of :func:`miss_report`): the sum of the priced causes;
    None when there were misses and none of them was priced (requests without a model name)."""
    priced = [v["miss_cost_usd"] for v in by_cause.values() if v["miss_cost_usd"] is not None]
    unpriced = any(v["misses"] and v["miss_cost_usd"] is None for v in by_cause.values())
    return None if unpriced and not any(priced) else float(sum(priced))


def _with_costs(frame: pl.DataFrame, prices: PriceModel | None) -> pl.DataFrame:
    """``frame`` (``model``, ``ttl_in_force_s``, ``missed_tokens``) with ``miss_cost_usd``
    (:func:`miss_cost`)."""
    import polars as pl

    pm = prices or PriceModel()
    costs = [
        miss_cost(pm, m, t, n)
        for m, t, n in zip(frame["model"], frame["ttl_in_force_s"], frame["missed_tokens"], strict=True)
    ]
    return frame.with_columns(pl.Series("miss_cost_usd", costs, dtype=pl.Float64))


def miss_rows(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    options: MissOptions = DEFAULT_MISS_OPTIONS,
    *,
    misses_only: bool = False,
) -> pl.DataFrame:
    """One row per request (``misses_only``: per miss) with ``misses.sql``'s columns and ``miss_cost_usd``."""
    wrap = "SELECT * FROM {q} WHERE miss" if misses_only else None
    rows = _run(con, selection, options, wrap=wrap).sort("started_at", maintain_order=True, nulls_last=True)
    return _with_costs(rows, options.prices)


def miss_counts(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    by: Sequence[str] = (),
    options: MissOptions = DEFAULT_MISS_OPTIONS,
    *,
    split: dt.datetime | None = None,
) -> pl.DataFrame:
    """Per group (``by``) and cause (NULL: the hits): requests, misses, missed tokens and their cost.
    With ``split`` (a time within the selection), also per part of the selection: the key
    ``after_split`` is whether the request started at or after ``split`` (one pass of ``misses.sql``
    for two periods: each part's counts are those of the selection narrowed to it, since the window
    runs over the whole lake either way)."""
    import polars as pl

    wrap, keys = _count_wrap(selection, by, split)
    raw = _run(con, selection, options, wrap=wrap, ordered=False)
    schema: dict[str, Any] = {
        **{k: raw.schema[k] for k in keys},
        "cause": pl.String,
        "requests": pl.Int64,
        "misses": pl.Int64,
        "missed_tokens": pl.Int64,
        "miss_cost_usd": pl.Float64,
        "not_applicable": pl.Int64,
    }
    rows = _count_groups(raw.columns, raw.rows(), keys, options.prices)
    return pl.DataFrame(rows, schema=schema, orient="row")


def _count_wrap(
    selection: Selection | None, by: Sequence[str], split: dt.datetime | None
) -> tuple[str, list[str]]:
    """:func:`miss_counts`' aggregate over misses.sql's rows (per group, cause, model and TTL in
    force: what a miss costs depends on the last two), and its group keys (``after_split`` last)."""
    keys = groups.row_keys(by, zone=zone_of(selection))
    after = ""
    names = list(by)
    if split is not None:
        if split.tzinfo is None:
            raise ValueError("split must be an aware datetime")
        after = f"started_at >= CAST('{split.isoformat()}' AS TIMESTAMPTZ) AS after_split, "
        names.append("after_split")
    wrap = (
        f"SELECT {keys.select}{after}cause, model, ttl_in_force_s, count(*)::BIGINT AS requests, "
        "count(*) FILTER (WHERE miss)::BIGINT AS misses, sum(missed_tokens)::BIGINT AS missed_tokens, "
        "count(*) FILTER (WHERE miss IS NULL)::BIGINT AS not_applicable "
        f"FROM {{q}} AS m {keys.join} GROUP BY ALL"
    )
    return wrap, names


def _count_groups(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], keys: Sequence[str], prices: PriceModel | None
) -> list[tuple[Any, ...]]:
    """:func:`_count_wrap`'s rows priced (:func:`miss_cost`) and summed per ``keys`` and cause:
    (*keys, cause, requests, misses, missed_tokens, miss_cost_usd, not_applicable), sorted by the
    keys and cause, NULL first; a group's cost is None when none of its rows was priced."""
    pm = prices or PriceModel()
    at = {c: i for i, c in enumerate(columns)}
    key_at = [at[k] for k in [*keys, "cause"]]
    model, ttl, missed = at["model"], at["ttl_in_force_s"], at["missed_tokens"]
    counted = [at["requests"], at["misses"], at["missed_tokens"], at["not_applicable"]]
    sums: dict[tuple[Any, ...], list[int]] = {}
    costs: dict[tuple[Any, ...], list[float]] = {}
    rates: dict[tuple[Any, Any], tuple[float, float] | None] = {}  # per (model, TTL): one price lookup
    for r in rows:
        key = tuple(r[i] for i in key_at)
        total = sums.setdefault(key, [0, 0, 0, 0])
        for j, i in enumerate(counted):
            total[j] += r[i] or 0  # a NULL sum is 0, as in SQL's sum over the groups
        at_rate = (r[model], r[ttl])
        if at_rate not in rates:
            rates[at_rate] = _miss_rate(pm, *at_rate)
        rate = rates[at_rate]
        priced = costs.setdefault(key, [])
        if rate is not None and r[missed] is not None:  # miss_cost, its factors looked up once
            priced.append(r[missed] * rate[0] * rate[1])
    order = sorted(sums, key=lambda k: tuple((v is not None, v) for v in k))
    out = []
    for key in order:
        requests, misses, missed_tokens, not_applicable = sums[key]
        priced = costs[key]
        cost = math.fsum(priced) if priced else None
        out.append((*key, requests, misses, missed_tokens, cost, not_applicable))
    return out


def sum_counts(counts: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Rows of :func:`miss_counts`' columns added up per ``by``: requests, misses, missed tokens, not
    applicable, and the cost (NULL where no row of the group has one)."""
    import polars as pl

    return counts.group_by(by).agg(
        pl.col("requests").sum(),
        pl.col("misses").sum(),
        pl.col("missed_tokens").sum(),
        pl.when(pl.col("miss_cost_usd").count() > 0)
        .then(pl.col("miss_cost_usd").sum())
        .alias("miss_cost_usd"),
        pl.col("not_applicable").sum(),
    )


def miss_summary(counts: pl.DataFrame) -> dict[str, Any]:
    """The JSON object of one group's :func:`miss_counts` rows."""
    return _summary(counts.iter_rows(named=True))


def _summary(counts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`miss_summary` of one group's rows, as mappings of :func:`miss_counts`' columns."""
    by_cause: dict[str, dict[str, Any]] = {
        c: {"misses": 0, "missed_tokens": 0, "miss_cost_usd": 0.0} for c in CAUSES
    }
    requests = not_applicable = 0
    for r in counts:
        requests += int(r["requests"])
        not_applicable += int(r["not_applicable"])
        if r["cause"] is not None:
            by_cause[r["cause"]] = {
                "misses": int(r["misses"]),
                "missed_tokens": int(r["missed_tokens"]),
                "miss_cost_usd": None if r["miss_cost_usd"] is None else float(r["miss_cost_usd"]),
            }
    judged = requests > not_applicable or not requests  # None: no request could be judged
    return {
        "requests": requests,
        "misses": sum(v["misses"] for v in by_cause.values()) if judged else None,
        "missed_tokens": sum(v["missed_tokens"] for v in by_cause.values()) if judged else None,
        "not_applicable": not_applicable,
        "by_cause": by_cause,
    }


def miss_report(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    options: MissOptions = DEFAULT_MISS_OPTIONS,
) -> dict[str, Any]:
    """The ``traceflow misses --format json`` object: ``{"requests", "misses", "missed_tokens",
    "by_cause": {cause: {"misses", "missed_tokens", "miss_cost_usd"}}}`` (every cause present)."""
    return miss_groups(con, selection, (), options)[0]


def miss_groups(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    by: Sequence[str] = (),
    options: MissOptions = DEFAULT_MISS_OPTIONS,
) -> list[dict[str, Any]]:
    """``traceflow misses --by ... --format json``: per group its keys and :func:`miss_report`'s object.

    :func:`miss_counts`' figures, read without a frame library (a command that prints them needs none)."""
    wrap, keys = _count_wrap(selection, by, None)
    columns, raw = _run_rows(con, selection, options, wrap)
    names = [*keys, "cause", "requests", "misses", "missed_tokens", "miss_cost_usd", "not_applicable"]
    parts: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in _count_groups(columns, raw, keys, options.prices):  # sorted by the keys
        parts.setdefault(row[: len(keys)], []).append(dict(zip(names, row, strict=True)))
    if not by:
        return [_summary(parts.get((), []))]
    return [{**dict(zip(by, key, strict=True)), **_summary(part)} for key, part in parts.items()]


def flat(report: dict[str, Any]) -> dict[str, Any]:
    """One group's object as one flat row: requests, misses, missed_tokens, miss_cost_usd, misses per
    cause."""
    causes = report["by_cause"]
    return {
        "requests": report["requests"],
        "misses": report["misses"],
        "missed_tokens": report["missed_tokens"],
        "miss_cost_usd": total_cost(causes),
        **{f"{c}_misses": causes[c]["misses"] for c in CAUSES},
        "not_applicable": report["not_applicable"],
    }
