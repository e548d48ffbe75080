"""``check --metrics-file`` and ``--pushgateway`` (docs/forensics.md#prometheus-gauges): the gauges parse
with prometheus_client's own text parser, hold the figures ``check --format json`` prints (and, for the
designed drop of tests/test_misses.py, the figures worked out by hand there), and a real Prometheus
scrapes the file from a static HTTP server, as node_exporter's textfile collector would serve it.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import os
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.test_collectors_prometheus import PROMETHEUS, _query, first_answer, running_prometheus
from tests.test_misses import BASELINE_REUSE, WINDOW_ARGS, _health_lake
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
CHECKS = {"reuse_drop", "unexplained_misses", "version_regression", "write_amplification", "silence"}
PERIOD_KEYS = {
    "traceflow_cache_requests": "requests",
    "traceflow_cache_reuse_ratio": "reuse_ratio",
    "traceflow_cache_write_amplification": "write_amplification",
    "traceflow_cache_misses": "misses",
    "traceflow_cache_unexplained_misses": "unexplained_misses",
    "traceflow_cache_unexplained_share": "unexplained_share",
}

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def _samples(text: str) -> Samples:
    """name -> {sorted labels: value}, through prometheus_client's parser (a parse error raises)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _one(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get(name, {}).get(tuple(sorted(labels.items())))


