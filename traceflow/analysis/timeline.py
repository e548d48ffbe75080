"""One session's requests side by side (``traceflow timeline SESSION``): what users reconstruct by
hand from their transcripts when they hunt a cache bug ("08:08:36 cr=0 cw5m=209,013 cw1h=0 ...").

Every request of the session (its sub-agents' too, marked), in time order, with the figures of
:mod:`traceflow.analysis.misses`: the gap, model, client version, the token kinds (cold, read, write
5m, write 1h, output), the context, the TTL in force, the restart flag, the cause of a miss (None for
a hit), the missed tokens and their cost. Writes of a source without a 5m/1h split count as 5-minute
writes (as the TTL in force does). The session is judged against the whole lake: its requests are
selected after the stream window, so they are classed as ``misses`` classes them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from traceflow.analysis.misses import DEFAULT_MISS_OPTIONS, MissOptions, miss_rows
from traceflow.errors import UsageError
from traceflow.output import Rows
from traceflow.store.selection import Selection
from traceflow.units import format_duration

if TYPE_CHECKING:
    import duckdb

#: The keys of one request in ``traceflow timeline --format json``, in order.
KEYS: tuple[str, ...] = (
    "started_at",
    "session_id",
    "parent_session_id",
    "subagent",
    "position",
    "gap_s",
    "model",
    "agent_version",
    "cold_input_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "context_tokens",
    "ttl_in_force_s",
    "restart",
    "cause",
    "missed_tokens",
    "miss_cost_usd",
)

#: The columns of :func:`table` kept to fit a narrow terminal, the first named longest: when, why and
#: how much (issue 32: cause and missed tokens stay at 80 columns).
ESSENTIAL: tuple[str, ...] = ("time", "cause", "missed", "miss_cost_usd", "stream", "gap", "context")

#: Characters of the read / write / cold bar of the table, and its width.
BAR_READ, BAR_WRITE, BAR_COLD = "█", "▒", "·"
BAR_WIDTH = 20


def timeline(
    con: duckdb.DuckDBPyConnection, session: str, options: MissOptions = DEFAULT_MISS_OPTIONS
) -> list[dict[str, Any]]:
    """The requests of ``session`` (a root session id: its sub-agents come with it), one dict per
    request with :data:`KEYS`, in time order. UsageError when the lake has none."""
    records = timelines(con, [session], options).get(session)
    if not records:
        raise UsageError(
            f"no requests of session {session!r} in the lake; `traceflow sessions --list` lists the sessions"
        )
    return records


def anchor(session: str) -> str:
    """The HTML id of a session's timeline in the report (the misses chart links to it).

    >>> anchor("346a579e-0006/x y")
    'timeline-346a579e-0006_x_y'
    """
    return "timeline-" + re.sub(r"[^A-Za-z0-9_-]", "_", session)


def timelines(
    con: duckdb.DuckDBPyConnection, sessions: Sequence[str], options: MissOptions = DEFAULT_MISS_OPTIONS
) -> dict[str, list[dict[str, Any]]]:
    """:func:`timeline` of each of ``sessions`` at once (one pass over the lake); a session without
    requests is left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    if not sessions:
        return out
    frame = miss_rows(con, Selection(sessions=tuple(sessions)), options)
    frame = frame.sort(["started_at", "parent_session_id", "position"], nulls_last=False)
    for r in frame.iter_rows(named=True):
        w5m, w1h = r["cache_write_5m_tokens"], r["cache_write_1h_tokens"]
        if w5m is None and w1h is None:  # no TTL split: a 5-minute write, as the TTL in force says
            w5m, w1h = r["cache_write_tokens"], 0
        own = {
            "subagent": r["parent_session_id"] is not None,
            "cache_write_5m_tokens": w5m or 0,
            "cache_write_1h_tokens": w1h or 0,
        }
        out.setdefault(r["root_session_id"], []).append({k: own[k] if k in own else r[k] for k in KEYS})
    return out


def bar(read: int, write: int, cold: int, width: int = BAR_WIDTH) -> str:
    """The prompt as ``width`` characters: read (█), then written (▒), then cold (·), each rounded
    to its share, at least one character for a kind that is there.

    >>> bar(750, 250, 0, 8)
    '██████▒▒'
    >>> bar(0, 10, 990, 10)
    '▒·········'
    """
    total = read + write + cold
    if total <= 0:
        return ""
    counts = [round(width * n / total) if n else 0 for n in (read, write, cold)]
    counts = [max(c, 1) if n else 0 for c, n in zip(counts, (read, write, cold), strict=True)]
    while sum(counts) > width:  # rounding up: take from the largest
        counts[counts.index(max(counts))] -= 1
    while sum(counts) < width:
        counts[counts.index(max(counts))] += 1
    return BAR_READ * counts[0] + BAR_WRITE * counts[1] + BAR_COLD * counts[2]


def gap_label(seconds: float | None) -> str:
    """A gap as the table shows it: seconds to one decimal under a minute, else minutes and seconds,
    or hours and minutes.

    >>> [gap_label(s) for s in (None, 0.057, 20, 400, 1200, 4000)]
    ['', '0.1s', '20.0s', '6m40s', '20m00s', '1h06m']
    """
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def table(records: list[dict[str, Any]], *, bars: bool = True) -> Rows:
    """The terminal table of :func:`timeline`'s records: time (UTC), the stream (``main`` or
    ``sub <id>``), gap, model, version, tokens, context, TTL, restart, cause, missed, cost, and
    with ``bars`` the read/write/cold bar."""
    cols = [
        "time",
        "stream",
        "gap",
        "model",
        "version",
        "cold",
        "read",
        "write_5m",
        "write_1h",
        "output",
        "context",
        "ttl",
        "restart",
        "cause",
        "missed",
        "miss_cost_usd",
    ]
    if bars:
        cols.append("read█ write▒ cold·")
    rows = []
    for r in records:
        t = r["started_at"]
        row: list[Any] = [
            t.strftime("%Y-%m-%d %H:%M:%S") if t is not None else None,
            f"sub {r['session_id']}" if r["subagent"] else "main",
            gap_label(r["gap_s"]),
            r["model"],
            r["agent_version"],
            r["cold_input_tokens"],
            r["cache_read_tokens"],
            r["cache_write_5m_tokens"],
            r["cache_write_1h_tokens"],
            r["output_tokens"],
            r["context_tokens"],
            format_duration(r["ttl_in_force_s"]),
            r["restart"],
            r["cause"] or "hit",
            r["missed_tokens"],
            r["miss_cost_usd"],
        ]
        if bars:
            write = r["cache_write_5m_tokens"] + r["cache_write_1h_tokens"]
            row.append(bar(r["cache_read_tokens"], write, r["cold_input_tokens"]))
        rows.append(row)
    return Rows(cols, rows)


def headline(session: str, records: list[dict[str, Any]]) -> str:
    """One line: the session, its requests (sub-agents'), misses, missed tokens and their cost."""
    subs = sum(1 for r in records if r["subagent"])
    misses = [r for r in records if r["cause"] is not None]
    missed = sum(r["missed_tokens"] for r in misses)
    cost = sum(r["miss_cost_usd"] for r in misses)
    return (
        f"session {session}: {len(records)} requests ({subs} of sub-agents), {len(misses)} misses, "
        f"{missed:,} missed tokens, ${cost:,.4f}"
    )
