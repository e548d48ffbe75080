"""``traceflow statusline`` (issue 25): the session's cost and reuse today and its cache's warmth, from
the transcript's tail and from the lake, against figures computed by hand."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from traceflow.cli import status
from traceflow.importers.claude_code_tail import read_since
from traceflow.store.lake import Lake

CLI = Callable[..., tuple[int, str, str]]
REPO = Path(__file__).resolve().parents[1]
SESSION = "5f0c1e9a-2b7d-4c1e-9a55-0d3c6b1f2e77"
NOW = dt.datetime(2026, 8, 3, 12, 0, tzinfo=dt.UTC)


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _assistant(
    t: dt.datetime,
    req: str,
    cold: int,
    read: int,
    w5: int,
    w1: int,
    out: int,
    *,
    model: str = "claude-sonnet-4-5",
    session: str = SESSION,
    error: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "type": "assistant",
        "sessionId": session,
        "cwd": "/home/u/proj",
        "version": "2.1.90",
        "requestId": f"req_{req}",
        "uuid": f"{req}-{out}",
        "timestamp": _iso(t),
        **({"isApiErrorMessage": True} if error else {}),
        **extra,
        "message": {
            "id": f"msg_{req}",
            "model": "<synthetic>" if error else model,
            "content": [{"type": "text", "text": "ok"}],
            "usage": {
                "input_tokens": cold,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": w5 + w1,
                "cache_creation": {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1},
                "output_tokens": out,
            },
        },
    }


def _user(t: dt.datetime, n: int) -> dict[str, Any]:
    return {
        "type": "user",
        "sessionId": SESSION,
        "uuid": f"u{n}",
        "timestamp": _iso(t),
        "message": {"role": "user", "content": "go on " + "x" * 200},
    }


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _transcript(root: Path, now: dt.datetime) -> Path:
    """Yesterday one request; today three (the second written as two content-block lines, the
    second line complete), an API error, and a sub-agent request in its own file."""
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    lines = [
        _user(day - dt.timedelta(hours=3), 0),
        _assistant(day - dt.timedelta(hours=3), "y1", 10, 0, 5000, 0, 100),
        _user(day + dt.timedelta(hours=9), 1),
        _assistant(day + dt.timedelta(hours=9), "t1", 3, 20_000, 0, 4000, 300),
        _assistant(now - dt.timedelta(minutes=30), "t2", 2, 24_000, 0, 1000, 1),  # first block line
        _assistant(now - dt.timedelta(minutes=30), "t2", 2, 24_000, 0, 1000, 250),  # the complete copy
        _assistant(now - dt.timedelta(minutes=25), "e1", 0, 0, 0, 0, 0, error=True),
        _user(now - dt.timedelta(minutes=21), 2),
        _assistant(now - dt.timedelta(minutes=20), "t3", 1, 25_000, 500, 0, 80),
    ]
    path = _write(root / "projects" / "-home-u-proj" / f"{SESSION}.jsonl", lines)
    sub = [
        _assistant(now - dt.timedelta(minutes=22), "s1", 4, 0, 6000, 0, 40, isSidechain=True, agentId="a1"),
    ]
    _write(path.with_suffix("") / "subagents" / "agent-a1.jsonl", sub)
    return path


#: Today's requests by hand: (cold, read, write 5m, write 1h, output); sonnet $3 in, $15 out per M.
TODAY = [(3, 20_000, 0, 4000, 300), (2, 24_000, 0, 1000, 250), (1, 25_000, 500, 0, 80), (4, 0, 6000, 0, 40)]


def _cost(cold: int, read: int, w5: int, w1: int, out: int) -> float:
    return (cold * 3 + read * 0.3 + w5 * 3.75 + w1 * 6 + out * 15) / 1e6


def _expected() -> dict[str, Any]:
    context = sum(c + r + w5 + w1 for c, r, w5, w1, _ in TODAY)
    return {
        "requests_today": 4,
        "cost_usd_today": pytest.approx(sum(_cost(*t) for t in TODAY)),
        "reuse_ratio_today": pytest.approx(sum(r for _, r, _, _, _ in TODAY) / context),
        # main stream today: 5,000 1-hour write tokens against 500 5-minute ones: the 1-hour TTL
        "ttl_s": 3600.0,
        # 3,600 s minus the 20 minutes since the main stream's last request
        "warm_s": pytest.approx(3600 - 20 * 60),
    }


def _stdin(path: Path | None) -> str:
    data: dict[str, Any] = {
        "session_id": SESSION,
        "hook_event_name": "Status",
        "cwd": "/home/u/proj",
        "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet 4.5"},
        "workspace": {"current_dir": "/home/u/proj", "project_dir": "/home/u/proj"},
        "version": "2.1.90",
        "cost": {"total_cost_usd": 0.5, "total_duration_ms": 1000},
    }
    if path is not None:
        data["transcript_path"] = str(path)
    return json.dumps(data)


def test_from_the_transcript(tmp_path: Path) -> None:
    path = _transcript(tmp_path, NOW)
    got = json.loads(status.run(_stdin(path), fmt="json", now=NOW, data=str(tmp_path / "nolake")))
    assert got["source"] == "transcript"
    assert {k: got[k] for k in _expected()} == _expected()
    # the active block (all sessions): 09:00-14:00, today's four requests, first 09:00, last 11:40
    cost = sum(_cost(*t) for t in TODAY)
    assert got["model"] == "Sonnet 4.5"
    assert got["block_cost_usd"] == pytest.approx(cost)
    assert got["block_remaining_s"] == pytest.approx(2 * 3600)
    assert got["block_usd_per_hour"] == pytest.approx(cost / 160 * 60)
    line = status.run(_stdin(path), now=NOW)
    assert (
        line
        == f"Sonnet 4.5 · ${cost:,.2f} today · reuse {got['reuse_ratio_today']:.1%} · "
        + f"cache warm 40m 00s (1h TTL) · block ${cost:,.2f} (2h 0m left) · ${cost / 160 * 60:,.2f}/h"
    )


def test_the_block_counts_every_session(tmp_path: Path) -> None:
    """Another project's session in the same hours adds to the block, not to this session's day; a
    request 7 hours before the block makes the chain be read further back, and changes nothing."""
    path = _transcript(tmp_path, NOW)
    other = [
        _assistant(NOW - dt.timedelta(hours=2), "o1", 5, 1000, 2000, 0, 50, session="other"),
        _assistant(NOW - dt.timedelta(hours=9), "o0", 1, 0, 0, 0, 10, session="other"),
    ]
    _write(tmp_path / "projects" / "-home-u-other" / "other.jsonl", other)
    got = json.loads(status.run(_stdin(path), fmt="json", now=NOW))
    assert got["requests_today"] == 4
    assert got["block_cost_usd"] == pytest.approx(sum(_cost(*t) for t in TODAY) + _cost(5, 1000, 2000, 0, 50))
    assert got["block_remaining_s"] == pytest.approx(2 * 3600)


def test_cold_cache_and_the_zone(tmp_path: Path) -> None:
    path = _transcript(tmp_path, NOW)
    later = NOW + dt.timedelta(hours=2)
    got = json.loads(status.run(_stdin(path), fmt="json", now=later))
    assert got["warm_s"] == pytest.approx(3600 - 140 * 60)
    assert "cache cold 1h 20m ago (1h TTL)" in status.run(_stdin(path), now=later)
    # in Tokyo (UTC+9) "today" began at 15:00 UTC the day before: the request of 21:00 UTC
    # yesterday (06:00 there) is today's too
    tokyo = json.loads(status.run(_stdin(path), fmt="json", now=NOW, tz="Asia/Tokyo"))
    assert tokyo["requests_today"] == 5
    assert tokyo["cost_usd_today"] == pytest.approx(
        sum(_cost(*t) for t in TODAY) + _cost(10, 0, 5000, 0, 100)
    )
    assert tokyo["last_request_at"].endswith("+09:00")
    # in Los Angeles (UTC-7) it began at 07:00 UTC: the same four as in UTC
    assert (
        json.loads(status.run(_stdin(path), fmt="json", now=NOW, tz="America/Los_Angeles"))["requests_today"]
        == 4
    )


def test_tail_reads_backwards_in_chunks(tmp_path: Path) -> None:
    """Tiny chunks (lines cut anywhere) give the same requests as one read of the whole file."""
    path = _transcript(tmp_path, NOW)
    since = NOW - dt.timedelta(days=2)
    whole = read_since(path, since, chunk=1 << 20)
    assert len(whole) == 4  # yesterday's, t1, t2 once (its complete copy), t3; no error
    for chunk in (7, 64, 333, 1000):
        assert read_since(path, since, chunk=chunk) == whole
    t2 = next(r for r in whole if r.key == ("req_t2", "msg_t2"))
    assert t2.output == 250


def test_lake_answers_without_a_transcript(tmp_path: Path, lake: Lake, cli: CLI) -> None:
    """The importer's rows and the tail reader's agree: the same figures from the lake."""
    path = _transcript(tmp_path, NOW)
    code, _, err = cli("import", "claude-code", str(tmp_path / "projects"))
    assert code == 0, err
    got = json.loads(status.run(_stdin(None), fmt="json", now=NOW, data=str(lake.root)))
    assert got["source"] == "lake"
    assert {k: got[k] for k in _expected()} == _expected()
    # a transcript that cannot be read falls back to the lake too
    gone = json.loads(
        status.run(_stdin(path.with_name("gone.jsonl")), fmt="json", now=NOW, data=str(lake.root))
    )
    assert gone["source"] == "lake" and gone["requests_today"] == 4


def test_console_script_fast_path(tmp_path: Path) -> None:
    """Through ``python -m traceflow`` (the fast path, before typer): a live session, real clock."""
    now = dt.datetime.now(dt.UTC)
    path = _transcript(tmp_path, now)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACEFLOW_DATA": str(tmp_path / "nolake")}
    run = subprocess.run(
        [sys.executable, "-m", "traceflow", "statusline"],
        input=_stdin(path),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    assert len(out) == 1 and " today · reuse " in out[0] and "(1h TTL)" in out[0]
    assert "typer" not in run.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "traceflow", "statusline"],
        input="not json",
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("traceflow: error: statusline reads the JSON")


def test_typer_command_matches(tmp_path: Path, cli: CLI) -> None:
    from typer.testing import CliRunner

    from traceflow.cli.app import app, register_all

    register_all()
    path = _transcript(tmp_path, dt.datetime.now(dt.UTC))
    result = CliRunner().invoke(app, ["statusline", "--format", "json"], input=_stdin(path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["requests_today"] >= 3
    result = CliRunner().invoke(app, ["statusline", "--format", "xml"], input=_stdin(path))
    assert result.exit_code != 0


def test_the_status_lines_block_rule_is_group_blocks() -> None:
    """status.block_at (written without DuckDB) gives analysis.blocks.group_blocks' active block:
    the same cost, time left and burn rate on random traffic, seen at random instants after it."""
    import random

    from traceflow.analysis.blocks import Hour, group_blocks
    from traceflow.importers.claude_code_tail import TailRequest
    from traceflow.prices import PriceModel

    pm = PriceModel()
    rng = random.Random(7)
    for _ in range(200):
        t = NOW - dt.timedelta(hours=30)
        reqs = []
        for i in range(rng.randint(1, 30)):
            t += dt.timedelta(minutes=rng.choice([1, 7, 55, 61, 180, 299, 300, 301, 420]))
            model = rng.choice(["claude-sonnet-4-5", "claude-opus-4-5", None])
            reqs.append(TailRequest(t, model, rng.randint(0, 9), rng.randint(0, 9999), 50, 20, 30, 7, i))
        at = NOW - dt.timedelta(hours=30) + dt.timedelta(minutes=rng.randint(0, 40 * 60))
        reqs = [r for r in reqs if r.at <= at]  # a transcript holds no request after now
        hours = [
            Hour(
                r.at.replace(minute=0, second=0),
                None,
                r.model,
                1,
                r.cold,
                r.read,
                r.write,
                30,
                r.output,
                r.at,
                r.at,
            )
            for r in reqs
        ]
        active = [b for b in group_blocks(hours, pm) if b.active(at)]
        got = status.block_at(reqs, at, pm)
        if not active:
            assert got is None
            continue
        b = active[0]
        burn = b.burn()
        assert got is not None
        assert got[0] == pytest.approx(b.cost)
        assert got[1] == pytest.approx((b.end - at).total_seconds())
        assert got[2] == (pytest.approx(burn[1]) if burn else None)


def test_long_lines_are_passed_over_in_linear_reads(tmp_path: Path) -> None:
    """Huge user lines (a pasted image) between the requests: the same requests as a plain read, at any
    chunk, reading each byte at most once (a line begun in earlier chunks is joined once, not
    re-copied per chunk: that was quadratic, 64.5 s for one 256 MiB line)."""
    from traceflow.importers.claude_code_tail import read_tail

    path = _transcript(tmp_path, NOW)
    lines = path.read_text().splitlines(keepends=True)
    big = json.dumps({**_user(NOW - dt.timedelta(hours=1), 9), "image": "A" * 50_000}) + "\n"
    path.write_text("".join(lines[:4]) + big + "".join(lines[4:7]) + big + "".join(lines[7:]))
    since = NOW - dt.timedelta(days=2)
    whole = read_since(path, since)
    assert len(whole) == 4
    for chunk in (7, 333, 4096, 70_000):
        for long_line in (10_000, 1 << 20):
            tail = read_tail(path, since, chunk, long_line=long_line)
            assert tail.requests == whole, (chunk, long_line)
            assert tail.bytes_read == path.stat().st_size  # each byte once


def test_a_256_mib_line_gives_up_after_the_cap_and_answers_from_the_lake(
    tmp_path: Path, lake: Lake, cli: CLI
) -> None:
    from traceflow.importers.claude_code_tail import READ_CAP, TranscriptUnread, read_tail

    path = _transcript(tmp_path, NOW)
    code, _, err = cli("import", "claude-code", str(tmp_path / "projects"))
    assert code == 0, err
    lines = path.read_bytes().splitlines(keepends=True)
    with open(path, "wb") as fh:  # yesterday's lines, a 256 MiB line (sparse: zero bytes), today's
        fh.write(b"".join(lines[:2]) + b'{"type":"user","x":"')
        fh.truncate(fh.tell() + (256 << 20))
        fh.seek(0, 2)
        fh.write(b'"}\n' + b"".join(lines[2:]))
    with pytest.raises(TranscriptUnread) as info:
        read_tail(path, NOW - dt.timedelta(days=2))
    assert info.value.bytes_read <= READ_CAP  # not the 256 MiB
    got = json.loads(status.run(_stdin(path), fmt="json", now=NOW, data=str(lake.root)))
    assert got["source"] == "lake" and got["requests_today"] == 4


def test_a_transcript_that_is_no_regular_file_falls_back_to_the_lake(
    tmp_path: Path, lake: Lake, cli: CLI
) -> None:
    """``/dev/zero`` is not an empty transcript, a FIFO does not block: both answer from the lake."""
    _transcript(tmp_path, NOW)
    code, _, err = cli("import", "claude-code", str(tmp_path / "projects"))
    assert code == 0, err
    got = json.loads(status.run(_stdin(Path("/dev/zero")), fmt="json", now=NOW, data=str(lake.root)))
    assert got["source"] == "lake" and got["requests_today"] == 4
    fifo = tmp_path / "transcript.fifo"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACEFLOW_DATA": str(lake.root)}
    run = subprocess.run(  # a subprocess: a FIFO read in-process would hang the test run
        [sys.executable, "-m", "traceflow", "statusline", "--format", "json"],
        input=_stdin(fifo),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,  # a guard against the hang, not a measurement
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["source"] in ("lake", "none")
