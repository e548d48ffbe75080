"""The otlp-json importer: files of OTLP/JSON export requests (Collector file exporter, captures).

Expected numbers: tests/data/agent-examples/README.md (the files: traceflow/examples and
tests/data/agent-examples) and the fake API's formula in
tests/fake_anthropic.py (request k: input 11+100(k-1), output 22+100(k-1),
cache creation 333+100(k-1), cache read 4444+100(k-1)).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from tests.conftest import EXAMPLES
from traceflow.importers import get
from traceflow.importers.base import FileContext
from traceflow.importers.otlp_json import IMPORTER, OtlpJsonImporter
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

KINDS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def rows(lake: Lake, sql: str) -> list[dict[str, Any]]:
    cur = lake.connect().execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def compact(path: Path) -> bytes:
    """A pretty or compact JSON file as one line (the Collector file exporter's layout)."""
    return orjson.dumps(orjson.loads(path.read_bytes()))


def test_registered_under_its_cli_name() -> None:
    assert get("otlp-json") is IMPORTER
    assert isinstance(IMPORTER, OtlpJsonImporter)
    assert (IMPORTER.name, IMPORTER.whole_file, IMPORTER.source) == ("otlp-json", False, "otlp-json")
    assert IMPORTER.default_paths() == []


def test_agent_example_fixtures(testdata: Path, lake: Lake) -> None:
    # the packaged logs and the metric streams beside the expected rows; discover picks the *otlp*
    # JSON files only
    summary = run_import(lake, IMPORTER, [EXAMPLES, testdata / "agent-examples"])
    assert not summary.errors
    got = rows(
        lake,
        "SELECT agent, request_id, source, " + ", ".join(KINDS) + ", reasoning_tokens FROM requests "
        "ORDER BY agent, ended_at",
    )
    assert [(r["agent"], *(r[k] for k in KINDS), r["reasoning_tokens"]) for r in got] == [
        ("claude-code", 3, 89356, 161, 97, None),
        ("claude-code", 512, 0, 0, 12, None),
        ("codex", 1073, 13952, 0, 84, 22),
        ("gemini-cli", 7250, 40960, None, 902, 590),
    ]
    assert {r["source"] for r in got} == {"otlp-json"}
    deltas = rows(
        lake,
        "SELECT delta FROM metric_points WHERE name = 'gemini_cli.token.usage' ORDER BY time",
    )
    assert [r["delta"] for r in deltas] == [1000, 1500, 300, 200]  # the duplicate is dropped
    claude = rows(lake, "SELECT type, delta FROM metric_points WHERE name = 'claude_code.token.usage'")
    assert {r["type"]: r["delta"] for r in claude} == {
        "input": 3,
        "cacheRead": 89356,
        "cacheCreation": 161,
        "output": 97,
    }


def test_capture_folder_dedups_spans_against_api_requests(testdata: Path, lake: Lake) -> None:
    folder = testdata / "claude-code-otlp" / "json-full" / "otlp"
    files = IMPORTER.discover(folder)
    assert files and all(not f.name.endswith(".meta.json") and f.name != "index.jsonl" for f in files)
    summary = run_import(lake, IMPORTER, [folder])
    assert not summary.errors
    got = rows(lake, "SELECT * FROM requests ORDER BY request_id")
    assert len(got) == 20
    for r in got:
        k = int(r["request_id"].removeprefix("req_fake"))
        assert [r[c] for c in KINDS] == [
            11 + 100 * (k - 1),
            4444 + 100 * (k - 1),
            333 + 100 * (k - 1),
            22 + 100 * (k - 1),
        ]
        # the lake kept the api_request copy (prompt id, cost, 5m/1h), not the llm_request span's
        assert r["prompt_id"] is not None and r["cost_usd"] is not None
        assert (r["cache_write_5m_tokens"], r["cache_write_1h_tokens"]) == (300 + 100 * (k - 1), 33)
    sub = [r for r in got if r["parent_session_id"] is not None]
    assert {r["request_id"] for r in sub} == {"req_fake0020", "req_fake0021"}
    assert rows(lake, "SELECT count(*) AS n FROM spans")[0]["n"] == 56
    # importing again reads nothing new
    again = run_import(lake, IMPORTER, [folder])
    assert again.files_read == 0


def test_pretty_printed_and_concatenated_requests(testdata: Path, tmp_path: Path, lake: Lake) -> None:
    capture = testdata / "claude-code-otlp" / "protobuf-full" / "otlp"
    pretty = (capture / "0002-logs.decoded.json").read_bytes()
    one = tmp_path / "one.json"
    one.write_bytes(pretty + b"\n")
    two = tmp_path / "two.json"
    two.write_bytes(pretty + b"\n" + pretty + b"\n\n")
    ctx = FileContext(one)
    parsed = IMPORTER.parse(one.read_bytes(), ctx)
    assert not parsed.errors and len(parsed.requests) == 2  # req_fake0001 and 0002 of that run
    parsed2 = IMPORTER.parse(two.read_bytes(), FileContext(two))
    assert not parsed2.errors and len(parsed2.requests) == 4
    assert [r["event_id"] for r in parsed2.requests] == [r["event_id"] for r in parsed.requests] * 2
    summary = run_import(lake, IMPORTER, [one, two])
    assert not summary.errors
    assert rows(lake, "SELECT count(*) AS n FROM requests")[0]["n"] == 2


def test_bad_lines_are_reported_and_the_rest_is_imported(tmp_path: Path, lake: Lake) -> None:
    bad_types = json.loads((EXAMPLES / "claude-otlp-logs.json").read_text())
    bad_types["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["timeUnixNano"] = "soon"
    bad_tokens = json.loads((EXAMPLES / "claude-otlp-logs.json").read_text())
    for kv in bad_tokens["resourceLogs"][0]["scopeLogs"][0]["logRecords"][2]["attributes"]:
        if kv["key"] == "output_tokens":
            kv["value"] = {"stringValue": "twelve"}
    lines = [
        compact(EXAMPLES / "codex-otlp-logs.json"),  # 1
        b'{"resourceLogs": [ truncated',  # 2
        b"",  # 3
        b'{"hello": "world"}',  # 4
        orjson.dumps(bad_types),  # 5
        orjson.dumps(bad_tokens),  # 6: one record rejected, the others kept
        compact(EXAMPLES / "gemini-otlp-logs.json"),  # 7
        b"{}",  # 8: an empty request
    ]
    f = tmp_path / "export.jsonl"
    f.write_bytes(b"\n".join(lines) + b"\n")
    summary = run_import(lake, IMPORTER, [f])
    errors = {e.line: e.message for e in summary.errors}
    assert sorted(errors) == [2, 4, 5, 6]
    assert "invalid JSON" in errors[2]
    assert "not an OTLP export request" in errors[4]
    assert "timeUnixNano" in errors[5] and "soon" in errors[5]
    assert "1 logs records skipped" in errors[6] and "twelve" in errors[6]
    got = rows(lake, "SELECT agent, request_id FROM requests ORDER BY agent")
    assert [r["agent"] for r in got] == ["claude-code", "codex", "gemini-cli"]
    assert got[0]["request_id"] == "req_011CPkCWc21qrE6dGwSHMcw1"


def test_metric_state_is_carried_across_imports_of_a_growing_file(
    testdata: Path, tmp_path: Path, lake: Lake
) -> None:
    doc = json.loads((testdata / "agent-examples" / "otlp-cumulative-reset.json").read_text())
    points = doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"]

    def line(p: dict[str, Any]) -> bytes:
        doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"] = [p]
        return orjson.dumps(doc) + b"\n"

    f = tmp_path / "metrics.jsonl"
    f.write_bytes(line(points[0]) + line(points[1]))
    run_import(lake, IMPORTER, [f])
    with open(f, "ab") as fh:
        fh.write(line(points[2]) + line(points[3]) + line(points[4]))
    summary = run_import(lake, IMPORTER, [f])
    assert summary.files_read == 1 and not summary.errors
    got = rows(lake, "SELECT value, delta FROM metric_points ORDER BY time")
    assert [r["delta"] for r in got] == [1000, 1500, 300, 200]
    assert [r["value"] for r in got] == [1000, 2500, 300, 500]
