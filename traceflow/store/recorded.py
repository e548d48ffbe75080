"""What each coding agent records: the one table of the kinds of data an agent's importer can fill,
and which of them the per-request cache analyses need (issue 36).

An agent's local files do not all record the same things. Where an agent does not record a kind the
lake says unknown (NULL), not zero, and an analysis that needs the kind leaves the agent out and says
so (``left_out`` in JSON, a ``note:`` line under the table) instead of reading its rows as zeros:

* ``per_request``: one row per model request. Copilot CLI records only the totals of a CLI process
  (one row stands for ``attributes.aggregate_requests`` requests); Goose and Droid record only a
  session's running totals. Gaps, misses, TTLs and the working set compare a request with the one
  before it, so they need it.
* ``cache_read``: the input served from the prompt cache (misses and TTLs judge a request by it).
* ``cache_write``: the input written to the cache (TTLs price and validate the writes).
* ``reasoning``: the reasoning part of the output (no analysis here needs it; listed for the docs).

An agent missing from :data:`RECORDS` (an OTLP ``service.name`` traceflow has no importer for) is taken
to record every kind: nothing is left out that the lake cannot show is missing. The kinds per agent
come from the importers' formats (their docstrings and tests/data/SOURCES.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from traceflow.store import sql

if TYPE_CHECKING:
    import duckdb

    from traceflow.store.selection import Selection

KINDS: tuple[str, ...] = ("per_request", "cache_read", "cache_write", "reasoning")

_ALL = frozenset(KINDS)

#: agent (the lake's ``agent``) -> the kinds its importer fills; every other kind is unknown (NULL).
RECORDS: dict[str, frozenset[str]] = {
    "claude-code": frozenset({"per_request", "cache_read", "cache_write"}),
    "codex": _ALL,
    # Gemini's implicit cache bills no write and the CLI records none (the importer writes 0)
    "gemini-cli": frozenset({"per_request", "cache_read", "reasoning"}),
    "qwen-code": frozenset({"per_request", "cache_read", "reasoning"}),
    "opencode": _ALL,
    "kilo": _ALL,
    "amp": frozenset({"per_request", "cache_read", "cache_write"}),
    "kimi": frozenset({"per_request", "cache_read", "cache_write"}),
    "codebuff": frozenset({"per_request", "cache_read", "cache_write"}),
    "pi": frozenset({"per_request", "cache_read", "cache_write"}),
    "openclaw": frozenset({"per_request", "cache_read", "cache_write"}),
    "copilot": frozenset({"cache_read", "cache_write", "reasoning"}),
    "goose": frozenset(),
    "droid": frozenset({"cache_read", "cache_write", "reasoning"}),
    "grok": frozenset({"per_request", "cache_read", "reasoning"}),
    "hermes": frozenset({"cache_read", "cache_write", "reasoning"}),
    "zcode": frozenset({"per_request", "cache_read", "cache_write"}),
    "antigravity": frozenset({"per_request", "cache_read", "reasoning"}),
}

#: analysis -> the kinds it needs of every agent it reads.
NEEDS: dict[str, frozenset[str]] = {
    "gaps": frozenset({"per_request"}),
    "working-set": frozenset({"per_request"}),
    "misses": frozenset({"per_request", "cache_read"}),
    "ttl": frozenset({"per_request", "cache_read", "cache_write"}),
}

_WHY: dict[str, str] = {
    "per_request": "records session totals, not one row per request",
    "cache_read": "records no cache read",
    "cache_write": "records no cache write",
    "reasoning": "records no reasoning split",
}


def records(agent: str | None, kind: str) -> bool:
    """Whether ``agent``'s rows carry ``kind`` (an agent not in :data:`RECORDS` carries every kind)."""
    if kind not in _ALL:
        raise ValueError(f"unknown kind {kind!r}; the kinds are {', '.join(KINDS)}")
    known = RECORDS.get(agent or "")
    return known is None or kind in known


def missing(agent: str, analysis: str) -> list[str]:
    """The kinds ``analysis`` needs that ``agent`` does not record, in :data:`KINDS` order."""
    needs = NEEDS[analysis]
    return [k for k in KINDS if k in needs and not records(agent, k)]


def unfit(analysis: str) -> dict[str, str]:
    """agent -> why ``analysis`` leaves it out, for every agent of :data:`RECORDS` it cannot read."""
    if analysis not in NEEDS:
        raise ValueError(f"unknown analysis {analysis!r}; known: {', '.join(sorted(NEEDS))}")
    out: dict[str, str] = {}
    for agent in RECORDS:
        kinds = missing(agent, analysis)
        if kinds:
            out[agent] = "; ".join(_WHY[k] for k in kinds)
    return out


@dataclass(frozen=True)
class LeftOut:
    """The agents an analysis left out of a selection (those with rows in it), and why."""

    analysis: str
    agents: dict[str, str]

    def as_json(self) -> list[dict[str, str]]:
        return [{"agent": a, "reason": r} for a, r in self.agents.items()]

    def note(self) -> str | None:
        """One line for under a table (None when nothing was left out)."""
        if not self.agents:
            return None
        named = "; ".join(f"{a} ({r})" for a, r in self.agents.items())
        return f"note: {self.analysis} leaves out {named}"


def narrow(
    con: duckdb.DuckDBPyConnection | sql.Engine, selection: Selection | None, analysis: str
) -> tuple[Selection, LeftOut]:
    """``selection`` without the agents ``analysis`` cannot read, and which of them had rows in it.

    ``con`` has the ``requests`` view; the rows counted are those ``selection`` selects.
    """
    from traceflow.store.selection import Selection

    chosen = selection or Selection()
    reasons = unfit(analysis)
    present: list[str] = []
    if reasons:
        block, params = sql.selection_block(chosen)
        names = ", ".join(f"$unfit_{i}" for i in range(len(reasons)))
        params.update({f"unfit_{i}": a for i, a in enumerate(reasons)})
        query = f"SELECT DISTINCT agent FROM requests WHERE agent IN ({names}) AND {block} ORDER BY agent"
        present = [str(a) for (a,) in sql.query_rows(con, query, params)[1]]
    if not present:  # nothing to leave out: the selection as it was (a filter on agents would make
        # the per-stream window read the lake twice, for the sessions with a selected request)
        return chosen, LeftOut(analysis, {})
    narrowed = replace(chosen, without_agents=tuple(sorted({*chosen.without_agents, *reasons})))
    return narrowed, LeftOut(analysis, {a: reasons[a] for a in present})
