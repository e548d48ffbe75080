"""One working-set peak (issue 22, item 5): ``report``, the dashboard and ``working-set`` take the
headline figures at one resolution (one minute unless ``--resolution`` says otherwise), print it
beside them, and give the same numbers for the same lake -- also where the selection is long enough
for the charts to use coarse buckets."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import TESTDATA
from traceflow.dashboards.render import write_report
from traceflow.dashboards.report_data import ReportOptions, gather
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.output import exact
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
T0 = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)  # on a minute


def _request(event: str, session: str, end: dt.datetime, context: int) -> dict[str, Any]:
    return {
        "event_id": event,
        "source": "claude-code-jsonl",
        "model": "claude-sonnet-4-5",
        "session_id": session,
        "started_at": end - dt.timedelta(seconds=5),
        "ended_at": end,
        "cold_input_tokens": context,
        "output_tokens": 10,
    }


@pytest.fixture
def long_lake(lake: Lake) -> Lake:
    """One request of 60,000 tokens of context ending on a minute, and one of 1,000 tokens 60 days
    later: at a 5-minute TTL the first holds 60,000 tokens for five whole minutes, so the peak at
    one-minute buckets is 60,000; a chart over 60 days takes buckets of hours, where it averages away."""
    lake.append(
        "requests",
        [_request("a", "s1", T0, 60_000), _request("b", "s2", T0 + dt.timedelta(days=60), 1_000)],
    )
    return lake


def as_json(cli: Cli, *args: str) -> Any:
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _figures(working_set: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    # as printed: the CLI writes floats to 15 significant digits (traceflow.output.exact)
    return [
        tuple(exact(w[k]) for k in ("ttl", "resolution_s", "peak_tokens", "p95_tokens", "mean_tokens"))
        for w in working_set
    ]


def test_report_dashboard_and_working_set_agree(long_lake: Lake, cli: Cli) -> None:
    report = as_json(cli, "report")
    ws = as_json(cli, "working-set", "--ttl", "5m", "--ttl", "1h")
    data = gather(
        long_lake.connect(["requests", "events"]), None, ReportOptions()
    )  # what the dashboard draws
    assert data.resolution_s > 3600  # the charts' buckets are coarse over 60 days ...
    dashboard = data.report.as_dict()
    five = report["working_set"][0]
    assert (five["ttl"], five["resolution_s"], five["peak_tokens"]) == (
        "5m",
        60.0,
        60_000.0,
    )  # ... not the peak
    assert _figures(dashboard["working_set"]) == _figures(report["working_set"]) == _figures(ws)
    assert {k: exact(v) for k, v in dashboard["load"].items()} == {
        k: exact(v) for k, v in report["load"].items()
    }
    assert report["load"]["resolution_s"] == 60.0
    # the headline sentences are the same, and name the buckets beside the figures
    served = write_report(long_lake, None, ReportOptions())["headline"]
    assert served == report["headline"]
    assert any(
        line.startswith("KV working set at a 5m TTL (1-minute buckets): peak 60.00k") for line in served
    )
    assert any(line.startswith("Arrivals (1-minute buckets)") for line in served)


@pytest.mark.realdata
def test_the_tracelab_sample_has_one_peak(lake: Lake, cli: Cli) -> None:
    run_import(lake, get("tracelab"), [TESTDATA / "tracelab-example" / "round_trace.jsonl"])
    report = as_json(cli, "report")
    dashboard = gather(lake.connect(["requests", "events"]), None, ReportOptions()).report.as_dict()
    assert _figures(dashboard["working_set"]) == _figures(report["working_set"])
    assert dashboard["load"]["p_value"] == report["load"]["p_value"]
    # its two rounds are months apart: 1 minute would pass the bucket cap, so both use 2 minutes
    assert {w["resolution_s"] for w in report["working_set"]} == {120.0}
