"""Replay exports (traceflow.replay.export) and the ``traceflow export`` command.

Expected values come from the lake rows and the source files read here with plain code; the AIPerf
consumer itself is exercised in test_aiperf_consumer.py.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.replay.export import export, manifest_path
from traceflow.replay.hash_ids import check_hash_ids
from traceflow.replay.requests import load_requests
from traceflow.replay.synth import generate, preset
from traceflow.replay.synth_trace import write_lake
from traceflow.store.lake import Lake


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compacting_profile() -> dict[str, Any]:
    prof = preset("agentic-coding")
    prof["context"] = {
        "cap": 20_000,
        "on_cap": "compact",
        "compact_to": {"kind": "uniform", "low": 4000, "high": 6000},
    }
    prof["arrival"]["sessions_per_min"] = 6.0
    return prof


@pytest.fixture(scope="module")
def synth_lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    lake = Lake(tmp_path_factory.mktemp("synth") / "data")
    write_lake(generate(compacting_profile(), 1800, seed=7), lake)
    return lake


@pytest.fixture(scope="module")
def rows(synth_lake: Lake) -> pl.DataFrame:
    return load_requests(synth_lake.connect(["requests"]))


def test_manifest_sits_beside_the_export() -> None:
    assert manifest_path(Path("/x/trace.jsonl")) == Path("/x/trace.manifest.json")
    assert manifest_path(Path("/x/traces")) == Path("/x/traces.manifest.json")


def test_mooncake_export(synth_lake: Lake, rows: pl.DataFrame, tmp_path: Path) -> None:
    con = synth_lake.connect(["requests"])
    out = tmp_path / "m.jsonl"
    manifest = export(con, None, "mooncake", out)
    recs = jsonl(out)
    assert len(recs) == rows.height and manifest["counts"]["requests"] == rows.height
    assert list(recs[0]) == ["timestamp", "input_length", "output_length", "hash_ids"]
    t0 = rows["t_us"][0]
    assert [r["timestamp"] for r in recs] == [round((t - t0) / 1000) for t in rows["t_us"].to_list()]
    assert [r["input_length"] for r in recs] == rows["ctx"].to_list()
    assert [r["output_length"] for r in recs] == rows["out"].to_list()
    assert check_hash_ids([r["input_length"] for r in recs], [r["hash_ids"] for r in recs], 512) == []
    # a session's next request reuses every full block of the previous one (no compaction between)
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for sid, r in zip(rows["session_id"].to_list(), recs, strict=True):
        by_session[sid].append(r)
    for reqs in by_session.values():
        for a, b in itertools.pairwise(reqs):
            if b["input_length"] >= a["input_length"]:
                full = a["input_length"] // 512
                assert b["hash_ids"][:full] == a["hash_ids"][:full]
    saved = json.loads(manifest_path(out).read_text())
    assert saved["format"] == "mooncake" and saved["block_size"] == 512
    assert saved["counts"]["resets"] > 0  # the profile compacts at 20k
    assert 0.5 < saved["statistics"]["infinite_cache"]["prefix_hit_ratio"] < 1
    assert "--timed-trace-chunk-hash-size 512" in saved["replay"]["vllm"]


def test_speedup_limit_and_block_size(synth_lake: Lake, tmp_path: Path) -> None:
    con = synth_lake.connect(["requests"])
    export(con, None, "mooncake", tmp_path / "f.jsonl")
    full = jsonl(tmp_path / "f.jsonl")
    export(con, None, "mooncake", tmp_path / "s.jsonl", speedup=4, limit=100, block_size=256)
    fast = jsonl(tmp_path / "s.jsonl")
    assert len(fast) == 100
    for a, b in zip(full, fast, strict=False):
        assert abs(b["timestamp"] - a["timestamp"] / 4) <= 1
        assert b["input_length"] == a["input_length"]
        assert len(b["hash_ids"]) == -(-b["input_length"] // 256)


def test_aiperf_export_sessions_deltas_and_delays(
    rows: pl.DataFrame, synth_lake: Lake, tmp_path: Path
) -> None:
    con = synth_lake.connect(["requests"])
    out = tmp_path / "a.jsonl"
    manifest = export(con, None, "aiperf", out)
    recs = jsonl(out)
    assert len(recs) == rows.height
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        sessions[r["session_id"]].append(r)
    # lake rows per (session, segment): a compaction starts a new AIPerf session "<id>~k"
    lake_streams: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows.iter_rows(named=True):
        lake_streams[r["session_id"]].append(r)
    segments: dict[str, list[dict[str, Any]]] = {}
    for sid, reqs in lake_streams.items():
        k = 0
        for i, r in enumerate(reqs):
            if i and r["ctx"] < reqs[i - 1]["ctx"]:
                k += 1
            segments.setdefault(sid if k == 0 else f"{sid}~{k}", []).append(r)
    assert set(sessions) == set(segments)
    assert manifest["counts"]["sessions"] == len(lake_streams)
    assert manifest["counts"]["aiperf_sessions"] == len(segments)
    assert any("~" in s for s in sessions)
    first_ts = [s[0]["timestamp"] for s in sessions.values()]
    assert min(first_ts) == 0
    sizes: dict[int, int] = {}
    for sid, turns in sessions.items():
        lake_turns = segments[sid]
        assert len(turns) == len(lake_turns)
        assert "timestamp" in turns[0] and "delay" not in turns[0]
        assert turns[0]["input_length"] == lake_turns[0]["ctx"]
        sent = 0
        for i, (turn, want) in enumerate(zip(turns, lake_turns, strict=True)):
            if i:
                assert "delay" in turn and "timestamp" not in turn
                think_ms = (want["t_us"] - lake_turns[i - 1]["end_us"]) / 1000
                assert turn["delay"] == pytest.approx(think_ms, abs=1)
            assert turn["input_length"] >= 1 and turn["output_length"] == want["out"]
            sent += turn["input_length"]
            # AIPerf's history (earlier turns + replies of output_length) + new tokens = the context
            assert sent == want["ctx"]
            sent += turn["output_length"]
            for k, h in enumerate(turn["hash_ids"]):
                size = min(512, turn["input_length"] - 512 * k)
                assert sizes.setdefault(h, size) == size  # an id stands for one size (AIPerf's rule)
            assert len(turn["hash_ids"]) == -(-turn["input_length"] // 512)
    assert manifest["counts"]["replayed_context_max_excess_tokens"] == 0


def test_aiperf_first_turns_share_the_prefix_ids_of_the_flat_export(synth_lake: Lake, tmp_path: Path) -> None:
    con = synth_lake.connect(["requests"])
    export(con, None, "aiperf", tmp_path / "a.jsonl")
    export(con, None, "mooncake", tmp_path / "m.jsonl")
    flat = jsonl(tmp_path / "m.jsonl")
    firsts = [r for r in jsonl(tmp_path / "a.jsonl") if "timestamp" in r]
    by_time: dict[tuple[int, int], list[list[int]]] = defaultdict(list)
    for r in flat:
        by_time[(r["timestamp"], r["input_length"])].append(r["hash_ids"])
    for r in firsts:
        assert r["hash_ids"] in by_time[(r["timestamp"], r["input_length"])]


def test_aiperf_clamps_a_shrinking_turn_and_catches_up(tmp_path: Path) -> None:
    # thinking tokens are not carried into the next context: ctx grows by less than the output
    lake = Lake(tmp_path / "data")
    base = {"source": "synthetic", "session_id": "s", "model": "m", "cold_input_tokens": 0}
    reqs = [(0, 10_000, 900, 0), (20, 10_400, 100, 10_000), (40, 11_500, 50, 10_400)]  # t, ctx, out, read
    lake.append(
        "requests",
        [
            {
                **base,
                "event_id": f"e{i}",
                "started_at": t * 1_000_000,
                "ended_at": t * 1_000_000 + 5_000_000,
                "cache_read_tokens": r,
                "cache_write_tokens": c - r,
                "output_tokens": o,
                "seq": i,
            }
            for i, (t, c, o, r) in enumerate(reqs)
        ],
    )
    export(lake.connect(["requests"]), None, "aiperf", tmp_path / "a.jsonl")
    turns = jsonl(tmp_path / "a.jsonl")
    # 10,000 + reply 900 = 10,901 > 10,400: one token; then 10,901 + 100 + 499 = 11,500 again
    assert [t["input_length"] for t in turns] == [10_000, 1, 499]
    assert [t["delay"] for t in turns[1:]] == [15_000.0, 15_000.0]


def test_kvcache_tester_export_floor_rule_and_files(
    synth_lake: Lake, rows: pl.DataFrame, tmp_path: Path
) -> None:
    out = tmp_path / "kv"
    manifest = export(synth_lake.connect(["requests"]), None, "kvcache-tester", out)
    files = sorted(out.glob("*.json"))
    assert len(files) == rows["session_id"].n_unique() == manifest["counts"]["files"]
    doc = json.loads(files[0].read_text())
    assert doc["block_size"] == 64 and doc["hash_id_scope"] == "local"
    for r in doc["requests"]:
        assert len(r["hash_ids"]) == r["in"] // 64
    assert doc["requests"][0]["t"] == 0 and doc["requests"][0]["think_time"] == 0
    ids = [r["hash_ids"] for r in doc["requests"]]
    assert ids[0][0] == 1  # renumbered from 1 per file


@pytest.mark.realdata
def test_kvcache_tester_round_trip_of_the_real_sessions(tmp_path: Path) -> None:
    from conftest import TESTDATA

    src = TESTDATA / "weka_cc_traces"
    lake = Lake(tmp_path / "data")
    run_import(lake, get("kvcache-tester"), [src])
    out = tmp_path / "kv"
    manifest = export(lake.connect(["requests"]), None, "kvcache-tester", out)
    assert manifest["counts"]["files"] == 36 and manifest["counts"]["subagents"] == 28

    def flat(doc: dict[str, Any]) -> list[dict[str, Any]]:
        return [x for r in doc["requests"] for x in (r["requests"] if r.get("type") == "subagent" else [r])]

    for path in sorted(src.glob("*.json")):
        a = json.loads(path.read_text())
        b = json.loads((out / path.name).read_text())
        assert b["totals"] == a["totals"] and b["models"] == a["models"]
        subs_a = [
            (r["t"], r["agent_id"], r["subagent_type"]) for r in a["requests"] if r.get("type") == "subagent"
        ]
        subs_b = [
            (r["t"], r["agent_id"], r["subagent_type"]) for r in b["requests"] if r.get("type") == "subagent"
        ]
        assert subs_a == subs_b
        fwd: dict[int, int] = {}
        back: dict[int, int] = {}
        for x, y in zip(flat(a), flat(b), strict=True):
            for key in (
                "t",
                "in",
                "out",
                "model",
                "stop",
                "input_types",
                "output_types",
                "api_time",
                "think_time",
            ):
                if key == "think_time" and x.get(key) is None:
                    continue  # missing in the source: the export fills in start - previous end
                assert x.get(key) == y.get(key), (path.name, key)
            assert len(x["hash_ids"]) == len(y["hash_ids"])
            for p, q in zip(x["hash_ids"], y["hash_ids"], strict=True):  # the same ids, renamed
                assert fwd.setdefault(p, q) == q and back.setdefault(q, p) == p
    # and the export imports back into the same requests
    again = Lake(tmp_path / "again")
    run_import(again, get("kvcache-tester"), [out])
    cols = "session_id, parent_session_id, started_at, context_tokens, output_tokens, cache_read_tokens"
    q = f"SELECT {cols} FROM requests ORDER BY ALL"
    assert again.connect().execute(q).fetchall() == lake.connect().execute(q).fetchall()


# -- the command ----------------------------------------------------------------------------------


def test_export_command(cli: Callable[..., tuple[int, str, str]], lake: Lake, tmp_path: Path) -> None:
    write_lake(generate(preset("agentic-coding"), 900, seed=3), lake)
    sid = load_requests(lake.connect(["requests"]))["session_id"][0]
    out = tmp_path / "one.jsonl"
    code, stdout, _ = cli("export", "aiperf", "-o", str(out), "--session", sid, "--format", "json")
    assert code == 0, stdout
    summary = json.loads(stdout)
    assert summary["format"] == "aiperf" and summary["sessions"] == 1
    assert {r["session_id"] for r in jsonl(out)} == {sid}
    assert Path(summary["manifest"]).is_file()
    code, _, err = cli("export", "parquet", "-o", str(out))
    assert code == 2 and "mooncake, aiperf, kvcache-tester" in err
    code, _, err = cli("export", "mooncake", "-o", str(out), "--source", "nothing-like-this")
    assert code == 2 and "no requests" in err
    code, _, err = cli("export", "mooncake", "-o", str(out), "--speedup", "0")
    assert code == 2 and "--speedup" in err
    # the engine options are the analyses' (the Spark run is tests/test_conformance.py)
    code, _, err = cli("export", "mooncake", "-o", str(out), "--spark-remote", "sc://nowhere:15002")
    assert code == 2 and "--spark-remote needs --engine spark" in err
    code, _, err = cli("export", "mooncake", "-o", str(out), "--engine", "polars")
    assert code == 2 and "choose duckdb or spark" in err
