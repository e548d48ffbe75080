"""The analyses on hand-built sessions whose gaps, TTL outcomes, compactions and idle_returns were worked
out by hand (the arithmetic is in the comments), plus the price model and the dispersion test."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from traceflow.analysis import gaps, load, sessions, ttl, working_set
from traceflow.errors import UsageError
from traceflow.prices import ModelPrice, PriceModel
from traceflow.store.lake import Lake
from traceflow.store.selection import Selection

T0 = dt.datetime(2026, 8, 1, 10, 0, tzinfo=dt.UTC)
SONNET, OPUS = "claude-sonnet-4-5-20250929", "claude-opus-4-5-20251101"


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# (event_id, session, parent, prompt, model, start s, end s, cold, read, write, output, seq)
# Session A: main stream a1..a6 and a sub-agent stream s1..s2 (parent A).
#   gaps: a2 12-10=2 agent, a3 620-20=600 human, a4 640-630=10 agent, a5 6050-650=5400 human
#   (an idle return, and a compaction: context 3000 < 50% of 12000), a6 6060-6060=0 agent; s2 19-18=1 agent
# Session B: b2 130-110=20 human; b3 failed (no tokens): left out everywhere.
# Session C: no prompt ids: c2 305-205=100 unknown.
# Session D: d1 and d2 start at the same time; seq puts d2 first; d1's gap 400-401 clamps to 0.
REQUESTS: list[tuple[Any, ...]] = [
    ("a1", "A", None, "p1", SONNET, 0, 10, 0, 0, 10_000, 100, 1),
    ("a2", "A", None, "p1", SONNET, 12, 20, 0, 10_000, 500, 100, 2),
    ("a3", "A", None, "p2", SONNET, 620, 630, 0, 0, 11_000, 200, 3),
    ("a4", "A", None, "p2", SONNET, 640, 650, 0, 11_000, 1_000, 100, 4),
    ("a5", "A", None, "p3", SONNET, 6050, 6060, 0, 0, 3_000, 50, 5),
    ("a6", "A", None, "p3", SONNET, 6060, 6070, 0, 3_000, 200, 50, 6),
    ("s1", "A/sub1", "A", "p1", SONNET, 15, 18, 0, 0, 4_000, 30, 1),
    ("s2", "A/sub1", "A", "p1", SONNET, 19, 25, 0, 4_000, 100, 30, 2),
    ("b1", "B", None, "q1", OPUS, 100, 110, 5, 0, 2_000, 10, 1),
    ("b2", "B", None, "q2", OPUS, 130, 140, 0, 2_000, 100, 10, 2),
    ("b3", "B", None, "q2", OPUS, 150, 151, 0, 0, 0, 0, 3),
    ("c1", "C", None, None, None, 200, 205, 0, 0, 1_000, 0, 1),
    ("c2", "C", None, None, None, 305, 310, 0, 1_000, 0, 0, 2),
    ("d1", "D", None, "r1", None, 400, 402, 0, 500, 100, 20, 2),
    ("d2", "D", None, "r1", None, 400, 401, 0, 0, 500, 20, 1),
]
# compaction events: one in A (within its span), two in B (within), one for B outside its span
EVENTS = [("e1", "A", 6055), ("e2", "B", 120), ("e3", "B", 135), ("e4", "B", 5000)]


def fill(lake: Lake) -> Lake:
    lake.append(
        "requests",
        [
            {
                "event_id": e,
                "source": "test",
                "agent": "claude-code",
                "user_id": "u1" if sess.startswith("A") else "u2",
                "session_id": sess,
                "parent_session_id": parent,
                "prompt_id": prompt,
                "model": model,
                "started_at": at(start),
                "ended_at": at(end),
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "cache_write_5m_tokens": write,
                "cache_write_1h_tokens": 0,
                "output_tokens": out,
                "seq": seq,
            }
            for e, sess, parent, prompt, model, start, end, cold, read, write, out, seq in REQUESTS
        ],
    )
    lake.append(
        "events",
        [
            {"event_id": e, "source": "test", "session_id": s, "name": "compaction", "timestamp": at(t)}
            for e, s, t in EVENTS
        ],
    )
    return lake


@pytest.fixture
def con(lake: Lake) -> Any:
    return fill(lake).connect()


# ---------------------------------------------------------------------------------------------
# gaps


def test_gap_rows_are_the_hand_computed_gaps(con: Any) -> None:
    rows = gaps.gap_rows(con).select("session_id", "gap_s", "kind").rows()
    assert sorted(rows) == sorted(
        [
            ("A", 2.0, "agent"),
            ("A", 600.0, "human"),
            ("A", 10.0, "agent"),
            ("A", 5400.0, "human"),
            ("A", 0.0, "agent"),
            ("A/sub1", 1.0, "agent"),
            ("B", 20.0, "human"),
            ("C", 100.0, "unknown"),
            ("D", 0.0, "agent"),
        ]
    )


def test_gap_summary_exact(con: Any) -> None:
    r = gaps.gap_summary(con).to_dicts()[0]
    # all gaps sorted: 0 0 1 2 10 20 100 600 5400 (n=9; quantile_cont interpolates at (n-1)q)
    assert (r["gaps"], r["human_gaps"], r["agent_gaps"], r["unknown_gaps"]) == (9, 3, 5, 1)
    assert r["p50_s"] == pytest.approx(10.0)
    assert r["p90_s"] == pytest.approx(600 + 0.2 * 4800)
    assert r["p99_s"] == pytest.approx(600 + 0.92 * 4800)
    assert r["mean_s"] == pytest.approx(6133 / 9)
    assert r["max_s"] == 5400.0
    assert r["share_over_300"] == pytest.approx(2 / 9)
    assert r["share_over_3600"] == pytest.approx(1 / 9)
    # human: 20 600 5400; agent: 0 0 1 2 10
    assert (r["human_p50_s"], r["human_p90_s"]) == pytest.approx((600.0, 600 + 0.8 * 4800))
    assert r["human_mean_s"] == pytest.approx(6020 / 3)
    assert (r["human_share_over_300"], r["human_share_over_3600"]) == pytest.approx((2 / 3, 1 / 3))
    assert (r["agent_p50_s"], r["agent_p90_s"], r["agent_mean_s"]) == pytest.approx((1.0, 2 + 0.6 * 8, 2.6))
    assert r["agent_share_over_300"] == 0.0


def test_gap_report_json_keys_and_histogram(con: Any) -> None:
    rep = gaps.gap_report(con, ttls=[300, 3600])
    for key in ("gaps", "human_gaps", "agent_gaps", "p50_s", "p90_s", "p99_s", "share_over", "histogram"):
        assert key in rep
    assert rep["share_over"] == pytest.approx({"300": 2 / 9, "3600": 1 / 9})
    hist = {
        (h["lo_s"], h["hi_s"]): (h["gaps"], h["human_gaps"], h["agent_gaps"], h["unknown_gaps"])
        for h in rep["histogram"]
    }
    assert hist == {
        (0.0, 0.1): (2, 0, 2, 0),
        (1.0, 2.0): (1, 0, 1, 0),
        (2.0, 5.0): (1, 0, 1, 0),
        (10.0, 20.0): (1, 0, 1, 0),
        (20.0, 30.0): (1, 1, 0, 0),
        (60.0, 120.0): (1, 0, 0, 1),
        (600.0, 1200.0): (1, 1, 0, 0),
        (3600.0, 7200.0): (1, 1, 0, 0),
    }
    assert rep["histogram"][-1]["cum_share"] == pytest.approx(1.0)
    # the one-pass histogram equals the named query's
    named = gaps.gap_histogram(con)
    assert (
        named.drop("share", "cum_share").to_dicts()
        == pl.DataFrame(rep["histogram"]).drop("share", "cum_share").to_dicts()
    )


def test_gap_summary_by_session_and_kind(con: Any) -> None:
    by = gaps.gap_summary(con, by=["session"]).select("session", "gaps", "p50_s").rows()
    assert by == [("A", 6, 6.0), ("B", 1, 20.0), ("C", 1, 100.0), ("D", 1, 0.0)]  # A: main 5 + sub 1
    kinds = dict(gaps.gap_summary(con, by=["kind"]).select("kind", "gaps").rows())
    assert kinds == {"agent": 5, "human": 3, "unknown": 1}
    with pytest.raises(UsageError, match="cannot group by"):
        gaps.gap_summary(con, by=["colour"])


def test_selection_filters_the_gaps(con: Any) -> None:
    only_b = gaps.gap_summary(con, Selection(sessions=("B",))).to_dicts()[0]
    assert (only_b["gaps"], only_b["p50_s"]) == (1, 20.0)
    # a time window narrows the gaps reported, not what a request is compared with: a3, the first
    # request of A in the window, keeps its 600 s gap after a2 (the window is the whole lake's)
    late = gaps.gap_rows(con, Selection(since=at(600))).select("session_id", "gap_s").rows()
    assert sorted(late) == [("A", 0.0), ("A", 10.0), ("A", 600.0), ("A", 5400.0)]


def test_no_requests_gives_zero_gaps(lake: Lake) -> None:
    rep = gaps.gap_report(lake.connect())
    assert rep["gaps"] == 0 and rep["p50_s"] is None and rep["histogram"] == []


# ---------------------------------------------------------------------------------------------
# TTL what-if

# Tokens per model by hand (prefix = min(previous context + output, context); first request of a
# stream writes its whole context). Sonnet = A + its sub-agent; opus = B; NULL model = C and D.
#   a2 prefix min(10000+100, 10500) = 10100   a3 min(10500+100, 11000) = 10600 (gap 600)
#   a4 min(11000+200, 12000) = 11200          a5 min(12000+100, 3000) = 3000 (gap 5400)
#   a6 min(3000+50, 3200) = 3050              s2 min(4000+30, 4100) = 4030
#   b2 min(2005+10, 2100) = 2015              c2 min(1000+0, 1000) = 1000   d1 min(500+20, 600) = 520
SONNET_CTX, OPUS_CTX, NULL_CTX = 57_800, 4_105, 3_100
READ_5M = {SONNET: 10100 + 11200 + 3050 + 4030, OPUS: 2015, None: 1000 + 520}
READ_1H = {**READ_5M, SONNET: READ_5M[SONNET] + 10600}
OUTPUT = {SONNET: 660, OPUS: 20, None: 40}
CTX = {SONNET: SONNET_CTX, OPUS: OPUS_CTX, None: NULL_CTX}


def hand_cost(reads: dict[str | None, int], write_mult: float) -> float:
    # requests without a model name (C and D) are not priced
    price = {SONNET: (3.0, 15.0), OPUS: (5.0, 25.0)}
    total = 0.0
    for model, (pin, pout) in price.items():
        total += (reads[model] * 0.1 + (CTX[model] - reads[model]) * write_mult) * pin / 1e6 + OUTPUT[
            model
        ] * pout / 1e6
    return total


def test_ttl_tokens_by_hand(con: Any) -> None:
    tok = ttl.ttl_tokens(con, ttls=[300, 3600])
    got = {(r["ttl_s"], r["model"]): r for r in tok.to_dicts()}
    assert got[(300.0, SONNET)]["expired_requests"] == 2  # a3 (600 s) and a5 (5400 s)
    assert got[(300.0, SONNET)]["rewrite_tokens"] == 10600 + 3000
    assert got[(3600.0, SONNET)]["expired_requests"] == 1  # a5 only
    assert got[(3600.0, SONNET)]["rewrite_tokens"] == 3000
    for (t, model), r in got.items():
        reads = READ_5M if t == 300 else READ_1H
        assert r["read_tokens"] == reads[model]
        assert r["write_tokens"] == CTX[model] - reads[model]
        assert r["context_tokens"] == CTX[model]
        assert r["output_tokens"] == OUTPUT[model]
    assert sum(r["requests"] for (t, _), r in got.items() if t == 300) == 14  # b3 (no tokens) left out


def test_ttl_whatif_costs_and_best(con: Any) -> None:
    w = ttl.ttl_whatif(con, ttls=[300, 3600])
    assert list(w.columns) == list(ttl.COLUMNS)
    rows = {r["ttl"]: r for r in w.to_dicts()}
    assert rows["5m"]["cost_usd"] == pytest.approx(hand_cost(READ_5M, 1.25))
    assert rows["1h"]["cost_usd"] == pytest.approx(hand_cost(READ_1H, 2.0))
    assert rows["5m"]["share_requests_expired"] == pytest.approx(2 / 14)
    assert rows["5m"]["share_tokens_rewritten"] == pytest.approx(13600 / 65005)
    assert rows["5m"]["expiry_cost_usd"] == pytest.approx(13600 * 3e-6 * (1.25 - 0.1))
    # 0.1433 (5m) < 0.1569 (1h): few expiries, so the cheaper writes win
    assert rows["5m"]["best"] and not rows["1h"]["best"]
    assert rows["1h"]["cost_vs_best"] == pytest.approx(hand_cost(READ_1H, 2.0) / hand_cost(READ_5M, 1.25))


def test_ttl_best_flips_when_writes_are_cheap_at_long_ttls(con: Any) -> None:
    flat = PriceModel().merged({"write_multipliers": {"300": 1.25, "3600": 1.25}})
    w = ttl.ttl_whatif(con, ttls=[300, 3600], prices=flat)
    assert w.filter(pl.col("best"))["ttl"].to_list() == ["1h"]


def test_ttl_validation_shows_the_writes_after_long_gaps(con: Any) -> None:
    v = {r["gap_class"]: r for r in ttl.ttl_validation(con).to_dicts()}
    # short: a2 a4 a6 s2 b2 c2 d1 write 500+1000+200+100+100+0+100 = 2000 over 7 requests
    assert v["short"]["requests"] == 7
    assert v["short"]["mean_cache_write_tokens"] == pytest.approx(2000 / 7)
    assert v["medium"]["cache_write_tokens"] == 11_000 and v["medium"]["requests"] == 1
    assert v["long"]["cache_write_tokens"] == 3_000
    assert v["medium"]["write_vs_short"] == pytest.approx(11_000 / (2000 / 7))


def test_observed_cost_prices_the_reported_tokens(con: Any) -> None:
    obs = {r["model"]: r for r in ttl.observed_cost(con).to_dicts()}
    # opus: cold 5, read 2000, write 2100 (5m), output 20 at $5/$25
    assert obs[OPUS]["cost_usd"] == pytest.approx((5 + 2000 * 0.1 + 2100 * 1.25) * 5e-6 + 20 * 25e-6)
    assert obs[OPUS]["reported_cost_usd"] is None


#: The 30-minute write multiplier: log-linear between 1.25 (5 min) and 2.0 (1 h).
WRITE_30M = 1.25 + 0.75 * math.log(1800 / 300) / math.log(3600 / 300)


def test_ttl_report_as_dict(con: Any) -> None:
    d = ttl.ttl_report(con, ttls=ttl.ttl_list([1800])).as_dict()
    # 30 min: a5's expiry only, as at 1 h, at the 1.791 multiplier: 0.14294 < 0.14331 (5m) < 0.15692 (1h)
    assert hand_cost(READ_1H, WRITE_30M) < hand_cost(READ_5M, 1.25) < hand_cost(READ_1H, 2.0)
    assert d["best_ttl"] == "30m" and d["best_ttl_s"] == 1800.0
    assert [r["ttl"] for r in d["ttls"]] == ["5m", "30m", "1h"]
    assert {"by_model", "observed", "validation", "prices"} <= d.keys()
    json.dumps(d, default=str)


# ---------------------------------------------------------------------------------------------
# sessions


def test_sessions_by_hand(con: Any) -> None:
    rows = {r["root_session_id"]: r for r in sessions.sessions(con).to_dicts()}
    a = rows["A"]
    assert (a["requests"], a["turns"], a["subagents"], a["subagent_requests"]) == (8, 3, 1, 2)
    assert (a["context_start"], a["context_end"], a["context_max"]) == (10_000, 3_200, 12_000)
    assert a["growth_tokens"] == 500 + 500 + 1000 + 200  # the drop at a5 adds nothing
    assert a["growth_per_turn"] == pytest.approx(2200 / 3)
    assert (a["context_drops"], a["compaction_events"], a["compactions"]) == (1, 1, 1)
    assert (a["idle_returns"], a["idle_return_reload_tokens"], a["idle_return_cache_write_tokens"]) == (
        1,
        3000,
        3000,
    )
    assert a["duration_s"] == 6070.0
    assert a["reuse_ratio"] == pytest.approx(28_000 / 57_800)
    b = rows["B"]
    assert (b["requests"], b["turns"], b["context_start"], b["context_end"]) == (2, 2, 2005, 2100)
    assert (b["context_drops"], b["compaction_events"], b["compactions"]) == (
        0,
        2,
        2,
    )  # e4 is outside B's span
    assert b["duration_s"] == 40.0
    c = rows["C"]
    assert (c["turns"], c["growth_tokens"]) == (2, 0)  # no prompt ids: every request is a turn
    d = rows["D"]
    assert (d["turns"], d["context_start"], d["context_end"], d["duration_s"]) == (1, 500, 600, 2.0)


def test_session_summary_by_hand(con: Any) -> None:
    s = sessions.session_summary(con).to_dicts()[0]
    assert list(s) == [name for name, _ in sessions.SUMMARY] + list(sessions.SUMMARY_EXTRA)
    assert (s["sessions"], s["requests"], s["turns"], s["subagents"], s["sessions_with_subagents"]) == (
        4,
        14,
        8,
        1,
        1,
    )
    assert (s["compactions"], s["sessions_with_compaction"]) == (3, 2)
    assert (s["idle_returns"], s["sessions_with_idle_return"], s["idle_return_reload_tokens"]) == (1, 1, 3000)
    assert s["requests_p50"] == 2.0 and s["turns_p50"] == 2.0
    assert s["duration_p50_s"] == pytest.approx((40 + 110) / 2)
    assert s["growth_per_turn_mean"] == pytest.approx((2200 + 95 + 0 + 100) / 8)


def test_session_thresholds(con: Any) -> None:
    # with a 10-minute idle-return threshold a3 (600 s) is an idle return too: it reloaded 10600 tokens
    a = sessions.sessions(con, idle_after_s=600).filter(pl.col("root_session_id") == "A").to_dicts()[0]
    assert (a["idle_returns"], a["idle_return_reload_tokens"]) == (2, 10600 + 3000)
    # a drop must exceed 80% of the previous context to count: 3000 vs 12000 is 75%
    a = sessions.sessions(con, compaction_drop=0.8).filter(pl.col("root_session_id") == "A").to_dicts()[0]
    assert (a["context_drops"], a["compactions"]) == (0, 1)  # the event still counts
    with pytest.raises(UsageError):
        sessions.sessions(con, compaction_drop=1.5)


def test_session_summary_by_user(con: Any) -> None:
    rows = sessions.session_summary(con, by=["user"]).select("user", "sessions", "requests").rows()
    assert rows == [("u1", 1, 8), ("u2", 3, 6)]


# ---------------------------------------------------------------------------------------------
# working set


def test_working_set_of_one_session_by_hand(con: Any) -> None:
    ws = working_set.working_set_series(con, Selection(sessions=("B",)), ttl_s=300, resolution_s=60)
    # b1 ends at 110 and holds 2005 until b2 ends at 140; b2 holds 2100 from 140 to 440.
    assert ws["bucket_start"].to_list() == [at(60 * i) for i in range(1, 8)]
    assert ws["tokens"].to_list() == pytest.approx(
        [2005 * 10 / 60, 2005 * 20 / 60 + 2100 * 40 / 60, 2100, 2100, 2100, 2100, 2100 * 20 / 60]
    )
    assert ws["tokens_end"].to_list() == [2005, 2100, 2100, 2100, 2100, 2100, 0]
    assert ws["streams_end"].to_list() == [1, 1, 1, 1, 1, 1, 0]
    s = working_set.summarise(ws, 300, 60, kv_bytes_per_token=1000)
    assert s["peak_tokens"] == pytest.approx(2100) and s["peak_at"] == at(180)
    mean = (2005 * 10 / 60 + 2005 * 20 / 60 + 2100 * 40 / 60 + 4 * 2100 + 700) / 7
    assert s["mean_tokens"] == pytest.approx(mean)
    assert s["peak_bytes"] == pytest.approx(2_100_000)


def test_working_set_counts_sub_agents_apart(con: Any) -> None:
    ws = working_set.working_set_series(con, Selection(sessions=("A",)), ttl_s=300, resolution_s=1)
    row = next(r for r in ws.to_dicts() if r["bucket_start"] == at(30))
    # at t=30: A's main stream holds a2's 10500, the sub-agent holds s2's 4100
    assert (row["tokens"], row["streams"]) == pytest.approx((14_600, 2))


def test_working_set_summary_per_ttl(con: Any) -> None:
    s = working_set.working_set_summary(con, ttls=[300, 3600], kv_bytes_per_token=126_976)
    assert s["ttl"].to_list() == ["5m", "1h"]
    assert list(s.columns) == list(working_set.SUMMARY_COLUMNS)
    # a longer TTL never holds less
    assert s["mean_tokens"][1] >= s["mean_tokens"][0]
    assert s["peak_bytes"][0] == pytest.approx(s["peak_tokens"][0] * 126_976)


# ---------------------------------------------------------------------------------------------
# load


def test_load_series_by_hand(con: Any) -> None:
    series = load.load_series(con)
    assert series.height == 102  # minute 0 .. minute 101 (a6 starts at 6060 s)
    new = dict(zip(range(series.height), series["new_sessions"].to_list(), strict=True))
    assert {i for i, n in new.items() if n} == {0, 1, 3, 6}  # A at 0 s, B 100 s, C 200 s, D 400 s
    req = series["requests"].to_list()
    assert (req[0], req[1], req[2], req[3], req[5], req[6], req[10], req[100], req[101]) == (
        4,
        1,
        1,
        1,
        1,
        2,
        2,
        1,
        1,
    )
    assert sum(req) == 14
    active = series["active_sessions"].to_list()
    assert active[:8] == [1, 2, 2, 2, 2, 2, 2, 1] and max(active) == 2 and active[101] == 1
    assert series["requests_per_s"][0] == pytest.approx(4 / 60)
    assert series["cache_write_tokens_per_s"][0] == pytest.approx((10_000 + 500 + 4_000 + 100) / 60)


def test_load_summary_dispersion(con: Any) -> None:
    summary = load.load_summary(load.load_series(con)).to_dicts()[0]
    counts = [1, 1, 0, 1, 0, 0, 1] + [0] * 95
    mean = 4 / 102
    var = sum((c - mean) ** 2 for c in counts) / 101
    assert summary["index_of_dispersion"] == pytest.approx(var / mean)
    assert summary["new_sessions_per_min"] == pytest.approx(mean)
    assert summary["sessions"] == 4 and summary["requests"] == 14


def test_dispersion_test_recognises_poisson_and_bursts() -> None:
    import random

    rng = random.Random(7)
    lam = 3.0
    poisson = []
    for _ in range(2000):  # Poisson counts by inversion
        k, p, u = 0, math.exp(-lam), rng.random()
        cum = p
        while u > cum:
            k += 1
            p *= lam / k
            cum += p
        poisson.append(k)
    d = load.dispersion(poisson)
    assert d.index == pytest.approx(1.0, abs=0.1) and d.poisson
    bursty = [0] * 1900 + [60] * 100  # same mean, all at once
    b = load.dispersion(bursty)
    assert b.index is not None and b.index > 10 and b.poisson is False
    assert load.dispersion([5]).index is None


def test_chi2_cdf_against_known_values() -> None:
    assert load.chi2_cdf(3.841458820694124, 1) == pytest.approx(0.95, abs=1e-9)
    assert load.chi2_cdf(18.307038053275146, 10) == pytest.approx(0.95, abs=1e-9)
    assert load.chi2_cdf(124.34211340400407, 100) == pytest.approx(0.95, abs=1e-9)
    assert load.chi2_cdf(0.0, 5) == 0.0


def test_local_dispersion_ignores_a_changing_rate() -> None:
    # each window is constant: no dispersion inside a window, though the rate changes a lot
    counts = [1] * 60 + [10] * 60
    assert load.local_dispersion(counts, 60) == pytest.approx(0.0)
    # overall: mean 5.5, variance 4.5**2 * 120/119: index 3.71, far from Poisson
    assert load.dispersion(counts).index == pytest.approx(4.5**2 * 120 / 119 / 5.5)
    assert load.dispersion(counts).poisson is False


# ---------------------------------------------------------------------------------------------
# prices


def test_price_model_defaults_and_prefix_match() -> None:
    m = PriceModel()
    assert m.price("claude-sonnet-4-5-20250929") == ModelPrice(3.0, 15.0)
    assert m.price("claude-opus-4-5-20251101") == ModelPrice(5.0, 25.0)
    assert m.price("claude-opus-4-1-20250805") == ModelPrice(15.0, 75.0)
    assert m.price("claude-haiku-4-5") == ModelPrice(1.0, 5.0)
    assert m.price("gpt-5") == m.default and m.price(None) == m.default
    assert (m.write_multiplier(300), m.write_multiplier(3600), m.write_multiplier(60)) == (1.25, 2.0, 1.25)
    assert 1.25 < m.write_multiplier(1800) < 2.0 < m.write_multiplier(7200)


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_price_file_overrides(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"prices{suffix}"
    if suffix == ".json":
        path.write_text(
            json.dumps(
                {"as_of": "2026-08-01", "read_multiplier": 0.2, "models": {"my-model": {"input": 0.5}}}
            )
        )
    else:
        path.write_text('as_of = "2026-08-01"\nread_multiplier = 0.2\n[models.my-model]\ninput = 0.5\n')
    m = PriceModel.load(path)
    assert m.as_of == "2026-08-01" and m.read_multiplier == 0.2
    assert m.price("my-model-v2") == ModelPrice(0.5, 15.0)  # output falls back to the default
    assert m.price("claude-opus-4-5") == ModelPrice(5.0, 25.0)  # built-ins kept


def test_price_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"read_multiplyer": 0.2}')
    with pytest.raises(UsageError, match="unknown key"):
        PriceModel.load(bad)
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        PriceModel.load(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(UsageError, match="holds a list; write one object"):
        PriceModel.load(bad)
    with pytest.raises(UsageError, match=r"missing\.json: no such file"):
        PriceModel.load(tmp_path / "missing.json")


def test_requests_without_a_session_stand_alone(lake: Lake) -> None:
    lake.append(
        "requests",
        [
            {
                "event_id": f"n{i}",
                "source": "mooncake",
                "started_at": at(10 * i),
                "ended_at": at(10 * i + 1),
                "cold_input_tokens": 1000,
                "output_tokens": 10,
                "seq": i,
            }
            for i in range(3)
        ],
    )
    con = lake.connect()
    assert gaps.gap_summary(con).to_dicts()[0]["gaps"] == 0
    # a request without a session id is not a session: "not applicable", never 3 sessions of one request
    s = sessions.session_summary(con).to_dicts()[0]
    assert (s["sessions"], s["sessionless_requests"]) == (None, 3)
    assert s["note"] == sessions.NOT_APPLICABLE
    assert sessions.sessions(con).height == 0
    assert load.load_series(con)["new_sessions"].sum() == 0
    summary = load.load_overview(con).to_dicts()[0]
    assert summary["sessions"] is None and summary["new_sessions_per_min"] is None
    assert summary["requests"] == 3 and summary["note"].startswith("not applicable")
    w = ttl.ttl_whatif(con).to_dicts()[0]
    assert (w["expired_requests"], w["write_tokens"]) == (0, 3000)


# ---------------------------------------------------------------------------------------------
# one quantile definition: every p50/p90/p95/p99 is the linear interpolation between order
# statistics at (n - 1) * p (numpy's default method, DuckDB's quantile_cont), computed here by numpy


def _linear(values: list[float], p: float) -> float | None:
    import numpy as np

    return float(np.quantile(np.array(values, dtype=float), p, method="linear")) if values else None


def test_gaps_sessions_and_working_set_share_one_quantile_definition(con: Any) -> None:
    rows = gaps.gap_rows(con).to_dicts()
    summary = gaps.gap_summary(con).to_dicts()[0]
    for kind, prefix in ((None, ""), ("human", "human_"), ("agent", "agent_")):
        values = [r["gap_s"] for r in rows if kind is None or r["kind"] == kind]
        for p in (0.5, 0.9, 0.99):
            assert summary[f"{prefix}p{round(p * 100)}_s"] == pytest.approx(_linear(values, p)), (kind, p)
    per_session = sessions.sessions(con).to_dicts()
    s = sessions.session_summary(con).to_dicts()[0]
    for key, column, p in (
        ("requests_p50", "requests", 0.5),
        ("turns_p50", "turns", 0.5),
        ("duration_p50_s", "duration_s", 0.5),
        ("duration_p90_s", "duration_s", 0.9),
        ("context_start_p50", "context_start", 0.5),
        ("context_end_p90", "context_end", 0.9),
        ("growth_per_turn_p50", "growth_per_turn", 0.5),
    ):
        values = [r[column] for r in per_session if r[column] is not None]
        assert s[key] == pytest.approx(_linear(values, p)), key
    series = working_set.working_set_series(con, ttl_s=300, resolution_s=60)
    ws = working_set.summarise(series, 300, 60)
    tokens = series["tokens"].to_list()
    assert (ws["p50_tokens"], ws["p95_tokens"]) == pytest.approx(
        (_linear(tokens, 0.5), _linear(tokens, 0.95))
    )


def test_no_sessions_sum_to_zero_and_have_no_quantiles(con: Any) -> None:
    """Counts and sums over no sessions are 0 (they add up over windows); quantiles, means and
    ratios are null: there is no data."""
    s = sessions.session_summary(con, Selection(since=at(10**6))).to_dicts()[0]
    assert (s["sessions"], s["requests"], s["turns"], s["idle_returns"], s["idle_return_reload_tokens"]) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert (s["requests_p50"], s["duration_mean_s"], s["growth_per_turn_mean"], s["reuse_ratio"]) == (
        None,
        None,
        None,
        None,
    )
