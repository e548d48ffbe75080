"""ccusage 20.0.24 as the oracle of the agents beside Claude Code (issue: every agent ccusage reads).

For each agent: its fixture under ``tests/data/agent-logs/<agent>`` (sources: tests/data/SOURCES.md)
is read by ``ccusage <agent> daily|session --json`` (the folder named by the agent's own variable,
``HOME`` empty so nothing else is found) and by traceflow's drop-in views on the default lake, which
import it by themselves through the same variable (docs/freshness.md), with ``--agent <agent>``.
Per day and per session every token field must be equal, except for the differences traceflow makes
on purpose; each is written out below with its tokens, counted by hand from the fixture, and why.

ccusage comes from ``bash scripts/install_ccusage.sh`` (or ``$TRACEFLOW_CCUSAGE_BIN``); without it
the tests skip locally and fail in CI (``$CI`` set).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.test_ccusage_oracle import ccusage_binary
from tests.test_import_opencode import opencode_home

ZONE = "UTC"
QWEN_FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "qwen"
KEYS = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens", "totalTokens")
Tally = dict[str, dict[str, int]]


def run_ccusage(agent: str, view: str, env: dict[str, str], home: Path) -> dict[str, Any]:
    binary = ccusage_binary()
    out = subprocess.run(
        [str(binary), agent, view, "--json", "--offline", "--timezone", ZONE],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home), "TZ": "UTC", **env},
        timeout=120,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def run_traceflow(agent: str, view: str, env: dict[str, str], xdg: Path, home: Path) -> dict[str, Any]:
    from typer.testing import CliRunner

    from traceflow.cli.app import app, register_all

    register_all()
    full: dict[str, str | None] = {
        "HOME": str(home),
        "XDG_DATA_HOME": str(xdg),
        "TRACEFLOW_DATA": None,
        "TRACEFLOW_CACHE": "0",
        "CLAUDE_CONFIG_DIR": None,
        "CODEX_HOME": None,
        "GEMINI_DIR": None,
        "OPENCODE_DATA_DIR": None,
        "QWEN_DATA_DIR": None,
        "AMP_DATA_DIR": None,
        "COPILOT_HOME": None,
        "KIMI_DATA_DIR": None,
        "CODEBUFF_DATA_DIR": None,
        "KILO_DATA_DIR": None,
        "PI_AGENT_DIR": None,
        "OPENCLAW_DIR": None,
        "GROK_HOME": None,
        "DROID_SESSIONS_DIR": None,
        "ZCODE_HOME": None,
        "ANTIGRAVITY_DATA_DIR": None,
        "GOOSE_DATA_DIR": None,
        "HERMES_HOME": None,
        **env,
    }
    result = CliRunner().invoke(app, [view, "--json", "--timezone", ZONE, "--agent", agent], env=full)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def tally(rows: list[dict[str, Any]], key: str) -> Tally:
    return {r[key]: {k: r[k] for k in KEYS} for r in rows}


def move(t: Tally, src: str, dst: str, tokens: dict[str, int]) -> None:
    """Move ``tokens`` (and their total) from row ``src`` to row ``dst``."""
    total = sum(tokens.values())
    for row, sign in ((src, -1), (dst, 1)):
        entry = t.setdefault(row, dict.fromkeys(KEYS, 0))
        for k, v in tokens.items():
            entry[k] += sign * v
        entry["totalTokens"] += sign * total
    if not any(t[src].values()):
        del t[src]


def add(t: Tally, row: str, key: str, n: int, *, in_total: bool = True) -> None:
    t[row][key] += n
    if in_total:
        t[row]["totalTokens"] += n


def fold(t: Tally, child: str, parent: str) -> None:
    """Count a sub-agent's session in the session that spawned it."""
    for k, v in t.pop(child).items():
        t[parent][k] += v


# -- OpenCode ---------------------------------------------------------------------------------------

OC_A, OC_B = "ses_6a1f0c2e3ffeY2qk0Ugq1Zc9Ab", "ses_6a1f0b71cffeQ8r3WbN2kLmPq4"
OC_C = "ses_69f2d3a85ffe1xVt7Hs4RkEu0m"
OC_D, OC_E = "ses_5e02b9d41ffeHk3sQw8ZtYp1Lc", "ses_5e02b8f07ffeM4nXr6VbJu2Kd9"
#: msg_a06, created 2026-03-09T23:59:58Z, completed 2026-03-10T00:00:07Z.
OC_MIDNIGHT = {"inputTokens": 6, "outputTokens": 402, "cacheReadTokens": 16756, "cacheCreationTokens": 2311}


