"""The shared explorer in a real headless Chromium (Debian ``chromium`` + ``chromium-driver``, driven
by Selenium; skipped without them, a failure under ``CI=1``, as tests/test_report_browser.py): sign
in with a token, apply a filter (the URL keeps it and the figures change), drill down from a team to
its sessions to a session's timeline, with no error in the console (Vega's included)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.explorer_support import TOKENS, fill, tokens_file
from tests.test_report_browser import CHROMEDRIVER, CHROMIUM, _need_browser
from traceflow.store.lake import Lake

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The dashboard of a two-team lake, signed in by the tokens file, on a free loopback port."""
    import uvicorn

    from traceflow.dashboards.live import dashboard_app

    app = dashboard_app(fill(Lake(tmp_path / "data")), tokens=tokens_file(tmp_path))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the dashboard did not start within 30 s"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


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
        "--window-size=1200,900",
        # no network beyond the dashboard on loopback
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--no-proxy-server",
        "--disable-background-networking",
        "--disable-component-update",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def _loaded(driver: Any, old: Any = None) -> None:
    """Wait until the page that replaces ``old`` (its body) has loaded, and its script fetched and
    drew everything."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    if old is not None:
        WebDriverWait(driver, 60).until(expected_conditions.staleness_of(old))
    deadline = time.monotonic() + 60
    while driver.execute_script("return document.body && document.body.dataset.done") != "true":
        assert time.monotonic() < deadline, "the page did not finish within 60 s"
        time.sleep(0.1)


def _figure(driver: Any, key: str) -> str:
    text: str = driver.execute_script(
        f"return document.querySelector('#figures dd[data-key=\"{key}\"]').textContent"
    )
    return text


def _marks(driver: Any, chart: str) -> int:
    count: int = driver.execute_script(
        f"var el = document.getElementById('{chart}');"
        "return el.dataset.rendered === 'true' ? el.querySelectorAll('g.role-mark > *').length : -1"
    )
    return count


def test_sign_in_filter_and_drill_down_in_chromium(server: str, tmp_path: Path) -> None:
    _need_browser()
    from selenium.webdriver.common.by import By

    driver = _driver()
    try:
        driver.get(server)
        assert "/signin?next=" in driver.current_url  # not signed in: the sign-in form
        driver.find_element(By.ID, "token").send_keys(TOKENS["*"])
        old = driver.find_element(By.TAG_NAME, "body")
        driver.find_element(By.ID, "signin").submit()
        _loaded(driver, old)
        assert driver.current_url == server
        assert _figure(driver, "requests") == "25"  # 5 sessions of 5 requests, both teams
        assert _marks(driver, "chart-days") > 0 and _marks(driver, "chart-misses") > 0
        teams = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#teams td a")]
        assert teams == ["payments", "search"]
        choices = "return Array.from(document.querySelectorAll('#choices-team option')).map(o => o.value)"
        assert driver.execute_script(choices) == ["payments", "search"]  # the filter offers the teams

        # a filter: the URL keeps it, and the figures are the filtered ones
        driver.find_element(By.ID, "filter-project").send_keys("indexer")
        old = driver.find_element(By.TAG_NAME, "body")
        driver.find_element(By.ID, "apply").click()
        _loaded(driver, old)
        assert "project=indexer" in driver.current_url
        assert _figure(driver, "requests") == "10"  # the search team's 2 sessions
        assert [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#teams td a")] == ["search"]
        filtered = driver.current_url
        driver.get(filtered)  # the link reproduces the view
        _loaded(driver)
        assert _figure(driver, "requests") == "10"

        # drill down: the team -> its sessions -> one session's timeline
        old = driver.find_element(By.TAG_NAME, "body")
        driver.find_element(By.LINK_TEXT, "search").click()
        _loaded(driver, old)
        assert "/sessions?" in driver.current_url and "team=search" in driver.current_url
        assert "project=indexer" in driver.current_url
        sessions = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#sessions td a")]
        assert sessions == ["s2", "s1"]  # newest first
        old = driver.find_element(By.TAG_NAME, "body")
        driver.find_element(By.LINK_TEXT, "s1").click()
        _loaded(driver, old)
        assert "/session?" in driver.current_url and "id=s1" in driver.current_url
        causes = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#timeline tbody td:nth-child(11)")]
        assert causes == ["first_request", "hit", "hit", "ttl_expired", "hit"]
        assert _marks(driver, "chart-timeline") > 0
        out = Path(os.environ.get("TRACEFLOW_ARTIFACTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(out / "explorer_timeline.png"))
        logs = driver.get_log("browser")
    finally:
        driver.quit()
    errors = [entry for entry in logs if entry.get("level") in ("SEVERE", "ERROR", "WARNING")]
    assert errors == [], [e["message"] for e in errors]
