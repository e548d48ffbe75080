"""``export --max-context N``: contexts kept within N by compaction (traceflow.replay.compaction).

The expected contexts are worked out by hand below from the rule in docs/replay.md, not by the code."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from traceflow.replay.export import export
from traceflow.store.lake import Lake

N = 100_000
S = 20_000

# (session, t seconds, recorded context, output tokens)
REQUESTS = [
    ("a", 0, 30_000, 100),
    ("b", 5, 10_000, 100),
    ("a", 10, 60_000, 100),
    ("c", 12, 150_000, 100),  # a first request above N: restarts from the summary alone
    ("a", 20, 90_000, 100),
    ("b", 25, 20_000, 100),
    ("a", 30, 120_000, 100),  # 120k > N: compacts to S + 30k added = 50k (d = 70k)
    ("c", 32, 160_000, 100),  # 160k - 130k = 30k
    ("a", 40, 150_000, 100),  # 150k - 70k = 80k
    ("a", 50, 40_000, 100),  # the agent's own drop: 40k as recorded, d = 0
    ("a", 60, 130_000, 100),  # 130k > N: S + 90k = 110k > N: cut to N (truncated), d = 30k
    ("a", 70, 135_000, 100),  # 105k > N: S + 5k = 25k
    ("d", 80, 95_000, 10_000),  # a long (thinking) reply that the next context does not carry
    ("d", 90, 96_000, 100),  # recorded 96k fits; AIPerf would send 95k + 10,001 = 105,001 > N
]
# flat replay (mooncake), in arrival order
WANT_FLAT = [30_000, 10_000, 60_000, 20_000, 90_000, 20_000, 50_000, 30_000, 80_000, 40_000, 100_000,
             25_000, 95_000, 96_000]  # fmt: skip


def hand_lake(root: Path) -> Lake:
    lake = Lake(root)
    prev: dict[str, int] = {}
    rows = []
    for i, (sid, t, ctx, out) in enumerate(REQUESTS):
        read = prev.get(sid, 0) if ctx >= prev.get(sid, 0) else 0
        prev[sid] = ctx
        rows.append(
            {
                "source": "synthetic",
                "session_id": sid,
                "model": "m",
                "event_id": f"e{i}",
                "started_at": t * 1_000_000,
                "ended_at": t * 1_000_000 + 2_000_000,
                "cache_read_tokens": read,
                "cache_write_tokens": ctx - read,
                "cold_input_tokens": 0,
                "output_tokens": out,
                "seq": i,
            }
        )
    lake.append("requests", rows)
    return lake


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_mooncake_contexts_and_counts(tmp_path: Path) -> None:
    lake = hand_lake(tmp_path / "data")
    out = tmp_path / "m.jsonl"
    manifest = export(lake.connect(["requests"]), None, "mooncake", out, max_context=N, summary_tokens=S)
    recs = jsonl(out)
    assert [r["input_length"] for r in recs] == WANT_FLAT
    assert max(r["input_length"] for r in recs) <= N
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 512) for r in recs)
    c = manifest["compaction"]
    assert (c["sessions_compacted"], c["compactions"], c["requests_truncated"]) == (2, 4, 1)
    assert manifest["statistics"]["input_tokens"]["max"] == N
    # a compacted request shares no more than the stream's base prefix with the history it replaced:
    # a's request at 30 s (50k) is not a continuation of its 90k request
    by_len = {r["input_length"]: r["hash_ids"] for r in recs}
    assert by_len[50_000][: 90_000 // 512] != by_len[90_000][: 50_000 // 512]
    # ... and the request after it continues it (append-only)
    assert by_len[80_000][: 50_000 // 512] == by_len[50_000][: 50_000 // 512]


def test_without_the_option_nothing_changes(tmp_path: Path) -> None:
    lake = hand_lake(tmp_path / "data")
    out = tmp_path / "m.jsonl"
    manifest = export(lake.connect(["requests"]), None, "mooncake", out)
    assert [r["input_length"] for r in jsonl(out)] == [r[2] for r in REQUESTS]
    assert "compaction" not in manifest


def test_aiperf_sent_contexts_stay_within_the_window(tmp_path: Path) -> None:
    lake = hand_lake(tmp_path / "data")
    out = tmp_path / "a.jsonl"
    manifest = export(lake.connect(["requests"]), None, "aiperf", out, max_context=N, summary_tokens=S)
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in jsonl(out):
        sessions[r["session_id"]].append(r)
    # what AIPerf sends at each turn: its history (earlier turns + replies of output_length) + new tokens
    sent_max = 0
    for turns in sessions.values():
        history = 0
        for t in turns:
            history += t["input_length"]
            sent_max = max(sent_max, history)
            history += t["output_length"]
    assert sent_max <= N
    assert manifest["counts"]["replayed_context_max_tokens"] == sent_max
    c = manifest["compaction"]
    # d's second turn: 95,000 + 10,001 > N, compacted to S + 1,000 added (AIPerf appends replies)
    assert (c["sessions_compacted"], c["compactions"], c["requests_truncated"]) == (3, 5, 1)
    d_turns = [t for name, ts in sessions.items() if name.startswith("d") for t in ts]
    assert [t["input_length"] for t in d_turns] == [95_000, 21_000]
    assert len([n for n in sessions if n.startswith("a")]) == 5  # a, then 4 restarts (3 compactions, 1 drop)


def test_prefix_hit_ratio_filled_for_every_format(tmp_path: Path) -> None:
    lake = hand_lake(tmp_path / "data")
    con = lake.connect(["requests"])
    ratios = {}
    for fmt, name in (("mooncake", "m.jsonl"), ("aiperf", "a.jsonl"), ("kvcache-tester", "kv")):
        stats = export(con, None, fmt, tmp_path / name)["statistics"]
        ratios[fmt] = stats["infinite_cache"]["prefix_hit_ratio"]
    assert ratios["aiperf"] is not None and ratios["aiperf"] == ratios["mooncake"]
    # by hand: an unbounded cache of 512-token blocks hits the previous context's full blocks of each
    # request that extends its stream (first requests and the drop hit nothing)
    prev: dict[str, int] = {}
    hit = total = 0
    for sid, _, ctx, _ in REQUESTS:
        p = prev.get(sid, 0)
        hit += p // 512 * 512 if ctx >= p else 0
        total += ctx
        prev[sid] = ctx
    assert ratios["mooncake"] == pytest.approx(hit / total, abs=1e-12)


def test_export_command_options(cli: Callable[..., tuple[int, str, str]], lake: Lake, tmp_path: Path) -> None:
    hand_lake(lake.root)
    out = tmp_path / "a.jsonl"
    code, stdout, err = cli("export", "aiperf", "-o", str(out), "--max-context", str(N), "--format", "json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["sessions_compacted"] == 3 and summary["summary_tokens_assumed"] == 20_000
    assert summary["prefix_hit_ratio"] is not None
    assert summary["replayed_context_max_tokens"] <= N and summary["input_tokens_max"] <= N
    code, _, err = cli("export", "kvcache-tester", "-o", str(tmp_path / "kv"), "--max-context", "1000")
    assert code == 2 and "--max-context" in err
    code, _, err = cli("export", "mooncake", "-o", str(out), "--summary-tokens", "5000")
    assert code == 2 and "--summary-tokens needs --max-context" in err
    code, _, err = cli(
        "export", "mooncake", "-o", str(out), "--max-context", "1000", "--summary-tokens", "5000"
    )
    assert code == 2 and "below --max-context" in err


@pytest.mark.parametrize("summary", [0, N])
def test_summary_must_fit(tmp_path: Path, summary: int) -> None:
    from traceflow.errors import UsageError

    lake = hand_lake(tmp_path / "data")
    with pytest.raises(UsageError, match="--summary-tokens"):
        export(lake.connect(["requests"]), None, "mooncake", tmp_path / "m.jsonl", max_context=N,
               summary_tokens=summary)  # fmt: skip
