"""``GET /metrics`` of ``traceflow serve`` (docs/collector.md#prometheus-get-metrics): the text parses,
the accepted records add up to the rows the lake stored, per team, and a real Prometheus scrapes it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from collectors_support import Server, api_request_logs, kv, query, stub, wait_for
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from traceflow.collectors.prometheus import CollectorMetrics

TOKEN = "prometheus-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PB = {"Content-Type": "application/x-protobuf"}
PROMETHEUS = "/usr/bin/prometheus"


def _team_logs(n: int, team: str | None) -> bytes:
    req, _ = api_request_logs(n)
    if team is not None:
        req.resource_logs[0].resource.attributes.append(kv("team.id", team))
    return bytes(req.SerializeToString())


def _spans(good: int, bad: int) -> ExportTraceServiceRequest:
    """``good`` spans of a service that is no agent, and ``bad`` with a 3-byte trace id."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(kv("service.name", "billing-api"))
    rs.resource.attributes.append(kv("team.id", "payments"))
    ss = rs.scope_spans.add()
    now = time.time_ns()
    for i in range(good + bad):
        span = ss.spans.add()
        span.trace_id = os.urandom(16) if i < good else b"abc"
        span.span_id = os.urandom(8)
        span.name = f"op{i}"
        span.start_time_unix_nano = now
        span.end_time_unix_nano = now + 1_000_000
    return req


