"""``misses``, ``ttl --observed`` and ``check`` on Codex rollouts and Claude Code OTLP/JSON logs.

The rollouts and the OTLP/JSON files are built here by hand (as in tests/test_import_codex.py and
tests/test_import_otlp_json.py); every expected number comes from their construction.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from traceflow.analysis.health import ALERT_EXIT
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
READ, W5M, W1H = 0.1, 1.25, 2.0  # the built-in multipliers
SONNET, OPUS = "claude-sonnet-4-5", "claude-opus-4-5"  # input $3 / M, $5 / M
T0 = dt.datetime(2026, 3, 2, 10, 0, tzinfo=dt.UTC)

# a request: (seconds after the session's start, model, cold, read, 5m writes, 1h writes, output)
Req = tuple[float, str, int, int, int, int, int]


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def codex_rollout(path: Path, session: str, start: dt.datetime, requests: list[Req]) -> None:
    """A Codex rollout: one ``token_count`` per request (cumulative totals; input = cold + read,
    cached = read; Codex has no writes), a ``turn_context`` before each model change."""
    lines: list[dict[str, Any]] = [
        {"timestamp": _iso(start), "type": "session_meta", "payload": {"id": session, "cwd": "/repo"}},
        {
            "timestamp": _iso(start),
            "type": "event_msg",
            "payload": {"type": "task_started", "turn_id": f"turn-{session}"},
        },
    ]
    total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    model = None
    for at, m, cold, read, w5m, w1h, out in requests:
        assert w5m == w1h == 0
        t = start + dt.timedelta(seconds=at)
        if m != model:
            model = m
            ctx = {"cwd": "/repo", "model": m}
            lines.append(
                {"timestamp": _iso(t - dt.timedelta(seconds=0.5)), "type": "turn_context", "payload": ctx}
            )
        last = {"input_tokens": cold + read, "cached_input_tokens": read, "output_tokens": out}
        total = {k: total[k] + v for k, v in last.items()}
        info = {
            "total_token_usage": {**total, "total_tokens": total["input_tokens"] + total["output_tokens"]},
            "last_token_usage": {**last, "total_tokens": cold + read + out},
        }
        lines.append(
            {"timestamp": _iso(t), "type": "event_msg", "payload": {"type": "token_count", "info": info}}
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))


def _attrs(**kv: Any) -> list[dict[str, Any]]:
    return [
        {
            "key": k.replace("_DOT_", "."),
            "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v},
        }
        for k, v in kv.items()
    ]


def otlp_logs(
    path: Path,
    session: str,
    start: dt.datetime,
    requests: list[Req],
    tools: list[tuple[float, str]] = (),  # type: ignore[assignment]
) -> None:
    """Claude Code OTLP/JSON logs: one ``api_request`` per request (ends 1 s after it starts,
    ``duration_ms`` 1000) and one ``tool_result`` per ``(seconds, tool)``."""
    records = []
    for i, (at, model, cold, read, w5m, w1h, out) in enumerate(requests):
        end = start + dt.timedelta(seconds=at + 1)
        attrs = _attrs(
            event_DOT_name="api_request",
            session_DOT_id=session,
            model=model,
            input_tokens=cold,
            cache_read_tokens=read,
            cache_creation_tokens=w5m + w1h,
            cache_creation_5m_tokens=w5m,
            cache_creation_1h_tokens=w1h,
            output_tokens=out,
            duration_ms=1000,
            request_id=f"req_{session}_{i}",
        )
        nanos = str(int(end.timestamp() * 1e9))
        records.append(
            {"timeUnixNano": nanos, "body": {"stringValue": "claude_code.api_request"}, "attributes": attrs}
        )
    for at, tool in tools:
        t = start + dt.timedelta(seconds=at)
        attrs = _attrs(event_DOT_name="tool_result", session_DOT_id=session, tool_name=tool, duration_ms=5)
        nanos = str(int(t.timestamp() * 1e9))
        records.append(
            {"timeUnixNano": nanos, "body": {"stringValue": "claude_code.tool_result"}, "attributes": attrs}
        )
    resource = {"attributes": _attrs(service_DOT_name="claude-code", service_DOT_version="2.1.340")}
    scope = {"scope": {"name": "com.anthropic.claude_code.events"}, "logRecords": records}
    doc = {"resourceLogs": [{"resource": resource, "scopeLogs": [scope]}]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) + "\n")


# -- misses ------------------------------------------------------------------------------------

# Codex: prompt = cold + read; reusable = min(previous prompt, own prompt); missed = reusable - read.
CODEX = [
    (0, "gpt-5.5", 10000, 0, 0, 0, 100),  # c1 10000: first_request
    (5, "gpt-5.5", 516, 9984, 0, 0, 100),  # c2 10500: reusable 10000, read 9984: a hit
    (405, "gpt-5.5", 10700, 0, 0, 0, 100),  # c3 10700: 400 s > 300 s (no write split): ttl_expired 10500
    (410, "gpt-5", 10800, 0, 0, 0, 100),  # c4 10800: model_switch, missed 10700
    (415, "gpt-5", 9000, 2000, 0, 0, 100),  # c5 11000: unexplained, missed 10800 - 2000 = 8800
    (420, "gpt-5", 4000, 0, 0, 0, 100),  # c6 4000 < half of 11000: compaction, missed 4000
    (425, "gpt-5", 200, 4000, 0, 0, 100),  # c7 4200: reusable 4000, read 4000: a hit
]


def test_codex_misses_get_their_causes(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    codex_rollout(tmp_path / "codex" / "rollout-c.jsonl", "c-1", T0, CODEX)
    summary = run_import(lake, get("codex"), [tmp_path / "codex"])
    assert not summary.errors and summary.rows["requests"] == 7
    code, out, err = cli("misses", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert (got["requests"], got["misses"]) == (7, 5)
    assert got["missed_tokens"] == 10500 + 10700 + 8800 + 4000
    assert {c: (v["misses"], v["missed_tokens"]) for c, v in got["by_cause"].items()} == {
        "first_request": (1, 0),
        "model_switch": (1, 10700),
        "compaction": (1, 4000),
        "ttl_expired": (1, 10500),
        "restart": (0, 0),
        "prefix_break": (0, 0),  # c5 reads 2,000: above the first read (0) + 1,024
        "unexplained": (1, 8800),
    }
    assert all(v["miss_cost_usd"] > 0 for v in got["by_cause"].values() if v["misses"] and v["missed_tokens"])


def test_codex_ttl_observed_is_inferred_from_the_misses_after_gaps(
    lake: Lake, tmp_path: Path, cli: Cli
) -> None:
    codex_rollout(tmp_path / "codex" / "rollout-c.jsonl", "c-1", T0, CODEX)
    run_import(lake, get("codex"), [tmp_path / "codex"])
    code, out, err = cli("ttl", "--observed", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    # no 5m/1h split; the one gap over 5 minutes (c3, 400 s) was followed by a miss: 300 s
    assert got["days"] == [{"day": "2026-03-02", "ttl_in_force_s": 300, "share_1h_writes": None}]
    assert got["changes"] == []
    assert len(got["notes"]) == 1 and "no 5m/1h cache-write split" in got["notes"][0]
    assert "0 hit(s), 1 miss(es)" in got["notes"][0]


# Claude Code OTLP: o-1 on day 1 (1-hour writes), p-1 on day 2 (5-minute writes). Request k starts
# at its offset and ends 1 s later; a gap is the next start minus this end.
OTLP = [
    (0, SONNET, 3, 0, 0, 10000, 100),  # o1 10003: first_request
    (5, SONNET, 3, 10000, 0, 500, 100),  # o2 10503: reusable 10003, read 10000: a hit
    (406, SONNET, 3, 10500, 0, 200, 100),  # o3 10703: 400 s after 1-hour writes: a hit
    (4407, SONNET, 3, 0, 0, 10800, 100),  # o4 10803: 4000 s > 1 h: ttl_expired, missed 10703
    (4412, OPUS, 3, 0, 0, 11000, 100),  # o5 11003: model_switch, missed 10803
    (4417, OPUS, 3, 2000, 0, 9100, 100),  # o6 11103 after a Bash result: unexplained, missed 9003
    (4422, OPUS, 3, 0, 0, 3000, 100),  # o7 3003 < half of 11103: compaction, missed 3003
]
OTLP_DAY2 = [
    (0, SONNET, 3, 0, 5000, 0, 100),  # p1 5003: first_request
    (401, SONNET, 3, 0, 5200, 0, 50),  # p2 5203: 400 s after 5-minute writes: ttl_expired, 5003
]


@pytest.fixture
def otlp(lake: Lake, tmp_path: Path) -> Lake:
    otlp_logs(tmp_path / "otlp" / "o.json", "o-1", T0, OTLP, tools=[(4416.5, "Bash")])
    otlp_logs(tmp_path / "otlp" / "p.json", "p-1", T0 + dt.timedelta(days=1), OTLP_DAY2)
    summary = run_import(lake, get("otlp-json"), [tmp_path / "otlp"])
    assert not summary.errors and summary.rows["requests"] == 9
    return lake


def test_otlp_misses_get_their_causes(otlp: Lake, cli: Cli) -> None:
    code, out, err = cli("misses", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert (got["requests"], got["misses"]) == (9, 7)
    expected = {
        "first_request": {"misses": 2, "missed_tokens": 0, "miss_cost_usd": 0.0},
        "model_switch": {"misses": 1, "missed_tokens": 10803, "miss_cost_usd": 10803 * 5e-6 * (W1H - READ)},
        "compaction": {"misses": 1, "missed_tokens": 3003, "miss_cost_usd": 3003 * 5e-6 * (W1H - READ)},
        "ttl_expired": {
            "misses": 2,
            "missed_tokens": 10703 + 5003,
            "miss_cost_usd": 10703 * 3e-6 * (W1H - READ) + 5003 * 3e-6 * (W5M - READ),
        },
        "unexplained": {"misses": 1, "missed_tokens": 9003, "miss_cost_usd": 9003 * 5e-6 * (W1H - READ)},
    }
    for cause, want in expected.items():
        assert got["by_cause"][cause] == {k: pytest.approx(v) for k, v in want.items()}, cause
    # the OTLP tool_result event: o6 followed Bash
    code, out, err = cli("misses", "--by", "tool", "--format", "json")
    assert code == 0, err
    bash = {g["tool"]: g for g in json.loads(out)}["Bash"]
    assert (bash["requests"], bash["misses"], bash["by_cause"]["unexplained"]["missed_tokens"]) == (
        1,
        1,
        9003,
    )


def test_otlp_ttl_observed_changes_on_day_2(otlp: Lake, cli: Cli) -> None:
    code, out, err = cli("ttl", "--observed", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["days"] == [
        {"day": "2026-03-02", "ttl_in_force_s": 3600, "share_1h_writes": 1.0},
        {"day": "2026-03-03", "ttl_in_force_s": 300, "share_1h_writes": 0.0},
    ]
    # day 2 by the TTL what-if: p1 writes its context 5003; p2's prefix is p1's context plus output,
    # 5103. Under 300 s p2 (gap 400 s) rewrites its whole context 5203; under 3600 s it reads 5103
    # and writes 100. Sonnet input $3 / M; the output costs the same either way.
    cost_300 = (5003 + 5203) * 3e-6 * W5M
    cost_3600 = (5003 + 100) * 3e-6 * W1H + 5103 * 3e-6 * READ
    assert got["changes"] == [
        {
            "day": "2026-03-03",
            "from_s": 3600,
            "to_s": 300,
            "extra_cost_usd": pytest.approx(cost_300 - cost_3600),
        }
    ]
    assert got["notes"] == []


# -- check -------------------------------------------------------------------------------------

WINDOW = dt.datetime(2026, 3, 10, tzinfo=dt.UTC)
WINDOW_ARGS = ("--since", "2026-03-10", "--until", "2026-03-11")
HEALTHY = [(0, "M", 10000, 0, 0, 0, 10), (5, "M", 500, 10000, 0, 0, 10), (10, "M", 500, 10500, 0, 0, 10)]
DROP = [(0, "M", 10000, 0, 0, 0, 10), (5, "M", 10500, 0, 0, 0, 10), (10, "M", 11000, 0, 0, 0, 10)]
BASELINE_REUSE = (10000 + 10500) / (10000 + 10500 + 11000)


def _health(lake: Lake, root: Path, source: str, *, drop: bool) -> None:
    """Seven baseline days of one healthy session each; the window day healthy or dropping (two
    unexplained misses of three requests, nothing read)."""
    model = "gpt-5" if source == "codex" else SONNET
    for d in range(-7, 1):
        spec = DROP if d == 0 and drop else HEALTHY
        reqs = [(at, model, *rest) for at, _, *rest in spec]
        start = WINDOW + dt.timedelta(days=d, hours=12)
        if source == "codex":
            codex_rollout(root / f"rollout-h{d + 7}.jsonl", f"h{d + 7}", start, reqs)  # type: ignore[arg-type]
        else:
            otlp_logs(root / f"h{d + 7}.json", f"h{d + 7}", start, reqs)  # type: ignore[arg-type]
    summary = run_import(lake, get(source), [root])
    assert not summary.errors and summary.rows["requests"] == 24


@pytest.mark.parametrize("source", ["codex", "otlp-json"])
def test_check_on_codex_and_otlp(lake: Lake, tmp_path: Path, cli: Cli, source: str) -> None:
    _health(lake, tmp_path / "quiet", source, drop=False)
    code, out, err = cli("check", *WINDOW_ARGS, "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["status"] == "ok" and got["fired"] == []
    assert got["window"]["reuse_ratio"] == pytest.approx(BASELINE_REUSE)


@pytest.mark.parametrize("source", ["codex", "otlp-json"])
def test_check_fires_on_codex_and_otlp(lake: Lake, tmp_path: Path, cli: Cli, source: str) -> None:
    _health(lake, tmp_path / "drop", source, drop=True)
    code, out, err = cli("check", *WINDOW_ARGS, "--format", "json")
    assert code == ALERT_EXIT, err
    fired = {f["check"]: f for f in json.loads(out)["fired"]}
    assert set(fired) == {"reuse_drop", "unexplained_misses"}
    assert fired["reuse_drop"]["window"] == 0.0
    assert fired["reuse_drop"]["baseline"] == pytest.approx(BASELINE_REUSE)
    assert fired["unexplained_misses"]["window"] == pytest.approx(2 / 3)
    assert fired["unexplained_misses"]["baseline"] == 0.0
