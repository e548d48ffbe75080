"""Importers of public serving traces: Mooncake, Azure 2023, kv-cache-tester (WEKA), Bailian, BurstGPT.

Expected values are computed here from the raw files with plain ``json``/``csv`` code, or taken from
the published figures in docs/formats.md (cited per check);
never from the importers' own output.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import shutil
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TESTDATA
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

MOONCAKE = get("mooncake")
AZURE = get("azure")
KVCACHE = get("kvcache-tester")
BAILIAN = get("bailian")
BURSTGPT = get("burstgpt")

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)  # the importers' documented anchor for relative times


def q(lake: Lake, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    return lake.connect().execute(sql, params or []).fetchall()


def us(ts: dt.datetime) -> int:
    d = ts - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def data_file(name: str) -> Path:
    path = TESTDATA / name
    if not path.exists():
        pytest.fail(f"test data file {path} is missing")
    return path


def raw_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


# -- Mooncake -------------------------------------------------------------------------------------

MOONCAKE_FILES = {
    # file: (requests, mean input, mean output, duration s, distinct timestamps, ∞-cache prefix hit)
    # docs/formats.md#mooncake (the files recounted, and the paper's Table 2: 12,035/343, 15,325/149).
    "mooncake_conversation_trace.jsonl": (12_031, 12_035, 342.6, 3_537, 1_180, 0.374),
    "mooncake_synthetic_trace.jsonl": (3_993, 15_325, 149.1, 1_022, 3_982, 0.651),
}


@pytest.fixture(scope="module")
def mooncake_lakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Lake]:
    lakes = {}
    for name in MOONCAKE_FILES:
        lake = Lake(tmp_path_factory.mktemp("mooncake") / "data")
        summary = run_import(lake, MOONCAKE, [data_file(name)])
        assert summary.skipped == 0, summary.errors
        lakes[name] = lake
    return lakes


@pytest.mark.realdata
@pytest.mark.parametrize("name", list(MOONCAKE_FILES))
def test_mooncake_trace_imports_every_record_exactly(name: str, mooncake_lakes: dict[str, Lake]) -> None:
    lake = mooncake_lakes[name]
    raw = raw_jsonl(data_file(name))
    got = q(
        lake,
        "SELECT seq, epoch_ms(started_at), cold_input_tokens, output_tokens, hash_ids, block_size, "
        "cache_read_tokens, cache_write_tokens, session_id, ended_at, source FROM requests ORDER BY seq",
    )
    assert [r[0] for r in got] == list(range(1, len(raw) + 1))  # seq = line number
    assert [(r[1], r[2], r[3], r[4]) for r in got] == [
        (r["timestamp"], r["input_length"], r["output_length"], r["hash_ids"]) for r in raw
    ]
    assert {(r[5], r[6], r[7], r[8], r[9], r[10]) for r in got} == {(512, 0, 0, None, None, "mooncake")}
    # The format's promise (§1): len(hash_ids) == ceil(input_length / 512), for 100 % of rows.
    (bad,) = q(lake, "SELECT count(*) FROM requests WHERE len(hash_ids) <> ceil(cold_input_tokens / 512)")[0]
    assert bad == 0
    # Equal timestamps keep file order: time order and file order agree.
    ordered = [r[0] for r in q(lake, "SELECT seq FROM requests ORDER BY started_at, seq")]
    assert ordered == sorted(ordered)


@pytest.mark.realdata
@pytest.mark.parametrize("name", list(MOONCAKE_FILES))
def test_mooncake_statistics_match_the_published_figures(name: str, mooncake_lakes: dict[str, Lake]) -> None:
    count, mean_in, mean_out, duration_s, distinct_ts, hit_ratio = MOONCAKE_FILES[name]
    lake = mooncake_lakes[name]
    (n, avg_in, avg_out, span, distinct) = q(
        lake,
        "SELECT count(*), avg(cold_input_tokens), avg(output_tokens), "
        "epoch(max(started_at)) - epoch(min(started_at)), count(DISTINCT started_at) FROM requests",
    )[0]
    assert n == count
    assert round(avg_in) == mean_in
    assert abs(avg_out - mean_out) < 0.05
    assert round(span) == duration_s
    assert distinct == distinct_ts
    # The trace starts at the documented anchor (1970-01-01T00:00:00Z + 0 ms).
    (first,) = q(lake, "SELECT min(started_at) FROM requests")[0]
    assert first == EPOCH
    # Prefix token hit ratio with an infinite cache (§1: 37.4 % / 65.1 %), from the stored hash ids:
    # the leading run of already-seen blocks; a fully seen request counts its real length.
    seen: set[int] = set()
    hit = total = 0
    for tokens, ids in q(lake, "SELECT cold_input_tokens, hash_ids FROM requests ORDER BY started_at, seq"):
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        hit += tokens if k == len(ids) else 512 * k
        total += tokens
        seen.update(ids)
    assert abs(hit / total - hit_ratio) < 0.0005


@pytest.mark.realdata
def test_mooncake_reimport_and_growth_add_nothing_new(tmp_path: Path) -> None:
    name = "mooncake_synthetic_trace.jsonl"
    src = data_file(name)
    lines = src.read_bytes().splitlines(keepends=True)
    # A file that grows: first 1,000 lines, then the rest (same name, so the same identity).
    grown = tmp_path / "grown" / name
    grown.parent.mkdir()
    grown.write_bytes(b"".join(lines[:1000]))
    lake = Lake(tmp_path / "data")
    assert run_import(lake, MOONCAKE, [grown]).rows["requests"] == 1000
    with open(grown, "ab") as fh:
        fh.write(b"".join(lines[1000:]))
    second = run_import(lake, MOONCAKE, [grown])
    assert second.rows["requests"] == len(lines) - 1000  # only the new lines were read
    assert run_import(lake, MOONCAKE, [grown]).rows["requests"] == 0  # unchanged: nothing read
    # Touched (re-read from the start) and the original imported too: still one row per record.
    os.utime(grown, ns=(1, 1))
    run_import(lake, MOONCAKE, [grown])
    assert run_import(lake, MOONCAKE, [src]).rows["requests"] == len(lines)
    assert q(lake, "SELECT count(*), count(DISTINCT event_id) FROM requests")[0] == (len(lines), len(lines))


def test_mooncake_malformed_lines_are_reported_and_skipped(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}\n'
        "{not json\n"
        '{"timestamp": 5, "output_length": 5, "hash_ids": [0]}\n'
        '{"timestamp": 7.5, "input_length": 513, "output_length": 9, "hash_ids": [0, 2]}\n'
        '{"timestamp": 9, "input_length": 10, "output_length": 1, "hash_ids": ["x"]}\n'
    )
    summary = run_import(lake, MOONCAKE, [path])
    assert [e.line for e in summary.errors] == [2, 3, 5]
    assert "invalid JSON" in summary.errors[0].message
    assert "input_length" in summary.errors[1].message
    got = q(
        lake, "SELECT seq, started_at, cold_input_tokens, output_tokens, hash_ids FROM requests ORDER BY seq"
    )
    assert got == [
        (1, EPOCH, 1000, 5, [0, 1]),
        (4, EPOCH + dt.timedelta(milliseconds=7.5), 513, 9, [0, 2]),
    ]


# -- Azure 2023 ---------------------------------------------------------------------------------

AZURE_FILES = {
    # file: (requests, (prompt mean, std, min, max), (generated mean, std, min, max), arrivals req/s)
    # docs/formats.md#azure-llm-inference-trace-2023 (8,819 / 19,366 requests; SplitwiseSim's docstrings,
    # "[computed] matches exactly"; arrivals 2.57 / 5.53 req/s).
    "AzureLLMInferenceTrace_code_2023.csv": (8_819, (2048, 1973, 3, 7437), (28, 60, 6, 1899), 2.57),
    "AzureLLMInferenceTrace_conv_2023.csv": (19_366, (1155, 1109, 2, 14050), (211, 163, 7, 1000), 5.53),
}


@pytest.fixture(scope="module")
def azure_lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    lake = Lake(tmp_path_factory.mktemp("azure") / "data")
    summary = run_import(lake, AZURE, [data_file(n) for n in AZURE_FILES])
    assert summary.skipped == 0, summary.errors
    return lake


def _raw_azure(path: Path) -> list[tuple[int, int, int]]:
    out = []
    with open(path, newline="") as fh:
        for rec in csv.DictReader(fh):
            stamp = rec["TIMESTAMP"]
            assert len(stamp) == 27 and stamp.endswith("0")  # 100 ns ticks, whole microseconds here
            parsed = dt.datetime.strptime(stamp[:26], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=dt.UTC)
            out.append((us(parsed), int(rec["ContextTokens"]), int(rec["GeneratedTokens"])))
    return out


@pytest.mark.realdata
@pytest.mark.parametrize("name", list(AZURE_FILES))
def test_azure_trace_matches_the_raw_file_and_splitwise_figures(name: str, azure_lake: Lake) -> None:
    count, prompt, generated, rate = AZURE_FILES[name]
    raw = _raw_azure(data_file(name))
    workload = "code" if "code" in name else "conv"
    got = q(
        azure_lake,
        "SELECT started_at, cold_input_tokens, output_tokens FROM requests "
        "WHERE attributes->>'workload' = ? ORDER BY seq",
        [workload],
    )
    assert [(us(r[0]), r[1], r[2]) for r in got] == raw
    assert len(got) == count
    for column, (mean, std, lo, hi) in ((1, prompt), (2, generated)):
        values = [r[column] for r in got]
        assert round(statistics.fmean(values)) == mean
        assert abs(statistics.pstdev(values) - std) <= 1
        assert (min(values), max(values)) == (lo, hi)
    span = (got[-1][0] - got[0][0]).total_seconds()
    assert round(len(got) / span, 2) == rate
    assert got[0][0].date() == dt.date(2023, 11, 16)  # §4: "The file's timestamps are 2023-11-16"
    (sessions, cached, ended) = q(
        azure_lake,
        "SELECT count(session_id), sum(cache_read_tokens + cache_write_tokens)::BIGINT, count(ended_at) "
        "FROM requests WHERE attributes->>'workload' = ?",
        [workload],
    )[0]
    assert (sessions, cached, ended) == (0, 0, 0)


def test_azure_header_is_kept_for_grown_files_and_ticks_round(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "AzureLMMInferenceTrace_multimodal.csv"
    path.write_text(
        "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.0000004,1,100,10\n"
        "2024-05-10 00:00:00.9999996,0,200,20\n"
    )
    assert run_import(lake, AZURE, [path]).rows["requests"] == 2
    with open(path, "a") as fh:
        fh.write("2024-05-10 00:00:02.5+02:00,2,300,30\nnot a time,0,1,1\n")
    summary = run_import(lake, AZURE, [path])
    assert summary.rows["requests"] == 1
    assert [e.line for e in summary.errors] == [5]
    got = q(
        lake,
        "SELECT seq, started_at, cold_input_tokens, output_tokens, attributes->>'numimages' "
        "FROM requests ORDER BY seq",
    )
    day = dt.datetime(2024, 5, 10, tzinfo=dt.UTC)
    assert got == [
        (2, day, 100, 10, "1"),
        (3, day + dt.timedelta(seconds=1), 200, 20, "0"),
        (4, day - dt.timedelta(hours=2) + dt.timedelta(seconds=2.5), 300, 30, "2"),
    ]


# -- kv-cache-tester (WEKA) Claude Code sessions ----------------------------------------------------


def _common_prefix_seen(ids: list[int], seen: set[int]) -> int:
    k = 0
    for h in ids:
        if h not in seen:
            break
        k += 1
    return k


@pytest.fixture(scope="module")
def weka_raw() -> dict[str, dict[str, Any]]:
    folder = TESTDATA / "weka_cc_traces"
    if not folder.is_dir():
        pytest.fail(f"{folder} is missing")
    docs = {}
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        docs[doc["id"]] = doc
    return docs


@pytest.fixture(scope="module")
def weka_lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    lake = Lake(tmp_path_factory.mktemp("weka") / "data")
    summary = run_import(lake, KVCACHE, [TESTDATA / "weka_cc_traces"])
    assert summary.skipped == 0, summary.errors
    assert summary.files_seen == 36
    return lake


def _streams(doc: dict[str, Any]) -> dict[str, list[tuple[float, dict[str, Any]]]]:
    """Session id -> its requests with absolute times (sub-agent times count from the entry's t)."""
    streams: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)
    for entry in doc["requests"]:
        if entry["type"] == "subagent":
            for sub in entry["requests"]:
                streams[f"{doc['id']}/{entry['agent_id']}"].append((entry["t"] + sub["t"], sub))
        else:
            streams[doc["id"]].append((entry["t"], entry))
    return streams


