"""The HTML report in a real headless Chromium (Debian ``chromium`` + ``chromium-driver``, driven by
Selenium with the system chromedriver): offline, no console errors, every chart drawn with marks,
and a PNG screenshot kept as an artefact (``$TRACEFLOW_ARTIFACTS``, else the test's tmp dir)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from traceflow.store.lake import Lake

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")


def _need_browser() -> None:
    missing = [n for n, p in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not p]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        message = (
            f"missing {', '.join(missing)}: apt-get install -y chromium chromium-driver; pip install selenium"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _lake(tmp_path: Path) -> Lake:
    """A small agentic-coding lake, with a time to first token so the optional TTFT chart shows too."""
    import datetime as dt

    import polars as pl

    from traceflow.replay.synth import generate, preset

    start = dt.datetime(2026, 8, 1, 15, 50, tzinfo=dt.UTC)  # absolute UTC times: the axes show 24-hour clock
    trace = generate(preset("agentic-coding"), 900, seed=7, start_us=int(start.timestamp()) * 1_000_000)
    frame = trace.lake_frame().with_columns(
        (pl.col("duration_ms").fill_null(1000.0) * 0.25 + 150.0).alias("ttft_ms")
    )
    # some requests without a model: the token-mix chart must label them "(unknown)", not leave a blank row
    frame = frame.with_columns(
        pl.when(pl.int_range(pl.len()) % 17 == 0).then(None).otherwise(pl.col("model")).alias("model")
    )
    lake = Lake(tmp_path / "data")
    lake.append("requests", frame)
    return lake


def _driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM  # type: ignore[assignment]
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1100,900",
        # no network: every host resolves to nothing, and no proxy is tried
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--no-proxy-server",
        "--disable-background-networking",
        "--disable-component-update",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
    )
    return driver


MARKS_JS = """
return Array.from(document.querySelectorAll('.chart')).map(function (el) {
  var svg = el.querySelector('svg');
  var canvas = el.querySelector('canvas');
  var marks = svg ? svg.querySelectorAll('g.role-mark > *').length : 0;
  return {key: el.dataset.chart, rendered: el.dataset.rendered || '', svg: !!svg, canvas: !!canvas,
          marks: marks, text: el.textContent.slice(0, 200)};
});
"""


GEOMETRY_JS = """
function boxes(nodes) {
  // labels Vega hid (labelOverlap) have opacity 0 and are not drawn
  return Array.from(nodes).filter(function (t) {
    return t.textContent !== '' && (t.getAttribute('opacity') || '1') !== '0';
  }).map(function (t) {
    var r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  });
}
var out = {};
document.querySelectorAll('.chart').forEach(function (el) {
  var rects = Array.from(el.querySelectorAll('g.mark-rect.role-mark path')).map(function (p) {
    var r = p.getBBox();
    return {width: r.width, height: r.height};
  });
  out[el.dataset.chart] = {
    rects: rects,
    xLabels: boxes(el.querySelectorAll('g.role-axis[aria-label^="X-axis"] g.role-axis-label text')),
    yLabels: boxes(el.querySelectorAll('g.role-axis[aria-label^="Y-axis"] g.role-axis-label text')),
    texts: Array.from(el.querySelectorAll('g.role-axis-label text')).map(function (t) {
      return t.textContent;
    })
  };
});
return out;
"""


#: Per chart: its legend's entries (label -> symbol colour) and its bars' fill and ARIA label (which
#: names the bar's fields, "cause: ttl_expired" among them).
LEGEND_JS = """
var out = {};
document.querySelectorAll('.chart').forEach(function (el) {
  var symbols = Array.from(el.querySelectorAll('g.role-legend-symbol path'));
  var labels = Array.from(el.querySelectorAll('g.role-legend-label text'));
  out[el.dataset.chart] = {
    legend: labels.map(function (t, i) {
      return [t.textContent, symbols[i] ? symbols[i].getAttribute('fill') : null];
    }),
    bars: Array.from(el.querySelectorAll('g.mark-rect.role-mark path')).map(function (p) {
      return [p.getAttribute('fill'), p.getAttribute('aria-label') || ''];
    }),
    titles: Array.from(el.querySelectorAll('g.role-title text')).map(function (t) { return t.textContent; })
  };
});
out._parts = Array.from(document.querySelectorAll('h2.part, section h3')).map(function (h) {
  return h.textContent;
});
return out;
"""


def _legend_matches(chart: dict[str, Any], field: str) -> list[tuple[str, str, str]]:
    """Bars whose ``field`` value (read off their ARIA label) is drawn in a colour other than its
    legend entry's: (value, bar colour, legend colour)."""
    import re

    legend = dict((label, color) for label, color in chart["legend"])
    wrong = []
    for fill, label in chart["bars"]:
        m = re.search(rf"\b{field}: ([^;]+)", label)
        if m and m.group(1) in legend and legend[m.group(1)] != fill:
            wrong.append((m.group(1), fill, legend[m.group(1)]))
    return wrong


