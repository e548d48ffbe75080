"""The analysis commands: output contracts (JSON keys), formats, errors; and the analyses on real
data: the hand-written Claude Code transcript and the 36 kv-cache-tester Claude Code sessions,
checked against statistics computed here independently from the raw files."""

from __future__ import annotations

import csv
import io
import itertools
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, TESTDATA
from tests.test_analyses import fill
from traceflow import importers
from traceflow.analysis import gaps, sessions, ttl
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake
from traceflow.store.selection import Selection

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def filled(lake: Lake) -> Lake:
    return fill(lake)


def as_json(cli: Cli, *args: str) -> Any:
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


# ---------------------------------------------------------------------------------------------
# contracts


def test_gaps_json(filled: Lake, cli: Cli) -> None:
    got = as_json(cli, "gaps")
    for key in (
        "gaps",
        "human_gaps",
        "agent_gaps",
        "unknown_gaps",
        "p50_s",
        "p90_s",
        "p99_s",
        "mean_s",
        "max_s",
        "share_over",
        "human",
        "agent",
        "ttls",
        "histogram",
    ):
        assert key in got
    assert got["gaps"] == 9 and got["share_over"] == pytest.approx({"300": 2 / 9, "3600": 1 / 9})
    got = as_json(cli, "gaps", "--ttl", "1m", "--ttl", "2h", "--by", "session")
    assert list(got["share_over"]) == ["60", "7200"]
    assert [g["session"] for g in got["groups"]] == ["A", "B", "C", "D"]
    assert got["groups"][0]["share_over"]["60"] == pytest.approx(2 / 6)


def test_gaps_histogram_and_formats(filled: Lake, cli: Cli) -> None:
    hist = as_json(cli, "gaps", "--histogram")
    assert sum(h["gaps"] for h in hist) == 9
    code, out, _ = cli("gaps", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 1 and rows[0]["gaps"] == "9" and "share_over_300" in rows[0]
    for fmt in ("table", "markdown"):
        code, out, _ = cli("gaps", "--by", "kind", "--format", fmt)
        assert code == 0 and "share_over_5m" in out and "human" in out


def test_ttl_json(filled: Lake, cli: Cli) -> None:
    got = as_json(cli, "ttl", "--ttl", "30m")
    assert got["best_ttl"] == "30m"  # worked out in tests/test_analyses.py::test_ttl_report_as_dict
    assert [r["ttl"] for r in got["ttls"]] == ["5m", "30m", "1h"]
    for key in ttl.COLUMNS:
        assert key in got["ttls"][0]
    assert {"observed", "validation", "by_model", "prices"} <= got.keys()
    code, out, _ = cli("ttl", "--by", "model", "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("ttl_s,model,")


def test_ttl_price_file(filled: Lake, cli: Cli, tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"write_multipliers": {"300": 1.25, "3600": 1.25}}))
    got = as_json(cli, "ttl", "--prices", str(prices))
    assert got["best_ttl"] == "1h"
    assert got["prices"]["write_multipliers"] == {"300": 1.25, "3600": 1.25}


def test_sessions_json_and_list(filled: Lake, cli: Cli) -> None:
    got = as_json(cli, "sessions")
    assert list(got) == [name for name, _ in sessions.SUMMARY] + list(sessions.SUMMARY_EXTRA)
    assert got["sessions"] == 4 and got["idle_returns"] == 1
    listed = as_json(cli, "sessions", "--list", "--limit", "2")
    assert [r["root_session_id"] for r in listed] == ["A", "B"]
    by = as_json(cli, "sessions", "--by", "user", "--idle-after", "10m")
    assert [(r["user"], r["idle_returns"]) for r in by] == [("u1", 2), ("u2", 0)]


def test_load_and_working_set_json(filled: Lake, cli: Cli) -> None:
    got = as_json(cli, "load")
    for key in (
        "new_sessions_per_min",
        "index_of_dispersion",
        "p_value",
        "poisson",
        "requests_per_s_peak",
        "active_sessions_peak",
        "cache_read_tokens_per_s_mean",
    ):
        assert key in got
    series = as_json(cli, "load", "--series", "--resolution", "1h")
    assert len(series) == 2 and sum(r["requests"] for r in series) == 14
    ws = as_json(cli, "working-set", "--ttl", "5m", "--kv-bytes-per-token", "126976")
    assert ws["peak_bytes"] == pytest.approx(ws["peak_tokens"] * 126976)
    both = as_json(cli, "working-set", "--ttl", "5m", "--ttl", "1h")
    assert [r["ttl"] for r in both] == ["5m", "1h"]
    series = as_json(cli, "working-set", "--series", "--session", "B")
    assert [r["tokens_end"] for r in series] == [2005, 2100, 2100, 2100, 2100, 2100, 0]