@pytest.mark.realdata
def test_kvcache_tester_sessions_and_subagents(weka_raw: dict[str, dict[str, Any]], weka_lake: Lake) -> None:
    parents = sum(1 for d in weka_raw.values() for r in d["requests"] if r["type"] != "subagent")
    subs = [(d["id"], r) for d in weka_raw.values() for r in d["requests"] if r["type"] == "subagent"]
    sub_requests = sum(len(r["requests"]) for _, r in subs)
    assert len(weka_raw) == 36
    (rows, sub_rows, sessions, parent_sessions) = q(
        weka_lake,
        "SELECT count(*), count(parent_session_id), count(DISTINCT session_id), "
        "count(DISTINCT parent_session_id) FROM requests",
    )[0]
    assert rows == parents + sub_requests
    assert sub_rows == sub_requests
    assert sessions == 36 + len(subs)
    # SOURCES.md: the subset holds "all 9 traces that contain type:subagent entries"; every file's
    # totals.subagent_count matches its sub-agent entries.
    assert parent_sessions == 9 == len({t for t, _ in subs})
    assert sum(d["totals"]["subagent_count"] for d in weka_raw.values()) == len(subs)
    events = dict(q(weka_lake, "SELECT name, count(*) FROM events GROUP BY name"))
    assert events == {"trace_info": 36, "subagent": len(subs)}
    got_types = sorted(
        r[0] for r in q(weka_lake, "SELECT attributes->>'subagent_type' FROM events WHERE name = 'subagent'")
    )
    assert got_types == sorted(r["subagent_type"] for _, r in subs)
    # Per-session token totals equal the files' own `totals` (parent, sub-agents, combined).
    got = q(
        weka_lake,
        "SELECT coalesce(parent_session_id, session_id), parent_session_id IS NOT NULL, "
        "sum(context_tokens)::BIGINT, sum(output_tokens)::BIGINT FROM requests GROUP BY ALL",
    )
    by_trace: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    for trace, is_sub, inp, outp in got:
        by_trace[trace]["subagent_tokens" if is_sub else "parent_tokens"] = (inp, outp)
    for trace, doc in weka_raw.items():
        totals = doc["totals"]
        for kind in ("parent_tokens", "subagent_tokens"):
            expected = (totals[kind]["input"], totals[kind]["output"])
            assert by_trace[trace].get(kind, (0, 0)) == expected, (trace, kind)
        combined = tuple(map(sum, zip(*by_trace[trace].values(), strict=True)))
        assert combined == (totals["combined_tokens"]["input"], totals["combined_tokens"]["output"])


