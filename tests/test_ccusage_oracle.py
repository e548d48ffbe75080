"""ccusage 20.0.24 as the oracle of ``traceflow daily|weekly|monthly|session|blocks --json``.

One generated Claude Code history (benchmarks/gen_claude_corpus.py: sessions, three models,
sub-agents, old clients' placeholder copies) plus one hand-made session: a copy of a generated
session moved so that a request is sent before Tokyo's midnight and recorded after it, run on
another model (claude-opus-4-1), with one assistant line written twice. Both tools read the same
folder in the same zone (Asia/Tokyo) with the same prices (ccusage ``--offline``: its bundled
LiteLLM prices; traceflow's built-in list); every token field of every row and of ``totals`` must
be equal key by key, costs within 0.5 %.

traceflow reads the folder through ``CLAUDE_CONFIG_DIR`` with no explicit import: the first read
command on the default lake brings it up to date itself (docs/freshness.md).

ccusage comes from ``bash scripts/install_ccusage.sh`` (or ``$TRACEFLOW_CCUSAGE_BIN``); without it
the test skips locally and fails in CI (``$CI`` set).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import zoneinfo
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_generator

REPO = Path(__file__).resolve().parent.parent
VERSION = "20.0.24"
ZONE = "Asia/Tokyo"
VIEWS = ("daily", "weekly", "monthly", "session")
TOKEN_KEYS = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens", "totalTokens")
BLOCK_TOKEN_KEYS = ("inputTokens", "outputTokens", "cacheCreationInputTokens", "cacheReadInputTokens")
#: The day the hand-made session crosses Tokyo's midnight (15:00 UTC), after the generated window.
MIDNIGHT = dt.datetime(2026, 5, 2, 15, 0, tzinfo=dt.UTC)
CLI = Callable[..., tuple[int, str, str]]


def ccusage_binary() -> Path:
    """ccusage 20.0.24; without it: fail when ``$CI`` is set, else skip."""
    candidates = [
        os.environ.get("TRACEFLOW_CCUSAGE_BIN", ""),
        str(REPO / ".ci/cache/ccusage/node_modules/.bin/ccusage"),
    ]
    for c in candidates:
        if c and Path(c).is_file():
            out = subprocess.run([c, "--version"], capture_output=True, text=True, timeout=60)
            if VERSION in out.stdout:
                return Path(c)
    msg = (
        f"ccusage {VERSION} not found; run `bash scripts/install_ccusage.sh` first "
        "(or set TRACEFLOW_CCUSAGE_BIN)"
    )
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def _ts(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _stamp(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def add_midnight_session(root: Path) -> tuple[str, str]:
    """Copy the largest generated main session under a new id, model and project, shifted so that
    one request's trigger line is written before :data:`MIDNIGHT` (Tokyo) and all its assistant
    lines after it; write one assistant line twice. Returns the new session id and the request id."""
    mains = [p for p in (root / "projects").glob("*/*.jsonl")]
    source = max(mains, key=lambda p: p.stat().st_size)
    lines = [json.loads(raw) for raw in source.read_bytes().splitlines() if raw.strip()]
    # a request whose first assistant copy follows its trigger (a user line) by at least 2 s
    pick = None
    seen: set[str] = set()
    for i, line in enumerate(lines):
        rid = line.get("requestId")
        if line.get("type") != "assistant" or not rid or rid in seen:
            continue
        seen.add(rid)
        before = [j for j in range(i) if lines[j].get("type") == "user" and lines[j].get("timestamp")]
        if before and (_ts(line["timestamp"]) - _ts(lines[before[-1]]["timestamp"])).total_seconds() >= 2:
            pick = (before[-1], i)
            break
    assert pick is not None
    trigger = _ts(lines[pick[0]]["timestamp"])
    shift = MIDNIGHT - dt.timedelta(seconds=1) - trigger
    session = "0c0ffee0-0000-4000-8000-000000000001"
    out: list[dict[str, Any]] = []
    for line in lines:
        line = dict(line)
        if line.get("timestamp"):
            line["timestamp"] = _stamp(_ts(line["timestamp"]) + shift)
        if "sessionId" in line:
            line["sessionId"] = session
        if line.get("requestId"):
            line["requestId"] = line["requestId"] + "M"
        message = line.get("message")
        if isinstance(message, dict) and line.get("type") == "assistant":
            message = dict(message)
            if message.get("id"):
                message["id"] = message["id"] + "M"
            if message.get("model") and message["model"] != "<synthetic>":
                message["model"] = "claude-opus-4-1-20250805"
            line["message"] = message
        out.append(line)
    moved = out[pick[1]]
    assert _ts(out[pick[0]]["timestamp"]) < MIDNIGHT <= _ts(moved["timestamp"])
    out.insert(pick[1] + 1, dict(moved))  # the same line written twice: counted once
    folder = root / "projects" / "-home-test-midnight"
    folder.mkdir(parents=True)
    (folder / f"{session}.jsonl").write_bytes(
        b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in out)
    )
    return session, str(moved["requestId"])


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    root = tmp_path_factory.mktemp("claude")
    corpus_generator().generate_corpus(root, 0.6, 5)
    session, request = add_midnight_session(root)
    return root, session, request


@pytest.fixture(scope="module")
def ccusage(history: tuple[Path, str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    binary = ccusage_binary()
    home = tmp_path_factory.mktemp("home")  # no other agent's logs are found
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(history[0]),
        "TZ": "UTC",
    }
    docs = {}
    for view in (*VIEWS, "blocks"):
        out = subprocess.run(
            [str(binary), view, "--json", "--offline", "--timezone", ZONE],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        )
        docs[view] = json.loads(out.stdout)
    return docs


@pytest.fixture(scope="module")
def traceflow(history: tuple[Path, str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from typer.testing import CliRunner

    from traceflow.cli.app import app, register_all

    register_all()
    runner = CliRunner()
    # The default lake (no --data, no TRACEFLOW_DATA) under a fresh XDG data folder: the first read
    # command imports the logs the setting names by itself (docs/freshness.md), as ccusage reads them.
    env: dict[str, str | None] = {
        "CLAUDE_CONFIG_DIR": str(history[0]),
        "XDG_DATA_HOME": str(tmp_path_factory.mktemp("xdg")),
        "TRACEFLOW_DATA": None,
        "TRACEFLOW_CACHE": "0",
    }
    docs = {}
    for view in (*VIEWS, "blocks"):
        result = runner.invoke(app, [view, "--json", "--offline", "--timezone", ZONE], env=env)
        assert result.exit_code == 0, result.output
        docs[view] = json.loads(result.stdout)
    return docs


@pytest.fixture(scope="module")
def ledger(history: tuple[Path, str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same documents as ``python -m traceflow VIEW --json`` prints them from the usage ledger
    (traceflow/cli/usage_fast.py: no typer, no lake query), on a fresh default lake."""
    from traceflow.cli.usage_fast import answer

    home = tmp_path_factory.mktemp("home-ledger")
    mp = pytest.MonkeyPatch()
    for key in [k for k in os.environ if k.startswith("TRACEFLOW_")]:
        mp.delenv(key)
    mp.setenv("HOME", str(home))
    mp.setenv("CLAUDE_CONFIG_DIR", str(history[0]))
    mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-ledger")))
    try:
        docs = {}
        for view in VIEWS:
            text = answer(view, None, ZONE, None, None)
            assert text is not None
            docs[view] = json.loads(text)
    finally:
        mp.undo()
    return docs


