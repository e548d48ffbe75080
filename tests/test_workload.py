"""Workload profiles: fit, generate, the agentic-coding preset, and ``synth --send``
(traceflow.replay.workload, .fit, .synth, .synth_trace, .loadgen)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from traceflow.replay.fit import fit, fit_mixture
from traceflow.replay.requests import load_requests
from traceflow.replay.synth import generate, preset
from traceflow.replay.synth_trace import write_lake
from traceflow.replay.workload import profile_medians, sample, validate_profile
from traceflow.store.lake import Lake


def round_trip_profile() -> dict[str, Any]:
    prof = preset("agentic-coding")
    prof["name"] = "round-trip"
    prof["arrival"] = {"sessions_per_min": 50.0, "cv": 1.0}
    prof["turns"] = {"kind": "uniform", "low": 3, "high": 12, "integer": True}
    prof["think_s"] = {"kind": "lognormal", "median": 8.0, "sigma": 1.0}
    prof["latency"] = {"base_s": 1.5, "per_output_token_s": 0.02}
    return prof


def test_round_trip_synth_import_fit_recovers_the_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = round_trip_profile()
    trace = generate(source, 2 * 3600, seed=11)
    lake = Lake(tmp_path / "data")
    assert write_lake(trace, lake) == trace.n
    fitted = fit(lake.connect(["requests"]))
    rate = fitted["arrival"]["sessions_per_min"]
    want = profile_medians(source)
    got = profile_medians(fitted)
    with capsys.disabled():
        print(f"\nround trip ({trace.n} requests, {trace.n_sessions} sessions): profile vs fitted")
        print(f"  sessions/min: 50.00 vs {rate:.2f}")
        for key in ("appended", "output", "think_s"):
            print(f"  median {key}: {want[key]:.1f} vs {got[key]:.1f}")
    assert rate == pytest.approx(50.0, rel=0.05)
    for key in ("appended", "output", "think_s"):
        assert got[key] == pytest.approx(want[key], rel=0.10), key
    assert fitted["latency"]["base_s"] == pytest.approx(1.5, abs=0.01)
    assert fitted["latency"]["per_output_token_s"] == pytest.approx(0.02, rel=0.01)
    assert fitted["appended"]["kind"] == "mixture"  # tool results and file reads
    weights = sorted(c["weight"] for c in fitted["appended"]["components"])
    assert weights[0] == pytest.approx(0.15, abs=0.03)
    assert fitted["context"]["on_cap"] == "end"
    # a trace generated from the fitted profile has the same shape again
    again = generate(fitted, 3600, seed=12)
    assert np.median(again.out) == pytest.approx(np.median(trace.out), rel=0.1)
    assert again.n_sessions == pytest.approx(50 * 60, rel=0.1)


def test_agentic_coding_preset_has_the_reference_shape() -> None:
    trace = generate(preset("agentic-coding"), 4 * 3600, seed=0)
    assert trace.n_sessions == pytest.approx(2.5 * 240, rel=0.1)
    assert trace.ctx.max() <= 65_536
    order = np.lexsort((trace.turn, trace.session))
    s, c, o = trace.session[order], trace.ctx[order], trace.out[order]
    same = s[1:] == s[:-1]
    grew = same & (c[1:] >= c[:-1])
    compacted = same & (c[1:] < c[:-1])
    assert (c[1:][compacted] <= 8000).all() and (c[:-1][compacted] + o[:-1][compacted] > 60_000).all()
    appended = (c[1:] - c[:-1] - o[:-1])[grew]  # growth toward the cap, then a compaction
    assert np.mean(appended >= 1400) == pytest.approx(0.15, abs=0.02)  # file reads
    assert appended.min() >= 150 and appended.max() <= 3600  # ±100 jitter
    assert np.mean(trace.out >= 300) == pytest.approx(0.15, abs=0.02)  # code blocks
    gaps = (trace.t_us[order][1:] - trace.end_us[order][:-1])[same] / 1e6
    assert gaps[gaps > 600].min() >= 840 and gaps[gaps > 600].max() <= 960 + 300
    turns = Counter(s.tolist())
    eligible = sum(1 for n in turns.values() if n > 24)
    paused = len(set(s[1:][same][gaps > 600].tolist()))
    assert paused / eligible == pytest.approx(0.25, abs=0.06)
    assert (trace.read[trace.turn == 0] == 0).all()
    # the same process as `traceflow simulate --workload agentic-coding`
    from traceflow.kv.synthetic import agentic_coding_trace

    sim = agentic_coding_trace(4 * 3600, seed=0)
    assert trace.n == pytest.approx(sim.n_requests, rel=0.1)
    assert np.mean(trace.ctx) == pytest.approx(np.mean(sim.input_tokens), rel=0.1)


def test_generation_is_seeded() -> None:
    a = generate(preset("agentic-coding"), 1800, seed=5)
    b = generate(preset("agentic-coding"), 1800, seed=5)
    c = generate(preset("agentic-coding"), 1800, seed=6)
    assert a.key == b.key and np.array_equal(a.ctx, b.ctx) and np.array_equal(a.t_us, b.t_us)
    assert a.key != c.key and not np.array_equal(a.ctx[:50], c.ctx[:50])
    scaled = generate(preset("agentic-coding"), 1800, seed=5, rate_scale=4)
    assert scaled.n_sessions == pytest.approx(4 * a.n_sessions, rel=0.25)


def test_cache_reads_follow_the_ttl() -> None:
    trace = generate(preset("agentic-coding"), 7200, seed=1)
    order = np.lexsort((trace.turn, trace.session))
    s, c, r = trace.session[order], trace.ctx[order], trace.read[order]
    t, e = trace.t_us[order], trace.end_us[order]
    same = s[1:] == s[:-1]
    gap = (t[1:] - e[:-1]) / 1e6
    warm = same & (gap <= 300) & (c[1:] >= c[:-1])  # (a compaction rewrites its context)
    assert np.array_equal(r[1:][warm], c[:-1][warm])
    assert (r[1:][same & (gap > 300)] == 0).all()  # the cohort's 15-minute pause loses the cache


def test_mixture_fit_finds_two_components_only_when_there_are_two() -> None:
    rng = np.random.default_rng(0)
    two = np.concatenate([rng.uniform(250, 600, 8500), rng.uniform(1500, 3500, 1500)])
    d = fit_mixture(two)
    assert d["kind"] == "mixture" and sorted(c["weight"] for c in d["components"]) == pytest.approx(
        [0.15, 0.85], abs=0.01
    )
    one = rng.lognormal(5.0, 0.6, 10_000)
    assert fit_mixture(one)["kind"] == "quantiles"
    drawn = sample(d, np.random.default_rng(1), 100_000)
    assert np.median(drawn) == pytest.approx(np.median(two), rel=0.02)


def test_fit_detects_compaction_and_pauses(tmp_path: Path) -> None:
    prof = preset("agentic-coding")
    prof["context"] = {
        "cap": 20_000,
        "on_cap": "compact",
        "compact_to": {"kind": "uniform", "low": 4000, "high": 6000},
    }
    prof["arrival"]["sessions_per_min"] = 10.0
    prof["turns"] = {"kind": "uniform", "low": 30, "high": 60, "integer": True}
    lake = Lake(tmp_path / "data")
    write_lake(generate(prof, 3600, seed=2), lake)
    fitted = fit(lake.connect(["requests"]))
    assert fitted["context"]["on_cap"] == "compact"
    assert fitted["context"]["cap"] == pytest.approx(20_000, rel=0.1)
    compact_median = sample(fitted["context"]["compact_to"], np.random.default_rng(0), 10_000)
    assert np.median(compact_median) == pytest.approx(5000, rel=0.1)
    assert fitted["idle"]["cohort_share"] > 0.1
    assert np.median(sample(fitted["idle"]["pause_s"], np.random.default_rng(0), 1000)) == pytest.approx(
        900, rel=0.1
    )


def test_profile_validation() -> None:
    from traceflow.errors import UsageError

    with pytest.raises(UsageError, match="not a traceflow profile"):
        validate_profile({"name": "x"})
    bad = preset("agentic-coding")
    bad["arrival"]["sessions_per_min"] = 0
    with pytest.raises(UsageError, match="sessions_per_min"):
        validate_profile(bad)
    with pytest.raises(UsageError, match="no preset"):
        preset("chatbot")


# -- the commands -----------------------------------------------------------------------------------


def test_synth_fit_synth_commands(
    cli: Callable[..., tuple[int, str, str]], lake: Lake, tmp_path: Path
) -> None:
    code, out, err = cli("synth", "--duration", "30m", "--rate-scale", "4", "--seed", "3", "--format", "json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["source"] == "synthetic" and summary["rows"] == summary["requests"] > 100
    rows = load_requests(lake.connect(["requests"]))
    assert rows.height == summary["requests"] and set(rows["source"]) == {"synthetic"}
    profile = tmp_path / "p.json"
    code, out, err = cli("fit", "-o", str(profile), "--source", "synthetic", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["sessions"] == summary["sessions"]
    doc = json.loads(profile.read_text())
    assert doc["traceflow_profile"] == 1 and doc["fitted"]["requests"] == summary["requests"]
    trace = tmp_path / "t.jsonl"
    code, out, err = cli(
        "synth",
        "--profile",
        str(profile),
        "--duration",
        "10m",
        "--export",
        "aiperf",
        "-o",
        str(trace),
        "-f",
        "json",
    )
    assert code == 0, err
    assert json.loads(out)["format"] == "aiperf" and trace.is_file()
    assert (tmp_path / "t.manifest.json").is_file()
    assert cli("synth", "--export", "mooncake")[0] == 2
    assert cli("synth", "--captured")[0] == 2
    assert cli("synth", "--preset", "chat")[0] == 2
    assert cli("synth", "--duration", "soon")[0] == 2


# -- synth --send -----------------------------------------------------------------------------------


class _Receiver:
    """An OTLP/HTTP logs endpoint on 127.0.0.1 that keeps the export requests it gets."""

    def __init__(self) -> None:
        self.bodies: list[tuple[bytes, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.bodies.append((body, self.headers.get("Content-Type", "")))
                assert self.path == "/v1/logs"
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def rows(self) -> pl.DataFrame:
        from traceflow.otlp.decode import MetricState, map_body

        out: list[dict[str, Any]] = []
        for body, ctype in self.bodies:
            mapped = map_body("logs", body, ctype, state=MetricState())
            assert mapped.rejected == 0
            out += mapped.parsed.requests
        return pl.DataFrame(out, infer_schema_length=None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    r = _Receiver()
    yield r
    r.close()


def _check_sent(rows: pl.DataFrame, frame: pl.DataFrame) -> None:
    assert rows.height == frame.height
    assert rows["event_id"].n_unique() == frame.height
    assert set(rows["agent"]) == {"claude-code"}
    got = sorted(
        zip(rows["cache_read_tokens"], rows["cache_write_tokens"], rows["output_tokens"], strict=True)
    )
    want = sorted(zip(frame["read"], (frame["ctx"] - frame["read"]), frame["out"], strict=True))
    assert got == want
    assert rows["session_id"].n_unique() == frame["session_id"].n_unique()
    assert rows["prompt_id"].null_count() == 0 and rows["request_id"].null_count() == 0
    res = {
        (a if isinstance(a, dict) else json.loads(a))["resource"]["service.name"] for a in rows["attributes"]
    }
    assert res == {"claude-code"}


def test_send_as_claude_code_otlp_over_http(receiver: _Receiver) -> None:
    from traceflow.replay.loadgen import send

    trace = generate(preset("agentic-coding"), 600, seed=4, rate_scale=2)
    frame = trace.replay_frame()
    result = send(frame, receiver.url, speedup=float("inf"))
    assert result["requests"] == frame.height and result["flushed"]
    rows = receiver.rows()
    _check_sent(rows, frame)
    # the backfill keeps the trace's spacing and ends now
    ends = rows.sort("ended_at")["ended_at"].dt.epoch("us").to_numpy()
    want = np.sort(frame["end_us"].to_numpy())
    assert np.allclose(np.diff(ends), np.diff(want), atol=1000)


def test_send_in_real_time_is_time_warped(receiver: _Receiver) -> None:
    from traceflow.replay.loadgen import send

    frame = generate(preset("agentic-coding"), 120, seed=8, rate_scale=3).replay_frame()
    t0, e0, e1 = int(frame["t_us"].min()), int(frame["end_us"].min()), int(frame["end_us"].max())  # type: ignore[arg-type]
    span_s = (e1 - t0) / 1e6
    slept: list[float] = []
    now = [1000.0]

    def sleep(s: float) -> None:  # a fake clock: no real waiting in the test
        slept.append(s)
        now[0] += s

    result = send(frame, receiver.url, speedup=10, sleep=sleep, clock=lambda: now[0])
    assert sum(slept) == pytest.approx(span_s / 10, rel=0.01)
    assert result["requests"] == frame.height
    stamps = receiver.rows()["ended_at"].dt.epoch("us").to_numpy() / 1e6
    assert stamps.min() == pytest.approx(1000.0 + (e0 - t0) / 1e7, abs=0.01)


def test_send_over_grpc_and_the_captured_command(
    cli: Callable[..., tuple[int, str, str]], lake: Lake
) -> None:
    import grpc
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

    got: list[bytes] = []

    class Logs(logs_service_pb2_grpc.LogsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            got.append(request.SerializeToString())
            return logs_service_pb2.ExportLogsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        write_lake(generate(preset("agentic-coding"), 600, seed=9), lake)
        frame = load_requests(lake.connect(["requests"]))
        code, out, err = cli(
            "synth",
            "--send",
            f"http://127.0.0.1:{port}",
            "--protocol",
            "grpc",
            "--captured",
            "--no-wait",
            "-f",
            "json",
        )
        assert code == 0, err
        assert json.loads(out)["requests"] == frame.height
    finally:
        server.stop(None)
    from traceflow.otlp.decode import MetricState, map_body

    rows = [
        r
        for body in got
        for r in map_body("logs", body, "application/x-protobuf", state=MetricState()).parsed.requests
    ]
    _check_sent(pl.DataFrame(rows, infer_schema_length=None), frame)