@pytest.mark.realdata
def test_kvcache_tester_requests_times_and_hash_ids(
    weka_raw: dict[str, dict[str, Any]], weka_lake: Lake
) -> None:
    got: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in q(
        weka_lake,
        "SELECT session_id, started_at, ended_at, context_tokens, output_tokens, hash_ids::VARCHAR, "
        "block_size, "
        "model, ttft_ms FROM requests ORDER BY session_id, started_at, seq",
    ):
        got[row[0]].append(row[1:])
    expected: dict[str, list[tuple[Any, ...]]] = {}
    for doc in weka_raw.values():
        assert doc["block_size"] == 64
        for session, reqs in _streams(doc).items():
            assert [t for t, _ in reqs] == sorted(t for t, _ in reqs)  # file order is time order
            expected[session] = [
                (
                    EPOCH + dt.timedelta(seconds=t),
                    EPOCH + dt.timedelta(seconds=t + r["api_time"]) if "api_time" in r else None,
                    r["in"],
                    r["out"],
                    str(r["hash_ids"]),  # DuckDB prints a list as Python does: cheap to compare
                    64,
                    r["model"],
                    r["ttft"] * 1000 if "ttft" in r else None,
                )
                for t, r in reqs
            ]
    assert got.keys() == expected.keys()
    for session, rows in expected.items():
        assert len(got[session]) == len(rows)
        for g, e in zip(got[session], rows, strict=True):
            assert abs((g[0] - e[0]).total_seconds()) < 1e-6
            assert (g[1] is None) == (e[1] is None)
            if e[1] is not None:
                assert abs((g[1] - e[1]).total_seconds()) < 1e-6
            assert g[2:7] == e[2:7]
            assert (g[7] is None and e[7] is None) or abs(g[7] - e[7]) < 1e-6
    # §4: `len(hash_ids) == floor(in/64)` for 100 % of requests (the tail block is not hashed).
    (bad,) = q(weka_lake, "SELECT count(*) FROM requests WHERE len(hash_ids) <> context_tokens // 64")[0]
    assert bad == 0