def opencode_expected(cc_daily: Tally, cc_session: Tally) -> tuple[Tally, Tally]:
    """ccusage's OpenCode rows turned into traceflow's by the named differences."""
    daily = {k: dict(v) for k, v in cc_daily.items()}
    session = {k: dict(v) for k, v in cc_session.items()}
    # 1. A request counts when the agent recorded it, its completion (the lake's ended_at); ccusage
    #    files OpenCode messages at their creation. msg_a06 crosses midnight: the next day here.
    move(daily, "2026-03-09", "2026-03-10", OC_MIDNIGHT)
    # 2. OpenCode records reasoning apart from output; traceflow's output includes reasoning
    #    (docs/schemas.md), ccusage's outputTokens leaves it out (its totalTokens counts it):
    #    msg_c02 1344 + msg_c03 448 + msg_c04 64 on the 10th (session C), msg_e03 1920 on the 11th.
    add(daily, "2026-03-10", "outputTokens", 1344 + 448 + 64, in_total=False)
    add(session, OC_C, "outputTokens", 1344 + 448 + 64, in_total=False)
    add(daily, "2026-03-11", "outputTokens", 1920, in_total=False)
    add(session, OC_E, "outputTokens", 1920, in_total=False)
    # 3. msg_c03 writes its input as a string ("820"): ccusage 20.0.24 counts it as 0, traceflow
    #    reads the number (as it does for every agent's counts).
    add(daily, "2026-03-10", "inputTokens", 820)
    add(session, OC_C, "inputTokens", 820)
    # 4. A sub-agent's session (storage/session parentID, the database's session.parent_id) counts
    #    in the session that spawned it, as traceflow's session view does for every agent; ccusage
    #    lists OpenCode's sub-agent sessions on their own.
    fold(session, OC_B, OC_A)
    fold(session, OC_E, OC_D)
    return daily, session


@pytest.fixture(scope="module")
def opencode_docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ccusage_binary()  # skip (or fail in CI) before building anything
    root = opencode_home(tmp_path_factory.mktemp("opencode"))
    env = {"OPENCODE_DATA_DIR": str(root)}
    home = tmp_path_factory.mktemp("home")
    xdg = tmp_path_factory.mktemp("xdg")
    return {
        "cc": {v: run_ccusage("opencode", v, env, home) for v in ("daily", "session")},
        "tf": {v: run_traceflow("opencode", v, env, xdg, home) for v in ("daily", "session")},
    }


def test_opencode_days_and_sessions_equal_ccusage(opencode_docs: dict[str, Any]) -> None:
    cc, tf = opencode_docs["cc"], opencode_docs["tf"]
    want_daily, want_session = opencode_expected(
        tally(cc["daily"]["daily"], "date"), tally(cc["session"]["sessions"], "sessionId")
    )
    assert tally(tf["daily"]["daily"], "period") == want_daily
    assert tally(tf["session"]["session"], "period") == want_session
    for view, key in (("daily", "daily"), ("session", "session")):
        rows = tf[view][key]
        assert {k: sum(r[k] for r in rows) for k in KEYS} == {k: tf[view]["totals"][k] for k in KEYS}


def test_opencode_models_equal_ccusage(opencode_docs: dict[str, Any]) -> None:
    cc, tf = opencode_docs["cc"], opencode_docs["tf"]
    # the same models per day (msg_a06 moves to the 10th, whose models already include its sonnet)
    assert {r["date"]: sorted(r["modelsUsed"]) for r in cc["daily"]["daily"]} == {
        r["period"]: sorted(r["modelsUsed"]) for r in tf["daily"]["daily"]
    }
    cc_models = {m for r in cc["session"]["sessions"] for m in r["modelsUsed"]}
    assert cc_models == {m for r in tf["session"]["session"] for m in r["modelsUsed"]}


# -- Qwen Code -------------------------------------------------------------------------------------

QW_1 = "4c1e2a7b-6f0d-4e55-9a0b-2d3c4e5f6a71"  # with a sidechain sub-agent (agentId explore-7f3c)
QW_2 = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c62"  # /branch of QW_1 after its first request
QW_3 = "e2f3a4b5-c6d7-48e9-a0b1-c2d3e4f5a6b3"  # qwen3-max with thoughts
#: The first request of QW_1 (prompt 14820, no cache, 212 out), copied into QW_2 by /branch.
QW_FORKED = {"inputTokens": 14820, "outputTokens": 212, "cacheReadTokens": 0, "cacheCreationTokens": 0}


