"""The token mix: the four kinds' totals, their shares, and the reuse ratio
(docs/everyday.md#traceflow-mix)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import duckdb

from traceflow.errors import UsageError
from traceflow.output import Rows
from traceflow.prices import PriceModel, token_cost
from traceflow.store import groups, zones
from traceflow.store.lake import ROLLUP_VIEW
from traceflow.store.measures import TOKEN_COLUMNS, period_label_sql
from traceflow.store.selection import Selection
from traceflow.store.sql import Engine, materialised
from traceflow.store.sql import load as load_query

if TYPE_CHECKING:
    import polars as pl

#: Output columns, in order (JSON keys are a contract).
COLUMNS = (
    "requests",
    *TOKEN_COLUMNS,
    "total_tokens",
    "share_cold_input",
    "share_cache_read",
    "share_cache_write",
    "share_output",
    "reuse_ratio",
)


#: The savings columns after :data:`COLUMNS` (:func:`savings_by_group`): the bill (what the priced
#: tokens cost, with the cache), the counterfactual (what they would have cost without it; both under
#: the price model), the difference, the difference's share of the cost without cache (all four null
#: when nothing is priced), and the tokens of requests without a model name, which are not priced
#: (:meth:`~traceflow.prices.PriceModel.priced`).
SAVINGS = ("cost_usd", "cost_without_cache_usd", "savings_usd", "savings_share", "unpriced_tokens")
#: The columns a mix table keeps to fit a narrow terminal, besides its group columns.
ESSENTIAL = ("total_tokens", "cost_usd", "requests", "reuse_ratio", "savings_usd", "cost_without_cache_usd")
#: The savings of a group with no priced request.
UNPRICED: tuple[float | None, float | None, float | None, float | None, int] = (None, None, None, None, 0)


#: ``--by`` names over the ``request_rollup`` view (``queries/rollup.sql``), which ``mix`` sums
#: instead of the requests when compaction stored it and the selection allows (see :func:`_rollup_where`).
ROLLUP_GROUPS: dict[str, str] = {
    "agent": "agent",
    "model": "model",
    "session": "session_id",
    "day": "day",
    "week": period_label_sql("week", "CAST(day AS DATE)"),  # UTC weeks of UTC days
    "month": period_label_sql("month", "CAST(day AS DATE)"),
    "user": "user_id",
    "source": "source",
}


def mix_sql(by: Sequence[str], where: str, *, zone: str, rollup: bool = False, write_1h: bool = False) -> str:
    """The mix over ``requests`` (or, with ``rollup``, over the stored ``request_rollup`` sums).

    The groupings are :mod:`traceflow.store.groups`', the periods in ``zone``; the rollup (UTC days)
    answers only its own columns. The total, the shares and the reuse ratio are the ``mix`` block of
    ``queries/token_mix.sql``.
    ``write_1h`` keeps the ``cache_write_1h_tokens`` sum after ``output_tokens`` (for the savings)."""
    if rollup:
        unknown = [b for b in by if b not in ROLLUP_GROUPS]
        if unknown:
            raise UsageError(f"the rollup cannot group by {', '.join(unknown)}")
        keys = groups.Keys(
            "".join(f"{ROLLUP_GROUPS[b]} AS {b}, " for b in by),
            "",
            f"GROUP BY {', '.join(by)} ORDER BY {', '.join(by)}" if by else "",
        )
    else:
        keys = groups.request_keys(by, zone=zone)
    count = "total(requests)" if rollup else "count(*)::BIGINT"
    # --by tool: the tool results that preceded each group's requests (store.groups.tool_lookup_sql)
    calls = groups.TOOL in by and not rollup
    # total(): a count summed, 0 where none, as a BIGINT (the macro of traceflow.store.measures)
    return f"""
WITH sums AS (
    SELECT {keys.select}
           {count} AS requests,
           total(cold_input_tokens) AS cold_input_tokens,
           total(cache_read_tokens) AS cache_read_tokens,
           total(cache_write_tokens) AS cache_write_tokens,
           total(output_tokens) AS output_tokens,
           total(cache_write_1h_tokens) AS cache_write_1h_tokens
           {f", total({groups.TOOL_ALIAS}.calls) AS tool_calls" if calls else ""}
    FROM {"request_rollup" if rollup else f"{keys.relation} AS r"} {keys.join}
    WHERE {where}
    {keys.group}
)
SELECT {"".join(f"{groups.ident(b)}, " for b in by)}requests, cold_input_tokens, cache_read_tokens,
       cache_write_tokens, output_tokens,{" cache_write_1h_tokens," if write_1h else ""}
       {load_query("token_mix").block("mix")}
       {", tool_calls" if calls else ""}