@pytest.mark.realdata
def test_kvcache_tester_cache_reads_follow_the_hash_ids(
    weka_raw: dict[str, dict[str, Any]], weka_lake: Lake
) -> None:
    # Independent: the leading ids already seen in an earlier request of the same trace, in time order.
    expected: dict[str, int] = {}
    for doc in weka_raw.values():
        flat: list[tuple[float, int, dict[str, Any]]] = []
        for entry in doc["requests"]:
            if entry["type"] == "subagent":
                flat += [(entry["t"] + s["t"], len(flat) + j, s) for j, s in enumerate(entry["requests"])]
            else:
                flat.append((entry["t"], len(flat), entry))
        seen: set[int] = set()
        read = 0
        for _, _, r in sorted(flat, key=lambda x: (x[0], x[1])):
            read += 64 * _common_prefix_seen(r["hash_ids"], seen)
            seen.update(r["hash_ids"])
        expected[doc["id"]] = read
    got = dict(
        q(
            weka_lake,
            "SELECT coalesce(parent_session_id, session_id), sum(cache_read_tokens)::BIGINT "
            "FROM requests GROUP BY 1",
        )
    )
    assert got == expected
    (bad,) = q(
        weka_lake,
        "SELECT count(*) FROM requests WHERE cold_input_tokens <> 0 OR cache_write_tokens < 0 "
        "OR cache_read_tokens + cache_write_tokens <> context_tokens",
    )[0]
    assert bad == 0
    # Published per-trace hit rate (overlap with the previous request), §4: p50 95.4 %, mean 92.8 %,
    # min 60.6 % over 710 traces. The subset's request-mean of parent requests after the first must
    # sit in the same range.
    rates = [
        r[1]
        for r in q(
            weka_lake,
            "SELECT session_id, avg(cache_read_tokens / context_tokens) FILTER (WHERE rn > 1) FROM ("
            " SELECT *, row_number() OVER (PARTITION BY session_id ORDER BY started_at, seq) AS rn"
            " FROM requests WHERE parent_session_id IS NULL) GROUP BY 1",
        )
        if r[1] is not None
    ]
    assert 0.90 <= statistics.median(rates) <= 0.99
    assert min(rates) >= 0.60