def _seconds(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _assert_equal_to_json(samples: Samples, got: dict[str, Any], where: str) -> None:
    for name, key in PERIOD_KEYS.items():
        for period in ("window", "baseline"):
            value = got[period][key]
            assert _one(samples, name, where=where, period=period) == (
                None if value is None else pytest.approx(value)
            ), (name, period)
    for period in ("window", "baseline"):
        start = _one(samples, "traceflow_cache_period_start_timestamp_seconds", where=where, period=period)
        assert start == _seconds(got[period]["since"])
        end = _one(samples, "traceflow_cache_period_end_timestamp_seconds", where=where, period=period)
        assert end == _seconds(got[period]["until"])
    for name, key in (
        ("traceflow_cache_reuse_drop", "reuse_drop"),
        ("traceflow_cache_unexplained_rise", "unexplained_rise"),
    ):
        value = got["window"].get(key)  # absent with nothing to compare
        assert _one(samples, name, where=where) == (None if value is None else pytest.approx(value))
    fired = {f["check"] for f in got["fired"]}
    thresholds = {
        "reuse_drop": "max_drop",
        "unexplained_misses": "max_unexplained_rise",
        "version_regression": "max_version_rise",
        "write_amplification": "max_amplification_rise",
        "silence": "min_requests",
    }
    for check in CHECKS:  # every check has a series, 0 or 1
        assert _one(samples, "traceflow_cache_alert", where=where, check=check) == (check in fired)
        limit = got["thresholds"][thresholds[check]]
        assert _one(samples, "traceflow_cache_threshold", where=where, check=check) == limit
    for v in got["versions"]:
        assert (
            _one(samples, "traceflow_cache_version_requests", where=where, version=v["version"])
            == v["requests"]
        )
    # nothing else: one series per figure, all with the where label
    assert all(dict(labels)["where"] == where for series in samples.values() for labels in series)


def test_the_gauges_are_the_checks_figures(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    _health_lake(tmp_path / "logs", lake, drop=True)
    folder = tmp_path / "textfile"
    folder.mkdir()
    prom = folder / "traceflow.prom"
    prom.write_text("stale\n")  # replaced whole
    before = dt.datetime.now(dt.UTC).timestamp()
    code, out, err = cli(
        "check", *WINDOW_ARGS, "--format", "json", "--where", "model!=none", "--metrics-file", str(prom)
    )
    assert code == 4, err
    got = json.loads(out)
    samples = _samples(prom.read_text())
    _assert_equal_to_json(samples, got, "model!=none")
    # the designed drop's figures, by hand in tests/test_misses.py
    assert _one(samples, "traceflow_cache_requests", where="model!=none", period="baseline") == 21
    assert _one(samples, "traceflow_cache_requests", where="model!=none", period="window") == 3
    assert _one(
        samples, "traceflow_cache_reuse_ratio", where="model!=none", period="baseline"
    ) == pytest.approx(BASELINE_REUSE)
    assert _one(samples, "traceflow_cache_reuse_ratio", where="model!=none", period="window") == 0.0
    fired = {c for c in CHECKS if _one(samples, "traceflow_cache_alert", where="model!=none", check=c)}
    assert fired == {"reuse_drop", "unexplained_misses"}
    ran = _one(samples, "traceflow_cache_check_timestamp_seconds", where="model!=none")
    assert ran is not None and before <= ran <= dt.datetime.now(dt.UTC).timestamp()
    assert sorted(p.name for p in folder.iterdir()) == ["traceflow.prom"]  # no temporary file left

    # looser thresholds: nothing fires, and the same file now says 0 for every check
    loose = ("--max-drop", "1", "--max-unexplained-rise", "1")
    code, out, err = cli("check", *WINDOW_ARGS, *loose, "--format", "json", "--metrics-file", str(prom))
    assert code == 0, err
    got = json.loads(out)
    samples = _samples(prom.read_text())
    _assert_equal_to_json(samples, got, "")
    assert {c: _one(samples, "traceflow_cache_alert", where="", check=c) for c in CHECKS} == dict.fromkeys(
        CHECKS, 0
    )
    assert _one(samples, "traceflow_cache_threshold", where="", check="reuse_drop") == 1


def test_a_figure_without_a_value_has_no_series(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    _health_lake(tmp_path / "logs", lake, drop=False)
    prom = tmp_path / "empty.prom"
    # a window with no requests: the silence check fires, the ratios are null in the JSON
    code, out, err = cli(
        "check",
        "--since",
        "2026-03-12",
        "--until",
        "2026-03-12",
        "--format",
        "json",
        "--metrics-file",
        str(prom),
    )
    assert code == 4, err
    got = json.loads(out)
    assert got["window"]["reuse_ratio"] is None and [f["check"] for f in got["fired"]] == ["silence"]
    samples = _samples(prom.read_text())
    _assert_equal_to_json(samples, got, "")
    assert _one(samples, "traceflow_cache_reuse_ratio", where="", period="window") is None
    assert _one(samples, "traceflow_cache_requests", where="", period="window") == 0


def test_a_bad_target_is_refused_before_the_check_runs(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    code, _, err = cli("check", *WINDOW_ARGS, "--metrics-file", str(tmp_path / "no" / "such.prom"))
    assert code == 2 and "does not exist" in err
    code, _, err = cli("check", *WINDOW_ARGS, "--metrics-file", str(tmp_path))
    assert code == 2 and "is a folder" in err
    code, _, err = cli("check", *WINDOW_ARGS, "--pushgateway", "pushgateway:9091")
    assert code == 2 and "is not an http:// or https:// URL" in err


def _grouping_key(path: str) -> dict[str, str]:
    """The labels of a Pushgateway URL path, as its README reads them: ``/metrics/NAME/VALUE/...``,
    a value URL-escaped, or base64url after ``NAME@base64``."""
    parts = path.split("/")
    assert parts[:2] == ["", "metrics"], path
    out = {}
    for name, value in zip(parts[2::2], parts[3::2], strict=True):
        if name.endswith("@base64"):
            out[name.removesuffix("@base64")] = base64.urlsafe_b64decode(value).decode()
        else:
            out[name] = urllib.parse.unquote(value)
    return out


class _Gateway(http.server.BaseHTTPRequestHandler):
    """What a Pushgateway receives: ``PUT /metrics/job/<job>/<label>/<value>`` with a text body."""

    puts: ClassVar[list[tuple[str, str, str]]] = []

    def do_PUT(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).puts.append((self.path, self.headers["Content-Type"], self.rfile.read(length).decode()))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[str]:
    _Gateway.puts = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_pushgateway_gets_the_same_gauges(lake: Lake, tmp_path: Path, cli: Cli, gateway: str) -> None:
    _health_lake(tmp_path / "logs", lake, drop=True)
    code, out, err = cli(
        "check", *WINDOW_ARGS, "--format", "json", "--where", "model!=x", "--pushgateway", gateway
    )
    assert code == 4, err
    assert len(_Gateway.puts) == 1
    path, content_type, body = _Gateway.puts[0]
    assert _grouping_key(path) == {"job": "traceflow_check", "where": "model!=x"}
    assert content_type.startswith("text/plain")
    _assert_equal_to_json(_samples(body), json.loads(out), "model!=x")
    # an unreachable gateway is reported; the alert's status stays
    code, _, err = cli("check", *WINDOW_ARGS, "--pushgateway", "http://127.0.0.1:9")
    assert code == 4 and "cannot reach the Pushgateway" in err


class _Static(http.server.SimpleHTTPRequestHandler):
    """Serves a folder's ``*.prom`` files as Prometheus text (what node_exporter would add them to)."""

    extensions_map: ClassVar[dict[str, str]] = {".prom": "text/plain; version=0.0.4; charset=utf-8"}

    def log_message(self, *args: Any) -> None:
        pass


def test_a_real_prometheus_scrapes_the_file(lake: Lake, tmp_path: Path, cli: Cli) -> None:
    if not os.access(PROMETHEUS, os.X_OK):
        reason = f"{PROMETHEUS} is absent: install Debian's prometheus package (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    _health_lake(tmp_path / "logs", lake, drop=True)
    folder = tmp_path / "textfile"
    folder.mkdir()
    code, out, err = cli(
        "check", *WINDOW_ARGS, "--format", "json", "--metrics-file", str(folder / "traceflow.prom")
    )
    assert code == 4, err
    got = json.loads(out)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Static(*a, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with running_prometheus(
            tmp_path,
            "scrape_configs:\n"
            "  - job_name: textfile\n"
            "    scrape_interval: 1s\n"
            "    metrics_path: /traceflow.prom\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{server.server_address[1]}']}}]\n",
        ) as port:
            alerts = first_answer(port, "traceflow_cache_alert == 1", tmp_path)
            assert sorted(a["metric"]["check"] for a in alerts) == sorted(f["check"] for f in got["fired"])
            ratio = _query(port, 'traceflow_cache_reuse_ratio{period="baseline"}')
            assert [float(r["value"][1]) for r in ratio] == [pytest.approx(got["baseline"]["reuse_ratio"])]
    finally:
        server.shutdown()
        server.server_close()
