"""ccusage's views: ``daily``, ``weekly``, ``monthly``, ``session`` and ``blocks --json`` (docs/ccusage.md).

Each view sums the lake's agent telemetry per period and model (``queries/usage_periods.sql``) with
every request filed at the time the agent *recorded* it (``ended_at``: the transcript line's
timestamp), which is where ccusage files it; the other analyses use the request's estimated send
time (:data:`traceflow.store.selection.REQUEST_TIME`). A period is a day, an ISO week (labelled by
its Monday) or a month of the zone passed in (:func:`traceflow.store.zones.period_sql`); a session is
the root session (a sub-agent's tokens count in the session that spawned it, as ccusage counts them
under their ``sessionId``).

:func:`document` gives ccusage 20's JSON document (the same top-level and per-row keys, see
docs/ccusage.md) with traceflow's own measures beside them under ``traceflow``; :func:`table` the
rows of the table, a Total row last. :func:`blocks_document` is ``ccusage blocks --json``: the chain
of 5-hour blocks of :mod:`traceflow.analysis.blocks` over the recorded times, with ccusage's gap rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from traceflow.prices import PriceModel, token_cost
from traceflow.store import zones
from traceflow.store.measures import RECORDED_TIME
from traceflow.store.selection import Selection

if TYPE_CHECKING:
    import duckdb

    from traceflow.analysis.blocks import Block, Hour
    from traceflow.output import Rows
    from traceflow.store.sql import Engine

#: The views and the top-level key of their JSON document (ccusage 20's names).
VIEWS = {"daily": "daily", "weekly": "weekly", "monthly": "monthly", "session": "session"}
#: ccusage's name of an agent, by the lake's ``agent`` value.
AGENT_NAMES = {"claude-code": "claude", "gemini-cli": "gemini", "qwen-code": "qwen"}
#: ``--order``'s choices.
ORDERS = ("asc", "desc")
#: ``blocks --recent``: the blocks that started this long before now (and the active one).
RECENT = dt.timedelta(days=3)


def _key_sql(view: str, zone: str) -> str:
    recorded = RECORDED_TIME
    if view == "daily":
        return zones.period_sql("day", recorded, zone)
    if view == "weekly":
        return zones.period_sql("week", recorded, zone)
    if view == "monthly":
        return zones.period_sql("month", recorded, zone)
    if view == "session":
        return "coalesce(parent_session_id, session_id, '')"
    raise ValueError(f"not a usage view: {view}")


@dataclass
class Tokens:
    """The four token kinds of ccusage, the 1-hour writes (for the price), requests and cost."""

    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0
    cache_write_1h: int = 0
    requests: int = 0
    cost: float = 0.0
    no_cache_cost: float = 0.0
    unpriced: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_creation + self.cache_read

    def add(self, other: Tokens) -> None:
        for name in (
            "input",
            "output",
            "cache_creation",
            "cache_read",
            "cache_write_1h",
            "requests",
            "cost",
            "no_cache_cost",
            "unpriced",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def counts(self) -> dict[str, Any]:
        """ccusage's token keys."""
        return {
            "inputTokens": self.input,
            "outputTokens": self.output,
            "cacheCreationTokens": self.cache_creation,
            "cacheReadTokens": self.cache_read,
        }

    def own(self) -> dict[str, Any]:
        """traceflow's measures beside ccusage's: requests, reuse ratio, the no-cache cost, savings."""
        inputs = self.input + self.cache_read + self.cache_creation
        return {
            "requests": self.requests,
            "reuseRatio": self.cache_read / inputs if inputs else None,
            "noCacheCostUSD": self.no_cache_cost,
            "savingsUSD": self.no_cache_cost - self.cost,
            "unpricedTokens": self.unpriced,
        }


@dataclass
class Period:
    """One row of a view: its key, per model sums, the first and last recorded time, the agents."""

    key: str
    models: dict[str, Tokens] = field(default_factory=dict)
    #: Each model's first recorded time (ccusage lists a session's models in that order).
    model_first: dict[str, dt.datetime] = field(default_factory=dict)
    #: The agents of its requests (the lake's names).
    agents: set[str] = field(default_factory=set)
    first_at: dt.datetime | None = None
    last_at: dt.datetime | None = None

    def sums(self) -> Tokens:
        out = Tokens()
        for t in self.models.values():
            out.add(t)
        return out


