"""Time bases: agent telemetry beside public serving traces (docs/everyday.md#time-bases).

Every source has a *time base*, one per kind of source. Agent telemetry (Claude Code, Codex, Gemini,
OTLP, TraceLab, ...) shares one: ``agent``, absolute UTC times. Each public serving trace
(:data:`PUBLIC_SOURCES`: Mooncake, kv-cache-tester, Bailian, BurstGPT and Azure) has its own,
``public:<source>``: its requests are another service's traffic, recorded at another time, so they
never share an axis with agent telemetry or with another trace -- Azure's 2023 times included,
although they are absolute. The traces that count time from their own start (:data:`RELATIVE_SOURCES`)
are stored as offsets from 1970-01-01T00:00:00Z (:data:`traceflow.importers.traces.RELATIVE_EPOCH_US`).
The time base follows from the ``source`` column, so a lake needs no extra column and old lakes need
no migration.

An analysis over time (``load``, ``working-set``, ``export``, the report's time sections) never puts
two time bases on one axis: the one-axis analyses refuse a selection that mixes them, naming
``--source`` (:func:`require_one`); the report keeps its time sections to one base, the agent
telemetry unless ``--source`` selects otherwise, and says so (:func:`series_selection`). And whatever
the selection spans, a time grid has at most :data:`MAX_BUCKETS` buckets: :func:`grid_resolution`
coarsens the bucket width past that.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError
from traceflow.store import sql

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.selection import Selection

#: The time base of agent telemetry (absolute UTC times).
AGENT = "agent"
#: The prefix of a public serving trace's own time base: ``public:mooncake``.
PUBLIC = "public"
#: Sources whose times are offsets from the trace's start, stored from 1970-01-01 UTC.
RELATIVE_SOURCES = frozenset({"mooncake", "kvcache-tester", "bailian", "burstgpt"})
#: Public serving traces: each its own time base (Azure's times are absolute, but of 2023 and of
#: another service, not of the agents beside it).
PUBLIC_SOURCES = RELATIVE_SOURCES | {"azure"}
#: Sources whose sessions each count time from their own zero (every session starts at t = 0), so
#: session starts are not arrivals: an arrival rate or Poisson test over them means nothing.
ALIGNED_START_SOURCES = frozenset({"kvcache-tester"})
#: The bucket width of a time grid (``load``, ``working-set``) unless asked otherwise: one minute.
#: It is also the *headline resolution* (:func:`headline_resolution`): the working-set peak and the
#: arrivals test of ``report``, the dashboard and ``working-set`` are all taken at one-minute buckets
#: (coarser only where the selection's span would pass :data:`MAX_BUCKETS`), so they agree.
DEFAULT_RESOLUTION_S = 60.0
#: The most buckets an analysis's time grid gets (69 days at one minute); coarser past that.
MAX_BUCKETS = 100_000
#: Bucket widths a coarsened grid takes (seconds); past a day, whole days.
NICE_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def time_base(source: str | None) -> str:
    """``public:<source>`` for a public serving trace (:data:`PUBLIC_SOURCES`), else ``agent``.

    >>> time_base("mooncake"), time_base("azure"), time_base("claude-code-jsonl")
    ('public:mooncake', 'public:azure', 'agent')
    """
    return f"{PUBLIC}:{source}" if source in PUBLIC_SOURCES else AGENT


def agent_telemetry_sql(column: str = "source") -> str:
    """:func:`time_base` as a SQL predicate: true where ``column`` names no public serving trace
    (the requests whose time base is ``agent``)."""
    names = ", ".join(f"'{s}'" for s in sorted(PUBLIC_SOURCES))
    return f"coalesce({column}, '') NOT IN ({names})"


def is_public(base: str) -> bool:
    """Whether ``base`` is a public serving trace's own time base."""
    return base.startswith(f"{PUBLIC}:")


@dataclass(frozen=True)
class SourceSpan:
    """One source of a selection: its requests (with tokens), those without a session id, and the
    first start and last end (epoch seconds)."""

    source: str | None
    requests: int
    sessionless: int
    first_s: float
    last_s: float

    @property
    def time_base(self) -> str:
        return time_base(self.source)


