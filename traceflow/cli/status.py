"""The one line ``traceflow statusline`` prints for Claude Code, without typer (the fast path).

Claude Code runs a status line command after each assistant message with a JSON object on stdin
(``session_id``, ``transcript_path``, ``model.id``, ``workspace``, ``cost``, ...) and shows the first
line it prints. This line says, for that session:

* its **cost today** (the day in ``--tz``, else ``TRACEFLOW_TZ``) under the price model, sub-agents
  included, and its token-weighted **reuse ratio** today, ``cache_read / (cold + read + write)``;
* how long its **cache stays warm**: the TTL in force minus the time since the session's last
  request. The TTL in force is 1 hour when most of the session's cache-write tokens (today, main
  stream) were 1-hour writes, else 5 minutes (docs/forensics.md#traceflow-misses); a cache read
  refreshes the TTL, so the clock starts at the last request, whatever it read or wrote;
* what ccusage's status line shows besides (docs/ccusage.md): the **model** (Claude Code's display
  name), and the active 5-hour **block** of all sessions (:mod:`traceflow.analysis.blocks`' chain over
  the requests' recorded times, read from the transcripts beside this one): its cost, the time left
  and its **burn rate** in dollars per hour. The transcripts are read back only as far as the chain
  needs: from 10 hours ago, further (doubling, at most 8 days) while requests in the first 5 hours
  of that window could belong to a block that began before it.

Where the numbers come from: the session's transcript (``transcript_path``, and its sub-agents'
files beside it), read from its end back to the start of the day (or an hour ago, if earlier, so a
1-hour cache that outlives midnight is seen): it is newer than the lake, and reading it costs
what today's traffic costs, not what the session's history does. Without a readable transcript
the lake answers (a query on the session, today), for sessions the collector receives over OTLP.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceflow.errors import UsageError
from traceflow.importers.claude_code_tail import RequestUsage

#: The TTL in force without 1-hour writes, and with them.
TTL_5M = 300.0
TTL_1H = 3600.0


@dataclass(frozen=True)
class Usage(RequestUsage):
    """One request of the session, as the line needs it."""

    main: bool  # the session's own stream, not a sub-agent's


@dataclass(frozen=True)
class Status:
    """What the line says, and where it came from (``--format json`` prints it)."""

    session_id: str
    source: str  # transcript, lake or none
    requests_today: int
    cost_usd_today: float
    reuse_ratio_today: float | None
    ttl_s: float
    last_request_at: dt.datetime | None
    warm_s: float | None  # seconds the cache stays warm; negative: it went cold that long ago
    model: str | None = None  # Claude Code's name of the model (display name, else id)
    block_cost_usd: float | None = None  # the active 5-hour block's cost (all sessions)
    block_remaining_s: float | None = None  # time left in it
    block_usd_per_hour: float | None = None  # its burn rate

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def parse_input(text: str) -> tuple[str, str | None, str | None]:
    """(session id, transcript path, model name: display name, else id) from Claude Code's JSON."""
    import orjson

    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise UsageError(
            f"statusline reads the JSON Claude Code passes on stdin, got invalid JSON ({e}); "
            "configure it as a statusLine command in Claude Code's settings.json"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("session_id"), str) or not data["session_id"]:
        raise UsageError(
            "statusline needs a JSON object with a session_id on stdin (as Claude Code passes it), "
            'e.g. {"session_id": "...", "transcript_path": "..."}'
        )
    path = data.get("transcript_path")
    model = data.get("model")
    model_id = (model.get("display_name") or model.get("id")) if isinstance(model, dict) else None
    return (
        data["session_id"],
        path if isinstance(path, str) and path else None,
        model_id if isinstance(model_id, str) else None,
    )


def _transcript_usage(path: Path, session_id: str, since: dt.datetime) -> list[Usage] | None:
    """The session's requests since ``since`` from its transcript and its sub-agents' files, or None
    when the transcript cannot be read."""
    from traceflow.importers.claude_code_tail import read_since

    try:
        main = read_since(path, since)
    except OSError:
        return None
    files = [(True, main)]
    subagents = path.with_suffix("") / "subagents"
    if subagents.is_dir():
        for p in sorted(subagents.glob("*.jsonl")):
            try:
                files.append((False, read_since(p, since)))
            except OSError:
                continue
    return [
        Usage(r.at, r.model, r.cold, r.read, r.write, r.write_5m, r.write_1h, r.output, is_main)
        for is_main, rows in files
        for r in rows
    ]