FROM sums
"""


def per_model_sql(by: Sequence[str], where: str, *, zone: str, rollup: bool = False) -> str:
    """:func:`mix_sql` with ``write_1h``, grouped by ``by`` and also by ``by`` + model in the same scan
    (``GROUPING SETS``): each row starts with the ``by`` values and the model (null on a ``by`` total),
    then ``per_model`` (true on a row of one model), then :func:`mix_sql`'s columns. The totals are
    the mix; the rows per model are what the savings price (:func:`savings_by_group`)."""
    names = [*by, "model"]
    if rollup:
        keys = groups.Keys("".join(f"{ROLLUP_GROUPS[b]} AS {b}, " for b in names), "", "")
    else:
        keys = groups.request_keys(names, zone=zone)
    calls = groups.TOOL in by and not rollup
    kinds = ", ".join(f"{c}" for c in (*TOKEN_COLUMNS, "cache_write_1h_tokens"))
    idents = [groups.ident(b) for b in names]
    sets = f"({', '.join(idents)}), ({', '.join(idents[:-1])})"
    sums = ",\n           ".join(f"total({c}) AS {c}" for c in (*TOKEN_COLUMNS, "cache_write_1h_tokens"))
    return f"""
WITH keyed AS (
    SELECT {keys.select}{"requests" if rollup else "1"} AS n_, {kinds}
           {f", {groups.TOOL_ALIAS}.calls AS calls_" if calls else ""}
    FROM {"request_rollup" if rollup else f"{keys.relation} AS r"} {keys.join}
    WHERE {where}
),
sums AS (
    SELECT {", ".join(idents)}, grouping({idents[-1]}) = 0 AS per_model,
           total(n_) AS requests,
           {sums}
           {", total(calls_) AS tool_calls" if calls else ""}
    FROM keyed
    GROUP BY GROUPING SETS ({sets})
)
SELECT {"".join(f"{i}, " for i in idents)}per_model, requests, cold_input_tokens, cache_read_tokens,
       cache_write_tokens, output_tokens, cache_write_1h_tokens,
       {load_query("token_mix").block("mix")}
       {", tool_calls" if calls else ""}
