"""The lake and tokens the explorer's tests share (tests/test_explorer.py and
tests/test_explorer_browser.py): two teams' Claude Code and Codex traffic over three days, each
request carrying its team as a resource attribute (as ``serve --tokens`` stores it), with cache
misses after idle gaps longer than the 5-minute TTL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traceflow.store.lake import Lake

T0 = 1785585600_000000  # 2026-08-01T12:00Z in microseconds
DAY = 86_400
#: team -> (sessions, agent, project, model)
TEAMS = {
    "payments": (("p1", "p2", "p3"), "claude-code", "billing-api", "claude-sonnet-4-5"),
    "search": (("s1", "s2"), "codex", "indexer", "gpt-5-codex"),
}
#: seconds after the session's start of each request, and its (cold, read, write, output) tokens:
#: the fourth comes after 11 idle minutes and reads nothing back (a miss: its prefix expired)
REQUESTS = [
    (0, (2000, 0, 6000, 100)),
    (30, (50, 8000, 400, 80)),
    (70, (40, 8400, 300, 60)),
    (730, (30, 0, 8800, 90)),
    (760, (20, 8800, 500, 40)),
]
TOKENS = {
    "payments": "payments-token-0123456789abcdef",
    "search": "search-token-0123456789abcdef0",
    "*": "admin-token-0123456789abcdef012",
}


def rows() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for team, (sessions, agent, project, model) in TEAMS.items():
        for n, session in enumerate(sessions):
            start = T0 + (n * DAY + (len(out) % 7) * 3600) * 1_000_000
            for at, (cold, read, write, output) in REQUESTS:
                i = len(out)
                out.append(
                    {
                        "event_id": f"e{i}",
                        "source": "otlp",
                        "agent": agent,
                        "model": model,
                        "session_id": session,
                        "user_id": f"u-{session}",
                        "prompt_id": f"{session}-{at}",
                        "started_at": start + at * 1_000_000,
                        "ended_at": start + at * 1_000_000 + 2_000_000,
                        "cold_input_tokens": cold,
                        "cache_read_tokens": read,
                        "cache_write_tokens": write,
                        "cache_write_5m_tokens": write,
                        "cache_write_1h_tokens": 0,
                        "output_tokens": output,
                        "attributes": {"resource": {"team.id": team, "project": project}},
                        "seq": i,
                    }
                )
    return out


def fill(lake: Lake) -> Lake:
    lake.ensure()
    lake.append("requests", rows())
    return lake


def tokens_file(folder: Path) -> Path:
    path = folder / "tokens"
    path.write_text("".join(f"{team} {token}\n" for team, token in TOKENS.items()))
    return path