def qwen_expected(cc_daily: Tally, cc_session: Tally) -> tuple[Tally, Tally]:
    """ccusage's Qwen rows turned into traceflow's by the named differences."""
    daily = {k: dict(v) for k, v in cc_daily.items()}
    session = {k: dict(v) for k, v in cc_session.items()}
    # 1. /branch copies a record into the new session with its uuid: one request, counted once here
    #    (in the session it was sent in); ccusage counts the copy again in the fork.
    for t, row in ((daily, "2026-03-12"), (session, QW_2)):
        for k, v in QW_FORKED.items():
            t[row][k] -= v
        t[row]["totalTokens"] -= sum(QW_FORKED.values())
    # 2. promptTokenCount includes the cached tokens: traceflow's input is the cold part (prompt −
    #    cached), ccusage's inputTokens is the whole prompt beside cacheReadTokens, so it counts the
    #    cache read twice (in inputTokens and in totalTokens).
    for t in (daily, session):
        for row in t.values():
            row["inputTokens"] -= row["cacheReadTokens"]
            row["totalTokens"] -= row["cacheReadTokens"]
    # 3. thoughtsTokenCount is apart from candidatesTokenCount: traceflow's output includes it,
    #    ccusage's outputTokens leaves it out (its totalTokens counts it): 1288 + 904 in QW_3.
    add(daily, "2026-03-13", "outputTokens", 1288 + 904, in_total=False)
    add(session, QW_3, "outputTokens", 1288 + 904, in_total=False)
    return daily, session


@pytest.fixture(scope="module")
def qwen_docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ccusage_binary()
    env = {"QWEN_DATA_DIR": str(QWEN_FIXTURE)}
    home = tmp_path_factory.mktemp("home")
    xdg = tmp_path_factory.mktemp("xdg")
    return {
        "cc": {v: run_ccusage("qwen", v, env, home) for v in ("daily", "session")},
        "tf": {v: run_traceflow("qwen", v, env, xdg, home) for v in ("daily", "session")},
    }


def test_qwen_days_and_sessions_equal_ccusage(qwen_docs: dict[str, Any]) -> None:
    cc, tf = qwen_docs["cc"], qwen_docs["tf"]
    want_daily, want_session = qwen_expected(
        tally(cc["daily"]["daily"], "date"), tally(cc["session"]["sessions"], "sessionId")
    )
    assert tally(tf["daily"]["daily"], "period") == want_daily
    assert tally(tf["session"]["session"], "period") == want_session
    assert {r["agent"] for r in tf["session"]["session"]} == {"qwen"}  # ccusage's name of the agent


def test_qwen_models_equal_ccusage(qwen_docs: dict[str, Any]) -> None:
    cc, tf = qwen_docs["cc"], qwen_docs["tf"]
    assert {r["date"]: sorted(r["modelsUsed"]) for r in cc["daily"]["daily"]} == {
        r["period"]: sorted(r["modelsUsed"]) for r in tf["daily"]["daily"]
    }
    assert {r["sessionId"]: sorted(r["modelsUsed"]) for r in cc["session"]["sessions"]} == {
        r["period"]: sorted(r["modelsUsed"]) for r in tf["session"]["session"]
    }


# -- Amp -------------------------------------------------------------------------------------------

AMP_FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "amp"


@pytest.fixture(scope="module")
def amp_docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ccusage_binary()
    env = {"AMP_DATA_DIR": str(AMP_FIXTURE)}
    home = tmp_path_factory.mktemp("home")
    xdg = tmp_path_factory.mktemp("xdg")
    return {
        "cc": {v: run_ccusage("amp", v, env, home) for v in ("daily", "session")},
        "tf": {v: run_traceflow("amp", v, env, xdg, home) for v in ("daily", "session")},
    }


def test_amp_days_and_sessions_equal_ccusage(amp_docs: dict[str, Any]) -> None:
    """No deliberate difference: Amp's usage is Anthropic's split, read the same way by both."""
    cc, tf = amp_docs["cc"], amp_docs["tf"]
    assert tally(tf["daily"]["daily"], "period") == tally(cc["daily"]["daily"], "date")
    assert tally(tf["session"]["session"], "period") == tally(cc["session"]["sessions"], "sessionId")


