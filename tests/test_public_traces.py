"""Public serving traces are not agent telemetry (issue 22, item 4): requests without a model name are
not priced, a public trace has its own time base (Azure's absolute 2023 times included), and a
sessionless request is not a first-request miss (where the trace has block hashes a miss is measured
from them; elsewhere the figure is not applicable)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import TESTDATA
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
REAL = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)


def _request(
    event: str, source: str, model: str | None, cold: int, read: int, write: int, out: int
) -> dict[str, Any]:
    return {
        "event_id": event,
        "source": source,
        "model": model,
        "session_id": "s1" if model else None,
        "started_at": REAL,
        "ended_at": REAL + dt.timedelta(seconds=2),
        "cold_input_tokens": cold,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "output_tokens": out,
    }


def as_json(cli: Cli, *args: str) -> Any:
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


# -- prices ------------------------------------------------------------------------------------


def test_requests_without_a_model_are_not_priced(lake: Lake, cli: Cli) -> None:
    # a Sonnet request ($3 in / $15 out per million; read 0.1x, 5-minute write 1.25x) beside two
    # requests of a public trace that names no model
    lake.append(
        "requests",
        [
            _request("a", "claude-code-jsonl", "claude-sonnet-4-5", 1000, 9000, 2000, 500),
            _request("m1", "mooncake", None, 70_000, 0, 0, 300),
            _request("m2", "mooncake", None, 5_000, 0, 0, 200),
        ],
    )
    no_cache = (1000 + 9000 + 2000) * 3e-6 + 500 * 15e-6
    billed = (1000 + 0.1 * 9000 + 1.25 * 2000) * 3e-6 + 500 * 15e-6
    got = as_json(cli, "mix")
    assert got["unpriced_tokens"] == 75_500
    assert got["cost_without_cache_usd"] == pytest.approx(no_cache)
    assert got["cost_usd"] == pytest.approx(billed)
    by = {r["source"]: r for r in as_json(cli, "mix", "--by", "source")}
    assert by["mooncake"]["unpriced_tokens"] == 75_500
    assert [
        by["mooncake"][k] for k in ("cost_without_cache_usd", "cost_usd", "savings_usd", "savings_share")
    ] == [None] * 4
    assert by["claude-code-jsonl"]["unpriced_tokens"] == 0
    _, table, _ = cli("mix")
    assert "75,500 tokens" in table and "not priced" in table
    report = as_json(cli, "report")
    assert any("75,500 tokens" in line and "not priced" in line for line in report["headline"])


@pytest.mark.realdata
def test_a_mooncake_lake_is_unpriced(lake: Lake, cli: Cli) -> None:
    run_import(lake, get("mooncake"), [TESTDATA / "mooncake_conversation_trace.jsonl"])
    got = as_json(cli, "mix")
    assert got["requests"] == 12031
    assert got["cost_usd"] is None and got["cost_without_cache_usd"] is None  # was 496.21 at default prices
    assert got["unpriced_tokens"] == got["total_tokens"] > 0


def test_the_ttl_what_if_does_not_price_requests_without_a_model(lake: Lake, cli: Cli) -> None:
    # one Sonnet session of two requests (the second reads the first's 10,000-token prompt after 10 s)
    # beside a public trace's request that names no model: only the session is priced
    second = {
        **_request("b", "claude-code-jsonl", "claude-sonnet-4-5", 100, 10_000, 0, 50),
        "started_at": REAL + dt.timedelta(seconds=12),
        "ended_at": REAL + dt.timedelta(seconds=14),
    }
    lake.append(
        "requests",
        [
            _request("a", "claude-code-jsonl", "claude-sonnet-4-5", 0, 0, 10_000, 100),
            second,
            _request("m1", "mooncake", None, 70_000, 0, 0, 300),
        ],
    )
    got = as_json(cli, "ttl", "--ttl", "5m")
    five = next(r for r in got["ttls"] if r["ttl_s"] == 300)
    # the what-if at 5 minutes: the first request writes its 10,000-token prompt; the second reads
    # the first's prompt + output (10,100 = its whole prompt) and writes nothing new
    per_in, per_out = 3e-6, 15e-6
    want = 10_100 * per_in * 0.1 + 10_000 * per_in * 1.25 + 150 * per_out
    assert five["cost_usd"] == pytest.approx(want)
    by_model = {r["model"]: r for r in got["by_model"] if r["ttl_s"] == 300}
    assert by_model[None]["cost_usd"] is None and by_model[None]["expiry_cost_usd"] is None
    assert got["observed"]["cost_usd"] == pytest.approx(
        (10_000 * 1.25 + 100 + 10_000 * 0.1) * per_in + 150 * per_out  # as reported: write, cold, read
    )


@pytest.mark.realdata
def test_a_mooncake_lake_has_no_ttl_costs(lake: Lake, cli: Cli) -> None:
    run_import(lake, get("mooncake"), [TESTDATA / "mooncake_conversation_trace.jsonl"])
    got = as_json(cli, "ttl")
    assert got["ttls"] and all(r["cost_usd"] is None and r["best"] is False for r in got["ttls"])
    assert got["best_ttl_s"] is None and got["observed"]["cost_usd"] is None


# -- time bases --------------------------------------------------------------------------------

AZURE_2023 = dt.datetime(2023, 11, 16, 18, 0, tzinfo=dt.UTC)


@pytest.fixture
def agents_and_azure(lake: Lake) -> Lake:
    """Three Claude Code sessions of March 2026 (12 requests) beside 40 Azure requests of November
    2023: absolute times both, but another service's traffic three years earlier."""
    rows = []
    for i in range(12):
        row = _request(f"c{i}", "claude-code-jsonl", "claude-sonnet-4-5", 100, 900, 0, 10)
        row["session_id"] = f"s{i % 3}"
        row["started_at"] = REAL + dt.timedelta(minutes=7 * i)
        row["ended_at"] = row["started_at"] + dt.timedelta(seconds=2)
        rows.append(row)
    for i in range(40):
        row = _request(f"a{i}", "azure", None, 2000, 0, 0, 50)
        row["started_at"] = AZURE_2023 + dt.timedelta(seconds=3 * i)
        row["ended_at"] = row["started_at"] + dt.timedelta(seconds=1)
        rows.append(row)
    lake.append("requests", rows)
    return lake