@pytest.mark.realdata
def test_kvcache_tester_think_time_durations_and_prompts(
    weka_raw: dict[str, dict[str, Any]], weka_lake: Lake
) -> None:
    # Idle gap (docs/everyday.md#analyses-common-options-and-definitions: start(n) - end(n-1) within a
    # stream) equals the recorded think_time (±1 s:
    # t is rounded to whole seconds) wherever both are known.
    gaps = q(
        weka_lake,
        "SELECT session_id, epoch(started_at) - epoch(lag(ended_at) OVER w), "
        "(attributes->>'think_time_s')::DOUBLE FROM requests "
        "WINDOW w AS (PARTITION BY session_id ORDER BY started_at, seq)",
    )
    pairs = [(g, t) for _, g, t in gaps if g is not None and t is not None]
    assert len(pairs) > 1800
    assert all(abs(g - t) <= 1 for g, t in pairs)
    raw_think = [
        r["think_time"]
        for d in weka_raw.values()
        for r in d["requests"]
        if r["type"] != "subagent" and "think_time" in r
    ]
    raw_out = [r["out"] for d in weka_raw.values() for r in d["requests"] if r["type"] != "subagent"]
    raw_api = [
        r["api_time"]
        for d in weka_raw.values()
        for r in d["requests"]
        if r["type"] != "subagent" and "api_time" in r
    ]
    (out_p50, api_p50) = q(
        weka_lake,
        "SELECT median(output_tokens), median(duration_ms) / 1000 FROM requests "
        "WHERE parent_session_id IS NULL",
    )[0]
    assert out_p50 == statistics.median(raw_out)
    assert abs(api_p50 - statistics.median(raw_api)) < 1e-9
    # Published (§4, 710 traces): think p50 10 s, output p50 216, api p50 6.08 s, duration p50 59.8 min.
    assert 5 <= statistics.median(raw_think) <= 20
    assert 150 <= out_p50 <= 350
    assert 4 <= api_p50 <= 10
    durations = dict(
        q(
            weka_lake,
            "SELECT session_id, (epoch(max(coalesce(ended_at, started_at))) - epoch(min(started_at))) / 60 "
            "FROM requests WHERE parent_session_id IS NULL GROUP BY 1",
        )
    )
    expected = {}
    for doc in weka_raw.values():
        parent = [r for r in doc["requests"] if r["type"] != "subagent"]
        expected[doc["id"]] = max(r["t"] + r.get("api_time", 0) for r in parent) / 60
    assert durations.keys() == expected.keys()
    assert all(abs(durations[k] - v) < 1e-6 for k, v in expected.items())
    assert 30 <= statistics.median(durations.values()) <= 90
    assert max(durations.values()) <= 4_952
    # A parent request without a tool result starts a user turn; tool loops and sub-agents inherit it.
    prompts = dict(
        q(
            weka_lake,
            "SELECT session_id, count(DISTINCT prompt_id) FROM requests "
            "WHERE parent_session_id IS NULL GROUP BY 1",
        )
    )
    for trace, doc in weka_raw.items():
        parent = [r for r in doc["requests"] if r["type"] != "subagent"]
        turns = sum(1 for i, r in enumerate(parent) if i == 0 or "tool_result" not in r["input_types"])
        assert prompts[trace] == turns, trace
    (orphans,) = q(
        weka_lake,
        "SELECT count(*) FROM requests s WHERE s.parent_session_id IS NOT NULL AND s.prompt_id NOT IN "
        "(SELECT prompt_id FROM requests p WHERE p.session_id = s.parent_session_id)",
    )[0]
    assert orphans == 0