@pytest.mark.parametrize("view", VIEWS)
def test_the_ledger_documents_are_the_lakes(
    view: str, traceflow: dict[str, Any], ledger: dict[str, Any]
) -> None:
    assert ledger[view] == traceflow[view]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 0.005 * max(abs(a), abs(b)) + 1e-9


@pytest.mark.parametrize("engine", ["lake", "ledger"])
@pytest.mark.parametrize("view", VIEWS)
def test_period_documents_equal_ccusage(
    view: str, engine: str, ccusage: dict[str, Any], traceflow: dict[str, Any], ledger: dict[str, Any]
) -> None:
    cc, tf = ccusage[view], (traceflow if engine == "lake" else ledger)[view]
    assert set(cc) <= set(tf)  # ccusage's top-level keys (traceflow adds its own)
    assert [r["period"] for r in tf[view]] == [r["period"] for r in cc[view]]  # the same rows, same order
    for want, got in zip(cc[view], tf[view], strict=True):
        assert set(want) <= set(got), f"{view} {want['period']}: missing keys {set(want) - set(got)}"
        for key in TOKEN_KEYS:
            assert got[key] == want[key], f"{view} {want['period']} {key}"
        assert _close(got["totalCost"], want["totalCost"]), f"{view} {want['period']} totalCost"
        assert got["agent"] == want["agent"]
        assert sorted(got["modelsUsed"]) == sorted(want["modelsUsed"])
        models = {m["modelName"]: m for m in want["modelBreakdowns"]}
        assert {m["modelName"] for m in got["modelBreakdowns"]} == set(models)
        for m in got["modelBreakdowns"]:
            for key in ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens"):
                assert m[key] == models[m["modelName"]][key], (
                    f"{view} {want['period']} {m['modelName']} {key}"
                )
            assert _close(m["cost"], models[m["modelName"]]["cost"])
    for key in TOKEN_KEYS:
        assert tf["totals"][key] == cc["totals"][key], f"{view} totals {key}"
    assert _close(tf["totals"]["totalCost"], cc["totals"]["totalCost"])
    assert tf["traceflow"]["zone"] == ZONE