def test_amp_models_and_claude_costs_equal_ccusage(amp_docs: dict[str, Any]) -> None:
    """Per day and model the same tokens; Claude models' costs within 0.5 % (gpt-5 is not in
    traceflow's built-in price list, which holds Claude models: `--prices` with LiteLLM's file prices it)."""
    cc, tf = amp_docs["cc"], amp_docs["tf"]
    want = {(r["date"], m["modelName"]): m for r in cc["daily"]["daily"] for m in r["modelBreakdowns"]}
    got = {(r["period"], m["modelName"]): m for r in tf["daily"]["daily"] for m in r["modelBreakdowns"]}
    assert set(got) == set(want)
    for key, m in got.items():
        for k in ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens"):
            assert m[k] == want[key][k], (key, k)
        if key[1].startswith("claude-"):
            assert m["cost"] == pytest.approx(want[key]["cost"], rel=0.005), key


# -- GitHub Copilot CLI ----------------------------------------------------------------------------

COPILOT_FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "copilot"
CP_2 = "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d"  # resumed; its second process ran gemini-2.5-pro


@pytest.fixture(scope="module")
def copilot_docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ccusage_binary()
    env = {"COPILOT_HOME": str(COPILOT_FIXTURE)}
    home = tmp_path_factory.mktemp("home")
    xdg = tmp_path_factory.mktemp("xdg")
    return {
        "cc": {v: run_ccusage("copilot", v, env, home) for v in ("daily", "session")},
        "tf": {v: run_traceflow("copilot", v, env, xdg, home) for v in ("daily", "session")},
    }


def test_copilot_days_and_sessions_equal_ccusage(copilot_docs: dict[str, Any]) -> None:
    cc, tf = copilot_docs["cc"], copilot_docs["tf"]
    daily, session = tally(cc["daily"]["daily"], "date"), tally(cc["session"]["sessions"], "sessionId")
    # The one difference: Gemini's reasoningTokens are outside its outputTokens (for Claude and GPT
    # models they are a part of them). traceflow counts them as output (they are billed as output);
    # ccusage 20.0.24 leaves them out of its output and its totals: 1210 on the 16th, in CP_2.
    add(daily, "2026-03-16", "outputTokens", 1210)
    add(session, CP_2, "outputTokens", 1210)
    assert tally(tf["daily"]["daily"], "period") == daily
    assert tally(tf["session"]["session"], "period") == session
    assert {r["date"]: sorted(r["modelsUsed"]) for r in cc["daily"]["daily"]} == {
        r["period"]: sorted(r["modelsUsed"]) for r in tf["daily"]["daily"]
    }


# -- Kimi, Codebuff: no deliberate difference -----------------------------------------------------

DATA = Path(__file__).resolve().parent / "data" / "agent-logs"
EQUAL = {
    # Kimi's split is Anthropic's; its sub-agent (``agents/coder-2``) is in the session folder ccusage
    # groups by; ``session``-scope records (running totals) count for neither.
    "kimi": ("KIMI_DATA_DIR", DATA / "kimi"),
    # Codebuff's usage is Anthropic's split; the session is ``<channel>/<project>/<chat>`` for both.
    "codebuff": ("CODEBUFF_DATA_DIR", DATA / "codebuff" / "manicode"),
    # pi's usage is exclusive; ccusage labels its models ``[pi] <model>`` (see MODEL_LABELS).
    "pi": ("PI_AGENT_DIR", DATA / "pi"),
    # OpenClaw's transcripts are pi's; a reset transcript (``.jsonl.reset.<time>``) is read by both.
    "openclaw": ("OPENCLAW_DIR", DATA / "openclaw"),
}
#: How ccusage names an agent's models where traceflow keeps the recorded name.
MODEL_LABELS = {"pi": "[pi] ", "openclaw": "[openclaw] "}


