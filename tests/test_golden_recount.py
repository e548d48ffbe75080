"""Golden recounts: the analyses on real traces against their definitions (docs/everyday.md,
docs/forensics.md), recomputed here in
plain Python straight from the raw files (json/csv parsing of the source file, never the lake or
traceflow's own functions) and compared exactly or to a stated float tolerance.

The traces: the 36 real Claude Code sessions of kv-cache-tester (``tests/data/weka_cc_traces``) and the
Azure 2023 code trace (``tests/data/SOURCES.md``). What the recounts take from the importers' documented
mappings (``traceflow/importers/kvcache_tester.py``, ``azure.py``): a kv-cache-tester request starts at
``t`` (a sub-agent's at its entry's ``t`` plus its own), rounded to the microsecond, and ends
``api_time`` later (at its start where ``api_time`` is missing); a sub-agent is a stream of its own in
the session; a main request without ``tool_result`` in its ``input_types`` starts a new prompt (a
user turn), every other request continues the prompt before it; ``in`` is the whole prompt (the
context). An Azure request starts at ``TIMESTAMP`` (UTC) and its ``ContextTokens`` are cold input.
The Claude Code captures (``tests/data/claude-code-otlp``) and the packaged examples are read per
``traceflow/importers/claude_code.py`` and ``traceflow/otlp/claude_code.py`` (see :func:`otlp_copies`,
:func:`transcript_copies`, :func:`kept_copy`).
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, TESTDATA
from traceflow import importers
from traceflow.analysis import gaps, load, misses, mix, sessions, ttl, working_set
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

pytestmark = pytest.mark.realdata

WEKA = TESTDATA / "weka_cc_traces"
AZURE = TESTDATA / "AzureLLMInferenceTrace_code_2023.csv"

#: Anthropic's published base prices (USD per million tokens, input/output; anthropic.com/pricing) of
#: the models in the 36 sessions, and the published cache multipliers: read 0.1x, write 1.25x (5 min)
#: and 2x (1 h) the base input price.
PUBLISHED_PRICES = {
    "claude-opus-4-5-20251101": (5.0, 25.0),
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-1-20250805": (15.0, 75.0),
    "claude-sonnet-4-5-20250929": (3.0, 15.0),
    "claude-sonnet-4-20250514": (3.0, 15.0),
    "claude-haiku-4-5-20251001": (1.0, 5.0),
}
READ_X, WRITE_X = 0.1, {300.0: 1.25, 3600.0: 2.0}


@dataclass
class Req:
    start_us: int
    end_us: int
    context: int
    output: int
    model: str
    new_prompt: bool  # starts a user turn (main stream, no tool_result in input_types)
    hashes: list[int]


@dataclass
class Stream:
    session: str  # the trace id (sub-agents fold into it)
    main: bool
    reqs: list[Req]  # in stream order: start time, then file order


def _req(rec: dict[str, Any], base_t: float, new_prompt: bool) -> Req:
    start = round((base_t + rec["t"]) * 1_000_000)
    api = rec.get("api_time")
    end = start + round(api * 1_000_000) if api is not None else start
    return Req(start, end, rec["in"], rec["out"], rec["model"], new_prompt, rec.get("hash_ids") or [])


def weka_streams(folder: Path = WEKA) -> list[Stream]:
    """Every stream of every trace file, straight from the JSON."""
    out: list[Stream] = []
    for f in sorted(folder.glob("*.json")):
        doc = json.loads(f.read_bytes())
        trace = doc.get("id") or f.stem
        main: list[Req] = []
        for rec in doc["requests"]:
            if rec.get("type") == "subagent":
                subs = [_req(s, rec["t"], False) for s in rec["requests"]]
                out.append(Stream(trace, False, sorted(subs, key=lambda r: r.start_us)))
            else:
                main.append(_req(rec, 0.0, "tool_result" not in (rec.get("input_types") or [])))
        out.append(Stream(trace, True, sorted(main, key=lambda r: r.start_us)))
    return out


def idle_gap_s(prev: Req, cur: Req) -> float:
    return max(0, cur.start_us - prev.end_us) / 1e6


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between the order statistics (DuckDB's quantile_cont, numpy's default)."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@pytest.fixture(scope="module")
def weka(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[Stream]]:
    lake = Lake(tmp_path_factory.mktemp("golden-weka") / "data")
    summary = run_import(lake, importers.get("kvcache-tester"), [WEKA])
    assert summary.skipped == 0
    return lake.connect(), weka_streams()


# ---------------------------------------------------------------------------------------------
# gaps: human vs agent


def test_gaps_by_kind_match_the_raw_files(weka: tuple[Any, list[Stream]]) -> None:
    """Inter-turn gap (docs/everyday.md#analyses-common-options-and-definitions): ``started_at(n) -
    ended_at(n-1)``, clamped at 0, within a stream;
    agent when the request continues the previous request's prompt (a tool loop), human when it starts
    a new one. Reading for kv-cache-tester (no prompt ids): a main request without ``tool_result``
    starts a new prompt; a sub-agent's requests all continue the prompt that spawned it, so its gaps
    are agent gaps, and its first request has no gap (it is its own stream)."""
    con, streams = weka
    by_kind: dict[str, list[float]] = {"human": [], "agent": []}
    for s in streams:
        for prev, cur in itertools.pairwise(s.reqs):
            by_kind["human" if cur.new_prompt else "agent"].append(idle_gap_s(prev, cur))
    g = gaps.gap_summary(con, ttls=(300.0, 3600.0)).to_dicts()[0]
    assert (g["human_gaps"], g["agent_gaps"], g["unknown_gaps"]) == (253, 1697, 0)
    for kind, xs in by_kind.items():
        assert g[f"{kind}_gaps"] == len(xs)
        for q, col in ((0.5, "p50_s"), (0.9, "p90_s"), (0.99, "p99_s")):
            assert g[f"{kind}_{col}"] == pytest.approx(quantile(xs, q), abs=1e-6), (kind, col)
        assert g[f"{kind}_mean_s"] == pytest.approx(statistics.fmean(xs), rel=1e-12)
        for t in (300, 3600):
            share = sum(x > t for x in xs) / len(xs)
            assert g[f"{kind}_share_over_{t}"] == pytest.approx(share, rel=1e-12), (kind, t)
    # human gaps (the user thinking) are longer than the tool loops'
    assert statistics.median(by_kind["human"]) > 4 * statistics.median(by_kind["agent"])


# ---------------------------------------------------------------------------------------------
# TTL what-if


def test_ttl_whatif_tokens_and_costs_match_the_raw_files(weka: tuple[Any, list[Stream]]) -> None:
    """TTL what-if (docs/forensics.md#traceflow-ttl): under TTL T a request whose idle gap exceeds T writes
    its prefix again,
    otherwise reads it; a stream's first request writes its whole context. Reading (as
    ``traceflow/analysis/ttl.py`` states it): the prefix is the previous request's context plus its
    output, at most this request's context; every non-read context token is written at the TTL's write
    price (no separate cold input). Costs at Anthropic's published prices and multipliers; the best
    TTL is the cheaper of 5 min and 1 h."""
    con, streams = weka
    rows = {r["ttl_s"]: r for r in ttl.ttl_whatif(con, ttls=(60.0, 300.0, 1800.0, 3600.0)).to_dicts()}
    costs = {}
    for t in (60.0, 300.0, 1800.0, 3600.0):
        n = expired = ctx = rewrite = read = write = out = 0
        cost = 0.0
        for s in streams:
            for i, cur in enumerate(s.reqs):
                prefix, is_expired = 0, False
                if i:
                    prev = s.reqs[i - 1]
                    prefix = min(prev.context + prev.output, cur.context)
                    is_expired = idle_gap_s(prev, cur) > t
                r = 0 if is_expired else prefix
                n += 1
                expired += is_expired
                ctx += cur.context
                rewrite += prefix if is_expired else 0
                read += r
                write += cur.context - r
                out += cur.output
                if t in WRITE_X:
                    p_in, p_out = PUBLISHED_PRICES[cur.model]
                    w = WRITE_X[t]
                    cost += (r * READ_X * p_in + (cur.context - r) * w * p_in + cur.output * p_out) / 1e6
        got = rows[t]
        assert (got["requests"], got["expired_requests"], got["context_tokens"]) == (n, expired, ctx), t
        assert (got["rewrite_tokens"], got["read_tokens"], got["write_tokens"]) == (rewrite, read, write), t
        assert got["output_tokens"] == out
        assert got["share_requests_expired"] == pytest.approx(expired / n, rel=1e-12)
        assert got["share_tokens_rewritten"] == pytest.approx(rewrite / ctx, rel=1e-12)
        if t in WRITE_X:
            assert got["cost_usd"] == pytest.approx(cost, rel=1e-9), t
            costs[t] = cost
    assert rows[300.0]["expired_requests"] == 115 and rows[3600.0]["expired_requests"] == 9
    best = min(costs, key=lambda k: costs[k])
    both = {r["ttl_s"]: r for r in ttl.ttl_whatif(con).to_dicts()}
    assert [t for t, r in both.items() if r["best"]] == [best] == [3600.0]


# ---------------------------------------------------------------------------------------------
# KV working set


def _held(s: Stream, x: int, ttl_us: int) -> int:
    """The context stream ``s`` holds at time ``x`` (microseconds): that of its latest request (in
    stream order) that has ended by ``x``, while ``x`` is less than ``ttl_us`` after that end."""
    last = None
    for r in s.reqs:
        if r.end_us <= x:
            last = r
    return last.context if last is not None and x < last.end_us + ttl_us else 0


def test_working_set_matches_the_raw_files(weka: tuple[Any, list[Stream]]) -> None:
    """KV working set (docs/forensics.md#traceflow-working-set): at time t, the sum of ``context_tokens`` of
    the sessions whose last
    request ended within T before t. Readings (those of ``traceflow/analysis/working_set.py``): a
    sub-agent is a stream of its own (its own cache prefix); "last request" is the stream's latest
    request in stream order that has ended by t (where a request without ``api_time`` ends at its
    start before its predecessor does, as in trace_0527, it is that later request's context that
    counts); held on [end, end + T). Each bucket's ``tokens`` is the exact time average of that step
    function over the bucket (integrated here segment by segment); ``tokens_end`` is its value just
    before the bucket's end; the grid runs from the first request's end to the last expiry."""
    con, streams = weka
    ttl_s, res_s = 300.0, 60.0
    ttl_us, res_us = round(ttl_s * 1e6), round(res_s * 1e6)
    area: dict[int, float] = {}
    stream_area: dict[int, float] = {}
    first, last = math.inf, -math.inf
    for s in streams:
        points = sorted({r.end_us for r in s.reqs} | {r.end_us + ttl_us for r in s.reqs})
        for a, b in itertools.pairwise(points):
            held = _held(s, a, ttl_us)  # constant on [a, b): nothing changes between the points
            if not held:
                continue
            first, last = min(first, a), max(last, b)
            for bucket in range(a // res_us, (b - 1) // res_us + 1):
                lo, hi = max(a, bucket * res_us), min(b, (bucket + 1) * res_us)
                area[bucket] = area.get(bucket, 0.0) + held * (hi - lo)
                stream_area[bucket] = stream_area.get(bucket, 0.0) + (hi - lo)
    buckets = range(int(first // res_us), int(last // res_us) + 1)
    tokens = [area.get(b, 0.0) / res_us for b in buckets]
    series = working_set.working_set_series(con, ttl_s=ttl_s, resolution_s=res_s)
    assert series.height == len(buckets)
    assert series["bucket_start"][0] == dt.datetime.fromtimestamp(buckets[0] * res_s, dt.UTC)
    assert series["tokens"].to_list() == pytest.approx(tokens, abs=1e-5)
    assert series["streams"].to_list() == pytest.approx([stream_area.get(b, 0.0) / res_us for b in buckets])
    ends = [sum(_held(s, (b + 1) * res_us - 1, ttl_us) for s in streams) for b in buckets]
    assert series["tokens_end"].to_list() == ends
    streams_end = [sum(_held(s, (b + 1) * res_us - 1, ttl_us) > 0 for s in streams) for b in buckets]
    assert series["streams_end"].to_list() == streams_end
    summary = working_set.working_set_summary(con, ttls=(ttl_s,), resolution_s=res_s).to_dicts()[0]
    assert summary["peak_tokens"] == pytest.approx(max(tokens), abs=1e-5)
    assert summary["mean_tokens"] == pytest.approx(statistics.fmean(tokens), rel=1e-9)
    assert summary["p50_tokens"] == pytest.approx(quantile(tokens, 0.5), abs=1e-5)
    assert summary["p95_tokens"] == pytest.approx(quantile(tokens, 0.95), abs=1e-5)


# ---------------------------------------------------------------------------------------------
# cache misses and their causes


def test_misses_and_causes_match_the_raw_files(weka: tuple[Any, list[Stream]]) -> None:
    """Cache misses (docs/forensics.md#traceflow-misses): a request misses when it is the first of its
    stream or its cache read
    falls more than 1,024 tokens below its reusable prefix (the smaller of the previous request's
    prompt and its own); cause, first match wins: first_request, model_switch, compaction (context
    below half the previous; the traces have no compaction events), ttl_expired (gap above 300 s: the
    traces have no 1-hour writes), prefix_break (a cache read above zero and at most the static prefix
    the trace records, its ``tool_tokens + system_tokens`` or the sub-agent entry's, + 1,024;
    docs/forensics-definitions.md), unexplained; missed tokens = reusable prefix - cache read. The cache
    read is the importer's documented derivation: the leading run of the request's hash ids already
    seen in an earlier request of the trace (in start order, file order on ties), times 64."""
    con, _ = weka
    by_id: dict[int, int] = {}  # id(request) -> its cache read
    streams: list[list[Req]] = []
    static: list[int] = []  # each stream's recorded static prefix (0: none recorded)
    for f in sorted(WEKA.glob("*.json")):
        doc = json.loads(f.read_bytes())
        flat: list[Req] = []  # every request of the trace in file order (a sub-agent's at its entry)
        mains: list[Req] = []
        for rec in doc["requests"]:
            if rec.get("type") == "subagent":
                sub = [_req(s, rec["t"], False) for s in rec["requests"]]
                flat += sub
                streams.append(sub)
                static.append((rec.get("tool_tokens") or 0) + (rec.get("system_tokens") or 0))
            else:
                mains.append(_req(rec, 0.0, False))
                flat.append(mains[-1])
        streams.append(mains)
        static.append((doc.get("tool_tokens") or 0) + (doc.get("system_tokens") or 0))
        seen: set[int] = set()
        for r in sorted(flat, key=lambda r: r.start_us):
            hit = 0
            for h in r.hashes:
                if h not in seen:
                    break
                hit += 1
            seen.update(r.hashes)
            by_id[id(r)] = min(r.context, hit * 64)
    causes: dict[str, int] = {}
    missed = 0
    for s, prefix in zip(streams, static, strict=True):
        reqs = sorted(s, key=lambda r: r.start_us)
        for i, cur in enumerate(reqs):
            if i == 0:
                causes["first_request"] = causes.get("first_request", 0) + 1
                continue
            prev = reqs[i - 1]
            reusable = min(prev.context, cur.context)
            if by_id[id(cur)] >= reusable - 1024:
                continue
            missed += reusable - by_id[id(cur)]
            if cur.model != prev.model:
                cause = "model_switch"
            elif cur.context < 0.5 * prev.context:
                cause = "compaction"
            elif idle_gap_s(prev, cur) > 300:
                cause = "ttl_expired"
            elif prefix > 0 and 0 < by_id[id(cur)] <= prefix + 1024:
                cause = "prefix_break"
            else:
                cause = "unexplained"
            causes[cause] = causes.get(cause, 0) + 1
    rows = misses.miss_rows(con, misses_only=True)
    got: dict[str, int] = {}
    for c in rows["cause"].to_list():
        got[c] = got.get(c, 0) + 1
    assert got == causes
    assert int(rows["missed_tokens"].sum()) == missed


# ---------------------------------------------------------------------------------------------
# sessions


def test_sessions_match_the_raw_files(weka: tuple[Any, list[Stream]]) -> None:
    """Sessions, per the header of ``queries/sessions.sql`` and docs/everyday.md#traceflow-sessions: a
    session folds
    its sub-agents in (a kv-cache-tester trace); requests and duration (first start to last end)
    count every stream, the context figures, turns, growth, drops and idle_returns the main stream only.
    turns: changes of ``prompt_id`` along the main stream (the importer's documented prompt: a main
    request without ``tool_result`` starts one, in file order); growth: the sum of the context
    increases; a context drop: a context below half the previous one (the traces have no compaction
    events, so compactions = drops); an idle return: an idle gap of at least 900 s, reloading its prefix
    (the previous context plus output, at most its own context). The summary's quantiles are
    DuckDB's ``quantile_cont`` (linear); ``growth_per_turn_mean`` is token-weighted."""
    con, _ = weka
    expected: dict[str, dict[str, Any]] = {}
    for f in sorted(WEKA.glob("*.json")):
        doc = json.loads(f.read_bytes())
        main: list[tuple[Req, int, int]] = []  # (request, its prompt, file order)
        subs: list[list[Req]] = []
        prompt: int | None = None
        for i, rec in enumerate(doc["requests"]):
            if rec.get("type") == "subagent":
                subs.append([_req(s, rec["t"], False) for s in rec["requests"]])
                continue
            if prompt is None or "tool_result" not in (rec.get("input_types") or []):
                prompt = i
            main.append((_req(rec, 0.0, False), prompt, i))
        main.sort(key=lambda m: (m[0].start_us, m[2]))
        reqs = [m[0] for m in main]
        every = reqs + [r for s in subs for r in s]
        assert all(r.context + r.output > 0 for r in every)  # no request without tokens to leave out
        steps = list(itertools.pairwise(reqs))
        returned = [(a, b) for a, b in steps if idle_gap_s(a, b) >= 900]
        drops = sum(b.context < 0.5 * a.context for a, b in steps)
        turns = sum(k == 0 or m[1] != main[k - 1][1] for k, m in enumerate(main))
        expected[doc.get("id") or f.stem] = {
            "requests": len(every),
            "turns": turns,
            "subagents": len(subs),
            "subagent_requests": sum(map(len, subs)),
            "duration_s": (max(r.end_us for r in every) - min(r.start_us for r in every)) / 1e6,
            "context_start": reqs[0].context,
            "context_end": reqs[-1].context,
            "context_max": max(r.context for r in reqs),
            "growth_tokens": sum(max(0, b.context - a.context) for a, b in steps),
            "context_drops": drops,
            "compaction_events": 0,
            "compactions": drops,
            "idle_returns": len(returned),
            "idle_return_reload_tokens": sum(min(a.context + a.output, b.context) for a, b in returned),
            "output_tokens": sum(r.output for r in every),
            "context_tokens": sum(r.context for r in every),
        }
    rows = sessions.sessions(con).to_dicts()
    got = {r["root_session_id"]: r for r in rows}
    assert set(got) == set(expected)
    for sid, want in expected.items():
        row = got[sid]
        have = {k: row[k] for k in want if k not in ("duration_s", "context_tokens")}
        have["context_tokens"] = (
            row["cold_input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"]
        )
        assert row["duration_s"] == pytest.approx(want["duration_s"], abs=1e-6), sid
        assert have == {k: v for k, v in want.items() if k != "duration_s"}, sid
    s = sessions.session_summary(con).to_dicts()[0]
    e = list(expected.values())
    totals = {
        k: sum(x[k] for x in e) for k in ("requests", "turns", "subagents", "compactions", "idle_returns")
    }
    assert {k: s[k] for k in totals} == totals == {
        "requests": 2014, "turns": 289, "subagents": 28, "compactions": 7, "idle_returns": 36,
    }  # fmt: skip
    assert s["sessions"] == 36 and s["sessions_with_subagents"] == sum(x["subagents"] > 0 for x in e) == 9
    assert s["sessions_with_idle_return"] == sum(x["idle_returns"] > 0 for x in e)
    assert s["sessions_with_compaction"] == sum(x["compactions"] > 0 for x in e)
    assert s["idle_return_reload_tokens"] == sum(x["idle_return_reload_tokens"] for x in e)
    assert s["context_max"] == max(x["context_max"] for x in e)
    for col, key, q in (
        ("requests_p50", "requests", 0.5),
        ("turns_p50", "turns", 0.5),
        ("duration_p50_s", "duration_s", 0.5),
        ("duration_p90_s", "duration_s", 0.9),
        ("context_start_p50", "context_start", 0.5),
        ("context_end_p50", "context_end", 0.5),
        ("context_end_p90", "context_end", 0.9),
    ):
        assert s[col] == pytest.approx(quantile([x[key] for x in e], q), abs=1e-6), col
    assert s["duration_mean_s"] == pytest.approx(statistics.fmean(x["duration_s"] for x in e), rel=1e-12)
    per_turn = [x["growth_tokens"] / x["turns"] for x in e]
    assert s["growth_per_turn_p50"] == pytest.approx(quantile(per_turn, 0.5), rel=1e-12)
    growth = sum(x["growth_tokens"] for x in e) / sum(x["turns"] for x in e)
    assert s["growth_per_turn_mean"] == pytest.approx(growth, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# arrivals and load


def chi2_sf(x: float, dof: int) -> float:
    """P(X > x) for X chi-squared with an integer ``dof``: the closed forms of Abramowitz & Stegun
    26.4.4-26.4.5 (a Poisson sum; erfc plus half-integer terms for odd ``dof``), summed in log space."""
    h = x / 2
    if h <= 0:
        return 1.0
    if dof % 2 == 0:
        logs = [-h + j * math.log(h) - math.lgamma(j + 1) for j in range(dof // 2)]
        head = 0.0
    else:
        logs = [-h + (j + 0.5) * math.log(h) - math.lgamma(j + 1.5) for j in range((dof - 1) // 2)]
        head = math.erfc(math.sqrt(h))
    if not logs:
        return head
    top = max(logs)
    return head + math.exp(top) * math.fsum(math.exp(v - top) for v in logs)


def dispersion_test(counts: list[int]) -> tuple[float, float, float]:
    """(index of dispersion, chi-squared, two-sided p-value) of counts per bucket: sample variance
    over mean, ``(n - 1)`` times it, against chi-squared with ``n - 1`` degrees of freedom."""
    n = len(counts)
    index = statistics.variance(counts) / statistics.fmean(counts)
    chi2 = (n - 1) * index
    sf = chi2_sf(chi2, n - 1)
    return index, chi2, min(1.0, 2 * min(sf, 1 - sf))


def within_windows(counts: list[int], window: int) -> float:
    """The index of dispersion within consecutive windows of ``window`` buckets from the grid's first
    (those with at least two buckets and some arrivals), pooled: the windows' squared deviations
    from their own means over their degrees of freedom, divided by their counts' mean."""
    chunks = [c for i in range(0, len(counts), window) if len(c := counts[i : i + window]) > 1 and sum(c)]
    dev = sum(sum((x - statistics.fmean(c)) ** 2 for x in c) for c in chunks)
    return dev / sum(len(c) - 1 for c in chunks) / (sum(map(sum, chunks)) / sum(map(len, chunks)))


def azure_requests() -> list[tuple[int, int, int]]:
    """(start µs, ContextTokens, GeneratedTokens) per line of the Azure CSV: ``TIMESTAMP`` as UTC,
    its 7 fractional digits rounded half up to the microsecond."""
    out = []
    with AZURE.open(newline="") as f:
        for rec in csv.DictReader(f):
            whole, _, frac = rec["TIMESTAMP"].partition(".")
            second = dt.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
            tenths = int(frac.ljust(7, "0")[:7])  # units of 100 ns
            us = int(second.timestamp()) * 1_000_000 + (tenths + 5) // 10
            out.append((us, int(rec["ContextTokens"]), int(rec["GeneratedTokens"])))
    return out


def test_load_on_azure_matches_the_raw_csv(tmp_path: Path) -> None:
    """Arrivals and load (docs/forensics.md#traceflow-load), per ``queries/load.sql``: one row per bucket
    from the first
    request's to the last's, a request counted in the bucket where it starts, tokens per second =
    the bucket's tokens / its width; the summary's means and peaks are over the buckets. The Azure
    trace has no sessions, so the arrival figures are not applicable (null, with a note); the
    dispersion test of ``traceflow.analysis.load`` is recounted on its requests per minute and per
    second instead (the p-value by hand from the chi-squared closed forms, no scipy)."""
    lake = Lake(tmp_path / "data")
    assert run_import(lake, importers.get("azure"), [AZURE]).skipped == 0
    con = lake.connect()
    reqs = azure_requests()
    assert len(reqs) == 8819 and all(c + o > 0 for _, c, o in reqs)  # none left out for no tokens
    for res_s in (60, 1):
        res_us = res_s * 1_000_000
        per: dict[int, list[int]] = {}
        for us, cold, out in reqs:
            acc = per.setdefault(us // res_us, [0, 0, 0])
            acc[0] += 1
            acc[1] += cold
            acc[2] += out
        grid = [per.get(b, [0, 0, 0]) for b in range(min(per), max(per) + 1)]
        series = load.load_series(con, resolution_s=float(res_s))
        assert series.height == len(grid) == {60: 58, 1: 3437}[res_s]
        assert series["bucket_start"][0] == dt.datetime.fromtimestamp(min(per) * res_s, dt.UTC)
        assert series["requests"].to_list() == [g[0] for g in grid]
        assert series["cold_input_tokens_per_s"].to_list() == pytest.approx([g[1] / res_s for g in grid])
        assert series["output_tokens_per_s"].to_list() == pytest.approx([g[2] / res_s for g in grid])
        assert series["cache_read_tokens_per_s"].sum() == series["cache_write_tokens_per_s"].sum() == 0
        assert series["new_sessions"].sum() == series["active_sessions"].sum() == 0

        counts = [g[0] for g in grid]
        index, chi2, p = dispersion_test(counts)
        d = load.dispersion(counts)
        assert d.index == pytest.approx(index, rel=1e-12) and d.chi2 == pytest.approx(chi2, rel=1e-12)
        assert d.p_value == pytest.approx(p, abs=1e-9) and d.poisson is (p >= 0.05)
        per_hour = max(2, round(3600 / res_s))
        local = load.local_dispersion(counts, per_hour)
        assert local == pytest.approx(within_windows(counts, per_hour), rel=1e-12)
        assert index > 1  # bursty: requests do not arrive as a Poisson process

        s = load.load_overview(con, resolution_s=float(res_s)).to_dicts()[0]
        assert (s["resolution_s"], s["buckets"], s["span_s"]) == (res_s, len(grid), len(grid) * res_s)
        assert s["requests"] == len(reqs) and s["sessions"] is None
        assert all(s[k] is None for k in load.NOT_APPLICABLE)
        assert (
            s["note"]
            == "not applicable: no request in the selection has a session id (azure: 8,819 requests)"
        )
        for key, i in (("requests_per_s", 0), ("cold_input_tokens_per_s", 1), ("output_tokens_per_s", 2)):
            assert s[f"{key}_mean"] == pytest.approx(statistics.fmean(g[i] / res_s for g in grid), rel=1e-12)
            assert s[f"{key}_peak"] == pytest.approx(max(g[i] / res_s for g in grid), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# token mix by day and by model (Claude Code: transcripts and OTLP)

CAPTURES = TESTDATA / "claude-code-otlp"


@dataclass
class Copy:
    """One representation of a Claude Code request: an OTLP event or span, or a transcript's kept line."""

    origin: str  # event, span, transcript
    tokens: tuple[int, int, int, int]  # cold, read, write, output
    model: str
    start_us: int
    end_us: int
    session: str


def _attrs(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) if a["value"] else None for a in items or []}


def _documents(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def otlp_copies(path: Path, out: dict[str, list[Copy]]) -> None:
    """The ``api_request`` events and ``claude_code.llm_request`` spans of an OTLP/JSON file, by
    request id (an event without one is a request of its own): cold = ``input_tokens``, read =
    ``cache_read_tokens``, write = ``cache_creation_tokens``
    (the 5m + 1h sum where it is 0 and they are not), the event ending at ``timeUnixNano`` and
    starting ``duration_ms`` before; a span without tokens (a failed call) is no copy."""
    keys = ("input_tokens", "cache_read_tokens", "cache_creation_tokens", "output_tokens")
    for doc in _documents(path):
        for rl in doc.get("resourceLogs", []):
            for sl in rl["scopeLogs"]:
                for rec in sl["logRecords"]:
                    a = _attrs(rec["attributes"])
                    if a.get("event.name") != "api_request":
                        continue
                    cold, read, write, output = (int(a.get(k) or 0) for k in keys)
                    if not write:
                        write = int(a.get("cache_creation_5m_tokens") or 0) + int(
                            a.get("cache_creation_1h_tokens") or 0
                        )
                    end = int(rec["timeUnixNano"]) // 1000
                    start = end - round(float(a.get("duration_ms") or 0) * 1000)
                    copy = Copy("event", (cold, read, write, output), a["model"], start, end, a["session.id"])
                    # without a request id the event is a request of its own
                    out.setdefault(a.get("request_id") or f"{path}:{rec['timeUnixNano']}", []).append(copy)
        for rs in doc.get("resourceSpans", []):
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    a = _attrs(span["attributes"])
                    toks = tuple(int(a.get(k) or 0) for k in keys)
                    if span["name"] != "claude_code.llm_request" or not sum(toks):
                        continue
                    start, end = int(span["startTimeUnixNano"]) // 1000, int(span["endTimeUnixNano"]) // 1000
                    copy = Copy("span", toks, a.get("model"), start, end, a["session.id"])  # type: ignore[arg-type]
                    out.setdefault(a["request_id"], []).append(copy)


def transcript_copies(path: Path, out: dict[str, list[Copy]]) -> None:
    """The requests of a Claude Code transcript, by ``requestId``: one per request, its most complete
    block line (largest token total, then the last written); ``<synthetic>`` lines are no requests;
    the cache write is ``cache_creation_input_tokens``, else (0, missing) the 5m + 1h breakdown;
    it starts at the user line that triggered it, ends at the kept line's write time."""
    kept: dict[str, Copy] = {}
    trigger: int | None = None
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        ts = rec.get("timestamp")
        us = round(dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1e6) if ts else None
        if rec.get("type") == "user":
            trigger = us
        msg = rec.get("message")
        if rec.get("type") != "assistant" or msg.get("model") == "<synthetic>" or "usage" not in msg:
            continue
        u = msg["usage"]
        breakdown = u.get("cache_creation") or {}
        write = (breakdown.get("ephemeral_5m_input_tokens") or 0) + (
            breakdown.get("ephemeral_1h_input_tokens") or 0
        )
        toks = (
            u.get("input_tokens") or 0,
            u.get("cache_read_input_tokens") or 0,
            u.get("cache_creation_input_tokens") or write,
            u.get("output_tokens") or 0,
        )
        key = rec.get("requestId") or msg["id"]
        assert us is not None
        first = kept.get(key)
        start = first.start_us if first else min(us, trigger) if trigger is not None else us
        if first is None or sum(toks) >= sum(first.tokens):
            kept[key] = Copy("transcript", toks, msg["model"], start, us, rec["sessionId"])
    for key, copy in kept.items():
        out.setdefault(key, []).append(copy)


def kept_copy(copies: list[Copy]) -> Copy:
    """The copy the lake keeps (docs/lake.md#storage: a request counts once): the most complete, and among
    equally
    complete ones not the span (stored as the oldest). The test's data has no other tie that matters."""
    best = max(sum(c.tokens) for c in copies)
    top = [c for c in copies if sum(c.tokens) == best]
    top = [c for c in top if c.origin != "span"] or top
    assert len({(c.tokens, c.model) for c in top}) == 1, top
    return top[0]


@pytest.mark.parametrize("run", ["json-full", "v2.1.197-json-full"])
def test_mix_by_day_and_model_match_the_raw_files(tmp_path: Path, run: str) -> None:
    """Token mix (docs/everyday.md#traceflow-mix) (totals per kind, shares of the four, reuse ratio = read /
    context) by UTC
    day of the request's start and by model, over the packaged Claude Code examples (a transcript and
    OTLP logs, 2026-03-30 and 2026-08-29) and one real capture (OTLP logs and traces, and the
    transcripts of the same requests, 2026-11-29): each request counted once however many copies
    (transcript block lines, OTLP event, beta span) arrived. Then again once the lake is compacted
    (``mix`` sums the stored rollup). One capture per lake: the fake API numbers its request ids the
    same way in every run."""
    copies: dict[str, list[Copy]] = {}
    folder = CAPTURES / run
    otlp_copies(EXAMPLES / "claude-otlp-logs.json", copies)
    for p in sorted((folder / "otlp").glob("*.json")):
        if not p.name.endswith(".meta.json"):
            otlp_copies(p, copies)
    for p in [EXAMPLES / "claude-transcript.jsonl", *sorted((folder / "transcripts").rglob("*.jsonl"))]:
        transcript_copies(p, copies)
    want: dict[str, dict[Any, list[int]]] = {"day": {}, "model": {}}
    for cs in copies.values():
        c = kept_copy(cs)
        day = dt.datetime.fromtimestamp(c.start_us / 1e6, dt.UTC).strftime("%Y-%m-%d")
        for by, key in (("day", day), ("model", c.model)):
            acc = want[by].setdefault(key, [0, 0, 0, 0, 0])
            acc[0] += 1
            for i, n in enumerate(c.tokens):
                acc[i + 1] += n
    assert sorted(want["day"]) == ["2026-03-30", "2026-08-29", "2026-11-29"]
    assert want["day"]["2026-11-29"][0] == 20  # the capture's 20 answered requests, each once

    lake = Lake(tmp_path / "data")
    run_import(lake, importers.get("otlp-json"), [EXAMPLES / "claude-otlp-logs.json", folder / "otlp"])
    run_import(
        lake, importers.get("claude-code"), [EXAMPLES / "claude-transcript.jsonl", folder / "transcripts"]
    )
    kinds = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
    for compacted in (False, True):
        if compacted:
            lake.compact("requests")
            lake.materialise_derived()
        con = lake.connect()
        for by, groups_ in want.items():
            rows = {r[by]: r for r in mix.token_mix(con, by=[by]).to_dicts()}
            assert {k: [r["requests"], *(r[c] for c in kinds)] for k, r in rows.items()} == groups_, (
                by,
                compacted,
            )
            for key, (_, cold, read, write, output) in groups_.items():
                r, total = rows[key], cold + read + write + output
                assert r["total_tokens"] == total
                assert r["share_cache_read"] == pytest.approx(read / total, rel=1e-12)
                assert r["share_output"] == pytest.approx(output / total, rel=1e-12)
                ctx = cold + read + write
                assert r["reuse_ratio"] == (pytest.approx(read / ctx, rel=1e-12) if ctx else None)


def test_load_arrivals_on_a_claude_code_capture_match_the_raw_payloads(tmp_path: Path) -> None:
    """Arrivals (docs/forensics.md#traceflow-load), per ``queries/load.sql``, on real telemetry with
    sessions (the ``json-full``
    capture's OTLP payloads, one-second buckets): a session (sub-agents fold in: Claude Code sends
    theirs under the parent's ``session.id``) arrives in the bucket of its first request's start and is
    open through the bucket of its last request's end; the summary's dispersion test is recounted by
    hand on the new sessions per bucket (index, chi-squared, two-sided p-value), and the rate per
    minute is their mean per bucket x 60 / width."""
    folder = CAPTURES / "json-full" / "otlp"
    copies: dict[str, list[Copy]] = {}
    for p in sorted(folder.glob("*.json")):
        if not p.name.endswith(".meta.json"):
            otlp_copies(p, copies)
    kept = [kept_copy(cs) for cs in copies.values()]
    res = 1_000_000
    spans: dict[str, list[int]] = {}
    per: dict[int, int] = {}
    for c in kept:
        per[c.start_us // res] = per.get(c.start_us // res, 0) + 1
        s = spans.setdefault(c.session, [c.start_us, c.end_us])
        s[0], s[1] = min(s[0], c.start_us), max(s[1], c.end_us)
    buckets = range(min(per), max(per) + 1)
    new = [sum(s[0] // res == b for s in spans.values()) for b in buckets]
    active = [sum(s[0] // res <= b <= s[1] // res for s in spans.values()) for b in buckets]

    lake = Lake(tmp_path / "data")
    run_import(lake, importers.get("otlp-json"), [folder])
    con = lake.connect()
    series = load.load_series(con, resolution_s=1.0)
    assert series["requests"].to_list() == [per.get(b, 0) for b in buckets]
    assert series["new_sessions"].to_list() == new and sum(new) == len(spans) == 6
    assert series["active_sessions"].to_list() == active
    s = load.load_overview(con, resolution_s=1.0).to_dicts()[0]
    index, chi2, p = dispersion_test(new)
    assert s["sessions"] == len(spans) and s["note"] is None
    assert s["new_sessions_per_min"] == pytest.approx(statistics.fmean(new) * 60, rel=1e-12)
    assert s["index_of_dispersion"] == pytest.approx(index, rel=1e-12)
    assert s["chi2"] == pytest.approx(chi2, rel=1e-12)
    assert s["p_value"] == pytest.approx(p, rel=1e-9) and s["poisson"] is (p >= 0.05)
    assert 0.01 < p < 1  # a p-value far from 0 and 1: the test is exercised
    assert s["index_of_dispersion_within_hour"] == pytest.approx(within_windows(new, 3600), rel=1e-12)
    assert s["active_sessions_mean"] == pytest.approx(statistics.fmean(active), rel=1e-12)
    assert s["active_sessions_peak"] == max(active)