def selection_sources(
    con: duckdb.DuckDBPyConnection | sql.Engine, selection: Selection | None
) -> list[SourceSpan]:
    """The sources of the requests with tokens in ``selection``, most requests first (one scan)."""
    from traceflow.store.selection import Selection

    where, params = (selection or Selection()).where()
    rows = sql.query_frame(
        con,
        "SELECT source, count(*)::BIGINT AS n,"
        " count(*) FILTER (WHERE coalesce(parent_session_id, session_id) IS NULL)::BIGINT AS sessionless,"
        " (epoch_us(min(request_time)) / 1000000.0)::DOUBLE AS first_s,"
        " (epoch_us(max(recorded_time)) / 1000000.0)::DOUBLE AS last_s"
        f" FROM requests WHERE total_tokens > 0 AND request_time IS NOT NULL AND ({where})"
        " GROUP BY source ORDER BY n DESC, source",
        params,
    ).rows()
    return [SourceSpan(r[0], int(r[1]), int(r[2]), float(r[3]), float(r[4])) for r in rows]


def bases(sources: Sequence[SourceSpan]) -> list[str]:
    """The time bases among ``sources``: the agent telemetry's first, then the public traces' in the
    order of ``sources`` (most requests first)."""
    out = [AGENT] if any(s.time_base == AGENT for s in sources) else []
    for s in sources:
        if s.time_base not in out:
            out.append(s.time_base)
    return out


def describe(base: str) -> str:
    """``base`` in words: "the agent telemetry", "the public trace mooncake"."""
    return "the agent telemetry" if base == AGENT else f"the public trace {base.split(':', 1)[1]}"


def _listing(sources: Sequence[SourceSpan]) -> str:
    return ", ".join(f"{s.source or '(none)'}: {s.requests:,} requests" for s in sources)


def mixed_message(sources: Sequence[SourceSpan], command: str) -> str:
    """Why ``command`` refuses a selection of several time bases, and how to choose one."""
    groups = []
    for base in bases(sources):
        members = [s for s in sources if s.time_base == base]
        opts = " ".join(f"--source {s.source}" for s in members if s.source)
        groups.append(f"{describe(base)} ({_listing(members)}; {opts})")
    return (
        f"traceflow {command}: the selection mixes time bases that cannot share one axis: "
        f"{'; '.join(groups)}. Agent telemetry has absolute times; each public serving trace has its "
        "own (another service's traffic, or offsets from its start). Choose one time base with --source."
    )


def require_one(
    con: duckdb.DuckDBPyConnection | sql.Engine, selection: Selection | None, command: str
) -> list[SourceSpan]:
    """The selection's sources; UsageError (naming ``--source``) when they mix time bases."""
    sources = selection_sources(con, selection)
    if len(bases(sources)) > 1:
        raise UsageError(mixed_message(sources, command))
    return sources


def series_selection(
    selection: Selection | None, sources: Sequence[SourceSpan]
) -> tuple[Selection, list[SourceSpan], str | None]:
    """The part of ``selection`` a report draws over time, and a note saying which: all of it when it
    has one time base, else the agent telemetry (the public trace with most requests where there is
    none); the sources kept and the note (None when nothing is left out and no public trace is drawn).
    A ``--source`` in ``selection`` that names one public trace selects it."""
    from traceflow.store.selection import Selection

    sel = selection or Selection()
    found = bases(sources)
    if not found:
        return sel, list(sources), None
    base = found[0]
    kept = [s for s in sources if s.time_base == base]
    left = [s for s in sources if s.time_base != base]
    if not left:
        note = None
        if is_public(base):
            note = (
                f"The time sections (arrivals, load, the KV working set, the time charts) cover "
                f"{describe(base)} on its own time base."
            )
        return sel, kept, note
    options = " or ".join(f"--source {s.source}" for s in left if s.source)
    one = len(found) == 2
    note = (
        f"The selection mixes time bases: arrivals, load, the KV working set and the time charts cover "
        f"{describe(base)} ({_listing(kept)}); {', '.join(describe(b) for b in found[1:])} "
        f"({_listing(left)}) {'is' if one else 'are'} left out of them (report {'it' if one else 'one'} "
        f"with {options})."
    )
    names = tuple(s.source for s in kept if s.source is not None)
    return dataclasses.replace(sel, sources=names), kept, note