def _lake_usage(data: str | None, session_id: str, since: dt.datetime) -> list[Usage]:
    """The session's requests since ``since`` from the lake (sub-agents included)."""
    from traceflow import config
    from traceflow.store.lake import Lake

    location = config.data_location(data)
    if not config.is_url(location) and not os.path.isdir(location):
        return []
    con = Lake(location).connect(["requests"])
    rows = con.execute(
        """SELECT recorded_time, model, cold_input_tokens, cache_read_tokens,
                  cache_write_tokens, cache_write_5m_tokens, cache_write_1h_tokens, output_tokens,
                  parent_session_id IS NULL
           FROM requests
           WHERE coalesce(parent_session_id, session_id) = ? AND recorded_time >= ?""",
        [session_id, since],
    ).fetchall()
    return [
        Usage(
            at if at.tzinfo else at.replace(tzinfo=dt.UTC),
            model,
            cold or 0,
            read or 0,
            write or 0,
            w5,
            w1,
            out or 0,
            bool(main),
        )
        for at, model, cold, read, write, w5, w1, out, main in rows
    ]


#: How far back the block's chain is read first, and at most.
BLOCK_LOOKBACK = dt.timedelta(hours=10)
BLOCK_LOOKBACK_MAX = dt.timedelta(days=8)


def _all_usage(projects: Path, since: dt.datetime) -> list[Any]:
    """Every transcript's requests since ``since`` under ``projects`` (files changed since then)."""
    from traceflow.importers.claude_code_tail import read_since

    out: list[Any] = []
    cutoff = since.timestamp()
    for p in [*projects.glob("*/*.jsonl"), *projects.glob("*/*/subagents/*.jsonl")]:
        try:
            if p.stat().st_mtime < cutoff:
                continue
            out += [r for r in read_since(p, since) if r.at >= since]
        except OSError:
            continue
    return out


#: A block's length (:data:`traceflow.analysis.blocks.BLOCK`, not imported: that module loads DuckDB).
BLOCK = dt.timedelta(hours=5)


def block_at(usage: list[Any], now: dt.datetime, prices: Any) -> tuple[float, float, float | None] | None:
    """(cost, seconds left, dollars per hour) of the block active at ``now`` among ``usage`` (each with
    ``at``, ``model`` and tokens), by :func:`traceflow.analysis.blocks.group_blocks`' rule: a block
    starts at its first request's UTC hour, floored, and a request at or after its end starts the
    next; the burn rate is the cost over the minutes between its first and last request. Written
    here so that the status line does not load DuckDB; tests/test_statusline.py checks it against
    ``group_blocks``."""
    start: dt.datetime | None = None
    members: list[Any] = []
    for r in sorted(usage, key=lambda r: r.at):
        if start is None or r.at >= start + BLOCK:
            start = r.at.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
            members = []
        members.append(r)
    if start is None or not start <= now < start + BLOCK:
        return None
    cost = sum(
        prices.cost(r.model, r.cold, r.read, r.write, r.output, r.write_1h or 0)
        for r in members
        if prices.priced(r.model) is not None  # a request without a model is not priced
    )
    minutes = (members[-1].at - members[0].at).total_seconds() / 60
    return cost, (start + BLOCK - now).total_seconds(), cost / minutes * 60 if minutes > 0 else None


def active_block(transcript: Path, now: dt.datetime, prices: Any) -> tuple[float, float, float | None] | None:
    """(cost, seconds left, dollars per hour) of the 5-hour block active at ``now`` over every
    transcript beside ``transcript`` (``projects/<project>/<session>.jsonl``), or None."""
    projects = transcript.parent.parent
    lookback = BLOCK_LOOKBACK
    while True:
        since = now - lookback
        usage = _all_usage(projects, since)
        early = any(r.at < since + BLOCK for r in usage)
        if not early or lookback >= BLOCK_LOOKBACK_MAX:
            break
        lookback = min(lookback * 2, BLOCK_LOOKBACK_MAX)
    return block_at(usage, now, prices)


def ttl_in_force(usage: list[Usage]) -> float:
    """1 hour when most of the main stream's cache-write tokens with a known TTL were 1-hour writes."""
    w5 = sum(u.write_5m or 0 for u in usage if u.main)
    w1 = sum(u.write_1h or 0 for u in usage if u.main)
    return TTL_1H if w1 > w5 else TTL_5M