def test_report_formats(filled: Lake, cli: Cli) -> None:
    got = as_json(cli, "report", "--kv-bytes-per-token", "126976")
    assert {"headline", "mix", "gaps", "ttl", "sessions", "load", "working_set", "settings"} <= got.keys()
    assert got["mix"]["requests"] == 15  # mix counts the failed request too
    assert got["gaps"]["gaps"] == 9 and got["ttl"]["best_ttl"] == "5m"
    assert any("Reuse ratio" in line for line in got["headline"])
    assert any("outlive 5m" in line for line in got["headline"])
    assert any(line.startswith("KV working set at a 5m TTL") and "B peak" in line for line in got["headline"])
    code, out, _ = cli("report", "--format", "markdown")
    assert code == 0 and out.startswith("# traceflow report") and "## TTL what-if" in out
    code, out, _ = cli("report")
    assert code == 0 and "Idle gaps" in out


def test_query_and_queries(filled: Lake, cli: Cli) -> None:
    code, out, _ = cli("queries", "--format", "json", data=False)
    assert code == 0 and {q["name"] for q in json.loads(out)} >= {"gaps", "ttl", "sessions"}
    got = as_json(cli, "query", "ttl", "--param", "ttl_s=600")
    assert {r["ttl_s"] for r in got} == {600.0}
    got = as_json(cli, "query", "idle_returns", "-p", "idle_after_s=500")
    assert [r["gap_s"] for r in got] == [600.0, 5400.0]


@pytest.mark.parametrize(
    "args, message",
    [
        (("gaps", "--by", "colour"), "cannot group by colour"),
        (("gaps", "--ttl", "soon"), "not a duration"),
        (("ttl", "--by", "user"), "only --by model"),
        (("sessions", "--compaction-drop", "2"), "between 0 and 1"),
        (("working-set", "--resolution", "0"), "positive"),
        (("report", "--format", "csv"), "no csv"),
        (("query", "nope"), "no query named 'nope'"),
        (("query", "gaps", "--param", "colour=red"), "has no parameter colour"),
        (("query", "gaps", "--param", "oops"), "is not NAME=VALUE"),
        (("gaps", "--format", "yaml"), "is not one of"),
    ],
)
def test_usage_errors(filled: Lake, cli: Cli, args: tuple[str, ...], message: str) -> None:
    code, _, err = cli(*args)
    assert code == 2 and message in err


def test_empty_lake(lake: Lake, cli: Cli) -> None:
    assert as_json(cli, "gaps")["gaps"] == 0
    assert as_json(cli, "sessions")["sessions"] == 0
    assert as_json(cli, "load")["buckets"] == 0
    assert as_json(cli, "working-set")["peak_tokens"] is None
    assert as_json(cli, "ttl")["best_ttl"] is None
    assert as_json(cli, "report")["headline"] == ["No requests in the selection."]


# ---------------------------------------------------------------------------------------------
# the hand-written Claude Code transcript: a real 441 s gap after which the cache was re-written


def test_claude_transcript_gap_and_ttl_validation(lake: Lake) -> None:
    run_import(lake, importers.get("claude-code"), [EXAMPLES / "claude-transcript.jsonl"])
    con = lake.connect()
    rows = gaps.gap_rows(con).select("gap_s", "kind").rows()
    # tests/data/agent-examples/README.md: 10:07:30 - 10:00:09
    assert rows == [(0.6, "agent"), (441.0, "human")]
    v = {r["gap_class"]: r for r in ttl.ttl_validation(con).to_dicts()}
    # after the 441 s gap the request wrote 16,600 tokens; after the 0.6 s gap 310
    assert v["medium"]["cache_write_tokens"] == 16_600 and v["short"]["cache_write_tokens"] == 310
    assert v["medium"]["write_vs_short"] > 10
    w = {r["ttl"]: r for r in ttl.ttl_whatif(con).to_dicts()}
    # the model agrees with the data: under a 5m TTL that request's prefix expired, under 1h not
    assert (w["5m"]["expired_requests"], w["1h"]["expired_requests"]) == (1, 0)
    assert w["5m"]["rewrite_tokens"] == 16_544 + 45  # previous context + output


# ---------------------------------------------------------------------------------------------
# real data: the 36 kv-cache-tester (WEKA) Claude Code sessions


def weka_independent(folder: Path) -> dict[str, Any]:
    """Statistics straight from the JSON files, without traceflow."""
    gaps_s: list[float] = []
    think: list[float] = []
    starts: list[int] = []
    ends: list[int] = []
    n_requests = with_sub = n_sub = drops = 0
    hit: list[float] = []  # reuse of the previous request's prefix, first request included (a miss)
    for f in sorted(folder.glob("*.json")):
        d = json.loads(f.read_bytes())
        main = [r for r in d["requests"] if r.get("type") != "subagent"]
        subs = [r for r in d["requests"] if r.get("type") == "subagent"]
        with_sub += bool(subs)
        n_sub += len(subs)
        streams = [[(r["t"], r.get("api_time")) for r in main]]
        streams += [[(s["t"] + r["t"], r.get("api_time")) for r in s["requests"]] for s in subs]
        n_requests += sum(len(s) for s in streams)
        for st in streams:
            gaps_s += [max(0.0, t1 - (t0 + (a0 or 0.0))) for (t0, a0), (t1, _) in itertools.pairwise(st)]
        think += [r["think_time"] for r in main[1:] if "think_time" in r]
        starts.append(main[0]["in"])
        ends.append(main[-1]["in"])
        num, den = 0, main[0]["in"]
        for prev, cur in itertools.pairwise(main):
            a, b = prev["hash_ids"], cur["hash_ids"]
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            num += k * d.get("block_size", 64)
            den += cur["in"]
            drops += cur["in"] < 0.5 * prev["in"]
        if den:
            hit.append(num / den)
    return {
        "requests": n_requests,
        "with_sub": with_sub,
        "subagents": n_sub,
        "gaps": gaps_s,
        "think": think,
        "starts": starts,
        "ends": ends,
        "hit": hit,
        "drops": drops,
    }