def _feed(srv: Server) -> None:
    """Records of three teams (one without a team) over HTTP and gRPC, and refused requests."""
    for n, team in ((3, "payments"), (4, "search"), (2, None)):
        r = httpx.post(f"{srv.http_url}/v1/logs", content=_team_logs(n, team), headers={**PB, **AUTH})
        assert r.status_code == 200, r.text
    with grpc.insecure_channel(srv.grpc_target) as ch:
        req, _ = api_request_logs(5)
        req.resource_logs[0].resource.attributes.append(kv("team.id", "search"))
        stub("logs", ch).Export(req, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
        answer = stub("traces", ch).Export(
            _spans(good=2, bad=1), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10
        )
        assert answer.partial_success.rejected_spans == 1
    assert (
        httpx.post(f"{srv.http_url}/v1/logs", content=b"\xff\xff", headers={**PB, **AUTH}).status_code == 400
    )
    assert (
        httpx.post(f"{srv.http_url}/v1/logs", content=_team_logs(1, "payments"), headers=PB).status_code
        == 401
    )


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _stored(data: Path) -> int:
    return sum(int(query(data, f"select count(*) from {t}")[0][0]) for t in ("requests", "spans"))


def _team_rows(data: Path) -> dict[str, int]:
    rows = query(
        data,
        "select coalesce(json_extract_string(attributes, '$.resource.\"team.id\"'), ''), count(*) "
        "from (select attributes from requests union all select attributes from spans) group by 1",
    )
    return {str(team): int(n) for team, n in rows}


def test_metrics_parse_and_add_up_to_the_lake(tmp_path: Path) -> None:
    with Server(tmp_path, "--token", TOKEN) as srv:
        assert httpx.get(f"{srv.http_url}/metrics").status_code == 401  # the token guards it
        _feed(srv)
        # 3 + 4 + 2 + 5 api_request records and 2 spans were acknowledged (1 span refused)
        assert wait_for(lambda: _stored(tmp_path) == 16, timeout_s=30)
        r = httpx.get(f"{srv.http_url}/metrics", headers=AUTH)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        samples = _samples(r.text)

    accepted = samples["traceflow_records_accepted_total"]
    assert sum(v for _, v in accepted) == _stored(tmp_path) == 16
    by_team: dict[str, float] = {}
    for labels, v in accepted:
        by_team[labels["team"]] = by_team.get(labels["team"], 0) + v
    assert by_team == _team_rows(tmp_path) == {"payments": 3 + 2, "search": 4 + 5, "": 2}
    assert {(lb["signal"], lb["agent"]) for lb, _ in accepted} == {("logs", "claude"), ("traces", "other")}

    refused = {lb["reason"]: v for lb, v in samples["traceflow_records_refused_total"]}
    assert refused["invalid"] == 1 and refused["unstorable"] == 0
    requests = {(lb["protocol"], lb["code"]): v for lb, v in samples["traceflow_requests_total"]}
    assert requests == {("http", "200"): 3, ("http", "400"): 1, ("http", "401"): 1, ("grpc", "OK"): 2}
    whole = {lb["reason"]: v for lb, v in samples["traceflow_requests_refused_total"]}
    assert whole == {"bad_request": 1, "unauthenticated": 1}
    assert samples["traceflow_seal_duration_seconds_count"][0][1] >= 1
    assert samples["traceflow_lake_write_errors_total"][0][1] == 0
    assert samples["traceflow_wal_bytes"][0][1] >= 0


def test_metrics_port_asks_for_no_token(tmp_path: Path) -> None:
    with Server(tmp_path, "--token", TOKEN, "--metrics-port", "0") as srv:
        url = srv.ready_line.split("metrics on ")[1].split(",")[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        r = httpx.post(f"{srv.http_url}/v1/logs", content=_team_logs(2, "payments"), headers={**PB, **AUTH})
        assert r.status_code == 200
        text = httpx.get(url).text
    accepted = _samples(text)["traceflow_records_accepted_total"]
    assert accepted == [({"signal": "logs", "agent": "claude", "team": "payments"}, 2.0)]


def test_each_collector_counts_in_its_own_registry() -> None:
    a, b = CollectorMetrics(), CollectorMetrics()
    a.note("logs", "http", 200, 0, origins=None)
    assert b"traceflow_requests_total{" in a.exposition()
    assert b"traceflow_requests_total{" not in b.exposition()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    r = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": promql}, timeout=5)
    r.raise_for_status()  # 503 while Prometheus starts: an httpx.HTTPError, so the callers wait
    body = r.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@contextlib.contextmanager
def running_prometheus(tmp_path: Path, scrape_config: str) -> Iterator[int]:
    """Debian's Prometheus with ``scrape_config`` (YAML), its data and log under ``tmp_path``; yields
    its API port and stops it on exit."""
    config = tmp_path / "prometheus.yml"
    config.write_text(scrape_config)
    port = _free_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        prom = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield port
        finally:
            prom.terminate()
            prom.wait(30)


def first_answer(port: int, promql: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The first non-empty result of ``promql`` (waiting up to 60 s while Prometheus starts and
    scrapes); the test fails with Prometheus's log otherwise."""
    found: list[dict[str, Any]] = []

    def answered() -> bool:
        nonlocal found
        try:
            found = _query(port, promql)
        except httpx.HTTPError:
            return False
        return bool(found)

    assert wait_for(answered, timeout_s=60, interval_s=0.5), (tmp_path / "prometheus.log").read_text()
    return found


def test_a_real_prometheus_scrapes_it(tmp_path: Path) -> None:
    if not os.access(PROMETHEUS, os.X_OK):
        reason = f"{PROMETHEUS} is absent: install Debian's prometheus package (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    data = tmp_path / "lake"
    with Server(data, "--token", TOKEN) as srv:
        _feed(srv)
        assert wait_for(lambda: _stored(data) == 16, timeout_s=30)
        target = srv.http_url.removeprefix("http://")
        with running_prometheus(
            tmp_path,
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: traceflow\n"
            "    scrape_interval: 1s\n"
            f"    authorization: {{type: Bearer, credentials: {TOKEN}}}\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n",
        ) as port:
            total = first_answer(port, "sum(traceflow_records_accepted_total)", tmp_path)
            assert float(total[0]["value"][1]) == _stored(data) == 16
            up = _query(port, 'up{job="traceflow"}')
            assert [float(u["value"][1]) for u in up] == [1.0]
            teams = _query(port, "sum by (team) (traceflow_records_accepted_total)")
            assert {t["metric"].get("team", ""): float(t["value"][1]) for t in teams} == {
                k: float(v) for k, v in _team_rows(data).items()
            }
