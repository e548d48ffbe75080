"""The sealer: WAL segments -> lake Parquet, metric state, bad records and poison segments."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import orjson
from collectors_support import Server, api_request_logs, count_requests, query, wait_for
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from traceflow.collectors import spool
from traceflow.collectors.quarantine import Quarantine
from traceflow.collectors.sealer import MAX_ATTEMPTS, Sealer

PB = "application/x-protobuf"


def _write_wal(data: Path, records: list[spool.WalRecord]) -> Path:
    wal = spool.Wal(spool.collector_dir(data) / "wal", roll_interval_s=3600)
    wal.start()
    for rec in records:
        wal.append_blocking(rec)
    wal.close()
    segments: list[Path] = spool.closed_segments(spool.collector_dir(data) / "wal")
    return segments[-1]


def _cumulative(value: int, t_s: int, start_s: int) -> bytes:
    req = ExportMetricsServiceRequest()
    metric = req.resource_metrics.add().scope_metrics.add().metrics.add(name="claude_code.token.usage")
    metric.sum.aggregation_temporality = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    metric.sum.is_monotonic = True
    point = metric.sum.data_points.add(
        as_int=value, start_time_unix_nano=start_s * 10**9, time_unix_nano=t_s * 10**9
    )
    point.attributes.add(key="session.id").value.string_value = "s-metric"
    point.attributes.add(key="type").value.string_value = "input"
    return bytes(req.SerializeToString())


def test_a_bad_record_does_not_stop_the_others(tmp_path: Path) -> None:
    req, ids = api_request_logs(5)
    _write_wal(
        tmp_path,
        [
            spool.WalRecord("logs", PB, b"\xff\xff not protobuf"),  # cannot happen via the server
            spool.WalRecord("logs", PB, req.SerializeToString()),
        ],
    )
    stats = Sealer(tmp_path).seal_all()
    assert stats.quarantined == 1 and stats.rows["requests"] == 5
    assert count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == 5
    assert not spool.closed_segments(spool.collector_dir(tmp_path) / "wal")


def test_metric_state_survives_a_restart_of_the_sealer(tmp_path: Path) -> None:
    start = int(time.time()) + 10  # a series that starts after the receiver did
    _write_wal(tmp_path, [spool.WalRecord("metrics", PB, _cumulative(100, start + 60, start))])
    Sealer(tmp_path).seal_all()
    state = spool.collector_dir(tmp_path) / "metric_state.json"
    assert orjson.loads(state.read_bytes())
    _write_wal(tmp_path, [spool.WalRecord("metrics", PB, _cumulative(130, start + 120, start))])
    Sealer(tmp_path).seal_all()  # a new sealer process: the state comes from metric_state.json
    deltas = query(tmp_path, "select delta from metric_points where session_id = 's-metric' order by time")
    assert [d for (d,) in deltas] == [100, 30]


def test_a_corrupt_segment_is_sealed_up_to_the_damage_and_quarantined(tmp_path: Path) -> None:
    first, ids1 = api_request_logs(3)
    second, ids2 = api_request_logs(3)
    seg = _write_wal(
        tmp_path,
        [
            spool.WalRecord("logs", PB, first.SerializeToString()),
            spool.WalRecord("logs", PB, second.SerializeToString()),
        ],
    )
    raw = bytearray(seg.read_bytes())
    raw[-10] ^= 0xFF  # damage the second record
    seg.write_bytes(bytes(raw))
    stats = Sealer(tmp_path).seal_all()
    assert stats.quarantined == 1
    assert count_requests(tmp_path, "list_contains(?, request_id)", [ids1]) == 3
    assert count_requests(tmp_path, "list_contains(?, request_id)", [ids2]) == 0
    assert (spool.collector_dir(tmp_path) / "quarantine" / seg.name).exists()


def test_a_segment_that_keeps_killing_the_sealer_is_sealed_record_by_record(tmp_path: Path) -> None:
    reqs = [api_request_logs(2) for _ in range(3)]
    seg = _write_wal(tmp_path, [spool.WalRecord("logs", PB, r.SerializeToString()) for r, _ in reqs])
    attempts = spool.collector_dir(tmp_path) / "sealing.json"
    # as if the sealer had died MAX_ATTEMPTS times while sealing this segment
    attempts.write_bytes(orjson.dumps({"segments": [seg.name], "attempts": MAX_ATTEMPTS}))
    stats = Sealer(tmp_path).seal_available()
    assert stats is not None and stats.quarantined == 0  # no record was to blame on its own
    ids = [i for _, rids in reqs for i in rids]
    assert count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == 6
    assert not seg.exists() and not attempts.exists()


def test_a_record_that_keeps_killing_the_sealer_is_quarantined_alone(tmp_path: Path) -> None:
    reqs = [api_request_logs(2) for _ in range(3)]
    seg = _write_wal(tmp_path, [spool.WalRecord("logs", PB, r.SerializeToString()) for r, _ in reqs])
    attempts = spool.collector_dir(tmp_path) / "sealing.json"
    # as if the sealer had died MAX_ATTEMPTS times on record 1 alone
    attempts.write_bytes(
        orjson.dumps(
            {"segments": [seg.name], "attempts": MAX_ATTEMPTS + 1, "next": 1, "record_attempts": MAX_ATTEMPTS}
        )
    )
    stats = Sealer(tmp_path).seal_available()
    assert stats is not None and stats.quarantined == 1
    (entry,) = Quarantine.of(tmp_path).entries()
    assert entry.payloads == 1 and "record 1 of WAL segment" in entry.reason
    assert count_requests(tmp_path, "list_contains(?, request_id)", [reqs[2][1]]) == 2
    assert count_requests(tmp_path, "list_contains(?, request_id)", [reqs[1][1]]) == 0
    assert not seg.exists() and not attempts.exists()


def test_the_server_restarts_a_dead_sealer(tmp_path: Path) -> None:
    with Server(tmp_path, "--roll-interval", "0.2") as srv:
        assert srv.proc is not None
        sealers = [
            int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == srv.proc.pid
        ]
        assert len(sealers) == 1
        os.kill(sealers[0], signal.SIGKILL)
        req, ids = api_request_logs(4)
        r = httpx.post(
            srv.http_url + "/v1/logs", content=req.SerializeToString(), headers={"Content-Type": PB}
        )
        assert r.status_code == 200  # acknowledging does not need the sealer
        assert wait_for(lambda: count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == 4, 20)


def _parent(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1
