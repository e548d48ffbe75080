"""One Anthropic usage, one answer: the OTLP mapper, the transcript importer and the status line's
transcript tail read the cache write of the same usage the same way (traceflow.rows.anthropic_cache_write).

The rule is the API's: a non-zero ``cache_creation`` total is the write and the 5m/1h split its
breakdown, kept as reported even where it disagrees; a total of 0 beside a split with tokens (old
Claude Code versions) is the split's sum. The expected figures are written by hand.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import EXAMPLES
from traceflow.importers.claude_code_tail import read_since
from traceflow.otlp import decode as otlp
from traceflow.store.lake import Lake

CLI = Callable[..., tuple[int, str, str]]
AT = dt.datetime(2026, 8, 3, 12, 0, tzinfo=dt.UTC)

#: (cache_creation total, 5m, 1h) -> (cache_write_tokens, cache_write_5m_tokens, cache_write_1h_tokens)
CASES = [
    ((100, 60, 0), (100, 60, 0)),  # the split disagrees: the total is the write, the split as reported
    ((0, 60, 40), (100, 60, 40)),  # an old version's 0 beside a breakdown: the breakdown's sum
    ((100, 70, 30), (100, 70, 30)),  # they agree
    ((0, 0, 0), (0, 0, 0)),
]


def _otlp(total: int, w5: int, w1: int) -> tuple[int, int | None, int | None]:
    doc = orjson.loads((EXAMPLES / "claude-otlp-logs.json").read_bytes())
    record = doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"][1]  # the api_request with a request id
    attrs = [kv for kv in record["attributes"] if not kv["key"].startswith("cache_creation")]
    for key, value in (
        ("cache_creation_tokens", total),
        ("cache_creation_5m_tokens", w5),
        ("cache_creation_1h_tokens", w1),
    ):
        attrs.append({"key": key, "value": {"intValue": str(value)}})
    record["attributes"] = attrs
    body = orjson.dumps(doc)
    m = otlp.map_request("logs", otlp.parse_body("logs", body, "application/json"), state=otlp.MetricState(0))
    (row,) = [r for r in m.parsed.requests if r["request_id"] == "req_011CPkCWc21qrE6dGwSHMcw1"]
    return row["cache_write_tokens"], row["cache_write_5m_tokens"], row["cache_write_1h_tokens"]


def _transcript(path: Path, total: int, w5: int, w1: int) -> Path:
    line: dict[str, Any] = {
        "type": "assistant",
        "sessionId": "5f0c1e9a-2b7d-4c1e-9a55-0d3c6b1f2e77",
        "cwd": "/home/u/proj",
        "version": "2.1.90",
        "requestId": "req_usage",
        "uuid": "a1",
        "timestamp": AT.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "message": {
            "id": "msg_usage",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}],
            "usage": {
                "input_tokens": 3,
                "cache_read_input_tokens": 5000,
                "cache_creation_input_tokens": total,
                "cache_creation": {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1},
                "output_tokens": 20,
            },
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(line) + "\n")
    return path


@pytest.mark.parametrize(("usage", "expected"), CASES)
def test_three_paths_give_one_answer(
    tmp_path: Path, cli: CLI, lake: Lake, usage: tuple[int, int, int], expected: tuple[int, int, int]
) -> None:
    assert _otlp(*usage) == expected

    path = _transcript(tmp_path / "projects" / "p" / "5f0c1e9a-2b7d-4c1e-9a55-0d3c6b1f2e77.jsonl", *usage)
    code, _, err = cli("import", "claude-code", str(tmp_path / "projects"))
    assert code == 0, err
    rows = (
        lake.connect(["requests"])
        .execute("SELECT cache_write_tokens, cache_write_5m_tokens, cache_write_1h_tokens FROM requests")
        .fetchall()
    )
    assert rows == [expected]

    (tail,) = read_since(path, AT - dt.timedelta(hours=1))
    assert (tail.write, tail.write_5m, tail.write_1h) == expected
    assert tail.total == 3 + 5000 + expected[0] + 20
