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


def _blocks_json(cli: CLI, *extra: str) -> list[dict[str, Any]]:
    code, out, err = cli("blocks", "--format", "json", *extra)
    assert code == 0, err
    return list(json.loads(out))


def test_blocks_follow_the_rule_on_a_generated_corpus(
    corpus_lake: list[dict[str, Any]],  # noqa: F811
    cli: CLI,
) -> None:
    rows = [(r["t"].astimezone(dt.UTC), sum(r[k] or 0 for k in KINDS)) for r in corpus_lake]
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
