"""``traceflow blocks`` (issue 25): the 5-hour billing blocks against the rule computed independently
from the lake's per-request rows, and the burn rate, the active block and its projection by hand."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.test_periods import corpus_lake  # noqa: F401 (the generated corpus in a lake)
from traceflow.analysis.blocks import billing_blocks
from traceflow.prices import PriceModel
from traceflow.store.lake import Lake

CLI = Callable[..., tuple[int, str, str]]
HOUR = dt.timedelta(hours=1)
FIVE = dt.timedelta(hours=5)
KINDS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def _rule(rows: list[tuple[dt.datetime, int]]) -> list[tuple[dt.datetime, int, int]]:
    """(start, requests, total tokens) per block: the first request's hour floored starts a block that
    ends 5 hours later; a request at or after the end starts the next."""
    out: list[list[Any]] = []
    for t, tokens in sorted(rows):
        if not out or t >= out[-1][0] + FIVE:
            out.append([t.replace(minute=0, second=0, microsecond=0), 0, 0])
        out[-1][1] += 1
        out[-1][2] += tokens
    return [(s, n, k) for s, n, k in out]


def _recorded(r: dict[str, Any]) -> dt.datetime:
    """When the agent recorded a request (a billing block files it there, as ccusage does): its end,
    else its start (worked out here from the stored columns, not from the view's)."""
    t = r["ended_at"] if r["ended_at"] is not None else r["started_at"]
    assert isinstance(t, dt.datetime)
    return t


def _blocks_json(cli: CLI, *extra: str) -> list[dict[str, Any]]:
    code, out, err = cli("blocks", "--format", "json", *extra)
    assert code == 0, err
    return list(json.loads(out))


def test_blocks_follow_the_rule_on_a_generated_corpus(
    corpus_lake: list[dict[str, Any]],  # noqa: F811
    cli: CLI,
) -> None:
    rows = [(_recorded(r).astimezone(dt.UTC), sum(r[k] or 0 for k in KINDS)) for r in corpus_lake]
    want = _rule(rows)
    got = _blocks_json(cli)
    blocks = [b for b in got if b["status"] != "gap"]
    assert [(dt.datetime.fromisoformat(b["start"]), b["requests"], b["total_tokens"]) for b in blocks] == want
    assert len(want) > 5
    for b in blocks:  # every block is 5 hours long and holds its requests
        start, end = dt.datetime.fromisoformat(b["start"]), dt.datetime.fromisoformat(b["end"])
        assert end - start == FIVE
        assert (
            start <= dt.datetime.fromisoformat(b["first_at"]) <= dt.datetime.fromisoformat(b["last_at"]) < end
        )
    # the gaps fill exactly the holes between consecutive blocks
    for a, b in itertools.pairwise(got):
        assert a["end"] <= b["start"]
        if b["status"] == "gap":
            assert b["start"] == a["end"] and b["requests"] == 0
    assert not any(a["status"] == "gap" and b["status"] == "gap" for a, b in itertools.pairwise(got))
    # the zone changes how the bounds print, not which blocks there are
    tokyo = [b for b in _blocks_json(cli, "--tz", "Asia/Tokyo") if b["status"] != "gap"]
    assert [dt.datetime.fromisoformat(b["start"]) for b in tokyo] == [s for s, _, _ in want]
    assert all(b["start"].endswith("+09:00") for b in tokyo)


def test_blocks_rule_on_random_times(lake: Lake) -> None:
    """Times spread so that requests land on, just before and just after block ends."""
    rng = random.Random(3)
    base = dt.datetime(2026, 8, 1, 9, 0, tzinfo=dt.UTC)
    times = [base, base + FIVE, base + FIVE - dt.timedelta(microseconds=1), base + 3 * FIVE + HOUR * 0.5]
    times += [base + dt.timedelta(minutes=rng.randrange(0, 60 * 48)) for _ in range(300)]
    lake.append(
        "requests",
        [
            {
                "event_id": f"e{i}",
                "source": "test",
                "model": "claude-sonnet-4-5",
                "session_id": "s",
                "started_at": int(t.timestamp() * 1_000_000),
                "cold_input_tokens": 1,
                "cache_read_tokens": i,
                "cache_write_tokens": 0,
                "output_tokens": 2,
            }
            for i, t in enumerate(times)
        ],
    )
    con = lake.connect(["requests"])
    got = billing_blocks(con, now=base).records()
    rows = [(t, 3 + i) for i, t in enumerate(times)]
    assert [(b["start"], b["requests"], b["total_tokens"]) for b in got if b["status"] != "gap"] == _rule(
        rows
    )


def _one_block(lake: Lake) -> Any:
    start = dt.datetime(2026, 8, 1, 10, 0, tzinfo=dt.UTC)
    reqs = [(start + dt.timedelta(minutes=20), 1_000), (start + dt.timedelta(minutes=80), 2_000)]
    lake.append(
        "requests",
        [
            {
                "event_id": f"b{i}",
                "source": "test",
                "model": "claude-sonnet-4-5",
                "session_id": "s",
                "started_at": int(t.timestamp() * 1_000_000),
                "cold_input_tokens": 0,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "output_tokens": out,
            }
            for i, (t, out) in enumerate(reqs)
        ],
    )
    return lake.connect(["requests"]), start


def test_burn_rate_and_projection_by_hand(lake: Lake) -> None:
    con, start = _one_block(lake)
    now = start + dt.timedelta(hours=2)  # 3 hours left of the block
    [b] = billing_blocks(con, now=now).records()
    assert b["status"] == "active"
    assert b["end"] == start + FIVE
    # 3,000 output tokens of a $15/M model = $0.045, over the 60 minutes between the two requests
    assert b["cost_usd"] == pytest.approx(0.045)
    assert b["tokens_per_min"] == pytest.approx(50.0)
    assert b["usd_per_hour"] == pytest.approx(0.045)
    assert b["remaining_min"] == pytest.approx(180.0)
    assert b["projected_tokens"] == 3_000 + 50 * 180
    assert b["projected_cost_usd"] == pytest.approx(0.045 + 0.045 * 3)
    # after the block's end it is done, without a projection; --active shows nothing then
    [done] = billing_blocks(con, now=start + FIVE).records()
    assert done["status"] == "done" and done["projected_tokens"] is None
    assert billing_blocks(con, now=start + FIVE, active_only=True).rows == []
    # prices from a price file change the cost
    pm = PriceModel().merged({"models": {"claude-sonnet-4-5": {"output": 30.0}}})
    [dear] = billing_blocks(con, prices=pm, now=now).records()
    assert dear["cost_usd"] == pytest.approx(0.09)


def test_live_refreshes_a_bounded_number_of_times(lake: Lake, cli: CLI) -> None:
    _one_block(lake)
    code, out, err = cli("blocks", "--live", "--count", "2", "--interval", "0.1")
    assert code == 0, err
    assert out.count("no active block") == 2  # the block is years ago
    code, _, err = cli("blocks", "--live", "--interval", "0")
    assert code == 2 and "--interval" in err


def test_blocks_on_an_empty_selection(lake: Lake, cli: CLI, tmp_path: Path) -> None:
    _one_block(lake)
    assert _blocks_json(cli, "--since", "2030-01-01") == []


# --- the chain is the whole history's (issue 32, part 4) ---------------------------------------------


def _request(
    i: int, t: dt.datetime, *, user: str | None = None, source: str = "test", out: int = 100
) -> dict[str, Any]:
    return {
        "event_id": f"{source}-{user}-{i}",
        "source": source,
        "model": "claude-sonnet-4-5",
        "session_id": f"s-{user}",
        "user_id": user,
        "started_at": int(t.timestamp() * 1_000_000),
        "cold_input_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": out,
    }


#: The audit's requests: 8, 5.5, 3 and 0.5 hours before now.
AUDIT_AGO = (dt.timedelta(hours=8), dt.timedelta(hours=5.5), dt.timedelta(hours=3), dt.timedelta(hours=0.5))


def test_audit_case_by_hand(lake: Lake) -> None:
    """now 18:44: the chain is 10:00-15:00 (two requests), then 15:00-20:00 (two, 76 min left); a
    window of the last 6 hours (12:44 on) starts at 13:14 but must not start a block there."""
    from traceflow.store.selection import Selection

    now = dt.datetime(2026, 8, 1, 18, 44, tzinfo=dt.UTC)
    lake.append("requests", [_request(i, now - ago) for i, ago in enumerate(AUDIT_AGO)])
    con = lake.connect(["requests"])
    for window in (Selection(), Selection(since=now - dt.timedelta(hours=6))):
        [b] = billing_blocks(con, window, now=now, active_only=True).records()
        assert (b["start"], b["end"]) == (now.replace(hour=15, minute=0), now.replace(hour=20, minute=0))
        assert b["requests"] == 2 and b["remaining_min"] == pytest.approx(76.0)
    # --since 16:00 keeps the block that holds it, whole
    [b] = billing_blocks(con, Selection(since=now.replace(hour=16, minute=0)), now=now).records()
    assert b["start"] == now.replace(hour=15, minute=0) and b["requests"] == 2


def test_live_and_active_equal_the_whole_chain(lake: Lake, cli: CLI) -> None:
    now = dt.datetime.now(dt.UTC)
    lake.append("requests", [_request(i, now - ago) for i, ago in enumerate(AUDIT_AGO)])
    start, n, tokens = _rule([(now - ago, 100) for ago in AUDIT_AGO])[-1]
    [active] = _blocks_json(cli, "--active")
    [live] = _blocks_json(cli, "--live", "--count", "1")
    for b in (active, live):
        assert (dt.datetime.fromisoformat(b["start"]), b["requests"], b["total_tokens"]) == (start, n, tokens)
    assert live["start"] == active["start"] and live["end"] == active["end"]


def test_since_blocks_equal_the_whole_chain_restricted(
    corpus_lake: list[dict[str, Any]],  # noqa: F811
    cli: CLI,
) -> None:
    rows = [(_recorded(r).astimezone(dt.UTC), sum(r[k] or 0 for k in KINDS)) for r in corpus_lake]
    chain = _rule(rows)
    times = sorted(t for t, _ in rows)
    rng = random.Random(7)
    for since in [times[len(times) // 2], *rng.sample(times, 3)]:
        since = since + dt.timedelta(minutes=1)  # inside a block, one minute after a request
        want = [b for b in chain if b[0] + FIVE > since]  # the blocks that end after the window starts
        got = [b for b in _blocks_json(cli, "--since", since.isoformat()) if b["status"] != "gap"]
        assert [
            (dt.datetime.fromisoformat(b["start"]), b["requests"], b["total_tokens"]) for b in got
        ] == want
        assert want and want[0][0] < since  # the first block began before the window


def test_a_public_trace_makes_no_blocks(lake: Lake, cli: CLI) -> None:
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    day = dt.datetime(2026, 8, 1, 9, 30, tzinfo=dt.UTC)
    lake.append(
        "requests",
        [
            _request(i, epoch + dt.timedelta(minutes=i), source=src)
            for i in range(3)
            for src in ("mooncake", "azure")
        ]
        + [_request(9, day)],
    )
    got = _blocks_json(cli)
    assert [(b["start"], b["requests"]) for b in got] == [(day.replace(minute=0).isoformat(), 1)]
    assert _blocks_json(cli, "--source", "mooncake") == []


def test_each_user_has_their_own_chain(lake: Lake, cli: CLI) -> None:
    """Alice at 0, 3 and 6 h, Bob at 2, 5 and 8 h: Alice's blocks 0-5 and 6-11, Bob's 2-7 and 8-13
    (one shared chain would be 0-5 with three requests and 5-10 with three)."""
    t0 = dt.datetime(2026, 8, 1, 0, 10, tzinfo=dt.UTC)
    plan = {"alice": (0, 3, 6), "bob": (2, 5, 8)}
    lake.append(
        "requests",
        [_request(h, t0 + h * HOUR, user=u) for u, hours in plan.items() for h in hours],
    )
    got = [b for b in _blocks_json(cli) if b["status"] != "gap"]
    t = t0.replace(minute=0)
    chains = {
        "alice": [(t, 2), (t + 6 * HOUR, 1)],
        "bob": [(t + 2 * HOUR, 2), (t + 8 * HOUR, 1)],
    }
    for user, want in chains.items():
        mine = [(dt.datetime.fromisoformat(b["start"]), b["requests"]) for b in got if b["user_id"] == user]
        assert mine == want
        only = [b for b in _blocks_json(cli, "--user", user) if b["status"] != "gap"]
        assert [(dt.datetime.fromisoformat(b["start"]), b["requests"]) for b in only] == want
    assert len(got) == 4


def test_any_window_is_the_whole_chain_restricted(lake: Lake) -> None:
    """For random windows [since, until): the blocks shown are the whole chain's (by the rule, from
    every request) that overlap the window, each whole."""
    from traceflow.store.selection import Selection

    rng = random.Random(11)
    base = dt.datetime(2026, 8, 1, 9, 0, tzinfo=dt.UTC)
    times = sorted(base + dt.timedelta(minutes=rng.randrange(0, 60 * 72)) for _ in range(120))
    lake.append("requests", [_request(i, t) for i, t in enumerate(times)])
    con = lake.connect(["requests"])
    chain = _rule([(t, 100) for t in times])
    for _ in range(12):
        since = base + dt.timedelta(minutes=rng.randrange(0, 60 * 72))
        until = since + dt.timedelta(minutes=rng.randrange(1, 60 * 24))
        want = [b for b in chain if b[0] + FIVE > since and b[0] < until]
        got = billing_blocks(con, Selection(since=since, until=until), now=base).records()
        assert [(b["start"], b["requests"], b["total_tokens"]) for b in got if b["status"] != "gap"] == want
        assert all(r["status"] == "gap" for r in got[1:-1] if r["requests"] == 0)
        assert not got or (got[0]["status"] != "gap" and got[-1]["status"] != "gap")


def test_blocks_json_gives_each_user_their_own_chain(lake: Lake, cli: CLI) -> None:
    """ccusage's document (``--json``) on two users whose requests interleave: Alice at 0, 3 and 6 h,
    Bob at 2, 5 and 8 h (recorded times) make two chains of two blocks each, as worked out by hand."""
    t0 = dt.datetime(2026, 8, 1, 0, 10, tzinfo=dt.UTC)
    plan = {"alice": (0, 3, 6), "bob": (2, 5, 8)}
    lake.append(
        "requests",
        [_request(h, t0 + h * HOUR, user=u) for u, hours in plan.items() for h in hours],
    )
    code, out, err = cli("blocks", "--json", "--timezone", "UTC")
    assert code == 0, err
    got = [b for b in json.loads(out)["blocks"] if not b["isGap"]]
    t = t0.replace(minute=0)
    want = {
        "alice": [(t, 2), (t + 6 * HOUR, 1)],
        "bob": [(t + 2 * HOUR, 2), (t + 8 * HOUR, 1)],
    }
    for user, chain in want.items():
        mine = [
            (dt.datetime.fromisoformat(b["startTime"].replace("Z", "+00:00")), b["entries"])
            for b in got
            if b["userId"] == user
        ]
        assert mine == chain
    assert len(got) == 4


def test_blocks_default_to_the_machines_zone(lake: Lake, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    """A personal view: without --tz or TRACEFLOW_TZ the table is in this machine's zone ($TZ here),
    and says so; --tz UTC overrides it."""
    lake.append("requests", [_request(0, dt.datetime(2026, 8, 1, 9, 30, tzinfo=dt.UTC))])
    monkeypatch.delenv("TRACEFLOW_TZ", raising=False)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    code, out, err = cli("blocks", "--format", "table", "--wide")
    assert code == 0, err
    assert "Asia/Tokyo" in out and "18:00" in out  # 09:00 UTC is 18:00 in Tokyo
    code, out, err = cli("blocks", "--format", "table", "--wide", "--tz", "UTC")
    assert code == 0, err
    assert "UTC" in out and "09:00" in out
