"""``traceflow demo`` runs end to end (a real collector, OTLP through the OpenTelemetry SDK, the
bundled examples, the analyses) and its report holds every chart."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from traceflow.dashboards.demo import examples_dir
from traceflow.dashboards.render import CHARTS
from traceflow.store.lake import Lake

pytestmark = pytest.mark.slow


def test_demo_writes_a_report_with_every_chart(
    cli: Callable[..., tuple[int, str, str]], lake: Lake, tmp_path: Path
) -> None:
    html = tmp_path / "demo.html"
    t0 = time.monotonic()
    code, out, err = cli("demo", "--html", str(html), "--minutes", "15", "--stream-seconds", "4", "--quiet")
    wall = time.monotonic() - t0
    assert code == 0, err
    assert wall < 60, f"the demo took {wall:.0f} s"
    page = html.read_text()
    shown = re.findall(r'data-chart="([a-z_]+)"', page)
    # every chart; the TTFT one only appears for data with a time to first token, which Claude Code's
    # api_request events do not carry
    assert shown == [c.key for c in CHARTS if c.key != "ttft"]
    assert "No data in this selection" not in page
    assert "Reuse ratio" in out and "HTML report:" in out
    # the streamed traffic arrived through the collector, the examples through the importers
    con = lake.connect(["requests"])
    sources = dict(con.execute("SELECT source, count(*) FROM requests GROUP BY source").fetchall())
    assert sources.get("otlp", 0) > 100
    if examples_dir() is not None:
        assert len(sources) >= 2


def test_demo_writes_its_report_beside_its_lake_and_says_where(
    cli: Callable[..., tuple[int, str, str]], lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --out the report goes beside the lake, never into the current directory."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    args = ("demo", "--minutes", "5", "--stream-seconds", "1", "--quiet", "--no-examples")
    code, out, err = cli(*args)  # --data: the report goes into the lake's folder
    assert code == 0, err
    assert list(cwd.iterdir()) == []
    report = lake.root / "traceflow-demo.html"
    assert report.is_file() and f"HTML report: {report} " in out
    code, out, err = cli(*args, data=False)  # a temporary lake: removed, the report beside it kept
    assert code == 0, err
    assert list(cwd.iterdir()) == []
    shown = Path(re.search(r"HTML report: (\S+) ", out).group(1))  # type: ignore[union-attr]
    assert shown.is_file() and shown.name == "traceflow-demo.html" and shown.is_absolute()
    assert sorted(p.name for p in shown.parent.iterdir()) == ["traceflow-demo.html"]
    shutil.rmtree(shown.parent)
