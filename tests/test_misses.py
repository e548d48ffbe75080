"""Cache misses and their causes, the TTL in force, and the cache-health check, on hand-built Claude
Code transcripts whose every number is fixed by their construction (see each fixture's comments)."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.conftest import TESTDATA
from traceflow.analysis import misses
from traceflow.analysis.health import ALERT_EXIT
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
CLAUDE = get("claude-code")
SONNET = "claude-sonnet-4-5-20250929"  # $3 / M input tokens in the built-in prices
OPUS = "claude-opus-4-5-20251101"  # $5 / M input tokens
READ, W5M, W1H = 0.1, 1.25, 2.0  # the built-in multipliers


class Transcript:
    """Lines of one Claude Code transcript: each request is a user line then, ``took`` seconds later,
    the assistant line (the request starts at the user line and ends at the assistant line)."""

    def __init__(self, session: str, start: dt.datetime, *, agent: str | None = None) -> None:
        self.session, self.agent, self.t = session, agent, start
        self.lines: list[dict[str, Any]] = []
        self.n = 0

    def _base(self, kind: str) -> dict[str, Any]:
        self.n += 1
        rec: dict[str, Any] = {
            "type": kind,
            "sessionId": self.session,
            "cwd": "/home/u/proj",
            "version": "2.1.90",
            "isSidechain": self.agent is not None,
            "uuid": f"{self.session}-{self.agent}-{self.n}",
            "timestamp": self.t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        }
        if self.agent:
            rec["agentId"] = self.agent
        return rec

    def request(
        self,
        gap_s: float,
        *,
        cold: int,
        read: int,
        w5m: int = 0,
        w1h: int = 0,
        output: int = 100,
        model: str = SONNET,
        took: float = 2.0,
    ) -> None:
        """A request ``gap_s`` after the previous one ended (the first: at the start)."""
        self.t += dt.timedelta(seconds=gap_s)
        user = self._base("user")
        user["message"] = {"role": "user", "content": f"turn {self.n}"}
        user["promptId"] = f"p-{self.session}-{self.agent}-{self.n}"
        self.lines.append(user)
        self.t += dt.timedelta(seconds=took)
        a = self._base("assistant")
        a["requestId"] = f"req_{self.session}_{self.agent}_{self.n}"
        a["message"] = {
            "id": f"msg_{self.session}_{self.agent}_{self.n}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": cold,
                "cache_creation_input_tokens": w5m + w1h,
                "cache_read_input_tokens": read,
                "cache_creation": {"ephemeral_5m_input_tokens": w5m, "ephemeral_1h_input_tokens": w1h},
                "output_tokens": output,
            },
        }
        self.lines.append(a)

    def compaction(self, after_s: float) -> None:
        self.t += dt.timedelta(seconds=after_s)
        rec = self._base("system")
        rec.update(
            {"subtype": "compact_boundary", "compactMetadata": {"trigger": "auto", "preTokens": 11003}}
        )
        self.lines.append(rec)

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in self.lines))
        return path


T0 = dt.datetime(2026, 3, 2, 10, 0, tzinfo=dt.UTC)


def _designed(root: Path) -> None:
    """One designed miss of each cause, 400 s gaps under 1-hour writes that hit, a read exactly 1,024
    below its reusable prefix that hits. Prompt = cold + read + write; reusable = min(previous
    prompt, own prompt); missed = reusable - read."""
    s1 = Transcript("s1", T0)
    s1.request(0, cold=3, read=0, w1h=10000)  # r1 prompt 10003: first_request, missed 0
    s1.request(5, cold=3, read=10000, w1h=500)  # r2 10503: reusable 10003, read 10000: hit
    s1.request(400, cold=3, read=10500, w1h=200)  # r3 10703: 400 s after 1-hour writes: hit
    s1.request(400, cold=3, read=10700, w1h=100)  # r4 10803: hit again
    s1.request(4000, cold=3, read=0, w1h=10900)  # r5 10903: 4000 s > 1 h: ttl_expired, missed 10803
    s1.request(5, cold=3, read=0, w1h=11000, model=OPUS)  # r6 11003: model_switch, missed 10903
    s1.compaction(3)
    s1.request(7, cold=3, read=0, w1h=8000, model=OPUS)  # r7 8003 (-27 %): compaction event, missed 8003
    s1.request(5, cold=3, read=8000, w1h=300, model=OPUS)  # r8 8303: reusable 8003: hit
    s1.request(10, cold=3, read=2000, w1h=6500, model=OPUS)  # r9 8503: reusable 8303: unexplained, 6303
    s1.request(10, cold=3, read=0, w1h=3000, model=OPUS)  # r10 3003 < half of 8503: compaction, 3003
    s1.request(10, cold=3, read=1979, w1h=1100, model=OPUS)  # r11 3082: reusable 3003, 1,024 short: hit
    s1.write(root / "proj" / "s1.jsonl")
    sub = Transcript("s1", T0 + dt.timedelta(seconds=30), agent="x1")  # a sub-agent: its own stream
    sub.request(0, cold=3, read=9000, w1h=500)  # first_request (its own stream), missed 0
    sub.request(5, cold=3, read=9500, w1h=100)  # reusable min(9503, 9603) = 9503: hit
    sub.write(root / "proj" / "s1" / "subagents" / "agent-x1.jsonl")
    s2 = Transcript("s2", T0 + dt.timedelta(hours=3))
    s2.request(0, cold=3, read=0, w5m=5000)  # first_request
    s2.request(400, cold=3, read=0, w5m=5200)  # 400 s after 5-minute writes: ttl_expired, missed 5003
    s2.write(root / "proj" / "s2.jsonl")


@pytest.fixture
def designed(lake: Lake, tmp_path: Path) -> Lake:
    _designed(tmp_path / "logs")
    summary = run_import(lake, CLAUDE, [tmp_path / "logs"])
    assert summary.skipped == 0 and summary.rows["requests"] == 15
    return lake


# the expected figures, from the construction above
EXPECTED = {
    "requests": 15,
    "misses": 9,
    "missed_tokens": 10903 + 8003 + 3003 + 10803 + 5003 + 6303,
    "not_applicable": 0,
    "by_cause": {
        "first_request": {"misses": 3, "missed_tokens": 0, "miss_cost_usd": 0.0},
        "model_switch": {"misses": 1, "missed_tokens": 10903, "miss_cost_usd": 10903 * 5e-6 * (W1H - READ)},
        "compaction": {
            "misses": 2,
            "missed_tokens": 8003 + 3003,
            "miss_cost_usd": (8003 + 3003) * 5e-6 * (W1H - READ),
        },
        "ttl_expired": {
            "misses": 2,
            "missed_tokens": 10803 + 5003,
            # r5 after 1-hour writes (Sonnet), s2's second request after 5-minute writes (Sonnet)
            "miss_cost_usd": 10803 * 3e-6 * (W1H - READ) + 5003 * 3e-6 * (W5M - READ),
        },
        "restart": {"misses": 0, "missed_tokens": 0, "miss_cost_usd": 0.0},
        # r9 reads 2,000, more than s1's first read (0) + 1,024: not a prefix break
        "prefix_break": {"misses": 0, "missed_tokens": 0, "miss_cost_usd": 0.0},
        "unexplained": {"misses": 1, "missed_tokens": 6303, "miss_cost_usd": 6303 * 5e-6 * (W1H - READ)},
    },
}


def _approx(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-9, abs=1e-12)
    return value


def test_each_designed_miss_gets_its_cause(designed: Lake, cli: Cli) -> None:
    code, out, err = cli("misses", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert list(got) == ["requests", "misses", "missed_tokens", "not_applicable", "by_cause", "left_out"]
    assert got.pop("left_out") == []  # every agent of the lake records what misses needs
    assert list(got["by_cause"]) == list(misses.CAUSES)
    assert got == _approx(EXPECTED)


def test_list_has_one_row_per_miss(designed: Lake, cli: Cli) -> None:
    code, out, err = cli("misses", "--list", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    got = [
        (r["session_id"], r["position"], r["cause"], r["missed_tokens"], r["ttl_in_force_s"]) for r in rows
    ]
    assert got == [
        ("s1", 1, "first_request", 0, 300),
        ("agent-x1", 1, "first_request", 0, 300),
        ("s1", 5, "ttl_expired", 10803, 3600),
        ("s1", 6, "model_switch", 10903, 3600),
        ("s1", 7, "compaction", 8003, 3600),
        ("s1", 9, "unexplained", 6303, 3600),
        ("s1", 10, "compaction", 3003, 3600),
        ("s2", 1, "first_request", 0, 300),
        ("s2", 2, "ttl_expired", 5003, 300),
    ]
    r7 = rows[4]
    assert r7["compaction_event"] is True and rows[6]["compaction_event"] is False
    assert [round(r["gap_s"]) for r in rows if r["position"] == 5] == [4000]


def test_hits_include_the_400s_gaps_under_1h_writes(designed: Lake) -> None:
    frame = misses.miss_rows(designed.connect(["requests", "events"]))
    s1 = frame.filter(frame["session_id"] == "s1").sort("position")
    assert s1["miss"].to_list() == [True, False, False, False, True, True, True, False, True, True, False]
    assert s1["gap_s"].to_list()[2:4] == [400.0, 400.0]


def test_by_groups_and_formats(designed: Lake, cli: Cli) -> None:
    code, out, err = cli("misses", "--by", "model", "--format", "json")
    assert code == 0, err
    groups = {g["model"]: g for g in json.loads(out)}
    # Opus: r6..r11 (6 requests): model_switch, compaction x2, unexplained; Sonnet: the other 9
    assert groups[OPUS]["requests"] == 6 and groups[OPUS]["misses"] == 4
    assert groups[OPUS]["missed_tokens"] == 10903 + 8003 + 6303 + 3003
    assert groups[SONNET]["requests"] == 9 and groups[SONNET]["misses"] == 5
    assert groups[SONNET]["by_cause"]["first_request"]["misses"] == 3
    code, out, _ = cli("misses", "--by", "session,day", "--format", "csv")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("session,day,requests,misses,missed_tokens,miss_cost_usd,first_request_misses")
    assert lines[1].startswith("s1,2026-03-02,13,7,")  # s1 with its sub-agent
    assert lines[2].startswith("s2,2026-03-02,2,2,5003,")
    for fmt in ("table", "markdown", "csv"):
        code, out, _ = cli("misses", "--format", fmt)
        assert code == 0 and "unexplained" in out
    code, out, _ = cli("misses", "--list", "--format", "csv")
    assert code == 0 and len(out.splitlines()) == 1 + 9
    code, _, err = cli("misses", "--by", "colour")
    assert code == 2 and "choose from" in err


def test_selection_keeps_the_previous_request_of_the_window(designed: Lake, cli: Cli) -> None:
    # from r5 on (the window starts after r4): r5 is still judged against r4, not a first request
    since = (T0 + dt.timedelta(seconds=1000)).strftime("%Y-%m-%dT%H:%M:%SZ")
    until = (T0 + dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    code, out, err = cli("misses", "--since", since, "--until", until, "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["requests"] == 7  # r5..r11
    assert {c: v["misses"] for c, v in got["by_cause"].items()} == {
        "first_request": 0,
        "model_switch": 1,
        "compaction": 2,
        "ttl_expired": 1,
        "restart": 0,
        "prefix_break": 0,
        "unexplained": 1,
    }


# -- ttl --observed -----------------------------------------------------------------------------


def test_ttl_in_force_changes_on_the_day_writes_turn_to_5_minutes(
    lake: Lake, tmp_path: Path, cli: Cli
) -> None:
    day1 = Transcript("d1", T0)
    day1.request(0, cold=3, read=0, w1h=5000)
    day1.request(400, cold=3, read=5000, w1h=200)
    day1.write(tmp_path / "logs" / "d1.jsonl")
    day2 = Transcript("d2", T0 + dt.timedelta(days=1))
    day2.request(0, cold=3, read=0, w5m=4000, w1h=1000)  # 1h share 1000 / 5000 = 0.2
    day2.request(400, cold=3, read=0, w5m=5200, output=50)  # expired after 5-minute writes
    day2.write(tmp_path / "logs" / "d2.jsonl")
    run_import(lake, CLAUDE, [tmp_path / "logs"])
    code, out, err = cli("ttl", "--observed", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["days"] == [
        {"day": "2026-03-02", "ttl_in_force_s": 3600, "share_1h_writes": 1.0},
        {"day": "2026-03-03", "ttl_in_force_s": 300, "share_1h_writes": 1000 / (4000 + 1000 + 5200)},
    ]
    # Day 2 by the TTL what-if (queries/ttl.sql): q1 writes its context 5003; q2's prefix is q1's
    # context plus output, 5003 + 100 = 5103. Under 300 s q2 (gap 400 s) rewrites its whole context
    # 5203; under 3600 s it reads 5103 and writes 100. Sonnet input $3 / M; output costs the same.
    cost_300 = (5003 + 5203) * 3e-6 * W5M
    cost_3600 = (5003 + 100) * 3e-6 * W1H + 5103 * 3e-6 * READ
    assert got["changes"] == [
        {
            "day": "2026-03-03",
            "from_s": 3600,
            "to_s": 300,
            "extra_cost_usd": pytest.approx(cost_300 - cost_3600),
        }
    ]
    assert got["notes"] == []
    code, out, _ = cli("ttl", "--observed", "--by", "session", "--format", "json")
    assert [(d["session"], d["ttl_in_force_s"]) for d in json.loads(out)["days"]] == [
        ("d1", 3600),
        ("d2", 300),
    ]
    assert json.loads(out)["changes"] == []  # each session keeps its TTL
    code, out, _ = cli("ttl", "--observed")
    assert code == 0 and "TTL in force per UTC day" in out and "Changes" in out


def test_ttl_in_force_without_a_write_split_is_inferred_and_said(lake: Lake, cli: Cli) -> None:
    base = dict(source="test", agent="codex", model="gpt-5", cache_write_tokens=0, output_tokens=10)
    rows = []
    for i, (start, cold, read) in enumerate([(0, 5000, 0), (1000, 200, 5000), (3000, 5400, 0)]):
        t = T0 + dt.timedelta(seconds=start)
        rows.append(
            {
                **base,
                "event_id": f"e{i}",
                "session_id": "c1",
                "started_at": t,
                "ended_at": t + dt.timedelta(seconds=1),
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "seq": i,
            }
        )
    lake.append("requests", rows)
    code, out, err = cli("ttl", "--observed", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    # after a 999 s gap a hit, after a 1999 s gap a miss: one each, so not "most hit": 300
    assert got["days"] == [{"day": "2026-03-02", "ttl_in_force_s": 300, "share_1h_writes": None}]
    assert len(got["notes"]) == 1 and "no 5m/1h cache-write split" in got["notes"][0]
    assert "1 hit(s), 1 miss(es)" in got["notes"][0]


# -- check --------------------------------------------------------------------------------------

WINDOW = dt.datetime(2026, 3, 10, tzinfo=dt.UTC)


def _health_lake(root: Path, lake: Lake, *, drop: bool) -> None:
    """Seven baseline days of one healthy session each; the window day healthy or dropping."""
    for d in range(-7, 1):
        t = Transcript(f"h{d + 7}", WINDOW + dt.timedelta(days=d, hours=12))
        t.request(0, cold=3, read=0, w5m=10000)
        if d == 0 and drop:
            t.request(5, cold=3, read=0, w5m=10500)  # prompt 10503: reusable 10003, unexplained
            t.request(5, cold=3, read=0, w5m=11000)  # 11003: unexplained
        else:
            t.request(5, cold=3, read=10000, w5m=500)  # hit
            t.request(5, cold=3, read=10500, w5m=500)  # hit
        t.write(root / f"h{d + 7}.jsonl")
    run_import(lake, CLAUDE, [root])


BASELINE_REUSE = (10000 + 10500) / (10003 + 10503 + 11003)
WINDOW_ARGS = ("--since", "2026-03-10", "--until", "2026-03-11")


def test_check_is_quiet_on_a_healthy_day(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    _health_lake(tmp_path / "logs", lake, drop=False)
    code, out, err = cli("check", *WINDOW_ARGS, "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["status"] == "ok" and got["fired"] == []
    assert got["window"]["reuse_ratio"] == pytest.approx(BASELINE_REUSE)
    assert got["baseline"]["reuse_ratio"] == pytest.approx(BASELINE_REUSE)
    assert got["baseline"]["requests"] == 21 and got["window"]["requests"] == 3
    code, out, _ = cli("check", *WINDOW_ARGS)
    assert code == 0 and "cache health: ok" in out


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).bodies.append((self.headers["Content-Type"], self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    _Receiver.bodies = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Receiver.bodies
    finally:
        server.shutdown()
        server.server_close()


def test_check_fires_on_a_designed_drop_and_posts_the_alert(
    lake: Lake, tmp_path: Path, cli: Cli, receiver: tuple[str, list[tuple[str, bytes]]]
) -> None:
    _health_lake(tmp_path / "logs", lake, drop=True)
    url, bodies = receiver
    code, out, err = cli("check", *WINDOW_ARGS, "--format", "json", "--webhook", url)
    assert code == ALERT_EXIT == 4, err
    got = json.loads(out)
    assert got["status"] == "alert"
    fired = {f["check"]: f for f in got["fired"]}
    assert set(fired) == {"reuse_drop", "unexplained_misses"}
    assert fired["reuse_drop"]["window"] == 0.0  # nothing read in the window
    assert fired["reuse_drop"]["baseline"] == pytest.approx(BASELINE_REUSE)
    assert fired["reuse_drop"]["drop"] == pytest.approx(1.0) and fired["reuse_drop"]["threshold"] == 0.25
    assert fired["unexplained_misses"]["window"] == pytest.approx(2 / 3)
    assert fired["unexplained_misses"]["baseline"] == 0.0
    assert len(bodies) == 1
    content_type, body = bodies[0]
    assert content_type == "application/json"
    assert json.loads(body) == got
    # a looser threshold on the unexplained misses still fires on the drop alone
    code, out, _ = cli("check", *WINDOW_ARGS, "--format", "json", "--max-unexplained-rise", "0.9")
    assert code == 4 and [f["check"] for f in json.loads(out)["fired"]] == ["reuse_drop"]
    # an unreachable webhook is reported; the alert status stays
    code, _, err = cli("check", *WINDOW_ARGS, "--webhook", "http://127.0.0.1:9/none")
    assert code == 4 and "not delivered" in err


def test_check_alerts_on_a_silent_window_after_a_week_of_traffic(
    lake: Lake, tmp_path: Path, cli: Cli, receiver: tuple[str, list[tuple[str, bytes]]]
) -> None:
    """A dead collector: the baseline week has 21 requests, the window day none (and then fewer than
    ``--min-requests``); that is an alert, not "ok"."""
    _health_lake(tmp_path / "logs", lake, drop=False)
    url, bodies = receiver
    silent = ("--since", "2026-03-11", "--until", "2026-03-12")  # the day after the last request
    code, out, err = cli("check", *silent, "--baseline-days", "8", "--format", "json", "--webhook", url)
    assert code == ALERT_EXIT == 4, err
    got = json.loads(out)
    assert got["status"] == "alert"
    assert got["window"]["requests"] == 0 and got["baseline"]["requests"] == 24
    assert [f["check"] for f in got["fired"]] == ["silence"]
    fired = got["fired"][0]
    assert fired["window_requests"] == 0 and fired["baseline_requests"] == 24 and fired["threshold"] == 1
    assert "no requests" in fired["reason"]
    assert len(bodies) == 1 and json.loads(bodies[0][1]) == got
    code, out, _ = cli("check", *silent, "--baseline-days", "8")
    assert code == 4 and "cache health: alert" in out and "silence" in out
    # the healthy window day has 3 requests: fewer than --min-requests 4 is an alert, 3 is not
    code, out, _ = cli("check", *WINDOW_ARGS, "--format", "json", "--min-requests", "4")
    assert code == 4 and [f["check"] for f in json.loads(out)["fired"]] == ["silence"]
    code, out, _ = cli("check", *WINDOW_ARGS, "--format", "json", "--min-requests", "3")
    assert code == 0 and json.loads(out)["fired"] == []
    code, _, err = cli("check", *WINDOW_ARGS, "--min-requests", "-1")
    assert code == 2 and "--min-requests" in err


def test_check_without_baseline_says_so(lake: Lake, cli: Cli) -> None:
    code, out, err = cli("check", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["status"] == "ok" and "nothing to compare" in got["notes"][0]
    code, _, err = cli("check", "--max-drop", "0")
    assert code == 2 and "--max-drop" in err


# -- real data ---------------------------------------------------------------------------------


@pytest.mark.realdata
def test_kvcache_tester_first_requests_are_the_streams(lake: Lake) -> None:
    folder = TESTDATA / "weka_cc_traces"
    streams = 0
    for path in folder.glob("*.json"):
        doc = json.loads(path.read_text())
        streams += 1 + len({e["agent_id"] for e in doc["requests"] if e["type"] == "subagent"})
    run_import(lake, get("kvcache-tester"), [folder])
    got = misses.miss_report(lake.connect(["requests", "events"]))
    assert got["by_cause"]["first_request"]["misses"] == streams
    assert got["misses"] == sum(v["misses"] for v in got["by_cause"].values())


def test_same_misses_from_the_steps_stored_by_compaction(designed: Lake, cli: Cli) -> None:
    code, _, err = cli("compact")
    assert code == 0, err
    con = designed.connect(["requests", "events"])
    assert con.execute("SELECT comment FROM duckdb_views() WHERE view_name = 'request_steps'").fetchone() == (
        "materialised",
    )
    assert misses.miss_report(con) == _approx(EXPECTED)