@pytest.mark.realdata
def test_kvcache_tester_reimport_adds_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for name in ("trace_0546.json", "trace_0638.json", "trace_0265.json"):
        shutil.copy(TESTDATA / "weka_cc_traces" / name, folder / name)
    lake = Lake(tmp_path / "data")
    first = run_import(lake, KVCACHE, [folder])
    assert first.rows["requests"] > 0
    assert run_import(lake, KVCACHE, [folder]).rows["requests"] == 0
    for path in folder.iterdir():
        os.utime(path, ns=(1, 1))  # whole-file importer: a touched file is parsed again
    again = run_import(lake, KVCACHE, [folder])
    assert again.files_read == 3
    assert q(lake, "SELECT count(*) FROM requests")[0][0] == first.rows["requests"]
    assert q(lake, "SELECT count(*) FROM events")[0][0] == first.rows["events"]


def test_kvcache_tester_bad_entries_are_reported(lake: Lake, tmp_path: Path) -> None:
    good = {
        "t": 0.0,
        "type": "n",
        "model": "m",
        "in": 130,
        "out": 5,
        "hash_ids": [1, 2],
        "input_types": ["text"],
        "api_time": 1.5,
        "think_time": 0.0,
    }
    doc = {
        "id": "trace_x",
        "block_size": 64,
        "requests": [
            good,
            {"t": 3.0, "type": "n", "model": "m", "out": 5, "hash_ids": [1, 2]},
            {
                "t": 4.0,
                "type": "subagent",
                "agent_id": "agent_001",
                "requests": [
                    {
                        "t": 0.0,
                        "type": "n",
                        "model": "h",
                        "in": 70,
                        "out": 1,
                        "hash_ids": [9],
                        "input_types": ["text"],
                        "api_time": 1.0,
                        "think_time": 0.0,
                    },
                    {"t": "x"},
                ],
            },
            {**good, "t": 10.0, "in": 200, "hash_ids": [1, 2, 3], "input_types": ["tool_result"]},
        ],
    }
    path = tmp_path / "trace_x.json"
    path.write_text(json.dumps(doc))
    broken = tmp_path / "trace_y.json"
    broken.write_text('{"id": "trace_y", "requests": [')
    summary = run_import(lake, KVCACHE, [path, broken])
    assert [(Path(e.path).name, e.line) for e in summary.errors] == [
        ("trace_x.json", 2),
        ("trace_x.json", 3),
        ("trace_y.json", 1),
    ]
    got = q(
        lake,
        "SELECT session_id, parent_session_id, started_at, ended_at, cache_read_tokens, "
        "cache_write_tokens, output_tokens, prompt_id FROM requests ORDER BY seq",
    )
    assert got == [
        ("trace_x", None, EPOCH, EPOCH + dt.timedelta(seconds=1.5), 0, 130, 5, "trace_x:0"),
        (
            "trace_x/agent_001",
            "trace_x",
            EPOCH + dt.timedelta(seconds=4),
            EPOCH + dt.timedelta(seconds=5),
            0,
            70,
            1,
            "trace_x:0",
        ),
        (
            "trace_x",
            None,
            EPOCH + dt.timedelta(seconds=10),
            EPOCH + dt.timedelta(seconds=11.5),
            128,
            72,
            5,
            "trace_x:0",
        ),
    ]


