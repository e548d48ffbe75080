"""ccusage 20.0.24 as the oracle of Grok Build CLI, Droid, Goose, Hermes, ZCode and Antigravity (issue 36), as
tests/test_agents_ccusage.py does for the other agents: per day and per session every token field
equal, except the differences traceflow makes on purpose, each written out with its tokens (counted
by hand from the fixture) and why. Droid, Goose and Hermes record only a session's running totals:
one row per session (store/recorded.py: the per-request analyses leave them out)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.test_agents_ccusage import DATA, Tally, add, run_ccusage, run_traceflow, tally
from tests.test_ccusage_oracle import ccusage_binary

GROK_A, GROK_B = "0197e0a1-5c2b-7d40-9a51-2f6b8c1d0e11", "0197e0f3-11aa-7c02-8e3d-6a9b0c4d2f27"


Views = dict[str, Tally]


def _views(
    agent: str, cc_env: dict[str, str], tf_env: dict[str, str], tmp: Path, cc_home: Path | None = None
) -> tuple[Views, Views]:
    """ccusage's and traceflow's daily and session rows (ccusage's ``HOME``: ``cc_home``, else an
    empty folder; traceflow's is always empty: it is told where through ``tf_env``)."""
    home, xdg = tmp / "home", tmp / "xdg"
    home.mkdir(exist_ok=True)
    xdg.mkdir(exist_ok=True)
    cc = {
        "daily": tally(run_ccusage(agent, "daily", cc_env, cc_home or home)["daily"], "date"),
        "session": tally(run_ccusage(agent, "session", cc_env, cc_home or home)["sessions"], "sessionId"),
    }
    tf = {view: tally(run_traceflow(agent, view, tf_env, xdg, home)[view], "period") for view in cc}
    return cc, tf


def test_grok_equals_ccusage(tmp_path: Path) -> None:
    ccusage_binary()
    env = {"GROK_HOME": str(DATA / "grok")}
    cc, tf = _views("grok", env, env, tmp_path)
    # Grok records reasoning apart from its output; traceflow counts it as output (billed as output),
    # ccusage 20.0.24 counts it nowhere: 512 + 402 + 1428 + 96 on the 2nd (session A), 288 + 655 on
    # the 3rd (session B; session A's turn after midnight has none).
    add(cc["daily"], "2026-04-02", "outputTokens", 512 + 402 + 1428 + 96)
    add(cc["daily"], "2026-04-03", "outputTokens", 288 + 655)
    add(cc["session"], GROK_A, "outputTokens", 512 + 402 + 1428 + 96)
    add(cc["session"], GROK_B, "outputTokens", 288 + 655)
    assert tf == cc


def test_droid_equals_ccusage(tmp_path: Path) -> None:
    """Droid's settings files (one per session, running totals; one with no tokens gives no row)."""
    ccusage_binary()
    home = DATA / "droid"
    env = {"DROID_SESSIONS_DIR": str(home / ".factory" / "sessions")}
    cc, tf = _views("droid", {}, env, tmp_path, cc_home=home)
    # thinkingTokens: output in traceflow (billed as output), in ccusage's totals only.
    a, b, c = (
        "5b0c8e61-2f4a-4d7e-9c13-7a8e2d4f6b90",
        "8e2d1c40-7b3f-4a55-a6c2-0f9e1d3b5a72",
        "c4a9f0e2-1d6b-4f38-8e57-3b2c9a0d7e15",
    )
    add(cc["daily"], "2026-05-11", "outputTokens", 2214 + 3968, in_total=False)
    add(cc["session"], a, "outputTokens", 2214, in_total=False)
    add(cc["session"], b, "outputTokens", 3968, in_total=False)
    assert set(cc["session"]) == {a, b, c}
    assert tf == cc
    # the custom model label is named as ccusage names it
    cc_models = run_ccusage("droid", "daily", {}, home)["daily"]
    tf_models = run_traceflow("droid", "daily", env, tmp_path / "xdg", tmp_path / "home")["daily"]
    assert {r["date"]: sorted(r["modelsUsed"]) for r in cc_models} == {
        r["period"]: sorted(r["modelsUsed"]) for r in tf_models
    }


def _database(sql: Path, db: Path) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(db)
    con.executescript(sql.read_text())
    con.commit()
    con.close()


def test_goose_equals_ccusage(tmp_path: Path) -> None:
    """Goose's session table (accumulated totals; the last exchange's where none; a session without a
    model or tokens gives no row)."""
    ccusage_binary()
    home = tmp_path / "goose-home"
    folder = home / ".local" / "share" / "goose"
    _database(DATA / "goose" / "sessions.sql", folder / "sessions" / "sessions.db")
    cc, tf = _views("goose", {}, {"GOOSE_DATA_DIR": str(folder)}, tmp_path, cc_home=home)
    # The total beyond input and output (96440 - 84113 - 6391 = 5936, 20260601_2) is reasoning:
    # output in traceflow, in ccusage's totals only.
    add(cc["daily"], "2026-06-01", "outputTokens", 5936, in_total=False)
    add(cc["session"], "20260601_2", "outputTokens", 5936, in_total=False)
    assert set(cc["session"]) == {"20260601_1", "20260601_2", "20260602_1"}
    assert tf == cc


def test_hermes_equals_ccusage(tmp_path: Path) -> None:
    """Hermes' session table (running totals; sessions without a model or tokens give no row)."""
    ccusage_binary()
    folder = tmp_path / "hermes"
    _database(DATA / "hermes" / "state.sql", folder / "state.db")
    env = {"HERMES_HOME": str(folder)}
    cc, tf = _views("hermes", env, env, tmp_path)
    # reasoning_tokens (4416, the gpt-5 session): output in traceflow, in ccusage's totals only.
    add(cc["daily"], "2026-07-07", "outputTokens", 4416, in_total=False)
    add(cc["session"], "20260707_220911_d4e5f6", "outputTokens", 4416, in_total=False)
    assert len(cc["session"]) == 3
    assert tf == cc


def test_zcode_equals_ccusage(tmp_path: Path) -> None:
    """ZCode's model_usage table: completed calls only (a failed and a running one are not), an
    all-zero call gives no row, one call after midnight; no deliberate difference."""
    ccusage_binary()
    folder = tmp_path / "zcode"
    _database(DATA / "zcode" / "db.sql", folder / "cli" / "db" / "db.sqlite")
    env = {"ZCODE_HOME": str(folder)}
    cc, tf = _views("zcode", env, env, tmp_path)
    assert set(cc["daily"]) == {"2026-08-03", "2026-08-04"}
    assert tf == cc


AG_1, AG_2 = "3f2a9c1e-5b7d-4e60-8a14-0c9d2e7f1b35", "8d41e0b2-c6a3-4f95-9e27-51b8a0c3d6f4"


def test_antigravity_differs_from_ccusage_only_as_named(tmp_path: Path) -> None:
    """Two conversation databases (protobuf blobs; a call without its own time, an all-zero call, a
    call after midnight, a call without a response id, one call in both databases: counted once, in
    the first, by both tools)."""
    ccusage_binary()
    root = tmp_path / "antigravity"
    for sql in sorted((DATA / "antigravity").glob("*.sql")):
        _database(sql, root / "conversations" / f"{sql.stem}.db")
    env = {"ANTIGRAVITY_DATA_DIR": str(root)}
    cc, tf = _views("antigravity", env, env, tmp_path)
    # ccusage 20.0.24 reads the usage message's fields otherwise than its adapter's documented layout
    # (parser.rs, which traceflow follows): it leaves out field 1 (the system prompt's input: 1036 +
    # 1036 + 2210 + 1036 in AG_1, 1036 + 1036 in AG_2) and reads field 10 (thinking) as its output and
    # field 9 (the output: 604 + 1288 + 731 + 96 in AG_1, 211 + 95 in AG_2) in its totals only.
    # traceflow: input = fields 1 + 2, output = fields 9 + 10.
    system = {AG_1: 1036 + 1036 + 2210 + 1036, AG_2: 1036 + 1036}
    output = {AG_1: 604 + 1288 + 731 + 96, AG_2: 211 + 95}
    for session in (AG_1, AG_2):
        add(cc["session"], session, "inputTokens", system[session])
        add(cc["session"], session, "outputTokens", output[session], in_total=False)
    add(cc["daily"], "2026-09-14", "inputTokens", system[AG_1] + 1036)
    add(cc["daily"], "2026-09-14", "outputTokens", output[AG_1] + 211, in_total=False)
    add(cc["daily"], "2026-09-15", "inputTokens", 1036)
    add(cc["daily"], "2026-09-15", "outputTokens", 95, in_total=False)
    assert tf == cc
