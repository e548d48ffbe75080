"""``--by tool``: the tools whose results a request carried back, in ``mix``, ``misses``, ``gaps`` and
``sessions``.

The fixture is built by hand; every expected number comes from its construction.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
T0 = 1785585600_000000  # 2026-08-01T12:00Z in microseconds
S = 1_000_000

# (event_id, session, start s, end s, cold, read, write, output); contexts (cold + read + write):
# r1 5,100 (first of s1: a first_request miss); r2 5,310 after Bash, Read, Bash (reusable
# min(5,100, 5,310) = 5,100, read 5,000: a hit); r3 5,310 after Edit (reusable 5,310, read 1,000,
# at most s1's first read (0) + 1,024: a prefix_break miss of 4,310 tokens, gap 1 s); r4 5,410 after
# no tool (a hit); q1 in s2, no tools (a first_request miss), at the same time as r2: s1's tool
# results are not s2's.
REQUESTS = [
    ("r1", "s1", 0, 1, 100, 0, 5000, 50),
    ("r2", "s1", 2, 3, 10, 5000, 300, 40),
    ("r3", "s1", 4, 5, 10, 1000, 4300, 30),
    ("r4", "s1", 10, 11, 0, 5310, 100, 20),
    ("q1", "s2", 2, 3, 200, 0, 0, 10),
]
# (tool, session, seconds after T0): the tool results
TOOLS = [("Bash", "s1", 1.5), ("Read", "s1", 1.6), ("Bash", "s1", 1.7), ("Edit", "s1", 3.5)]


@pytest.fixture
def tools(lake: Lake) -> Lake:
    lake.append(
        "requests",
        [
            {
                "event_id": e,
                "source": "otlp",
                "agent": "claude-code",
                "model": "claude-sonnet-4-5",
                "session_id": session,
                "started_at": T0 + start * S,
                "ended_at": T0 + end * S,
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "cache_write_5m_tokens": write,
                "cache_write_1h_tokens": 0,
                "output_tokens": out,
                "attributes": {},
                "seq": i,
            }
            for i, (e, session, start, end, cold, read, write, out) in enumerate(REQUESTS)
        ],
    )
    lake.append(
        "events",
        [
            {
                "event_id": f"t{i}",
                "source": "otlp",
                "agent": "claude-code",
                "session_id": session,
                "name": "tool_result",
                "timestamp": T0 + int(at * S),
                "attributes": {"tool_name": tool, "success": True},
                "seq": i,
            }
            for i, (tool, session, at) in enumerate(TOOLS)
        ],
    )
    return lake


def _groups(out: str) -> dict[Any, dict[str, Any]]:
    data = json.loads(out)
    rows = data["groups"] if isinstance(data, dict) else data
    return {g["tool"]: g for g in rows}


def test_mix_by_tool_counts_calls_and_the_requests_after_them(tools: Lake, cli: Cli) -> None:
    code, out, err = cli("mix", "--by", "tool", "-f", "json")
    assert code == 0, err
    got = _groups(out)
    assert set(got) == {"Bash", "Read", "Edit", None}
    # r2 followed two Bash results and one Read: it is in both groups
    assert got["Bash"]["tool_calls"] == 2 and got["Read"]["tool_calls"] == 1
    for tool in ("Bash", "Read"):
        assert got[tool]["requests"] == 1
        assert (got[tool]["cold_input_tokens"], got[tool]["cache_read_tokens"]) == (10, 5000)
        assert (got[tool]["cache_write_tokens"], got[tool]["output_tokens"]) == (300, 40)
    assert got["Edit"]["requests"] == 1 and got["Edit"]["tool_calls"] == 1
    assert got["Edit"]["cache_read_tokens"] == 1000 and got["Edit"]["cache_write_tokens"] == 4300
    # r1, r4 and q1 followed no tool result
    assert got[None]["requests"] == 3 and got[None]["tool_calls"] == 0
    assert got[None]["cold_input_tokens"] == 100 + 0 + 200


def test_mix_by_tool_and_session(tools: Lake, cli: Cli) -> None:
    code, out, err = cli("mix", "--by", "session,tool", "-f", "json")
    assert code == 0, err
    got = {(g["session"], g["tool"]): g["requests"] for g in json.loads(out)}
    assert got == {("s1", "Bash"): 1, ("s1", "Read"): 1, ("s1", "Edit"): 1, ("s1", None): 2, ("s2", None): 1}


def test_misses_by_tool(tools: Lake, cli: Cli) -> None:
    code, out, err = cli("misses", "--by", "tool", "-f", "json")
    assert code == 0, err
    got = _groups(out)
    assert got["Edit"]["requests"] == 1 and got["Edit"]["misses"] == 1
    assert got["Edit"]["by_cause"]["prefix_break"]["missed_tokens"] == 5310 - 1000
    for tool in ("Bash", "Read"):
        assert got[tool]["requests"] == 1 and got[tool]["misses"] == 0
    assert got[None]["requests"] == 3 and got[None]["misses"] == 2
    assert got[None]["by_cause"]["first_request"]["misses"] == 2


def test_gaps_by_tool(tools: Lake, cli: Cli) -> None:
    code, out, err = cli("gaps", "--by", "tool", "-f", "json")
    assert code == 0, err
    got = _groups(out)
    # gaps: r2 1 s (Bash, Read), r3 1 s (Edit), r4 5 s (no tool)
    assert got["Bash"]["gaps"] == 1 and got["Bash"]["max_s"] == pytest.approx(1.0)
    assert got["Edit"]["gaps"] == 1 and got["Edit"]["max_s"] == pytest.approx(1.0)
    assert got[None]["gaps"] == 1 and got[None]["max_s"] == pytest.approx(5.0)


def test_sessions_by_tool_puts_a_session_under_each_tool_it_called(tools: Lake, cli: Cli) -> None:
    code, out, err = cli("sessions", "--by", "tool", "-f", "json")
    assert code == 0, err
    got = _groups(out)
    assert {t: g["sessions"] for t, g in got.items()} == {"Bash": 1, "Read": 1, "Edit": 1, None: 1}
    assert got["Bash"]["requests"] == 4 and got[None]["requests"] == 1