# -- Bailian ------------------------------------------------------------------------------------

BAILIAN_LINES: list[dict[str, Any]] = [
    # chat 1 -> 2 -> 3 is one conversation; 4 -> 5 another (format: the dataset README).
    {
        "chat_id": 1,
        "parent_chat_id": -1,
        "timestamp": 0.5,
        "input_length": 40,
        "output_length": 7,
        "type": "text",
        "turn": 1,
        "hash_ids": [1, 2, 3],
    },
    {
        "chat_id": 4,
        "parent_chat_id": -1,
        "timestamp": 1.25,
        "input_length": 16,
        "output_length": 3,
        "type": "search",
        "turn": 1,
        "hash_ids": [1],
    },
    {
        "chat_id": 2,
        "parent_chat_id": 1,
        "timestamp": 61.114,
        "input_length": 70,
        "output_length": 12,
        "type": "text",
        "turn": 2,
        "hash_ids": [1, 2, 4, 5, 6],
    },
]


def _bailian_text(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_bailian_rows_sessions_and_growth(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "qwen_traceA_blksz_16.jsonl"
    path.write_text(_bailian_text(BAILIAN_LINES) + "{broken\n")
    summary = run_import(lake, BAILIAN, [path])
    assert summary.rows["requests"] == 3
    assert [e.line for e in summary.errors] == [4]
    more: list[dict[str, Any]] = [
        {
            "chat_id": 3,
            "parent_chat_id": 2,
            "timestamp": 130.0,
            "input_length": 90,
            "output_length": 4,
            "type": "file",
            "turn": 3,
            "hash_ids": [1, 2, 4, 5, 6, 7],
        },
        {
            "chat_id": 5,
            "parent_chat_id": 4,
            "timestamp": 131,
            "input_length": 33,
            "output_length": 2,
            "type": "text",
            "turn": 2,
            "hash_ids": [1, 8, 9],
        },
        {"chat_id": 6, "parent_chat_id": 1, "timestamp": 132, "output_length": 2, "hash_ids": []},
    ]
    with open(path, "a") as fh:
        fh.write(_bailian_text(more))
    second = run_import(lake, BAILIAN, [path])
    assert second.rows["requests"] == 2  # only the appended lines; chat 3 joins session 1 via state
    assert [e.line for e in second.errors] == [7]
    got = q(
        lake,
        "SELECT seq, session_id, prompt_id, request_id, started_at, cold_input_tokens, cache_read_tokens, "
        "output_tokens, hash_ids, block_size, attributes->>'type', (attributes->>'turn')::INT, "
        "ended_at FROM requests ORDER BY seq",
    )
    stem = "qwen_traceA_blksz_16"
    expected = []
    for seq, rec, root in zip((1, 2, 3, 5, 6), [*BAILIAN_LINES, *more[:2]], (1, 4, 1, 1, 4), strict=True):
        expected.append(
            (
                seq,
                f"{stem}:{root}",
                f"{stem}:{rec['chat_id']}",
                str(rec["chat_id"]),
                EPOCH + dt.timedelta(seconds=rec["timestamp"]),
                rec["input_length"],
                0,
                rec["output_length"],
                rec["hash_ids"],
                16,
                rec["type"],
                rec["turn"],
                None,
            )
        )
    assert got == expected
    assert run_import(lake, BAILIAN, [path]).rows["requests"] == 0


# -- BurstGPT -----------------------------------------------------------------------------------


def test_burstgpt_v11_rows_and_growth(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "BurstGPT_1.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,API log\n"
    )
    assert run_import(lake, BURSTGPT, [path]).rows["requests"] == 2
    with open(path, "a") as fh:  # new lines only; the header comes from the carried state
        fh.write("118,GPT-4,417,276,693,Conversation log\n119,GPT-4,many,1,1,API log\n")
    second = run_import(lake, BURSTGPT, [path])
    assert second.rows["requests"] == 1
    assert [e.line for e in second.errors] == [5]
    got = q(
        lake,
        "SELECT seq, started_at, model, cold_input_tokens, output_tokens, attributes->>'log_type', "
        "(attributes->>'failed')::BOOLEAN, session_id, ended_at, duration_ms FROM requests ORDER BY seq",
    )
    assert got == [
        (2, EPOCH + dt.timedelta(seconds=5), "ChatGPT", 472, 18, "Conversation log", None, None, None, None),
        (3, EPOCH + dt.timedelta(seconds=45), "ChatGPT", 1087, 0, "API log", True, None, None, None),
        (4, EPOCH + dt.timedelta(seconds=118), "GPT-4", 417, 276, "Conversation log", None, None, None, None),
    ]


def test_burstgpt_sessions_and_elapsed_time(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "BurstGPT_3.csv"
    path.write_text(
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "10.5,s1,2.25,ChatGPT,100,20,120,Conversation log\n"
        "140.0,s1,1.5,ChatGPT,300,30,330,Conversation log\n"
        "141.0,,0.5,GPT-4,50,5,55,API log\n"
    )
    assert run_import(lake, BURSTGPT, [path]).skipped == 0
    got = q(
        lake,
        "SELECT session_id, started_at, ended_at, duration_ms, cold_input_tokens, output_tokens, "
        "prompt_id = event_id FROM requests ORDER BY seq",
    )
    t = [EPOCH + dt.timedelta(seconds=s) for s in (10.5, 12.75, 140, 141.5, 141, 141.5)]
    assert got == [
        ("s1", t[0], t[1], 2250.0, 100, 20, True),
        ("s1", t[2], t[3], 1500.0, 300, 30, True),
        (None, t[4], t[5], 500.0, 50, 5, True),
    ]
    # The human gap between the two turns of s1 (docs/everyday.md#analyses-common-options-and-definitions):
    # 140 - 12.75 s.
    (gap,) = q(
        lake, "SELECT epoch(max(started_at)) - epoch(min(ended_at)) FROM requests WHERE session_id = 's1'"
    )[0]
    assert gap == pytest.approx(127.25)


# -- all five ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "whole_file"),
    [
        ("mooncake", False),
        ("azure", False),
        ("kvcache-tester", True),
        ("bailian", False),
        ("burstgpt", False),
    ],
)
def test_registry_names_and_modes(name: str, whole_file: bool) -> None:
    importer = get(name)
    assert importer.name == name
    assert importer.whole_file is whole_file
    assert importer.default_paths() == []


def test_cli_imports_a_public_trace(cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(_bailian_text(BAILIAN_LINES))
    code, out, _ = cli("import", "bailian", str(path), "--format", "json")
    assert code == 0
    assert json.loads(out)["rows"]["requests"] == 3
    with open(path, "a") as fh:
        fh.write("[1, 2]\n")
    code, out, err = cli("import", "bailian", str(path), "--format", "json")
    assert code == 3  # skipped records
    assert json.loads(out)["skipped"] == 1
    assert "trace.jsonl:4" in err