@pytest.fixture(scope="module")
def weka(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    folder = TESTDATA / "weka_cc_traces"
    if not folder.is_dir():
        pytest.fail(f"test data not found at {folder}")
    lake = Lake(tmp_path_factory.mktemp("weka") / "data")
    summary = run_import(lake, importers.get("kvcache-tester"), [folder])
    assert summary.skipped == 0
    return lake.connect(), weka_independent(folder)


@pytest.mark.realdata
def test_weka_gaps_match_the_raw_files(weka: tuple[Any, dict[str, Any]]) -> None:
    con, raw = weka
    g = gaps.gap_summary(con).to_dicts()[0]
    assert g["gaps"] == len(raw["gaps"])
    assert g["p50_s"] == pytest.approx(statistics.median(raw["gaps"]), abs=1e-6)
    assert g["max_s"] == pytest.approx(max(raw["gaps"]), abs=1e-6)
    # published (docs/formats.md#kv-cache-tester-claude-code-sessions, 710 traces): think time p25/p50/p75 =
    # 5/10/33 s; the
    # gap equals the client's think time within the 1 s rounding of t
    assert abs(g["p50_s"] - statistics.median(raw["think"])) <= 2.5
    assert 5 <= g["p50_s"] <= 15


@pytest.mark.realdata
def test_weka_sessions_match_the_raw_files(weka: tuple[Any, dict[str, Any]]) -> None:
    con, raw = weka
    s = sessions.session_summary(con).to_dicts()[0]
    assert s["sessions"] == 36 and s["requests"] == raw["requests"]
    assert (s["sessions_with_subagents"], s["subagents"]) == (raw["with_sub"], raw["subagents"]) == (9, 28)
    assert s["context_start_p50"] == pytest.approx(statistics.median(raw["starts"]))
    assert s["context_end_p50"] == pytest.approx(statistics.median(raw["ends"]))
    assert s["compactions"] == raw["drops"]  # context falling below half the previous request's
    # published: starting input p50 24,454 and ending p50 134,196 (710 traces); the 36 are smaller
    assert 0.5 < s["context_start_p50"] / 24_454 < 2 and 0.5 < s["context_end_p50"] / 134_196 < 2
    # published per-trace hit rate p50 95.4%, mean 92.8%: the sessions' reuse ratio agrees (it also
    # counts sub-agents, and ids seen anywhere earlier rather than in the previous request only)
    per = sessions.sessions(con)["reuse_ratio"].to_list()
    assert statistics.median(per) == pytest.approx(statistics.median(raw["hit"]), abs=0.02)
    assert 0.90 <= statistics.median(per) <= 0.99


@pytest.mark.realdata
def test_weka_ttl_and_working_set_run(weka: tuple[Any, dict[str, Any]]) -> None:
    con, raw = weka
    w = {r["ttl"]: r for r in ttl.ttl_whatif(con).to_dicts()}
    expired_5m = sum(1 for x in raw["gaps"] if x > 300)
    assert w["5m"]["expired_requests"] == expired_5m
    assert w["1h"]["expired_requests"] == sum(1 for x in raw["gaps"] if x > 3600)
    sub = gaps.gap_summary(con, Selection(sessions=("trace_0010",))).to_dicts()[0]
    assert sub["gaps"] > 0


@pytest.mark.realdata
@pytest.mark.parametrize(
    "source, path, requests",
    [
        ("mooncake", "mooncake_conversation_trace.jsonl", 12_031),  # Mooncake FAST'25 Table 2
        # docs/formats.md#azure-llm-inference-trace-2023
        ("azure", "AzureLLMInferenceTrace_code_2023.csv", 8_819),
    ],
)
def test_every_analysis_runs_on_public_traces(
    lake: Lake, cli: Cli, source: str, path: str, requests: int
) -> None:
    run_import(lake, importers.get(source), [TESTDATA / path])
    rep = as_json(cli, "report")
    assert rep["mix"]["requests"] == requests
    # no sessions in these traces: every request stands alone, so there are no gaps and no idle_returns,
    # and sessions and arrivals are "not applicable" (null), never one session per request
    assert rep["gaps"]["gaps"] == 0 and rep["sessions"]["sessions"] is None
    assert rep["sessions"]["sessionless_requests"] == requests
    assert rep["load"]["sessions"] is None and rep["load"]["new_sessions_per_min"] is None
    assert rep["load"]["requests"] == requests and rep["working_set"][0]["peak_tokens"] > 0
