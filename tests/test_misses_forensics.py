"""The miss causes users hunt by hand (issue 24): the TTL in force carried across requests that write
nothing, process restarts, reads that fall back to the static prefix, client versions, one session's timeline,
boundary comparisons and write amplification. Every expected figure is fixed by the construction of
the transcripts below (see the comments), never computed by the code under test."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import TESTDATA
from tests.test_misses import OPUS, READ, SONNET, W1H, W5M, Cli, Transcript
from traceflow.analysis import misses
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

CLAUDE = get("claude-code")
T0 = dt.datetime(2026, 5, 4, 9, 0, tzinfo=dt.UTC)
OLD, NEW = "2.1.68", "2.1.69"


class Session(Transcript):
    """A transcript whose lines carry ``version`` and that can end its agent process (``exit``: the
    ``cost-state`` line Claude Code 2.1.332 writes as its process exits)."""

    def __init__(self, session: str, start: dt.datetime, version: str) -> None:
        super().__init__(session, start)
        self.version = version

    def _base(self, kind: str) -> dict[str, Any]:
        rec = super()._base(kind)
        rec["version"] = self.version
        return rec

    def exit(self) -> None:
        self.lines.append({"type": "cost-state", "sessionId": self.session, "totalCostUSD": 0.5})


def _corpus(root: Path) -> None:
    """Prompt = cold + read + write; reusable = min(previous prompt, own prompt); a miss reads more
    than 1,024 below its reusable prefix; missed = reusable - read."""
    a = Session("a", T0, OLD)  # 1-hour writes, then a request that only reads
    a.request(0, cold=3, read=0, w1h=10000)  # a1 10003: first_request
    a.request(5, cold=3, read=10000)  # a2 10003: hit; writes nothing (the TTL in force stays 1 h)
    a.request(1200, cold=3, read=0, w1h=10000)  # a3 10003, 20 min later: within 1 h: unexplained 10003
    a.write(root / "a.jsonl")
    b = Session("b", T0 + dt.timedelta(hours=1), NEW)  # reads fall back to the static prefix (20,000)
    b.request(0, cold=3, read=20000, w5m=5000)  # b1 25003: first_request; its read is the prefix
    b.request(5, cold=3, read=25000, w5m=1000)  # b2 26003: hit
    b.request(20, cold=3, read=20000, w5m=6500)  # b3 26503, 20 s after a hit: prefix_break 6003
    b.request(20, cold=3, read=21024, w5m=6000)  # b4 27027: read = prefix + 1,024: prefix_break 5479
    b.request(20, cold=3, read=21025, w5m=7000)  # b5 28028: read one above: unexplained 6002
    b.request(20, cold=3, read=28000, w5m=500)  # b6 28503: reusable 28028: hit
    b.write(root / "b.jsonl")
    c = Session("c", T0 + dt.timedelta(hours=2), NEW)  # the agent process restarts three times
    c.request(0, cold=3, read=0, w5m=8000)  # c1 8003: first_request
    c.request(5, cold=3, read=8000, w5m=500)  # c2 8503: hit
    c.exit()
    c.request(30, cold=3, read=0, w5m=9000)  # c3 9003, 30 s after a restart: a restart miss of 8503
    c.request(5, cold=3, read=9000, w5m=200)  # c4 9203: hit
    c.exit()
    c.request(400, cold=3, read=0, w5m=9500)  # c5 9503, restart after 400 s > 5 min: ttl_expired 9203
    c.request(5, cold=3, read=9500, w5m=100)  # c6 9603: hit
    c.exit()
    c.request(10, cold=3, read=9600, w5m=100)  # c7 9703, after a restart: a hit (restart, no cause)
    c.write(root / "c.jsonl")
    d = Session("d", T0 + dt.timedelta(hours=3), OLD)
    d.request(0, cold=3, read=0, w5m=6000)  # d1 6003: first_request
    d.request(5, cold=3, read=0, w5m=6200, model=OPUS)  # d2 6203: model_switch 6003
    d.compaction(3)
    d.request(7, cold=3, read=0, w5m=5000, model=OPUS)  # d3 5003 after a compaction event: 5003
    d.write(root / "d.jsonl")


def _cost(tokens: int, per_m: float, write: float) -> float:
    return tokens * per_m * 1e-6 * (write - READ)


# What the construction above says, cause by cause (Sonnet $3 / M input, Opus $5 / M).
EXPECTED: dict[str, Any] = {
    "left_out": [],  # every request is Claude Code's, which records what misses needs
    "requests": 19,
    "misses": 12,
    "not_applicable": 0,  # every request has a session
    "missed_tokens": 10003 + 6003 + 5479 + 6002 + 8503 + 9203 + 6003 + 5003,
    "by_cause": {
        "first_request": {"misses": 4, "missed_tokens": 0, "miss_cost_usd": 0.0},
        "model_switch": {"misses": 1, "missed_tokens": 6003, "miss_cost_usd": _cost(6003, 5, W5M)},
        "compaction": {"misses": 1, "missed_tokens": 5003, "miss_cost_usd": _cost(5003, 5, W5M)},
        "ttl_expired": {"misses": 1, "missed_tokens": 9203, "miss_cost_usd": _cost(9203, 3, W5M)},
        "restart": {"misses": 1, "missed_tokens": 8503, "miss_cost_usd": _cost(8503, 3, W5M)},
        "prefix_break": {
            "misses": 2,
            "missed_tokens": 6003 + 5479,
            "miss_cost_usd": _cost(6003 + 5479, 3, W5M),
        },
        "unexplained": {
            "misses": 2,
            "missed_tokens": 10003 + 6002,
            "miss_cost_usd": _cost(10003, 3, W1H) + _cost(6002, 3, W5M),
        },
    },
}

#: Each session's causes in order (None: a hit), its TTL in force and its restart flags.
CAUSES_IN_ORDER = {
    "a": [("first_request", 300), (None, 3600), ("unexplained", 3600)],
    "b": [
        ("first_request", 300),
        *[(c, 300) for c in (None, "prefix_break", "prefix_break", "unexplained", None)],
    ],
    "c": [
        ("first_request", 300),
        *[(c, 300) for c in (None, "restart", None, "ttl_expired", None, None)],
    ],
    "d": [("first_request", 300), ("model_switch", 300), ("compaction", 300)],
}


def _approx(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-9, abs=1e-12)
    return value


@pytest.fixture
def corpus(lake: Lake, tmp_path: Path) -> Lake:
    _corpus(tmp_path / "logs")
    summary = run_import(lake, CLAUDE, [tmp_path / "logs"])
    assert summary.skipped == 0 and summary.rows["requests"] == 19
    return lake


def test_each_designed_miss_gets_its_cause(corpus: Lake, cli: Cli) -> None:
    code, out, err = cli("misses", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert list(got["by_cause"]) == list(misses.CAUSES)
    assert got == _approx(EXPECTED)


def test_causes_ttl_and_restarts_request_by_request(corpus: Lake) -> None:
    frame = misses.miss_rows(corpus.connect(["requests", "events", "metric_points"]))
    for session, want in CAUSES_IN_ORDER.items():
        rows = frame.filter(frame["session_id"] == session).sort("position")
        assert list(zip(rows["cause"], rows["ttl_in_force_s"], strict=True)) == want, session
    c = frame.filter(frame["session_id"] == "c").sort("position")
    assert c["restart"].to_list() == [None, None, "restart", None, "restart", None, "restart"]
    assert frame.filter(frame["session_id"] != "c")["restart"].null_count() == 19 - 7


def test_a_read_only_request_keeps_the_1h_ttl(corpus: Lake, cli: Cli) -> None:
    # the defect of issue 22: a3 (20 min after a2, which only read a 1-hour prefix) was ttl_expired
    code, out, err = cli("misses", "--list", "--format", "json")
    assert code == 0, err
    a3 = [r for r in json.loads(out) if r["session_id"] == "a" and r["position"] == 3]
    assert len(a3) == 1
    assert (a3[0]["cause"], a3[0]["ttl_in_force_s"], a3[0]["missed_tokens"]) == ("unexplained", 3600, 10003)
    assert round(a3[0]["gap_s"]) == 1200


def test_misses_by_version(corpus: Lake, cli: Cli) -> None:
    code, out, err = cli("misses", "--by", "version", "--format", "json")
    assert code == 0, err
    got = {g["version"]: g for g in json.loads(out)}
    assert set(got) == {OLD, NEW}
    # 2.1.68: sessions a and d (6 requests; misses a1, a3, d1, d2, d3); 2.1.69: b and c (13; b1, b3,
    # b4, b5, c1, c3, c5)
    assert (got[OLD]["requests"], got[OLD]["misses"]) == (6, 5)
    assert (got[NEW]["requests"], got[NEW]["misses"]) == (13, 7)
    assert got[OLD]["missed_tokens"] == 10003 + 6003 + 5003
    assert got[NEW]["missed_tokens"] == 6003 + 5479 + 6002 + 8503 + 9203
    assert got[NEW]["by_cause"]["prefix_break"]["misses"] == 2
    code, out, _ = cli("mix", "--by", "version", "--format", "json")
    assert code == 0
    assert {g["version"]: g["requests"] for g in json.loads(out)} == {OLD: 6, NEW: 13}
    code, out, _ = cli("gaps", "--by", "version", "--format", "json")
    assert code == 0
    assert {g["version"]: g["gaps"] for g in json.loads(out)["groups"]} == {OLD: 4, NEW: 11}
    code, out, _ = cli("sessions", "--by", "version", "--format", "json")
    assert code == 0
    assert {g["version"]: g["sessions"] for g in json.loads(out)} == {OLD: 2, NEW: 2}


# -- the real captures ---------------------------------------------------------------------------


def _fake_prompt(k: int) -> tuple[int, int]:
    """The fake API's k-th answer (tests/data/claude-code-otlp, tests/fake_anthropic.py): input
    11 + 100(k-1), cache creation 333 + 100(k-1), cache read 4444 + 100(k-1): (prompt, read)."""
    step = 100 * (k - 1)
    return (11 + step) + (333 + step) + (4444 + step), 4444 + step


@pytest.mark.parametrize("source", ["otlp", "transcripts"])
def test_real_continue_and_resume_are_classed(lake: Lake, cli: Cli, source: str) -> None:
    """json-full: A1 (requests 1, 2), A2 `--continue` (3), A3 `--resume` (4) in one session; G1
    (23, 24), G2 `--continue` (25, 26) in another. The fake API's reads grow by 100 a request, so
    requests 3 and 4 read 444 below their reusable prefix (hits) and request 25 reads 4,844 below
    (a miss): a restart."""
    run = TESTDATA / "claude-code-otlp" / "json-full"
    if source == "otlp":
        run_import(lake, get("otlp-json"), [run / "otlp"])  # each request as a log event and a span
    else:
        run_import(lake, CLAUDE, [run / "transcripts"])
    con = lake.connect(["requests", "events", "metric_points"])
    assert con.execute("SELECT count(*) FROM requests").fetchone() == (20,)
    frame = misses.miss_rows(con)
    flagged = frame.filter(frame["restart"].is_not_null()).sort("started_at")
    kinds = ["continue", "resume", "continue"] if source == "otlp" else ["restart"] * 3
    assert flagged["position"].to_list() == [3, 4, 3]
    assert flagged["restart"].to_list() == kinds
    assert flagged["session_id"].to_list() == [
        "346a579e-0006-46c1-ab2b-585609badaf1",
        "346a579e-0006-46c1-ab2b-585609badaf1",
        "b1574363-a02f-4e55-b74f-deac42f9749b",
    ]
    prompt_2, _ = _fake_prompt(2)
    _, read_3 = _fake_prompt(3)
    assert prompt_2 - read_3 == 444  # within 1,024: a hit
    assert flagged["cause"].to_list() == [None, None, "restart"]
    prompt_24, _ = _fake_prompt(24)
    _, read_25 = _fake_prompt(25)
    assert flagged["missed_tokens"].to_list() == [0, 0, prompt_24 - read_25]
    # a connection without the metric_points view reads no OTLP restart point
    bare = misses.miss_rows(lake.connect(["requests", "events"]))
    assert bare["restart"].null_count() == (20 if source == "otlp" else 17)
    code, out, err = cli("misses", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["by_cause"]["restart"] == {
        "misses": 1,
        "missed_tokens": 4844,
        "miss_cost_usd": pytest.approx(_cost(4844, 5, W5M)),  # claude-opus-5-5: $5 / M, 5-minute writes
    }


def test_transcripts_of_2_1_197_have_no_restart_marker(lake: Lake) -> None:
    # 2.1.197 writes no cost-state line: its --continue and --resume are not told apart from a turn
    run = TESTDATA / "claude-code-otlp" / "v2.1.197-json-full" / "transcripts"
    run_import(lake, CLAUDE, [run])
    con = lake.connect(["requests", "events", "metric_points"])
    assert con.execute("SELECT count(*) FROM events WHERE name = 'session_restart'").fetchone() == (0,)
    assert misses.miss_rows(con)["restart"].null_count() == 20


# -- timeline ------------------------------------------------------------------------------------


def test_timeline_lists_each_designed_session_in_order(corpus: Lake, cli: Cli) -> None:
    for session, want in CAUSES_IN_ORDER.items():
        code, out, err = cli("timeline", session, "--format", "json")
        assert code == 0, err
        got = json.loads(out)
        assert [(r["cause"], r["ttl_in_force_s"]) for r in got] == want, session
        assert [r["position"] for r in got] == list(range(1, len(want) + 1))
        assert all(not r["subagent"] for r in got)
    code, out, _ = cli("timeline", "b", "--format", "json")
    b = json.loads(out)
    assert [r["missed_tokens"] for r in b] == [0, 0, 6003, 5479, 6002, 0]
    assert [r["cache_read_tokens"] for r in b] == [20000, 25000, 20000, 21024, 21025, 28000]
    assert [r["cache_write_5m_tokens"] for r in b] == [5000, 1000, 6500, 6000, 7000, 500]
    assert b[2]["miss_cost_usd"] == pytest.approx(_cost(6003, 3, W5M))
    assert [round(r["gap_s"]) if r["gap_s"] is not None else None for r in b] == [None, 5, 20, 20, 20, 20]
    code, out, _ = cli("timeline", "a", "--format", "json")
    a = json.loads(out)
    assert [(r["cache_write_1h_tokens"], r["agent_version"]) for r in a] == [
        (10000, OLD),
        (0, OLD),
        (10000, OLD),
    ]
    code, out, _ = cli("timeline", "c")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "session c: 7 requests (0 of sub-agents), 3 misses, 17,706 missed tokens, $0.0611"
    body = lines[3:]
    # the cause (a process restart) and the restart flag: both on the third line, the flag alone on two
    assert [ln.count("restart") for ln in body] == [0, 0, 2, 0, 1, 0, 1]
    assert all("█" in ln or "▒" in ln for ln in body)
    code, out, _ = cli("timeline", "c", "--format", "csv")
    assert code == 0 and out.splitlines()[0].split(",")[0] == "started_at" and len(out.splitlines()) == 8


def test_timeline_marks_subagents_and_refuses_an_unknown_session(lake: Lake, cli: Cli) -> None:
    run_import(lake, CLAUDE, [TESTDATA / "claude-code-otlp" / "json-full" / "transcripts"])
    code, out, err = cli("timeline", "969233c2-33f6-4f26-b58e-4b556d8d2085", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    # F: the main request, the sub-agent's two, the main request that took its answer
    assert [r["subagent"] for r in got] == [False, True, True, False]
    assert [r["session_id"] for r in got][1:3] == ["agent-a1212a14a2634aa30"] * 2
    assert [r["cause"] for r in got][:2] == ["first_request", "first_request"]
    code, _, err = cli("timeline", "no-such-session")
    assert code == 2 and "no requests of session 'no-such-session'" in err


def test_report_links_each_session_of_the_misses_chart_to_its_timeline(corpus: Lake, tmp_path: Path) -> None:
    from traceflow.dashboards.render import render_html

    page, charts, data = render_html(corpus.connect())
    frame = data.frames["misses"]
    # the four sessions lost tokens: c (8503 + 9203), b (6003 + 5479 + 6002), d (6003 + 5003), a (10003)
    sessions = frame.filter(frame["session"].is_not_null())
    assert sorted(set(sessions["session"].to_list())) == ["a", "b", "c", "d"]
    assert dict(sessions.group_by("session").agg(pl.col("missed_tokens").sum()).iter_rows()) == {
        "a": 10003,
        "b": 6003 + 5479 + 6002,
        "c": 8503 + 9203,
        "d": 6003 + 5003,
    }
    spec = json.dumps([c.to_dict() for d, c in charts if d.key == "misses"])
    for s in "abcd":
        assert f'"#timeline-{s}"' in spec
        assert f'<details id="timeline-{s}"><summary>{s}</summary>' in page
    assert "session c: 7 requests (0 of sub-agents), 3 misses" in data.timelines["c"]


# -- check: client versions and write amplification -----------------------------------------------

DAY = dt.datetime(2026, 6, 10, tzinfo=dt.UTC)
CHECK_ARGS = ("--since", "2026-06-10", "--until", "2026-06-11", "--format", "json")


def _version_lake(root: Path, lake: Lake) -> None:
    """Seven baseline days, one healthy session each on 2.1.68 (four requests: a first request, three
    hits; writes 11,500, reads 31,500); the window day three sessions on 2.1.69 whose third request
    falls back to the static prefix (5,000): a prefix break (writes 12,000, reads 31,000 each)."""
    for d in range(-7, 0):
        s = Session(f"old{d + 7}", DAY + dt.timedelta(days=d, hours=12), OLD)
        s.request(0, cold=3, read=0, w5m=10000)
        for read in (10000, 10500, 11000):
            s.request(5, cold=3, read=read, w5m=500)
        s.write(root / f"old{d + 7}.jsonl")
    for i in range(3):
        s = Session(f"new{i}", DAY + dt.timedelta(hours=12 + i), NEW)
        s.request(0, cold=3, read=5000, w5m=5000)  # 10003: the static prefix was cached elsewhere
        s.request(5, cold=3, read=10000, w5m=500)  # 10503: hit
        s.request(5, cold=3, read=5000, w5m=6000)  # 11003: reusable 10503, read 5000: prefix_break
        s.request(5, cold=3, read=11000, w5m=500)  # 11503: hit
        s.write(root / f"new{i}.jsonl")
    run_import(lake, CLAUDE, [root])


def test_check_names_the_version_whose_client_misses_rose(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    _version_lake(tmp_path / "logs", lake)
    code, out, err = cli("check", *CHECK_ARGS)
    assert code == 4, err
    got = json.loads(out)
    assert [f["check"] for f in got["fired"]] == ["version_regression"]
    fired = got["fired"][0]
    assert (fired["version"], fired["previous_version"]) == (NEW, OLD)
    assert fired["window"] == pytest.approx(3 / 12) and fired["baseline"] == 0.0
    assert [(v["version"], v["requests"], v["client_misses"], v["in_window"]) for v in got["versions"]] == [
        (OLD, 28, 0, False),
        (NEW, 12, 3, True),
    ]
    assert got["window"]["write_amplification"] == pytest.approx(12000 / 31000)
    assert got["baseline"]["write_amplification"] == pytest.approx(11500 / 31500)
    code, out, _ = cli("check", *CHECK_ARGS[:4])
    assert code == 4 and f"fired: version_regression {NEW} after {OLD}" in out
    # a rise of 0.25 under a 0.3 threshold does not fire; the write amplification rose 6 %
    code, out, _ = cli("check", *CHECK_ARGS, "--max-version-rise", "0.3")
    assert code == 0 and json.loads(out)["fired"] == []
    code, out, _ = cli("check", *CHECK_ARGS, "--max-version-rise", "0.3", "--max-amplification-rise", "0.05")
    fired = json.loads(out)["fired"]
    assert code == 4 and [f["check"] for f in fired] == ["write_amplification"]
    assert fired[0]["rise"] == pytest.approx((12000 / 31000) / (11500 / 31500) - 1)


# -- compare: boundaries against matched idle gaps -----------------------------------------------


def _restart_lake(root: Path, lake: Lake) -> None:
    """Five sessions, every gap 90 s (one stratum: 5-minute TTL, gaps of 60-120 s). q2 and q4 are
    controls (ten, one miss: session 0's q4), q3 follows a restart (five, four misses)."""
    for i in range(5):
        s = Session(f"r{i}", T0 + dt.timedelta(hours=i), NEW)
        s.request(0, cold=3, read=0, w5m=10000)  # q1 10003: first request, left out
        s.request(90, cold=3, read=10000, w5m=500)  # q2 10503: a hit (control)
        s.exit()
        if i < 4:
            s.request(90, cold=3, read=0, w5m=11000)  # q3 11003 after a restart: miss 10503
        else:
            s.request(90, cold=3, read=10500, w5m=500)  # q3: a restart that hit
        if i == 0:
            s.request(90, cold=3, read=0, w5m=11500)  # q4 11503: a control that missed 11003
        else:
            s.request(90, cold=3, read=11000, w5m=500)  # q4: a hit (control)
        s.write(root / f"r{i}.jsonl")
    run_import(lake, CLAUDE, [root])


def test_compare_restarts_with_matched_idle_gaps(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    _restart_lake(tmp_path / "logs", lake)
    code, out, err = cli("compare", "--boundary", "restart", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    b, c, d = got["boundaries"], got["controls"], got["difference"]
    assert (b["requests"], b["misses"], b["unmatched"]) == (5, 4, 0)
    assert (c["requests"], c["misses"], c["effective_requests"]) == (10, 1, 10.0)
    assert b["missed_tokens_per_request"] == pytest.approx(4 * 10503 / 5)
    assert c["missed_tokens_per_request"] == pytest.approx(11003 / 10)
    # Wilson 95 % intervals of 4/5 and 1/10 (the published values: 0.3755-0.9638, 0.0179-0.4042)
    assert (b["miss_rate"], b["ci_low"], b["ci_high"]) == pytest.approx((0.8, 0.3755, 0.9638), abs=1e-4)
    assert (c["miss_rate"], c["ci_low"], c["ci_high"]) == pytest.approx((0.1, 0.0179, 0.4042), abs=1e-4)
    # Newcombe's interval of the difference: 0.7 -/+ the square-added distances to the limits
    low = 0.7 - ((0.8 - 0.3755) ** 2 + (0.4042 - 0.1) ** 2) ** 0.5
    high = 0.7 + ((0.9638 - 0.8) ** 2 + (0.1 - 0.0179) ** 2) ** 0.5
    assert (d["miss_rate"], d["ci_low"], d["ci_high"]) == pytest.approx((0.7, low, high), abs=2e-4)
    assert got["strata"] == [
        {
            "ttl_in_force_s": 300,
            "gap_from_s": 60,
            "gap_to_s": 120,
            "boundary_requests": 5,
            "boundary_misses": 4,
            "control_requests": 10,
            "control_misses": 1,
        }
    ]
    code, out, _ = cli("compare")
    assert code == 0 and "matched idle gaps" in out and out.startswith("restart: 5 transitions")
    code, _, err = cli("compare", "--boundary", "moon")
    assert code == 2 and "choose from restart, version, model" in err


def test_the_docs_worked_example_is_this_corpus(corpus: Lake, cli: Cli) -> None:
    from traceflow.analysis.timeline import table, timeline
    from traceflow.output import Rows, render

    readme = (Path(__file__).resolve().parents[1] / "docs" / "forensics.md").read_text()
    code, out, _ = cli("misses")
    assert code == 0 and out.strip() in readme
    keep = ["gap", "cold", "read", "write_5m", "write_1h", "context", "ttl", "restart", "cause"]
    keep += ["missed", "miss_cost_usd"]
    con = corpus.connect(["requests", "events", "metric_points"])
    for session in "abcd":
        rows = table(timeline(con, session), bars=False)
        idx = [rows.columns.index(k) for k in keep]
        text = render(Rows(keep, [[r[i] for i in idx] for r in rows.rows]), "table")
        assert text in readme, session


def test_write_amplification_per_session_and_per_day(corpus: Lake, cli: Cli) -> None:
    # writes / reads per session: a 20,000 / 10,000; b 26,000 / 135,049; c 27,400 / 36,100; d reads 0
    per_session = {"a": 20000 / 10000, "b": 26000 / 135049, "c": 27400 / 36100, "d": None}
    code, out, err = cli("sessions", "--list", "--format", "json")
    assert code == 0, err
    got = {r["root_session_id"]: r["write_amplification"] for r in json.loads(out)}
    assert got == {k: (pytest.approx(v) if v is not None else None) for k, v in per_session.items()}
    code, out, _ = cli("sessions", "--format", "json")
    summary = json.loads(out)
    assert summary["write_amplification"] == pytest.approx(90600 / 181149)
    assert summary["write_amplification_p50"] == pytest.approx(27400 / 36100)  # the median of three
    assert summary["write_amplification_max"] == pytest.approx(2.0)
    code, out, _ = cli("report", "--format", "json")
    assert code == 0
    assert json.loads(out)["write_amplification"] == [
        {
            "day": "2026-05-04",
            "cache_write_tokens": 90600,
            "cache_read_tokens": 181149,
            "write_amplification": pytest.approx(90600 / 181149),
        }
    ]


@pytest.mark.slow
def test_clicking_a_session_of_the_misses_chart_opens_its_timeline(corpus: Lake, tmp_path: Path) -> None:
    """In a real headless Chromium (as tests/test_report_browser.py): the session bar links to the
    session's timeline in the page, and the linked <details> opens."""
    import time

    from tests.test_report_browser import _driver, _need_browser
    from traceflow.dashboards.render import render_html

    _need_browser()
    page, _, _ = render_html(corpus.connect())
    path = tmp_path / "report.html"
    path.write_text(page)
    driver = _driver()
    try:
        driver.get(path.as_uri())
        deadline = time.monotonic() + 60
        while driver.execute_script("return document.body.dataset.chartsDone") != "true":
            assert time.monotonic() < deadline, "the charts were not drawn"
            time.sleep(0.2)
        bars = driver.find_elements("css selector", '#chart-misses path[aria-label*="session: c;"]')
        assert bars, "no bar of session c in the misses chart"
        assert not driver.execute_script("return document.getElementById('timeline-c').open")
        driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", bars[0])
        while driver.execute_script("return location.hash") != "#timeline-c":
            assert time.monotonic() < deadline, "the click did not follow the link"
            time.sleep(0.1)
        assert driver.execute_script("return document.getElementById('timeline-c').open")
        text = driver.execute_script("return document.getElementById('timeline-c').textContent")
        assert "session c: 7 requests" in text and "restart" in text
    finally:
        driver.quit()


def test_compare_version_and_model_boundaries(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    """Three sessions, gaps of 90 s: q2 a control (hit), q3 on a new client version (sessions 0 and
    1 miss), q4 a control (hit), q5 on Opus (a model switch, a miss in each), q6 a control after the
    switch (hit). Every request writes 5-minute tokens: one stratum (5 min, 60-120 s)."""
    for i in range(3):
        s = Session(f"v{i}", T0 + dt.timedelta(hours=i), OLD)
        s.request(0, cold=3, read=0, w5m=10000)  # q1 10003
        s.request(90, cold=3, read=10000, w5m=500)  # q2 10503: hit
        s.version = NEW
        if i < 2:
            s.request(90, cold=3, read=0, w5m=11000)  # q3 11003 on 2.1.69: miss 10503
        else:
            s.request(90, cold=3, read=10500, w5m=500)  # q3 on 2.1.69: hit
        s.request(90, cold=3, read=11000, w5m=500)  # q4 11503: hit
        s.request(90, cold=3, read=0, w5m=12000, model=OPUS)  # q5 12003 on Opus: miss 11503
        s.request(90, cold=3, read=12000, w5m=500, model=OPUS)  # q6 12503: hit
        s.write(tmp_path / "logs" / f"v{i}.jsonl")
    run_import(lake, CLAUDE, [tmp_path / "logs"])
    code, out, err = cli("compare", "--boundary", "version", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert (got["boundaries"]["requests"], got["boundaries"]["misses"]) == (3, 2)
    # the controls: q2, q4, q6 of each session (no boundary of any kind), all hits
    assert (got["controls"]["requests"], got["controls"]["misses"]) == (9, 0)
    assert got["boundaries"]["missed_tokens_per_request"] == pytest.approx(2 * 10503 / 3)
    assert got["difference"]["miss_rate"] == pytest.approx(2 / 3)
    lo, hi = got["boundaries"]["ci_low"], got["boundaries"]["ci_high"]
    assert lo < 2 / 3 < hi and got["controls"]["ci_low"] == 0.0
    code, out, _ = cli("compare", "--boundary", "model", "--format", "json")
    got = json.loads(out)
    assert (got["boundaries"]["requests"], got["boundaries"]["misses"]) == (3, 3)
    assert got["boundaries"]["missed_tokens"] == 3 * 11503
    assert (got["controls"]["requests"], got["controls"]["misses"]) == (9, 0)


@pytest.mark.parametrize("split_min", [1, 61, 125, 127, 187])
def test_misses_add_up_over_disjoint_windows(corpus: Lake, cli: Cli, split_min: int) -> None:
    """The carried TTL, the first read and the restarts are judged over the whole lake: a window's
    misses do not depend on where it starts (split inside sessions a, b, c: after c's first restart)."""
    cut = (T0 + dt.timedelta(minutes=split_min)).strftime("%Y-%m-%dT%H:%M:%SZ")
    halves = []
    for args in (("--until", cut), ("--since", cut)):
        code, out, err = cli("misses", *args, "--format", "json")
        assert code == 0, err
        halves.append(json.loads(out))
    assert halves[0]["requests"] + halves[1]["requests"] == EXPECTED["requests"]
    for cause, want in EXPECTED["by_cause"].items():
        got = [h["by_cause"][cause] for h in halves]
        assert got[0]["misses"] + got[1]["misses"] == want["misses"], cause
        assert got[0]["missed_tokens"] + got[1]["missed_tokens"] == want["missed_tokens"], cause


def test_a_restart_appended_to_an_imported_transcript_is_found(lake: Lake, tmp_path: Path) -> None:
    """`--continue` appends to the session's file: the exit seen by one import and the prompt seen by
    the next still make a restart (the importer keeps the file's state between imports)."""
    s = Session("g", T0, NEW)
    s.request(0, cold=3, read=0, w5m=8000)  # 8003
    s.request(5, cold=3, read=8000, w5m=500)  # 8503: hit
    s.exit()
    path = s.write(tmp_path / "logs" / "g.jsonl")
    run_import(lake, CLAUDE, [tmp_path / "logs"])
    s.request(30, cold=3, read=0, w5m=9000)  # 9003 after the restart: a restart miss of 8503
    s.write(path)
    summary = run_import(lake, CLAUDE, [tmp_path / "logs"])
    assert summary.rows["requests"] == 1
    frame = misses.miss_rows(lake.connect(["requests", "events", "metric_points"])).sort("position")
    assert frame["restart"].to_list() == [None, None, "restart"]
    assert (frame["cause"][2], frame["missed_tokens"][2]) == ("restart", 8503)


def test_otlp_restart_points_by_session_or_by_user(lake: Lake) -> None:
    """session.count points as the OTLP mapper stores them: one with the session's id (a --resume),
    one without any (OTEL_METRICS_INCLUDE_SESSION_ID=false): the latter marks the first main-stream
    request after it of the session that the other points of its export name (a token point of p;
    without one it is unlinked: tests/test_misses_definitions.py)."""
    sec = dt.timedelta(seconds=1)
    rows = []
    # (session, start s, read, write): p3 follows the id-less point at 290 s; q2 the point of q at 350 s
    for i, (session, start, read, write) in enumerate(
        [
            ("p", 0, 0, 8000),
            ("p", 10, 8000, 500),
            ("q", 100, 0, 7000),
            ("p", 300, 0, 9000),
            ("p", 310, 9000, 100),
            ("q", 400, 0, 7500),
        ]
    ):
        rows.append(
            {
                "event_id": f"r{i}",
                "source": "otlp",
                "agent": "claude-code",
                "agent_version": NEW,
                "user_id": "u1",
                "session_id": session,
                "model": SONNET,
                "started_at": T0 + start * sec,
                "ended_at": T0 + (start + 2) * sec,
                "cold_input_tokens": 3,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "cache_write_5m_tokens": write,
                "cache_write_1h_tokens": 0,
                "output_tokens": 50,
                "attributes": {},
                "seq": i,
            }
        )
    lake.append("requests", rows)
    points = [
        {
            "event_id": f"m{i}",
            "source": "otlp",
            "agent": "claude-code",
            "session_id": session,
            "user_id": "u1",
            "name": "claude_code.session.count",
            "unit": "",
            "temporality": "delta",
            "start_time": T0 + at * sec,
            "time": T0 + (at + 30) * sec,
            "value": 1.0,
            "delta": 1.0,
            "attributes": {"start_type": "resume"},
        }
        for i, (session, at) in enumerate([(None, 290), ("q", 350)])
    ]
    # the id-less point's export (sent at 320 s) also carries a token point of session p
    points.append({**points[0], "event_id": "m2", "session_id": "p", "name": "claude_code.token.usage",
                   "attributes": {"type": "input"}})  # fmt: skip
    lake.append("metric_points", points)
    frame = misses.miss_rows(lake.connect(["requests", "events", "metric_points"]))
    flagged = frame.filter(frame["restart"].is_not_null()).sort("started_at")
    assert list(zip(flagged["session_id"], flagged["position"], flagged["cause"], strict=True)) == [
        ("p", 3, "restart"),  # the id-less point at 290 s, its export naming p: p3 (300 s) is next
        ("q", 2, "restart"),  # q's own point at 350 s; its gap 400 - 102 = 298 s is within the 5 min TTL
    ]