FROM sums
ORDER BY {", ".join([*(str(i + 1) for i in range(len(by))), "per_model"])}
"""


def _source(
    con: duckdb.DuckDBPyConnection | Engine, sel: Selection, by: Sequence[str]
) -> tuple[bool, str, list[Any]]:
    """Whether ``mix`` sums the stored rollup for this selection and grouping, and the predicate."""
    # the rollup's days are UTC days: a period in another zone is grouped from the requests
    utc = sel.zone == zones.UTC or not any(b in zones.PERIODS for b in by)
    rollup = utc and materialised(con, ROLLUP_VIEW) and all(b in ROLLUP_GROUPS for b in by)
    answer = _rollup_where(sel) if rollup else None
    if answer is not None:
        return True, *answer
    where, params = sel.where()
    return False, where, params


def _sums(
    con: duckdb.DuckDBPyConnection | Engine, sel: Selection, by: Sequence[str], *, write_1h: bool = False
) -> list[tuple[Any, ...]]:
    rollup, where, params = _source(con, sel, by)
    text = mix_sql(by, where, zone=sel.zone, rollup=rollup, write_1h=write_1h)
    if isinstance(con, Engine):
        return list(con.frame(text, params).rows())
    return con.execute(text, params).fetchall()


def token_mix_rows(
    con: duckdb.DuckDBPyConnection | Engine,
    selection: Selection | None = None,
    by: Sequence[str] = (),
    prices: PriceModel | None = None,
) -> Rows:
    """Like :func:`token_mix`, as plain rows (no polars needed)."""
    sel = selection or Selection()
    n = len(by)
    m = n + len(COLUMNS)
    if isinstance(con, Engine):
        rows = _sums(con, sel, by)
        saved = savings_by_group(con, sel, by, prices)
    elif "model" in by:  # one scan: each group is of one model, priced as it is
        priced = _sums(con, sel, by, write_1h=True)
        saved = _savings(priced, n, by.index("model"), n, prices)
        rows = [(*r[: n + 5], *r[n + 6 :]) for r in priced]  # less the 1-hour writes, only priced
    else:  # one scan: the totals and the sums per model the savings price (per_model_sql)
        rollup, where, params = _source(con, sel, [*by, "model"])
        both = con.execute(per_model_sql(by, where, zone=sel.zone, rollup=rollup), params).fetchall()
        keys = [*by, "model"]
        saved = _savings(
            [(*r[: n + 1], *r[n + 2 :]) for r in both if r[n + 1]],
            len(by),
            keys.index("model"),
            len(keys),
            prices,
        )
        # a total row: the by values, then mix_sql's columns (the 1-hour writes only priced)
        rows = [(*r[:n], *r[n + 2 : n + 7], *r[n + 8 :]) for r in both if not r[n + 1]]
    out = [(*r[:m], *saved.get(tuple(r[:n]), UNPRICED), *r[m:]) for r in rows]
    # --by tool adds tool_calls: the tool results that preceded the group's requests
    return Rows([*by, *COLUMNS, *SAVINGS, *(["tool_calls"] if groups.TOOL in by else [])], out)


def savings_by_group(
    con: duckdb.DuckDBPyConnection | Engine,
    selection: Selection | None = None,
    by: Sequence[str] = (),
    prices: PriceModel | None = None,
) -> dict[tuple[Any, ...], tuple[float | None, float | None, float | None, float | None, int]]:
    """Per group (the tuple of its ``by`` values): :data:`SAVINGS`, priced per model; the tokens of
    requests without a model name are counted in ``unpriced_tokens`` instead."""
    sel = selection or Selection()
    keys = [*by, "model"] if "model" not in by else list(by)
    return _savings(_sums(con, sel, keys, write_1h=True), len(by), keys.index("model"), len(keys), prices)


def _savings(
    rows: Sequence[Sequence[Any]], by: int, at: int, n: int, prices: PriceModel | None
) -> dict[tuple[Any, ...], tuple[float | None, float | None, float | None, float | None, int]]:
    """:func:`savings_by_group` of ``rows``: per group and model (``n`` key columns, the first ``by`` the
    group's, the model at ``at``), requests, cold, read, write, output and 1-hour write tokens."""
    pm = prices or PriceModel()
    totals: dict[tuple[Any, ...], list[float]] = {}
    unpriced: dict[tuple[Any, ...], int] = {}
    for r in rows:
        # r: keys, requests, cold, read, write, output, write_1h, then the shares
        key = tuple(r[:by])
        unpriced.setdefault(key, 0)
        cost = token_cost(pm, r[at], r[n + 1 : n + 6])
        if cost is None:
            unpriced[key] += int(sum(r[n + 1 : n + 5]))
            continue
        acc = totals.setdefault(key, [0.0, 0.0])
        acc[0] += cost[0]
        acc[1] += cost[1]
    out: dict[tuple[Any, ...], tuple[float | None, float | None, float | None, float | None, int]] = {}
    for key, tokens in unpriced.items():
        if key not in totals:
            out[key] = (None, None, None, None, tokens)
            continue
        no_cache, billed = totals[key]
        share = (no_cache - billed) / no_cache if no_cache else None
        out[key] = (billed, no_cache, no_cache - billed, share, tokens)
    return out


def _midnight(value: dt.datetime) -> str | None:
    """``YYYY-MM-DD`` when ``value`` is a UTC midnight (a whole-day bound), else None."""
    utc = value.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%d") if utc.time() == dt.time(0) else None


def _rollup_where(sel: Selection) -> tuple[str, list[Any]] | None:
    """The selection as a predicate over the rollup's columns, or None when the rollup cannot
    answer it exactly (a bound inside a day, or a filter on something the rollup does not keep)."""
    if sel.extra or sel.conditions:  # --where: a request's own values, which the rollup sums away
        return None
    clauses: list[str] = []
    params: list[Any] = []
    for bound, op in ((sel.since, ">="), (sel.until, "<")):
        if bound is not None:
            day = _midnight(bound)
            if day is None:
                return None
            clauses.append(f"day {op} ?")  # ISO days compare as strings; a NULL day never matches
            params.append(day)
    more, more_params = sel.filter_clauses(session="session_id")
    return (" AND ".join(clauses + more) or "true"), params + more_params


def token_mix(
    con: duckdb.DuckDBPyConnection | Engine,
    selection: Selection | None = None,
    by: Sequence[str] = (),
    prices: PriceModel | None = None,
) -> pl.DataFrame:
    """One row (no ``by``) or one row per group: the ``by`` columns, :data:`COLUMNS`, :data:`SAVINGS`."""
    import polars as pl

    result = token_mix_rows(con, selection, by, prices)
    return pl.DataFrame(result.rows, schema=result.columns, orient="row")


def savings_line(row: dict[str, Any], prices: PriceModel | None = None) -> str:
    """The savings headline of one mix row, a sentence (naming the price table when ``prices`` is given,
    and the tokens left unpriced, if any)."""
    no_cache, billed = row["cost_without_cache_usd"], row["cost_usd"]
    share = row["savings_share"]
    unpriced = row.get("unpriced_tokens") or 0
    table = prices.describe() if prices else "list prices"
    text = (
        f"Prompt caching saved ${row['savings_usd']:,.2f} ({share:.1%}): these tokens cost "
        f"${billed:,.2f} with the cache and would have cost ${no_cache:,.2f} without it ({table})."
        if share is not None
        else "No priced tokens in the selection."
    )
    if unpriced:
        total = row.get("total_tokens") or unpriced
        text += (
            f" {unpriced:,} tokens ({unpriced / total:.1%}) of requests without a model name are not "
            "priced (no price applies to them) and are left out of the costs."
        )
    return text
