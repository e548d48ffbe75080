"""Five-hour billing blocks, as ccusage's ``blocks`` reports them (``traceflow blocks``).

A request counts at the time the agent recorded it (``recorded_time``: its end, else its start), as
ccusage counts it, in the table, ``--json`` and the status line alike.

The rule: requests in time order; a block starts at the first request's UTC hour, floored, and ends
5 hours later; a request at or after the end starts a new block (at its own hour, floored). Since
every block starts and ends on a whole UTC hour, all the requests of one UTC hour fall in the same
block, so the lake is read as hourly sums (:func:`hourly`), not request by request.

Per block: start, end, requests, the four token kinds and their total, the cost under the price
model (as billed: cache reads, 5-minute and 1-hour writes at their prices), and the burn rate:
tokens per minute and dollars per hour between the block's first and last request (ccusage's
definition; all four token kinds count; none when the block has one instant of traffic).

The chain is a property of the whole history, not of what a view shows: :func:`billing_blocks`
builds it from every request of the lake that the selection's filters keep (``--agent``, ``--user``,
...), ignoring its time window, and only then keeps the blocks that overlap the window
(``--since``/``--until``; ``--live`` reads no shorter window). Starting the chain at a window's first
request would move every block after it. Public serving traces (:data:`~traceflow.store.time_base.
PUBLIC_SOURCES`: another service's traffic, mostly on a 1970 time base) make no billing blocks. A
block belongs to one person: each ``user_id`` has its own chain (local logs carry none, so they make
one chain); rows come user by user, each user's in time order.

A block is **active** while the clock is inside it (start <= now < end): only the latest block of a
chain can be. For the active block the projection extends its burn rate to the block's end: projected tokens
and cost = now's totals + rate x minutes left. A **gap** row stands for the time between a block's
end and the next block's start when there is any (no traffic started a block then); ccusage shows
gaps only after 5 idle hours, here every hole between blocks is one (at least one hour long).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from traceflow.output import Rows
from traceflow.prices import PriceModel, token_cost
from traceflow.store import sql
from traceflow.store.measures import RECORDED_TIME, TOKEN_COLUMNS
from traceflow.store.selection import Selection
from traceflow.store.time_base import agent_telemetry_sql
from traceflow.units import format_elapsed

if TYPE_CHECKING:
    import duckdb

    from traceflow.store.sql import Engine

#: The length of a block (Anthropic's 5-hour usage window).
BLOCK = dt.timedelta(hours=5)

#: Output columns, in order (JSON keys are a contract).
COLUMNS = (
    "start",
    "end",
    "status",
    "requests",
    *TOKEN_COLUMNS,
    "total_tokens",
    "cost_usd",
    "unpriced_tokens",
    "first_at",
    "last_at",
    "tokens_per_min",
    "usd_per_hour",
    "remaining_min",
    "projected_tokens",
    "projected_cost_usd",
    "models",
    "user_id",
)


@dataclass(frozen=True)
class Hour:
    """One row of :func:`hourly`: one UTC hour, user, agent and model."""

    start: dt.datetime
    user: str | None
    model: str | None
    requests: int
    cold: int
    read: int
    write: int
    write_1h: int
    output: int
    first_at: dt.datetime
    last_at: dt.datetime


@dataclass
class Block:
    start: dt.datetime
    end: dt.datetime
    gap: bool = False
    user: str | None = None
    requests: int = 0
    cold: int = 0
    read: int = 0
    write: int = 0
    output: int = 0
    cost: float = 0.0
    #: Tokens of requests without a priced model (no model name): left out of ``cost``.
    unpriced: int = 0
    first_at: dt.datetime | None = None
    last_at: dt.datetime | None = None
    models: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.cold + self.read + self.write + self.output

    def add(self, h: Hour, prices: PriceModel) -> None:
        self.requests += h.requests
        self.cold += h.cold
        self.read += h.read
        self.write += h.write
        self.output += h.output
        cost = token_cost(prices, h.model, (h.cold, h.read, h.write, h.output, h.write_1h))
        if cost is None:
            self.unpriced += h.cold + h.read + h.write + h.output
        else:
            self.cost += cost[1]
        self.first_at = h.first_at if self.first_at is None else min(self.first_at, h.first_at)
        self.last_at = h.last_at if self.last_at is None else max(self.last_at, h.last_at)
        if h.model is not None and h.model not in self.models:
            self.models.append(h.model)

    def active(self, now: dt.datetime) -> bool:
        return not self.gap and self.start <= now < self.end

    def burn(self) -> tuple[float, float] | None:
        """(tokens per minute, dollars per hour) between the first and the last request, or None."""
        if self.gap or self.first_at is None or self.last_at is None:
            return None
        minutes = (self.last_at - self.first_at).total_seconds() / 60
        if minutes <= 0:
            return None
        return self.total / minutes, self.cost / minutes * 60

    def record(self, now: dt.datetime) -> dict[str, Any]:
        burn = self.burn()
        active = self.active(now)
        remaining = max(0.0, (self.end - now).total_seconds() / 60) if active else None
        projected = (
            (round(self.total + burn[0] * remaining), self.cost + burn[1] / 60 * remaining)
            if burn is not None and remaining is not None
            else (None, None)
        )
        return {
            "start": self.start,
            "end": self.end,
            "status": "gap" if self.gap else "active" if active else "done",
            "requests": self.requests,
            "cold_input_tokens": self.cold,
            "cache_read_tokens": self.read,
            "cache_write_tokens": self.write,
            "output_tokens": self.output,
            "total_tokens": self.total,
            "cost_usd": self.cost,
            "unpriced_tokens": self.unpriced,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "tokens_per_min": burn[0] if burn else None,
            "usd_per_hour": burn[1] if burn else None,
            "remaining_min": remaining,
            "projected_tokens": projected[0],
            "projected_cost_usd": projected[1],
            "models": ", ".join(sorted(self.models)),
            "user_id": self.user,
        }


def group_blocks(hours: Sequence[Hour], prices: PriceModel, length: dt.timedelta = BLOCK) -> list[Block]:
    """The blocks (and the gaps between them) of one person's ``hours``, by the rule in the module
    docstring."""
    blocks: list[Block] = []
    current: Block | None = None
    for h in sorted(hours, key=lambda h: (h.start, h.model or "")):
        if current is None or h.start >= current.end:
            if current is not None:
                blocks.append(current)
                if h.start > current.end:
                    blocks.append(Block(current.end, h.start, gap=True, user=h.user))
            current = Block(h.start, h.start + length, user=h.user)
        current.add(h, prices)
    if current is not None:
        blocks.append(current)
    return blocks


def chains(hours: Sequence[Hour], prices: PriceModel, length: dt.timedelta = BLOCK) -> list[list[Block]]:
    """Each user's own chain of blocks (:func:`group_blocks`), users in order (no user id first)."""
    users = sorted({h.user for h in hours}, key=lambda u: (u is not None, u or ""))
    return [group_blocks([h for h in hours if h.user == u], prices, length) for u in users]