def span_s(sources: Sequence[SourceSpan]) -> float:
    """Seconds from the first start to the last end over ``sources`` (0 when there are none)."""
    if not sources:
        return 0.0
    return max(s.last_s for s in sources) - min(s.first_s for s in sources)


def headline_resolution(requested_s: float | None = None) -> float:
    """The bucket width the headline figures (working-set peak and percentiles, arrivals) are asked
    at: ``--resolution`` when given, else :data:`DEFAULT_RESOLUTION_S` -- never the coarse width a
    chart picks to stay small ("peak" is a mean per bucket: a 2-hour bucket's peak is a fraction of
    a 1-minute one). The width used is then :func:`bounded_resolution` of it over the selection.

    >>> headline_resolution(), headline_resolution(None), headline_resolution(300)
    (60.0, 60.0, 300.0)
    """
    return float(requested_s) if requested_s else DEFAULT_RESOLUTION_S


def bounded_resolution(span: float, resolution_s: float, max_buckets: int = MAX_BUCKETS) -> float:
    """``resolution_s``, or the smallest "nice" width above it that keeps a grid over ``span``
    seconds within ``max_buckets`` buckets (a grid's ends add up to two partial buckets).

    >>> bounded_resolution(3600, 60), bounded_resolution(56 * 365 * 86400, 60)
    (60.0, 21600.0)
    """
    res = float(resolution_s)
    room = max(1, max_buckets - 2)
    if span / res <= room:
        return res
    for nice in NICE_S:
        if nice > res and span / nice <= room:
            return float(nice)
    return float(math.ceil(span / room / 86400) * 86400)


def coarsening_note(asked_s: float, used_s: float) -> str | None:
    """What a grid coarsened past :data:`MAX_BUCKETS` says (None when it was not): the width used,
    and that the series of two selections add up bucket by bucket only at one width, which each must
    then be asked at (a window of a coarsened selection is coarsened less, or not at all).

    >>> coarsening_note(60, 60) is None
    True
    >>> coarsening_note(60, 120).split(": ")[-1]
    'ask each with --resolution 2m'
    """
    if used_s == asked_s:
        return None
    from traceflow.units import format_duration

    used = format_duration(used_s)
    asked = format_duration(asked_s)
    return (
        f"buckets of {used}, not the {asked} asked (at {asked} this selection would pass {MAX_BUCKETS:,} "
        f"buckets); series of other selections add up with this one bucket by bucket only at one width: "
        f"ask each with --resolution {used}"
    )


def grid_resolution(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None,
    resolution_s: float,
    command: str,
    *,
    pad_s: float = 0.0,
) -> float:
    """The bucket width an analysis over ``selection`` uses: ``resolution_s`` unless its grid (the
    selection's span plus ``pad_s``, e.g. a TTL) would pass :data:`MAX_BUCKETS`. UsageError (naming
    ``command``) when the selection mixes time bases."""
    sources = require_one(con, selection, command)
    return bounded_resolution(span_s(sources) + pad_s, resolution_s)


def run_grid(
    con: duckdb.DuckDBPyConnection,
    query: str,
    selection: Selection | None,
    resolution_s: float,
    **params: Any,
) -> pl.DataFrame:
    """Run the packaged grid ``query`` over ``selection`` with buckets of ``resolution_s`` (from
    :func:`grid_resolution`) and at most :data:`MAX_BUCKETS` of them."""
    block, sel = sql.selection_block(selection)
    return sql.run(
        con,
        query,
        {**sel, **params, "resolution_s": resolution_s, "max_buckets": MAX_BUCKETS},
        blocks={"selection": block},
    )


def offset_label(value: dt.datetime) -> str:
    """A relative time as its offset from the trace's start: ``+2 h``, ``+35 min``, ``+12 s``.

    >>> offset_label(dt.datetime(1970, 1, 1, 2, tzinfo=dt.UTC))
    '+2 h'
    """
    seconds = (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= size:
            return f"+{seconds / size:.3g} {unit}"
    return f"+{seconds:.3g} s"