def periods(
    con: duckdb.DuckDBPyConnection | Engine,
    view: str,
    selection: Selection | None,
    zone: str,
    prices: PriceModel | None = None,
) -> list[Period]:
    """The rows of ``view`` (daily, weekly, monthly, session) over ``selection``, periods in ``zone``,
    in ascending key order."""
    from traceflow.store import sql
    from traceflow.store.time_base import agent_telemetry_sql

    pm = prices or PriceModel()
    block, params = sql.selection_block(selection, RECORDED_TIME)
    frame = sql.run(
        con,
        "usage_periods",
        params,
        blocks={"selection": block, "agents": agent_telemetry_sql(), "period": _key_sql(view, zone)},
    )
    out: dict[str, Period] = {}
    for r in frame.iter_rows(named=True):
        key = str(r["period"])
        row = out.setdefault(key, Period(key))
        model = r["model"] or ""
        tokens = Tokens(
            r["cold_input_tokens"],
            r["output_tokens"],
            r["cache_write_tokens"],
            r["cache_read_tokens"],
            r["cache_write_1h_tokens"],
            r["requests"],
        )
        cost = token_cost(
            pm,
            r["model"],
            (tokens.input, tokens.cache_read, tokens.cache_creation, tokens.output, tokens.cache_write_1h),
        )
        if cost is None:
            tokens.unpriced = tokens.total
        else:
            tokens.no_cache_cost, tokens.cost = cost
        row.models.setdefault(model, Tokens()).add(tokens)
        first, last = _utc(r["first_at"]), _utc(r["last_at"])
        row.model_first[model] = min(row.model_first.get(model, first), first)
        if r["agent"]:
            row.agents.add(str(r["agent"]))
        row.first_at = first if row.first_at is None else min(row.first_at, first)
        row.last_at = last if row.last_at is None else max(row.last_at, last)
    return [out[k] for k in sorted(out)]