def _overlaps(labels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    found = []
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            apart_x = a["right"] - 0.5 <= b["left"] or b["right"] - 0.5 <= a["left"]
            apart_y = a["bottom"] - 0.5 <= b["top"] or b["bottom"] - 0.5 <= a["top"]
            if not (apart_x or apart_y):
                found.append((a["text"], b["text"]))
    return found


def _check_geometry(geometry: dict[str, Any]) -> None:
    """What is drawn: histogram bars from zero, 24-hour UTC ticks, labels apart, "(unknown)" models."""
    import re

    for key in ("reuse_ratio", "ttft"):
        rects = geometry[key]["rects"]
        assert rects, key
        # bars stand on the axis: the tallest is far taller than a strip, none is negative or zero-width
        assert max(r["height"] for r in rects) > 20, (key, rects[:5])
        assert all(r["height"] >= 0 and r["width"] > 0 for r in rects), key
    for key in ("tokens_over_time", "working_set", "concurrent_sessions"):
        labels = [x["text"] for x in geometry[key]["xLabels"]]
        assert labels, key
        for text in labels:  # "15:50" or a date at midnight, never "03 PM"
            assert re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d|[A-Z][a-z]{2} \d\d", text), (key, text)
    for key, chart in geometry.items():
        assert _overlaps(chart["xLabels"]) == [], key
        assert _overlaps(chart["yLabels"]) == [], key
    mix = geometry["token_mix"]["texts"]
    assert "(unknown)" in mix and "" not in mix


def test_report_renders_offline_in_chromium(tmp_path: Path) -> None:
    _need_browser()
    from traceflow.dashboards.render import CHARTS, write_report

    html = tmp_path / "report.html"
    written = write_report(_lake(tmp_path), html=html)
    page = html.read_text()
    assert "<script src=" not in page and "cdn.jsdelivr" not in page
    assert written["charts"] == [c.key for c in CHARTS]  # the optional charts too: the lake has their data

    driver = _driver()
    try:
        driver.get(html.as_uri())
        deadline = time.monotonic() + 60
        while driver.execute_script("return document.body.dataset.chartsDone") != "true":
            assert time.monotonic() < deadline, "the charts did not finish rendering within 60 s"
            time.sleep(0.25)
        charts = driver.execute_script(MARKS_JS)
        geometry = driver.execute_script(GEOMETRY_JS)
        legends = driver.execute_script(LEGEND_JS)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1100, min(int(height) + 100, 16000))
        out = Path(os.environ.get("TRACEFLOW_ARTIFACTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        shot = out / "report_screenshot.png"
        assert driver.save_screenshot(str(shot))
        logs = driver.get_log("browser")
    finally:
        driver.quit()

    assert shot.stat().st_size > 10_000
    assert [c["key"] for c in charts] == written["charts"]
    for c in charts:
        assert c["rendered"] == "true", c
        assert c["svg"] or c["canvas"], c
        assert c["marks"] > 0, c
        assert "No data" not in c["text"], c
    errors = [entry for entry in logs if entry.get("level") in ("SEVERE", "ERROR")]
    assert errors == []
    _check_geometry(geometry)
    # legends match their bars: every cause in the legend's colour, in each panel of the misses chart
    misses = legends["misses"]
    assert {label for label, _ in misses["legend"]} >= {"ttl_expired", "unexplained"}
    assert len({color for _, color in misses["legend"]}) == len(misses["legend"])  # a colour per cause
    assert any("cause: " in label for _, label in misses["bars"])
    assert _legend_matches(misses, "cause") == []
    # the cost part first (cost per day, model and project), the capacity part after it, titled with
    # what it assumes
    parts = legends["_parts"]
    assert parts[0] == "What the agents cost, and why" and parts[1].startswith("Alerts")
    assert parts[2] == "Cost per day, model, project and agent"
    capacity = parts.index("Capacity planning: a KV cache of your own")
    assert capacity > parts.index("Cache misses by cause")
    assert any("MiniMax-M2 at FP8" in p and "drives of" in p for p in parts[capacity:])
    assert any(p.startswith("Hit ratio") and "MiniMax-M2 at FP8" in p for p in parts[capacity:])
    titles = legends["cost"]["titles"]
    assert {"Cost per day", "Cost per model", "Cost per project", "Cost per agent"} <= set(titles), titles
