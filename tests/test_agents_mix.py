"""One lake holding every agent's fixture answers ``mix --by agent`` with, per agent, the totals of
that agent's fixture imported alone (issue: every agent ccusage reads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tests.conftest import EXAMPLES
from tests.test_agents_ccusage import kilo_home
from tests.test_import_opencode import opencode_home

DATA = Path(__file__).resolve().parent / "data" / "agent-logs"
KEYS = (
    "requests",
    "cold_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "total_tokens",
)


def sources(tmp: Path) -> dict[str, Path]:
    return {
        "claude-code": EXAMPLES / "claude-transcript.jsonl",
        "codex": EXAMPLES / "codex-rollout.jsonl",
        "gemini": EXAMPLES / "gemini-chat.jsonl",
        "opencode": opencode_home(tmp),
        "qwen": DATA / "qwen",
        "amp": DATA / "amp",
        "copilot": DATA / "copilot",
        "kimi": DATA / "kimi",
        "codebuff": DATA / "codebuff" / "manicode",
        "pi": DATA / "pi",
        "openclaw": DATA / "openclaw",
        "kilo": kilo_home(tmp),
        "grok": DATA / "grok",
        "droid": DATA / "droid" / ".factory" / "sessions",
        "goose": _database(DATA / "goose" / "sessions.sql", tmp / "goose-db" / "sessions.db"),
        "hermes": _database(DATA / "hermes" / "state.sql", tmp / "hermes-db" / "state.db"),
        "zcode": _database(DATA / "zcode" / "db.sql", tmp / "zcode-db" / "db.sqlite"),
        "antigravity": _database(
            next((DATA / "antigravity").glob("3f2a9c1e-*.sql")), tmp / "ag-db" / "conversations" / "c.db"
        ),
    }


def _database(sql: Path, db: Path) -> Path:
    """The SQLite database of a fixture kept as SQL."""
    import sqlite3

    db.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(db)
    con.executescript(sql.read_text())
    con.commit()
    con.close()
    return db


def run(*args: str) -> str:
    from traceflow.cli.app import app, register_all

    register_all()
    result = CliRunner().invoke(app, list(args), env={"TRACEFLOW_CACHE": "0"})
    assert result.exit_code in (0, 3), result.output  # 3: the fixtures' half-written records
    return str(result.stdout)


def by_agent(lake: Path) -> dict[str, dict[str, Any]]:
    rows = json.loads(run("mix", "--by", "agent", "--format", "json", "--data", str(lake)))
    return {r["agent"]: {k: r[k] for k in KEYS} for r in rows}


def test_one_lake_of_all_agents_sums_the_agents(tmp_path: Path) -> None:
    alone: dict[str, dict[str, Any]] = {}
    together = tmp_path / "all"
    for name, path in sources(tmp_path).items():
        lake = tmp_path / name
        run("import", name, str(path), "--data", str(lake))
        run("import", name, str(path), "--data", str(together))
        (row,) = by_agent(lake).values()
        alone[name] = row
    got = by_agent(together)
    assert len(got) == 18
    assert sorted(got.values(), key=str) == sorted(alone.values(), key=str)
    assert sum(r["total_tokens"] for r in got.values()) == sum(r["total_tokens"] for r in alone.values())
    assert {"opencode", "qwen-code", "amp"} <= set(got)
    assert all(r["requests"] > 0 for r in got.values())