def within(
    blocks: Sequence[Block], since: dt.datetime | None = None, until: dt.datetime | None = None
) -> list[Block]:
    """The blocks of one chain that overlap ``[since, until)``, with the gaps between them (none
    before the first or after the last): the chain restricted to a window, each block whole."""
    kept = [
        i
        for i, b in enumerate(blocks)
        if not b.gap and (since is None or b.end > since) and (until is None or b.start < until)
    ]
    return list(blocks[kept[0] : kept[-1] + 1]) if kept else []


#: The period of :func:`hourly`: the UTC hour a request was recorded in.
HOUR_SQL = f"date_trunc('hour', {RECORDED_TIME} AT TIME ZONE 'UTC')"


def hourly(con: duckdb.DuckDBPyConnection | Engine, selection: Selection | None = None) -> list[Hour]:
    """The lake's hourly sums over ``selection``: ``queries/usage_periods.sql`` (the sums of the
    ccusage views) with the UTC hour (:data:`HOUR_SQL`) for its period, agent telemetry only (the
    hours of a public serving trace, :func:`~traceflow.store.time_base.time_base`, are nobody's bill)."""
    block, params = sql.selection_block(selection, RECORDED_TIME)
    frame = sql.run(
        con,
        "usage_periods",
        params,
        blocks={"selection": block, "agents": agent_telemetry_sql(), "period": HOUR_SQL},
    )
    return [
        Hour(
            _utc(r["period"]),
            r["user_id"],
            r["model"],
            r["requests"],
            r["cold_input_tokens"],
            r["cache_read_tokens"],
            r["cache_write_tokens"],
            r["cache_write_1h_tokens"],
            r["output_tokens"],
            _utc(r["first_at"]),
            _utc(r["last_at"]),
        )
        for r in frame.iter_rows(named=True)
    ]


