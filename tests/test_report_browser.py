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
    import polars as pl

    from traceflow.replay.synth import generate, preset

    trace = generate(preset("agentic-coding"), 900, seed=7)
    frame = trace.lake_frame().with_columns(
        (pl.col("duration_ms").fill_null(1000.0) * 0.25 + 150.0).alias("ttft_ms")
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
