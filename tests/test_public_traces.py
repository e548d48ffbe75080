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
    assert got["no_cache_cost_usd"] == pytest.approx(no_cache)
    assert got["cache_cost_usd"] == pytest.approx(billed)
    by = {r["source"]: r for r in as_json(cli, "mix", "--by", "source")}
    assert by["mooncake"]["unpriced_tokens"] == 75_500
    assert [
        by["mooncake"][k] for k in ("no_cache_cost_usd", "cache_cost_usd", "savings_usd", "savings_share")
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
    assert got["cache_cost_usd"] is None and got["no_cache_cost_usd"] is None  # was 496.21 at default prices
    assert got["unpriced_tokens"] == got["total_tokens"] > 0


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