def test_azure_is_not_agent_telemetry(agents_and_azure: Lake, cli: Cli) -> None:
    rep = as_json(cli, "report")
    assert rep["mix"]["requests"] == 52  # the sections without a time axis cover everything
    assert rep["time_base"]["series"] == "agent"
    assert rep["time_base"]["sources"] == {"claude-code-jsonl": "agent", "azure": "public:azure"}
    assert rep["load"]["requests"] == 12  # the time sections: the agent telemetry only
    assert (
        "the public trace azure" in rep["time_base"]["note"] and "--source azure" in rep["time_base"]["note"]
    )
    assert any("mixes time bases" in line for line in rep["headline"])
    # the one-axis analyses refuse the mix, naming the --source options
    code, _, err = cli("load")
    assert code == 2 and "--source azure" in err and "--source claude-code-jsonl" in err
    # --source selects the public trace: its time sections, and the report says so
    rep = as_json(cli, "report", "--source", "azure")
    assert rep["time_base"]["series"] == "public:azure" and rep["load"]["requests"] == 40
    assert "public trace azure" in rep["time_base"]["note"]


def test_two_public_traces_do_not_share_an_axis(lake: Lake, cli: Cli) -> None:
    rows = [_request(f"m{i}", "mooncake", None, 100, 0, 0, 1) for i in range(5)]
    for i, row in enumerate(rows):
        row["started_at"] = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i)
        row["ended_at"] = None
    rows += [_request(f"b{i}", "burstgpt", None, 100, 0, 0, 1) for i in range(3)]
    lake.append("requests", rows)
    code, _, err = cli("working-set")
    assert code == 2 and "--source mooncake" in err and "--source burstgpt" in err
    rep = as_json(cli, "report")
    assert rep["time_base"]["series"] == "public:mooncake" and rep["load"]["requests"] == 5


# -- misses of requests without a session ------------------------------------------------------