def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def billing_blocks(
    con: duckdb.DuckDBPyConnection | Engine,
    selection: Selection | None = None,
    prices: PriceModel | None = None,
    *,
    now: dt.datetime | None = None,
    active_only: bool = False,
    gaps: bool = True,
) -> Rows:
    """One row per block (and gap, unless ``gaps`` is false) that overlaps the selection's window,
    from the chains of the whole history (see the module docstring): :data:`COLUMNS`."""
    at = now or dt.datetime.now(dt.UTC)
    sel = selection or Selection()
    history = replace(sel, since=None, until=None)
    records = [
        b.record(at)
        for chain in chains(hourly(con, history), prices or PriceModel())
        for b in within(chain, sel.since, sel.until)
        if gaps or not b.gap
    ]
    if active_only:
        records = [r for r in records if r["status"] == "active"]
    return Rows(COLUMNS, [tuple(r[c] for c in COLUMNS) for r in records])


#: The columns a blocks table keeps to fit a narrow terminal (:attr:`traceflow.output.Rows.essential`):
#: whose, when it starts and its status, the cost, the time left, the projection and the burn rate
#: (the first named are kept longest).
ESSENTIAL = (
    "user_id",
    "start",
    "status",
    "cost_usd",
    "remaining_min",
    "projected_cost_usd",
    "usd_per_hour",
    "projected_tokens",
    "tokens_per_min",
)


def table(rows: Rows) -> Rows:
    """``rows`` (:func:`billing_blocks`) as a table shows them: ``user_id`` first when there are several
    users, left out when there is one; with :data:`ESSENTIAL`."""
    at = rows.columns.index("user_id")
    users = {r[at] for r in rows.rows}
    order = [at] if len(users) > 1 else []
    order += [i for i in range(len(rows.columns)) if i != at]
    return Rows([rows.columns[i] for i in order], [tuple(r[i] for i in order) for r in rows.rows], ESSENTIAL)


def panel(record: dict[str, Any] | None, now: dt.datetime) -> list[str]:
    """The lines of ``blocks --active`` and ``blocks --live`` for the active block's record (None: no
    active block), like ccusage's panel: elapsed, remaining, tokens, cost, burn rate, projection."""
    if record is None:
        return [f"no active block at {now:%Y-%m-%d %H:%M %Z} (no request in the last block's 5 hours)"]
    start, end = record["start"], record["end"]
    length = (end - start).total_seconds()
    left = record["remaining_min"] * 60
    who = f"  user {record['user_id']}" if record.get("user_id") else ""
    lines = [
        f"active block {start:%Y-%m-%d %H:%M} - {end:%H:%M %Z}{who}",
        f"  elapsed    {format_elapsed(length - left):>10}  {(length - left) / length:>6.0%}",
        f"  remaining  {format_elapsed(left):>10}  {left / length:>6.0%}  (ends {end:%H:%M})",
        f"  requests   {record['requests']:>10,}",
        f"  tokens     {record['total_tokens']:>10,}",
        f"  cost       {'$' + format(record['cost_usd'], ',.2f'):>10}",
    ]
    if record["tokens_per_min"] is None:
        lines.append("  burn rate  (one instant of traffic so far: no rate, no projection)")
    else:
        lines += [
            f"  burn rate  {record['tokens_per_min']:>10,.0f} tokens/min  ${record['usd_per_hour']:,.2f}/h",
            f"  projected  {record['projected_tokens']:>10,} tokens      ${record['projected_cost_usd']:,.2f}"
            " at the block's end",
        ]
    return lines
