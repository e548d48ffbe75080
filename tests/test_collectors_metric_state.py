"""The sealer's metric state: expiry on the collector's clock, a stream cap per resource, a journal.

Deltas are checked against values computed here from the points sent (cumulative differences), not
read back from the code under test.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
from collectors_support import query
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from traceflow.collectors import spool
from traceflow.collectors.sealer import Sealer
from traceflow.otlp import decode as otlp

PB = "application/x-protobuf"
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


def _cumulative(
    points: list[tuple[str, int, int, int]], *, host: str = "a", name: str = "claude_code.token.usage"
) -> ExportMetricsServiceRequest:
    """One resource (``host.name`` = ``host``) with cumulative points (session, value, start s, time s)."""
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.add(key="host.name").value.string_value = host
    metric = rm.scope_metrics.add().metrics.add(name=name)
    metric.sum.aggregation_temporality = CUMULATIVE
    metric.sum.is_monotonic = True
    for session, value, start_s, t_s in points:
        point = metric.sum.data_points.add(
            as_int=value, start_time_unix_nano=start_s * 10**9, time_unix_nano=t_s * 10**9
        )
        point.attributes.add(key="session.id").value.string_value = session
        point.attributes.add(key="type").value.string_value = "input"
    return req


def _raw_point(session: str, value: int, start_ns: int, t_ns: int, host: str) -> bytes:
    req = _cumulative([(session, value, 0, 0)], host=host)
    p = req.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points[0]
    p.start_time_unix_nano, p.time_unix_nano = start_ns, t_ns
    return bytes(req.SerializeToString())


def _wal(data: Path, bodies: list[tuple[bytes, int]]) -> None:
    wal = spool.Wal(spool.collector_dir(data) / "wal", roll_interval_s=3600)
    wal.start()
    for body, received_ns in bodies:
        wal.append_blocking(spool.WalRecord("metrics", PB, body, False, received_ns))
    wal.close()


def _deltas(data: Path, session: str) -> list[float | None]:
    rows = query(data, "select delta from metric_points where session_id = ? order by time", [session])
    return [d for (d,) in rows]


def test_a_point_dated_2_64_does_not_expire_other_clients_streams(tmp_path: Path) -> None:
    now = time.time_ns()
    start = now // 10**9 + 10  # series that start after the collector did: first points count
    a = [100, 130, 170, 240, 300, 390, 400]
    bodies = [
        (_cumulative([("s-a", v, start, start + 60 * (i + 1))]).SerializeToString(), now)
        for i, v in enumerate(a[:3])
    ]
    bodies.append((_raw_point("s-b", 5, 1, 2**64 - 1, host="b"), now))  # client B, hostile time
    bodies += [
        (_cumulative([("s-a", v, start, start + 60 * (i + 4))]).SerializeToString(), now)
        for i, v in enumerate(a[3:])
    ]
    _wal(tmp_path, bodies)
    Sealer(tmp_path).seal_all()
    expected = [a[0]] + [a[i] - a[i - 1] for i in range(1, len(a))]
    assert _deltas(tmp_path, "s-a") == expected


def test_streams_expire_on_the_collectors_clock() -> None:
    state = otlp.MetricState(0, max_staleness_s=3600)
    t0 = 1_800_000_000 * 10**9
    req = _cumulative([("s-old", 10, 1_700_000_000, 1_700_000_060)])  # old data times, seen now
    state.clock_ns = t0
    otlp.map_request("metrics", req, state=state)
    assert state.stream_count == 1
    state.clock_ns = t0 + 1800 * 10**9  # half an hour later: kept, whatever the data times say
    otlp.map_request("metrics", _cumulative([("s-new", 1, 1_600_000_000, 1_600_000_060)]), state=state)
    assert state.stream_count == 2
    state.clock_ns = t0 + 2 * 3600 * 10**9  # two hours later: the first stream was idle too long
    otlp.map_request("metrics", _cumulative([("s-new", 2, 1_600_000_000, 1_600_000_120)]), state=state)
    assert state.stream_count == 1


def test_a_resource_beyond_its_stream_cap_leaves_the_others_alone() -> None:
    state = otlp.MetricState(0, max_streams_per_resource=100)
    flood = _cumulative([(f"s{i}", 1, 1_700_000_000, 1_700_000_060) for i in range(150)], host="noisy")
    m = otlp.map_request("metrics", flood, state=state)
    assert len(m.parsed.metric_points) == 150  # every point is stored
    assert m.overflow == 50 and "beyond 100 per resource" in m.message
    assert sum(p["delta"] is None for p in m.parsed.metric_points) == 50
    assert state.stream_count == 100
    quiet = [
        otlp.map_request("metrics", _cumulative([("q", v, 1_700_000_000, t)], host="quiet"), state=state)
        for v, t in ((10, 1_700_000_060), (25, 1_700_000_120))
    ]
    assert [p["delta"] for m in quiet for p in m.parsed.metric_points] == [10, 15]


def test_the_state_is_journaled_not_rewritten_at_every_seal(tmp_path: Path) -> None:
    now = time.time_ns()
    many = _cumulative([(f"s{i}", 1, 1_700_000_000, 1_700_000_060) for i in range(5000)])
    _wal(tmp_path, [(many.SerializeToString(), now)])
    Sealer(tmp_path).seal_all()
    folder = spool.collector_dir(tmp_path)
    files = {p.name: p.stat().st_size for p in folder.glob("metric_state*")}
    total = sum(files.values())
    assert total > 100_000, files  # 5,000 streams
    sealer = Sealer(tmp_path)
    for i in range(5):  # five small seals: one stream each
        _wal(
            tmp_path,
            [(_cumulative([("s1", 2 + i, 1_700_000_000, 1_700_000_120 + i)]).SerializeToString(), now)],
        )
        sealer.seal_all()
    grown = sum(p.stat().st_size for p in folder.glob("metric_state*")) - total
    assert 0 < grown < 5 * 2000, grown  # a few hundred bytes per seal, not the 5,000 streams again
    assert Sealer(tmp_path).state == sealer.state  # what is on disk is what the sealer holds
    assert _deltas(tmp_path, "s1")[-5:] == [1, 1, 1, 1, 1]


def test_a_torn_journal_line_is_ignored_and_cut_off(tmp_path: Path) -> None:
    now = time.time_ns()
    sealer = Sealer(tmp_path)
    for i in range(2):  # a snapshot, then a journal line
        _wal(
            tmp_path,
            [(_cumulative([("s", 5 + i, 1_700_000_000, 1_700_000_060 + i)]).SerializeToString(), now)],
        )
        sealer.seal_all()
    journal = spool.collector_dir(tmp_path) / "metric_state.journal"
    good = journal.read_bytes()
    assert orjson.loads(good.splitlines()[0])
    with open(journal, "ab") as fh:
        fh.write(b'{"seq": 99, "meta": {"newest')  # a crash mid-append
    again = Sealer(tmp_path)
    assert again.state == sealer.state
    assert journal.read_bytes() == good  # cut off: the next line does not follow the torn one
    _wal(tmp_path, [(_cumulative([("s", 9, 1_700_000_000, 1_700_000_070)]).SerializeToString(), now)])
    again.seal_all()
    assert Sealer(tmp_path).state == again.state
    assert _deltas(tmp_path, "s")[-1] == 3


def test_a_series_that_started_after_the_server_keeps_its_first_delta_however_late_the_sealer(
    tmp_path: Path,
) -> None:
    """The sealer's state starts when the server began receiving (``--started-ns``), not when the sealer
    process came up: on a loaded machine that was seconds later, and a series that started between
    the two lost its first delta (tests/test_collectors_fuzz.py's honest streams did)."""
    server_started = time.time_ns() - 30 * 10**9  # the sealer comes up 30 s after the server
    start = server_started // 10**9 + 10  # the series starts 10 s after the server
    bodies = [
        (_cumulative([("late", v, start, start + 60 * (i + 1))]).SerializeToString(), server_started + i)
        for i, v in enumerate((40, 100))
    ]
    _wal(tmp_path, bodies)
    Sealer(tmp_path, started_ns=server_started).seal_all()
    assert _deltas(tmp_path, "late") == [40, 60]