@pytest.mark.parametrize("agent", sorted(EQUAL))
def test_days_and_sessions_equal_ccusage(agent: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    ccusage_binary()
    variable, folder = EQUAL[agent]
    env = {variable: str(folder)}
    home, xdg = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("xdg")
    for view, cc_rows, cc_key in (("daily", "daily", "date"), ("session", "sessions", "sessionId")):
        cc = run_ccusage(agent, view, env, home)[cc_rows]
        tf = run_traceflow(agent, view, env, xdg, home)[view]
        assert tally(tf, "period") == tally(cc, cc_key)
        label = MODEL_LABELS.get(agent, "")
        assert {r["period"]: sorted(label + m for m in r["modelsUsed"]) for r in tf} == {
            r[cc_key]: sorted(r["modelsUsed"]) for r in cc
        }


# -- Gemini CLI and Codex (their packaged examples) --------------------------------------------------

GEMINI_SESSION = "c1d2e3f4-0000-4000-8000-000000000003"
CODEX_FILE = "rollout-2026-08-29T09-20-00-0199a213-81c0-7800-8aa1-bbab2a035a53"


def test_gemini_and_codex_equal_ccusage(tmp_path: Path) -> None:
    """The packaged Gemini CLI chat and Codex rollout (traceflow/examples) laid out as the agents keep
    them; ccusage's folder variables are ``GEMINI_DATA_DIR`` and ``CODEX_HOME``, traceflow's
    ``GEMINI_DIR`` and ``CODEX_HOME``."""
    from tests.conftest import EXAMPLES

    ccusage_binary()
    chats = tmp_path / "gemini" / "tmp" / "0f1e2d3c" / "chats"
    chats.mkdir(parents=True)
    (chats / "session-2026-08-29T09-20-c1d2e3f4.jsonl").write_bytes(
        (EXAMPLES / "gemini-chat.jsonl").read_bytes()
    )
    day = tmp_path / "codex" / "sessions" / "2026" / "08" / "29"
    day.mkdir(parents=True)
    (day / f"{CODEX_FILE}.jsonl").write_bytes((EXAMPLES / "codex-rollout.jsonl").read_bytes())
    home = tmp_path / "home"
    home.mkdir()
    cases = (
        ("gemini", {"GEMINI_DATA_DIR": str(tmp_path / "gemini")}, {"GEMINI_DIR": str(tmp_path / "gemini")}),
        ("codex", {"CODEX_HOME": str(tmp_path / "codex")}, {"CODEX_HOME": str(tmp_path / "codex")}),
    )
    for agent, cc_env, tf_env in cases:
        xdg = tmp_path / f"xdg-{agent}"
        xdg.mkdir()
        cc_daily = tally(run_ccusage(agent, "daily", cc_env, home)["daily"], "date")
        cc_session = tally(run_ccusage(agent, "session", cc_env, home)["sessions"], "sessionId")
        tf_daily = tally(run_traceflow(agent, "daily", tf_env, xdg, home)["daily"], "period")
        tf_session = tally(run_traceflow(agent, "session", tf_env, xdg, home)["session"], "period")
        if agent == "gemini":
            # Gemini's thoughts (590) are apart from its candidates: traceflow's output includes them,
            # ccusage's outputTokens leaves them out (its totalTokens counts them).
            add(cc_daily, "2026-08-29", "outputTokens", 590, in_total=False)
            add(cc_session, GEMINI_SESSION, "outputTokens", 590, in_total=False)
        else:
            # ccusage names a Codex session by its rollout file's path under sessions/; traceflow by
            # the session id the rollout's session_meta records.
            (only,) = cc_session.values()
            assert list(cc_session) == [f"2026/08/29/{CODEX_FILE}"]
            cc_session = {"019a9776-0a34-7842-8627-112b63d66e90": only}
        assert tf_daily == cc_daily, agent
        assert tf_session == cc_session, agent


# -- Kilo CLI --------------------------------------------------------------------------------------

KILO_PARENT, KILO_CHILD = "ses_4d1a7e20bffeKx9Qp2Wm5Zr8Tn", "ses_4d1a6c11affeLm3Vb7Hq1Yu6Ej"


def kilo_home(tmp: Path) -> Path:
    """The Kilo fixture's database, built from its SQL."""
    import sqlite3

    home = tmp / "kilo"
    home.mkdir()
    con = sqlite3.connect(home / "kilo.db")
    con.executescript((DATA / "kilo" / "kilo.sql").read_text())
    con.commit()
    con.close()
    return home


def test_kilo_days_and_sessions_equal_ccusage(tmp_path: Path) -> None:
    ccusage_binary()
    env = {"KILO_DATA_DIR": str(kilo_home(tmp_path))}
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    xdg.mkdir()
    daily = tally(run_ccusage("kilo", "daily", env, home)["daily"], "date")
    session = tally(run_ccusage("kilo", "session", env, home)["sessions"], "sessionId")
    # As for OpenCode (Kilo is its fork): reasoning (1536 + 704, the gpt-5 sub-agent's) is output in
    # traceflow, beside the output in ccusage (counted in its totalTokens); the sub-agent's session
    # (session.parent_id) counts in its parent's.
    add(daily, "2026-03-20", "outputTokens", 1536 + 704, in_total=False)
    add(session, KILO_CHILD, "outputTokens", 1536 + 704, in_total=False)
    fold(session, KILO_CHILD, KILO_PARENT)
    assert tally(run_traceflow("kilo", "daily", env, xdg, home)["daily"], "period") == daily
    assert tally(run_traceflow("kilo", "session", env, xdg, home)["session"], "period") == session