def status(
    session_id: str,
    transcript: str | None,
    *,
    now: dt.datetime,
    day_start: dt.datetime,
    data: str | None = None,
    prices: Any = None,
    model: str | None = None,
) -> Status:
    """The session's :class:`Status` at ``now``; ``day_start`` is today's start in the chosen zone."""
    from traceflow.prices import PriceModel
    from traceflow.store.measures import context, ratio

    pm = prices or PriceModel.load(None)
    since = min(day_start, now - dt.timedelta(seconds=TTL_1H))
    usage = _transcript_usage(Path(transcript), session_id, since) if transcript else None
    source = "transcript"
    if usage is None:
        usage = _lake_usage(data, session_id, since)
        source = "lake"
    today = [u for u in usage if u.at >= day_start]
    cost = sum(pm.cost(u.model, u.cold, u.read, u.write, u.output, u.write_1h or 0) for u in today)
    reuse = ratio(sum(u.read for u in today), sum(context(u.cold, u.read, u.write) for u in today))
    main = [u for u in usage if u.main]
    last = max((u.at for u in main), default=None)
    ttl = ttl_in_force([u for u in main if u.at >= day_start] or main)
    warm = ttl - (now - last).total_seconds() if last is not None else None
    if not usage:
        source = "none"
    block = active_block(Path(transcript), now, pm) if transcript and source == "transcript" else None
    return Status(
        session_id,
        source,
        len(today),
        cost,
        reuse,
        ttl,
        last,
        warm,
        model,
        *(block if block is not None else (None, None, None)),
    )


def _minutes(seconds: float) -> str:
    s = int(abs(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def line(st: Status) -> str:
    """The status line: ``Sonnet 4.5 · $1.24 today · reuse 93.2% · cache warm 41m 10s (1h TTL) ·
    block $3.10 (2h 45m left) · $1.20/h``."""
    if st.requests_today == 0 and st.warm_s is None:
        return "traceflow: no requests of this session today"
    ttl = "1h" if st.ttl_s == TTL_1H else "5m"
    parts = [st.model] if st.model else []
    parts.append(f"${st.cost_usd_today:,.2f} today")
    if st.reuse_ratio_today is not None:
        parts.append(f"reuse {st.reuse_ratio_today:.1%}")
    if st.warm_s is not None:
        if st.warm_s > 0:
            parts.append(f"cache warm {_minutes(st.warm_s)} ({ttl} TTL)")
        else:
            parts.append(f"cache cold {_minutes(st.warm_s)} ago ({ttl} TTL)")
    if st.block_cost_usd is not None and st.block_remaining_s is not None:
        parts.append(f"block ${st.block_cost_usd:,.2f} ({_minutes(st.block_remaining_s)} left)")
        if st.block_usd_per_hour is not None:
            parts.append(f"${st.block_usd_per_hour:,.2f}/h")
    return " · ".join(parts)


def run(
    text: str,
    *,
    data: str | None = None,
    tz: str | None = None,
    prices: str | None = None,
    fmt: str = "table",
    now: dt.datetime | None = None,
) -> str:
    """The output of ``traceflow statusline`` for the stdin ``text``: the line (``table``), or every
    figure (``json``, ``csv``, ``markdown``)."""
    from traceflow.prices import PriceModel
    from traceflow.store import zones

    zone = zones.default_zone() if tz is None else zones.resolve(tz)
    at = now or dt.datetime.now(dt.UTC)
    local = at.astimezone(zones.tzinfo(zone))
    day_start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    session_id, transcript, model = parse_input(text)
    st = status(
        session_id,
        transcript,
        now=at,
        day_start=day_start,
        data=data,
        prices=PriceModel.load(prices),
        model=model,
    )
    if fmt == "table":
        return line(st)
    from traceflow.output import Rows, render, to_json

    figures = zones.localise(st.as_dict(), zone)
    if fmt == "json":
        return to_json(figures)
    return render(Rows(list(figures), [tuple(figures.values())]), fmt)


#: The options the fast path parses (each takes a value).
_FAST_OPTIONS = {"--data": "data", "--tz": "tz", "--prices": "prices", "--format": "fmt", "-f": "fmt"}


def fast_path(argv: list[str]) -> bool:
    """Answer ``traceflow statusline [OPTIONS]`` without typer; False when ``argv`` needs the CLI."""
    if argv[:1] != ["statusline"]:
        return False
    values: dict[str, str] = {}
    args = argv[1:]
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name not in _FAST_OPTIONS:
            return False
        if not eq:
            if i + 1 >= len(args):
                return False
            value = args[i + 1]
            i += 1
        values[_FAST_OPTIONS[name]] = value
        i += 1
    fmt = values.pop("fmt", "table")
    if fmt not in ("table", "json", "csv", "markdown"):
        return False  # the CLI says what is wrong
    from traceflow.errors import TraceflowError

    try:
        out = run(
            sys.stdin.read(),
            data=values.get("data"),
            tz=values.get("tz"),
            prices=values.get("prices"),
            fmt=fmt,
        )
    except TraceflowError as e:
        sys.stderr.write(f"traceflow: error: {e}\n")
        sys.exit(2 if isinstance(e, UsageError) else 1)
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    return True