def test_blocks_document_equals_ccusage(ccusage: dict[str, Any], traceflow: dict[str, Any]) -> None:
    cc, tf = ccusage["blocks"]["blocks"], traceflow["blocks"]["blocks"]
    assert [b["isGap"] for b in tf] == [b["isGap"] for b in cc]
    for want, got in zip(cc, tf, strict=True):
        assert set(want) <= set(got)
        if want["isGap"]:
            continue  # a gap's bounds are request times: see test_recorded_time_differences
        for key in ("id", "startTime", "endTime", "entries", "totalTokens", "isActive"):
            assert got[key] == want[key], f"block {want['id']} {key}"
        for key in BLOCK_TOKEN_KEYS:
            assert got["tokenCounts"][key] == want["tokenCounts"][key], f"block {want['id']} {key}"
        assert _close(got["costUSD"], want["costUSD"])
        assert sorted(got["models"]) == sorted(want["models"])


def test_the_midnight_request_is_filed_when_it_was_recorded(
    history: tuple[Path, str, str], ccusage: dict[str, Any], traceflow: dict[str, Any]
) -> None:
    """The hand-made session's request crosses Tokyo's midnight (sent before, recorded after): both
    tools file it on the new day."""
    after = MIDNIGHT.astimezone(zoneinfo.ZoneInfo(ZONE)).strftime("%Y-%m-%d")
    days = [r["period"] for r in ccusage["daily"]["daily"]]
    assert after in days
    assert [r["period"] for r in traceflow["daily"]["daily"]] == days
    session = history[1]
    assert session in [r["period"] for r in traceflow["session"]["session"]]


def _active_history(root: Path, now: dt.datetime) -> None:
    """Three requests of the last 130 minutes (two models): an active block, its burn rate and
    projection."""
    lines = []
    traffic = [
        (130, 5, 1000, 3000, 200, "claude-sonnet-4-5-20250929"),
        (70, 3, 4000, 500, 300, "claude-opus-4-5-20251101"),
        (10, 2, 4500, 100, 50, "claude-sonnet-4-5-20250929"),
    ]
    for i, (minutes, cold, read, write, out, model) in enumerate(traffic):
        lines.append(
            {
                "type": "assistant",
                "sessionId": "0c0ffee0-0000-4000-8000-0000000000a1",
                "cwd": "/home/u/p",
                "version": "2.1.101",
                "requestId": f"req_active{i}",
                "uuid": f"0c0ffee0-0000-4000-8000-0000000001a{i}",
                "timestamp": _stamp(now - dt.timedelta(minutes=minutes)),
                "message": {
                    "id": f"msg_active{i}",
                    "model": model,
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "ok"}],
                    "usage": {
                        "input_tokens": cold,
                        "cache_read_input_tokens": read,
                        "cache_creation_input_tokens": write,
                        "cache_creation": {
                            "ephemeral_5m_input_tokens": write,
                            "ephemeral_1h_input_tokens": 0,
                        },
                        "output_tokens": out,
                    },
                },
            }
        )
    folder = root / "projects" / "-home-u-p"
    folder.mkdir(parents=True)
    text = b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in lines)
    (folder / "0c0ffee0-0000-4000-8000-0000000000a1.jsonl").write_bytes(text)


def test_the_active_block_equals_ccusages(tmp_path: Path) -> None:
    """``blocks --active --json`` on traffic of the last hours: the same block, burn rate and (but
    for the seconds between the two runs) projection."""
    from typer.testing import CliRunner

    from traceflow.cli.app import app, register_all

    binary = ccusage_binary()
    root = tmp_path / "claude"
    _active_history(root, dt.datetime.now(dt.UTC))
    (tmp_path / "home").mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(root)}
    out = subprocess.run(
        [str(binary), "blocks", "--json", "--offline", "--active"],
        capture_output=True,
        text=True,
        env={**env, "TZ": "UTC"},
        timeout=120,
        check=True,
    )
    want = json.loads(out.stdout)["blocks"]
    register_all()
    runner = CliRunner()
    tf_env = {"CLAUDE_CONFIG_DIR": str(root), "TRACEFLOW_CACHE": "0"}
    lake = str(tmp_path / "lake")
    assert runner.invoke(app, ["import", "claude-code", "--data", lake], env=tf_env).exit_code == 0
    result = runner.invoke(app, ["blocks", "--json", "--offline", "--active", "--data", lake], env=tf_env)
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["blocks"]
    assert len(want) == len(got) == 1
    w, g = want[0], got[0]
    for key in (
        "id",
        "startTime",
        "endTime",
        "actualEndTime",
        "isActive",
        "entries",
        "tokenCounts",
        "totalTokens",
    ):
        assert g[key] == w[key], key
    assert _close(g["costUSD"], w["costUSD"])
    assert g["models"] == w["models"]  # in the order first used
    for key in ("tokensPerMinute", "tokensPerMinuteForIndicator", "costPerHour"):
        assert _close(g["burnRate"][key], w["burnRate"][key]), key
    # the projection moves with the clock: the runs are seconds apart
    assert abs(g["projection"]["remainingMinutes"] - w["projection"]["remainingMinutes"]) <= 1
    assert (
        abs(g["projection"]["totalTokens"] - w["projection"]["totalTokens"])
        <= 2 * w["burnRate"]["tokensPerMinute"]
    )
    assert abs(g["projection"]["totalCost"] - w["projection"]["totalCost"]) <= 0.011