def _hashed(
    event: str, t_s: float, hashes: list[int] | None, prompt: int, scope: str = "trace#1"
) -> dict[str, Any]:
    row = _request(event, "mooncake" if hashes is not None else "azure", None, prompt, 0, 0, 10)
    row["started_at"] = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=t_s)
    row["ended_at"] = None
    row["seq"] = int(t_s)
    if hashes is not None:
        row["hash_ids"] = hashes
        row["block_size"] = 100
        row["attributes"] = json.dumps({"hash_scope": scope})
    return row


def test_sessionless_requests_are_judged_by_their_block_hashes(lake: Lake, cli: Cli) -> None:
    lake.append(
        "requests",
        [
            _hashed("r1", 0, [1, 2, 3], 300),  # all new: nothing to reuse, not a miss
            _hashed("r2", 60, [1, 2, 4], 250),  # blocks 1, 2 seen 60 s ago: a hit (4 is new)
            _hashed("r3", 460, [1, 2, 5], 290),  # 1, 2 last seen 400 s ago > 300: 200 tokens expired
            _hashed("r4", 470, [9, 2], 200),  # 9 new, 2 seen 10 s ago (r3)
            _hashed("r5", 480, [1], 50, scope="other#2"),  # another trace's block 1: new there
        ],
    )
    lake.append("requests", [{**_hashed("a1", 500, None, 1000), "source": "azure"}])  # no hashes
    got = as_json(cli, "misses", "--miss-tokens", "100")
    assert got["requests"] == 6 and got["not_applicable"] == 1
    assert got["by_cause"]["first_request"]["misses"] == 0  # was 6: every sessionless request
    assert got["misses"] == 1 and got["missed_tokens"] == 200
    assert got["by_cause"]["ttl_expired"] == {"misses": 1, "missed_tokens": 200, "miss_cost_usd": None}
    rows = as_json(cli, "misses", "--list", "--miss-tokens", "100")
    assert [(r["reusable_tokens"], r["missed_tokens"], r["cause"]) for r in rows] == [
        (200, 200, "ttl_expired")
    ]
    # the block window runs over the whole lake: a --since after r2 still sees r2's blocks
    got = as_json(cli, "misses", "--miss-tokens", "100", "--since", "1970-01-01T00:05:00Z")
    assert got["requests"] == 4 and got["misses"] == 1 and got["missed_tokens"] == 200


def test_without_block_hashes_misses_are_not_applicable(lake: Lake, cli: Cli) -> None:
    lake.append("requests", [{**_hashed(f"a{i}", 10 * i, None, 1000), "source": "azure"} for i in range(4)])
    got = as_json(cli, "misses")
    assert got["requests"] == 4 and got["not_applicable"] == 4
    assert got["misses"] is None and got["missed_tokens"] is None
    code, out, _ = cli("misses")
    assert code == 0 and "not applicable" in out


@pytest.mark.realdata
def test_mooncake_misses_match_an_independent_recount(lake: Lake, cli: Cli) -> None:
    """The Mooncake conversation trace recounted from its JSON lines: a block (512 tokens, the last
    one what is left of input_length) is reusable when an earlier line had its hash id, expired when
    that line's timestamp is more than 300 s (300,000 ms) older; a miss has over 1,024 expired tokens."""
    path = TESTDATA / "mooncake_conversation_trace.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    order = sorted(range(len(lines)), key=lambda i: (lines[i]["timestamp"], i))
    last: dict[int, int] = {}
    misses = missed = reusable = 0
    for i in order:
        rec = lines[i]
        expired = 0
        for k, h in enumerate(rec["hash_ids"]):
            tokens = max(min(512, rec["input_length"] - k * 512), 0)
            if h in last:
                reusable += tokens
                if rec["timestamp"] - last[h] > 300_000:
                    expired += tokens
            last[h] = rec["timestamp"]
        if expired > 1024:
            misses += 1
            missed += expired
    run_import(lake, get("mooncake"), [path])
    got = as_json(cli, "misses")
    assert got["requests"] == len(lines) == 12031
    assert got["by_cause"]["first_request"]["misses"] == 0  # was 12,031 of 12,031
    assert (got["misses"], got["missed_tokens"]) == (misses, missed)
    rows = as_json(cli, "misses", "--list")
    assert sum(r["reusable_tokens"] for r in rows) <= reusable
