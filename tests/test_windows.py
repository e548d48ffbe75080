"""A selection narrows what is reported, never what a request is compared with.

Every per-stream analysis computes streams, gaps and prefix reuse over the whole lake and filters the
requests afterwards, so a request's figures do not change with the window that holds it, and figures
summed over requests add up over disjoint windows. The property test builds lakes (hypothesis: several
sessions, sub-agents, sessionless requests, overlapping and simultaneous requests, prompt ids or none,
two models, 5-minute and 1-hour writes), cuts them at a random time and requires, for ``gaps``,
``ttl``, ``misses``, ``sessions`` (the per-request parts), ``working-set`` and ``load``, that the
whole lake's figures are the sums of the two halves'. The examples below it are worked by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FULL
from traceflow.analysis import gaps, load, misses, sessions, ttl, working_set
from traceflow.prices import PriceModel
from traceflow.store.lake import Lake
from traceflow.store.selection import Selection

T0 = dt.datetime(2026, 8, 1, 10, 0, tzinfo=dt.UTC)
MODELS = ("claude-sonnet-4-5-20250929", "claude-opus-4-5-20251101")
Cli = Callable[..., tuple[int, str, str]]


def at(ms: int) -> dt.datetime:
    return T0 + dt.timedelta(milliseconds=ms)


# one request of a stream: (idle ms after the previous start, duration ms, new prompt, model index,
# cold, read, write, output, 1-hour writes)
_request = st.tuples(
    st.one_of(st.integers(0, 3_000), st.integers(0, 900_000), st.integers(3_000_000, 5_000_000)),
    st.integers(0, 60_000),
    st.booleans(),
    st.integers(0, 1),
    st.integers(0, 50),
    st.integers(0, 20_000),
    st.integers(0, 5_000),
    st.integers(0, 800),
    st.booleans(),
)
# one stream: (session 0..2 or None for sessionless requests, sub-agent number or None, start ms,
# whether the source has prompt ids, its requests)
_stream = st.tuples(
    st.one_of(st.none(), st.integers(0, 2)),
    st.one_of(st.none(), st.integers(0, 1)),
    st.integers(0, 1_800_000),
    st.booleans(),
    st.lists(_request, min_size=1, max_size=7),
)


def lake_rows(streams: list[Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for k, (session, sub, start, prompts, requests) in enumerate(streams):
        if session is None:
            sid, parent = None, None
        elif sub is None:
            sid, parent = f"S{session}", None
        else:
            sid, parent = f"S{session}/sub{sub}", f"S{session}"
        t = start
        prompt = 0
        for i, (idle, dur, new_prompt, model, cold, read, write, out, hour) in enumerate(requests):
            t += idle if i else 0
            prompt += 1 if new_prompt else 0
            rows.append(
                {
                    "event_id": f"e{k}-{i}",
                    "source": "test",
                    "agent": "claude-code",
                    "user_id": f"u{session}",
                    "session_id": sid,
                    "parent_session_id": parent,
                    "prompt_id": f"p{k}-{prompt}" if prompts else None,
                    "model": MODELS[model],
                    "started_at": at(t),
                    "ended_at": at(t + dur),
                    "cold_input_tokens": cold,
                    "cache_read_tokens": read,
                    "cache_write_tokens": write,
                    "cache_write_5m_tokens": 0 if hour else write,
                    "cache_write_1h_tokens": write if hour else 0,
                    "output_tokens": out,
                    "seq": len(rows),
                }
            )
    return rows


# --------------------------------------------------------------------------------------------
# the figures of each analysis that are sums over requests, as {name: number}


def gap_figures(con: Any, sel: Selection) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in gaps.gap_rows(con, sel).to_dicts():
        for key, value in (("gaps", 1), ("gap_s", r["gap_s"]), (f"{r['kind']}_gaps", 1)):
            out[key] = out.get(key, 0) + value
    for r in gaps.gap_histogram(con, sel).to_dicts():
        out[f"histogram/{r['label']}"] = r["gaps"]
    return out


TTL_SUMS = (
    "requests",
    "expired_requests",
    "context_tokens",
    "rewrite_tokens",
    "read_tokens",
    "write_tokens",
    "output_tokens",
)


def ttl_figures(con: Any, sel: Selection) -> dict[str, float]:
    out: dict[str, float] = {}
    tokens = ttl.ttl_tokens(con, sel, [300.0, 3600.0])
    for r in tokens.to_dicts():
        for col in TTL_SUMS:
            key = f"{r['ttl_s']:g}/{r['model']}/{col}"
            out[key] = out.get(key, 0) + r[col]
    priced = ttl.price_tokens(tokens, PriceModel())
    for r in ttl.summarise(priced, [300.0, 3600.0]).to_dicts():
        out[f"{r['ttl_s']:g}/cost_usd"] = r["cost_usd"]
    return out


def miss_figures(con: Any, sel: Selection) -> dict[str, float]:
    rep = misses.miss_report(con, sel)
    # a window whose requests could not be judged (no session, no block hashes) has null miss figures:
    # "not applicable", which adds as nothing
    out: dict[str, float] = {
        k: rep[k] or 0 for k in ("requests", "misses", "missed_tokens", "not_applicable")
    }
    for cause, v in rep["by_cause"].items():
        out[f"{cause}/misses"] = v["misses"] or 0
        out[f"{cause}/missed_tokens"] = v["missed_tokens"] or 0
    return out


#: the per-request parts of a session's row
SESSION_SUMS = (
    "requests",
    "turns",
    "subagents",
    "subagent_requests",
    "growth_tokens",
    "context_drops",
    "idle_returns",
    "idle_return_reload_tokens",
    "idle_return_cache_write_tokens",
    "cold_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
)


def session_figures(con: Any, sel: Selection) -> dict[str, float]:
    rows = sessions.sessions(con, sel).to_dicts()
    out: dict[str, float] = {}
    for r in rows:
        for col in SESSION_SUMS:
            key = f"{r['root_session_id']}/{col}"
            out[key] = out.get(key, 0) + r[col]
    return out


def _series(frame: pl.DataFrame, cols: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in frame.to_dicts():
        for col in cols:
            if r[col]:
                out[f"{r['bucket_start'].isoformat()}/{col}"] = r[col]
    return out


def working_set_figures(con: Any, sel: Selection) -> dict[str, float]:
    """Bucket by bucket (one width for every window): the average and end-of-bucket tokens held."""
    frame = working_set._series(con, sel, 300.0, 60.0, None)
    return _series(frame, ("tokens", "tokens_end", "streams", "streams_end"))


LOAD_SUMS = (
    "new_sessions",
    "requests",
    "requests_per_s",
    "cold_input_tokens_per_s",
    "cache_read_tokens_per_s",
    "cache_write_tokens_per_s",
    "output_tokens_per_s",
)


def load_figures(con: Any, sel: Selection) -> dict[str, float]:
    from traceflow.store import time_base

    return _series(time_base.run_grid(con, "load", sel, 60.0), LOAD_SUMS)


FIGURES = {
    "gaps": gap_figures,
    "ttl": ttl_figures,
    "misses": miss_figures,
    "sessions": session_figures,
    "working-set": working_set_figures,
    "load": load_figures,
}


def _added(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


def _same(whole: Mapping[str, float], halves: Mapping[str, float]) -> list[str]:
    """The keys whose values differ (floats to a relative 1e-9: sums in another order)."""
    return sorted(
        k
        for k in {*whole, *halves}
        if not math.isclose(whole.get(k, 0), halves.get(k, 0), rel_tol=1e-9, abs_tol=1e-6)
    )


#: Lakes the property test draws (each runs six analyses over the whole lake and both halves): 15 on CI
#: (``FULL``), 5 in a local run (docs/testing.md, "Keeping the suite fast").
WINDOW_EXAMPLES = 15 if FULL else 5


@settings(max_examples=WINDOW_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams=st.lists(_stream, min_size=1, max_size=5), data=st.data())
def test_request_figures_add_up_over_disjoint_windows(streams: list[Any], data: st.DataObject) -> None:
    rows = lake_rows(streams)
    starts = sorted({r["started_at"] for r in rows})
    # cut at a request's start (inclusive on the later side), or anywhere in or around the lake
    split = data.draw(
        st.one_of(
            st.sampled_from(starts),
            st.integers(-60_000, 7 * 3_600_000).map(at),
        ),
        label="split",
    )
    with tempfile.TemporaryDirectory() as tmp:
        lake = Lake(Path(tmp) / "data")
        lake.ensure()
        lake.append("requests", rows)
        con = lake.connect()
        differ: dict[str, list[str]] = {}
        for name, figures in FIGURES.items():
            whole = figures(con, Selection())
            halves = _added(figures(con, Selection(until=split)), figures(con, Selection(since=split)))
            differ[name] = _same(whole, halves)
        # a filter that is not a time (one model) adds up over the same cut too
        models = (MODELS[0],)
        for name in ("gaps", "ttl", "sessions"):
            whole = FIGURES[name](con, Selection(models=models))
            halves = _added(
                FIGURES[name](con, Selection(models=models, until=split)),
                FIGURES[name](con, Selection(models=models, since=split)),
            )
            differ[f"{name} --model"] = _same(whole, halves)
        assert not {name: keys for name, keys in differ.items() if keys}


# --------------------------------------------------------------------------------------------
# by hand


def _row(
    i: int, start_s: float, end_s: float, read: int, write: int, out: int = 100, **kw: Any
) -> dict[str, Any]:
    return {
        "event_id": f"r{i}",
        "source": "test",
        "agent": "claude-code",
        "session_id": kw.get("session", "S"),
        "parent_session_id": None,
        "prompt_id": kw.get("prompt", "p1"),
        "model": MODELS[0],
        "started_at": T0 + dt.timedelta(seconds=start_s),
        "ended_at": T0 + dt.timedelta(seconds=end_s),
        "cold_input_tokens": 0,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "cache_write_5m_tokens": write,
        "cache_write_1h_tokens": 0,
        "output_tokens": out,
        "seq": i,
    }


def test_ttl_since_inside_a_stream_prices_its_first_request_against_the_previous_one(
    lake: Lake, cli: Cli
) -> None:
    """One four-request stream, contexts 5,000, 5,400, 5,800 and 6,200 tokens, 100 output tokens
    each, 30 s apart. Under a 5-minute TTL request 3 reads request 2's prefix, min(5,400 + 100,
    5,800) = 5,500, and writes 300; request 4 reads min(5,800 + 100, 6,200) = 5,900 and writes 300.
    ``ttl --since`` request 3 writes 600 tokens, not 5,800 + 300 (request 3 priced as a cold start)."""
    lake.append(
        "requests",
        [
            _row(1, 0, 10, 0, 5_000),
            _row(2, 40, 50, 5_000, 400),
            _row(3, 80, 90, 5_400, 400),
            _row(4, 120, 130, 5_800, 400),
        ],
    )
    since = (T0 + dt.timedelta(seconds=80)).isoformat()
    code, out, err = cli("ttl", "--since", since, "--format", "json")
    assert code == 0, err
    five = next(r for r in json.loads(out)["ttls"] if r["ttl_s"] == 300.0)
    assert (five["requests"], five["context_tokens"]) == (2, 5_800 + 6_200)
    assert (five["read_tokens"], five["write_tokens"], five["rewrite_tokens"]) == (5_500 + 5_900, 600, 0)
    # and gaps --since reports request 3's own 30 s gap (it is not a stream's first request)
    code, out, err = cli("gaps", "--since", since, "--format", "json")
    assert code == 0, err
    assert (json.loads(out)["gaps"], json.loads(out)["p50_s"]) == (2, 30.0)


def test_gaps_of_overlapping_requests_start_after_every_earlier_end(lake: Lake) -> None:
    """r1 runs 0-100 s; r2 starts at 10 s and ends at 20 s (a request sent while r1 runs); r3 starts
    at 130 s. r2's gap is 0 (r1 still running); r3's is 130 - 100 = 30 s (r1 ended last), not
    130 - 20 = 110 s after the previous row's end. Symmetrically, r1's context is held until the
    first later end (r2 at 20 s), so the working set holds one context at a time."""
    lake.append(
        "requests",
        [
            _row(1, 0, 100, 0, 1_000),
            _row(2, 10, 20, 1_000, 100),
            _row(3, 130, 140, 1_100, 100),
        ],
    )
    con = lake.connect()
    got = sorted(gaps.gap_rows(con).select("position", "gap_s").rows())
    assert got == [(2, 0.0), (3, 30.0)]
    # under a 20 s TTL r3 reads its prefix (30 s < TTL is false: 30 > 20, it expired); under 60 s it hits
    by_ttl = {r["ttl_s"]: r for r in ttl.ttl_tokens(con, None, [20.0, 60.0]).to_dicts()}
    assert (by_ttl[20.0]["expired_requests"], by_ttl[60.0]["expired_requests"]) == (1, 0)


def test_a_window_inside_a_session_counts_it_once_as_new(lake: Lake) -> None:
    """load: a session is new where its first request is; a window starting inside it shows it open
    but not new. sessions: its first request in the window is no new turn when the prompt goes on."""
    lake.append("requests", [_row(1, 0, 10, 0, 1_000), _row(2, 120, 130, 1_000, 100)])
    con = lake.connect()
    late = Selection(since=T0 + dt.timedelta(seconds=60))
    series = load.load_series(con, late, 60)
    assert series["new_sessions"].sum() == 0 and series["active_sessions"].max() == 1
    assert load.load_series(con, None, 60)["new_sessions"].sum() == 1
    row = sessions.sessions(con, late).to_dicts()[0]
    assert (row["requests"], row["turns"], row["context_start"], row["context_end"]) == (1, 0, 1_100, 1_100)
    assert row["growth_tokens"] == 100  # 1,100 over the previous request's 1,000
    assert row["growth_per_turn"] is None  # no turn in the window: no data, not 0


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_an_empty_window_reports_no_data(lake: Lake, name: str) -> None:
    """A window without requests sums to nothing (the property test's halves rely on it)."""
    lake.append("requests", [_row(1, 0, 10, 0, 1_000)])
    con = lake.connect()
    empty = Selection(since=T0 + dt.timedelta(days=1))
    assert not {k: v for k, v in FIGURES[name](con, empty).items() if v}