def periods_of_requests(
    requests: Iterable[Sequence[Any]],
    view: str,
    zone: str,
    prices: PriceModel | None = None,
    agent: str = "claude-code",
) -> list[Period]:
    """:func:`periods` over the deduplicated requests of one agent held in memory (the usage ledger,
    :mod:`traceflow.importers.claude_code_usage`), each a sequence that starts ``(recorded time in µs
    since the epoch, model, session, cold input, output, cache write, cache read, 1-hour write)``:
    summed per period and model in the query's order and priced per sum as the query's rows are, so
    the rows are the same to the last bit."""
    pm = prices or PriceModel()
    if view not in VIEWS:
        raise ValueError(f"not a usage view: {view}")
    period = {"daily": "day", "weekly": "week", "monthly": "month"}.get(view)
    groups: dict[tuple[str, str | None], list[int]] = {}
    labels: dict[int, str] = {}  # a period's label by the quarter hour it starts in (µs): zones
    # change their offset on quarter hours
    for r in requests:
        us = r[0]
        if period is None:
            key = r[2] or ""
        else:
            quarter = us - us % 900_000_000
            key = labels.get(quarter) or ""
            if not key:
                key = labels[quarter] = zones.period_of(period, _from_micros(quarter), zone)
        g = groups.get((key, r[1]))
        if g is None:
            groups[(key, r[1])] = [r[3], r[4], r[5], r[6], r[7], 1, us, us]
        else:
            g[0] += r[3]
            g[1] += r[4]
            g[2] += r[5]
            g[3] += r[6]
            g[4] += r[7]
            g[5] += 1
            if us < g[6]:
                g[6] = us
            if us > g[7]:
                g[7] = us
    out: dict[str, Period] = {}
    # the query's ORDER BY period, agent, user, model: a NULL model last
    for (key, model), g in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1] or "")
    ):
        row = out.setdefault(key, Period(key))
        tokens = Tokens(g[0], g[1], g[2], g[3], g[4], g[5])
        cost = token_cost(
            pm,
            model,
            (tokens.input, tokens.cache_read, tokens.cache_creation, tokens.output, tokens.cache_write_1h),
        )
        if cost is None:
            tokens.unpriced = tokens.total
        else:
            tokens.no_cache_cost, tokens.cost = cost
        name = model or ""
        row.models.setdefault(name, Tokens()).add(tokens)
        first, last = _from_micros(g[6]), _from_micros(g[7])
        row.model_first[name] = min(row.model_first.get(name, first), first)
        row.agents.add(agent)
        row.first_at = first if row.first_at is None else min(row.first_at, first)
        row.last_at = last if row.last_at is None else max(row.last_at, last)
    return [out[k] for k in sorted(out)]


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _from_micros(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


def ordered(view: str, rows: Sequence[Period], order: str | None) -> list[Period]:
    """ccusage's order: periods by date (``asc`` by default), sessions by cost (``desc`` by default)."""
    if order is not None and order not in ORDERS:
        from traceflow.errors import UsageError

        raise UsageError(f"--order {order!r}: choose asc or desc")
    if view == "session":
        return sorted(rows, key=lambda p: (p.sums().cost, p.key), reverse=(order or "desc") == "desc")
    return sorted(rows, key=lambda p: p.key, reverse=order == "desc")


def _iso(value: dt.datetime | None) -> str | None:
    """ccusage's time format: UTC with milliseconds and ``Z``."""
    if value is None:
        return None
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _breakdowns(p: Period) -> list[dict[str, Any]]:
    out = [
        {"modelName": name, **t.counts(), "cost": t.cost}
        for name, t in p.models.items()
        if name  # requests without a model name count in the row, not in a model's breakdown
    ]
    return sorted(out, key=lambda m: (-m["cost"], m["modelName"]))


def _models_used(view: str, p: Period) -> list[str]:
    """The row's models: by name (ccusage's periods), in the order first used (its sessions)."""
    names = [m for m in p.models if m]
    if view == "session":
        return sorted(names, key=lambda m: (p.model_first[m], m))
    return sorted(names)


def lake_agent(name: str) -> str:
    """The lake's ``agent`` value of ``name``, given by the lake's name or ccusage's (``claude``:
    ``claude-code``), as ``--agent`` takes it."""
    return {v: k for k, v in AGENT_NAMES.items()}.get(name, name)


def agent_names(agents: set[str]) -> list[str]:
    """ccusage's names of the lake's agents (``claude-code``: ``claude``), sorted; ``claude`` when
    none is known."""
    return sorted({AGENT_NAMES.get(a, a) for a in agents}) or ["claude"]


def _row(view: str, p: Period) -> dict[str, Any]:
    t = p.sums()
    agents = agent_names(p.agents)
    row: dict[str, Any] = {
        "period": p.key,
        "agent": ", ".join(agents) if view == "session" else "all",
        **t.counts(),
        "totalTokens": t.total,
        "totalCost": t.cost,
        "modelsUsed": _models_used(view, p),
        "modelBreakdowns": _breakdowns(p),
        "metadata": {"lastActivity": _iso(p.last_at)} if view == "session" else {"agents": agents},
        "traceflow": {
            **t.own(),
            "firstActivity": _iso(p.first_at),
            "lastActivity": _iso(p.last_at),
        },
    }
    return row


def document(
    view: str, rows: Sequence[Period], zone: str, *, prices: PriceModel | None = None
) -> dict[str, Any]:
    """ccusage 20's ``--json`` document of ``view`` for ``rows`` (already ordered), with ``totals``
    and traceflow's measures under ``traceflow`` (per row and for the document)."""
    total = Tokens()
    for p in rows:
        total.add(p.sums())
    return {
        VIEWS[view]: [_row(view, p) for p in rows],
        "totals": {**total.counts(), "totalTokens": total.total, "totalCost": total.cost},
        "traceflow": {
            "zone": zone,
            "filedAt": "recorded",
            "prices": (prices or PriceModel()).describe(),
            **total.own(),
        },
    }


#: The table's columns (the first is the view's key).
TABLE_COLUMNS = (
    "models",
    "input_tokens",
    "output_tokens",
    "cache_write_tokens",
    "cache_read_tokens",
    "total_tokens",
    "cost_usd",
)


def table(view: str, rows: Sequence[Period], *, breakdown: bool = False) -> Rows:
    """The table of ``view``: one row per period (with ``breakdown``, one more per model under it),
    then a Total row."""
    from traceflow.output import Rows

    key = {"daily": "date", "weekly": "week", "monthly": "month", "session": "session"}[view]
    out: list[tuple[Any, ...]] = []

    def line(label: str, models: str, t: Tokens) -> tuple[Any, ...]:
        return (label, models, t.input, t.output, t.cache_creation, t.cache_read, t.total, t.cost)

    total = Tokens()
    for p in rows:
        t = p.sums()
        total.add(t)
        out.append(line(p.key, ", ".join(_short(m) for m in sorted(p.models) if m), t))
        if breakdown:
            for m in _breakdowns(p):
                out.append(line("", "└─ " + _short(m["modelName"]), p.models[m["modelName"]]))
    out.append(line("Total", "", total))
    return Rows((key, *TABLE_COLUMNS), out)


def _short(model: str) -> str:
    """``claude-opus-4-5-20251101`` as ccusage's tables show it: ``opus-4-5``."""
    name = model.removeprefix("claude-")
    head, _, tail = name.rpartition("-")
    return head if len(tail) == 8 and tail.isdigit() else name


def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


# ---------------------------------------------------------------------------------------------------
# blocks --json
# ---------------------------------------------------------------------------------------------------


def _block_json(b: Block, now: dt.datetime, hours: Sequence[Hour] = ()) -> dict[str, Any]:
    active = b.active(now)
    burn = b.burn() if active else None
    projection = None
    if burn is not None:
        remaining = max(0.0, (b.end - now).total_seconds() / 60)
        projection = {
            "totalTokens": round(b.total + burn[0] * remaining),
            "totalCost": round(b.cost + burn[1] / 60 * remaining, 2),
            "remainingMinutes": round(remaining),
        }
    minutes = (
        (b.last_at - b.first_at).total_seconds() / 60
        if b.first_at is not None and b.last_at is not None
        else 0
    )
    return {
        "id": _iso(b.start),
        "startTime": _iso(b.start),
        "endTime": _iso(b.end),
        "actualEndTime": _iso(b.last_at),
        "isActive": active,
        "isGap": False,
        "entries": b.requests,
        "tokenCounts": {
            "inputTokens": b.cold,
            "outputTokens": b.output,
            "cacheCreationInputTokens": b.write,
            "cacheReadInputTokens": b.read,
        },
        "totalTokens": b.total,
        "costUSD": b.cost,
        "models": _block_models(b, hours),
        "burnRate": None
        if burn is None
        else {
            "tokensPerMinute": burn[0],
            "tokensPerMinuteForIndicator": (b.cold + b.output) / minutes,
            "costPerHour": burn[1],
        },
        "projection": projection,
        "traceflow": {
            "requests": b.requests,
            "reuseRatio": b.read / (b.cold + b.read + b.write) if b.cold + b.read + b.write else None,
            "unpricedTokens": b.unpriced,
        },
    }


def _block_models(b: Block, hours: Sequence[Hour]) -> list[str]:
    """The block's models in the order first used (as ccusage lists them)."""
    first: dict[str, dt.datetime] = {}
    for h in hours:
        if h.model and b.start <= h.start < b.end:
            first[h.model] = min(first.get(h.model, h.first_at), h.first_at)
    return sorted(b.models, key=lambda m: (first.get(m, b.start), m))


def _gap_json(start: dt.datetime, end: dt.datetime) -> dict[str, Any]:
    return {
        "id": f"gap-{_iso(start)}",
        "startTime": _iso(start),
        "endTime": _iso(end),
        "actualEndTime": None,
        "isActive": False,
        "isGap": True,
        "entries": 0,
        "tokenCounts": {
            "inputTokens": 0,
            "outputTokens": 0,
            "cacheCreationInputTokens": 0,
            "cacheReadInputTokens": 0,
        },
        "totalTokens": 0,
        "costUSD": 0,
        "models": [],
        "burnRate": None,
        "projection": None,
    }


def blocks_document(
    con: duckdb.DuckDBPyConnection | Engine,
    selection: Selection | None,
    zone: str,
    prices: PriceModel | None = None,
    *,
    now: dt.datetime | None = None,
    active: bool = False,
    recent: bool = False,
    order: str | None = None,
) -> dict[str, Any]:
    """``ccusage blocks --json``: the 5-hour blocks over the recorded times of the whole history
    (the chain does not depend on the window), those that start in ``selection``'s window shown; a
    gap row where more than 5 hours passed between two shown blocks' requests (from the last one's
    time + 5 h to the next one, as ccusage writes it). ``active``: only the active block;
    ``recent``: the blocks of the last 3 days and the active one."""
    from traceflow.analysis.blocks import BLOCK, chains, hourly

    at = now or dt.datetime.now(dt.UTC)
    pm = prices or PriceModel()
    window = selection or Selection()
    hours = hourly(con, _without_time(window))
    out: list[dict[str, Any]] = []
    for chain in chains(hours, pm):  # each user's own chain (one for local logs)
        user = chain[0].user if chain else None
        own = [h for h in hours if h.user == user]
        previous: Block | None = None  # the last block shown
        for b in (b for b in chain if not b.gap):
            shown = (window.since is None or b.start >= window.since) and (
                window.until is None or b.start < window.until
            )
            if recent:
                shown = shown and (b.start >= at - RECENT or b.active(at))
            if active:
                shown = shown and b.active(at)
            if (
                shown
                and not active
                and previous is not None
                and previous.last_at is not None
                and b.first_at is not None
                and b.first_at - previous.last_at > BLOCK
            ):
                out.append(_gap_json(previous.last_at + BLOCK, b.first_at))
            if shown:
                doc = _block_json(b, at, own)
                if user is not None:
                    doc["userId"] = user
                out.append(doc)
                previous = b
    if order == "desc":
        out.reverse()
    return {"blocks": out, "traceflow": {"zone": zone, "filedAt": "recorded", "prices": pm.describe()}}


def _without_time(selection: Selection) -> Selection:
    from dataclasses import replace

    return replace(selection, since=None, until=None)
