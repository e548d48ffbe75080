"""Every chart builds from a small frame and from an empty one (a "no data" chart), and its
Vega-Lite spec validates; the report data and HTML page hold together (no browser here: see
test_report_browser.py)."""

from __future__ import annotations

import datetime as dt
import importlib
import json
from pathlib import Path

import polars as pl
import pytest

from traceflow.dashboards import render
from traceflow.dashboards.render import CHARTS
from traceflow.dashboards.report_data import ReportOptions

T0 = dt.datetime(2026, 8, 1, 12, tzinfo=dt.UTC)
MIN = dt.timedelta(minutes=1)
KINDS = ["cache_read", "cache_write", "cold_input", "output"]

_COST = pl.DataFrame(
    {
        "dimension": ["day", "day", "day", "model", "model", "project", "agent"],
        "group": ["2026-08-01", "2026-08-01", "2026-08-02", "opus", "sonnet", "(unknown)", "claude-code"],
        "model": ["opus", "sonnet", "opus", "opus", "sonnet", "opus", "opus"],
        "cost_usd": [3.0, 1.0, 2.0, 5.0, 1.0, 6.0, 6.0],
        "cost_without_cache_usd": [20.0, 6.0, 11.0, 31.0, 6.0, 37.0, 37.0],
    }
)

SAMPLES: dict[str, pl.DataFrame] = {
    "cost": _COST,
    "savings": _COST,
    "token_mix": pl.DataFrame(
        {
            "dimension": ["overall"] * 4 + ["model"] * 8,
            "group": ["all"] * 4 + ["opus"] * 4 + ["sonnet"] * 4,
            "kind": KINDS * 3,
            "tokens": [9816, 152, 2, 30, 5000, 100, 1, 20, 4816, 52, 1, 10],
        }
    ),
    "tokens_over_time": pl.DataFrame(
        {
            "bucket_start": [T0, T0, T0 + MIN, T0 + MIN],
            "kind": ["cache_read", "output", "cache_read", "output"],
            "tokens_per_s": [1200.0, 4.0, 900.0, 3.5],
        }
    ),
    "reuse_ratio": pl.DataFrame(
        {"lo": [0.5, 0.9], "hi": [0.55, 0.95], "sessions": [1, 7], "tokens": [10, 900]}
    ),
    "gaps": pl.DataFrame(
        {
            "label": ["0 s-0.1 s", "5 min-10 min", ">= 1 h"],
            "lo_s": [0.0, 300.0, 3600.0],
            "hi_s": [0.1, 600.0, None],
            "gaps": [3, 2, 1],
            "human_gaps": [0, 2, 1],
            "agent_gaps": [3, 0, 0],
            "unknown_gaps": [0, 0, 0],
        }
    ),
    "ttl_cost": pl.DataFrame(
        {
            "ttl_s": [60.0, 300.0, 3600.0],
            "ttl": ["1m", "5m", "1h"],
            "requests": [10, 10, 10],
            "cost_usd": [3.0, 2.0, 2.4],
            "share_requests_expired": [0.4, 0.1, 0.01],
            "best": [False, True, False],
        }
    ),
    "misses": pl.DataFrame(
        {
            "cause": ["first_request", "model_switch", "compaction", "ttl_expired", "unexplained"],
            "misses": [5, 1, 2, 3, 1],
            "missed_tokens": [0, 10000, 8000, 30000, 6000],
            "miss_cost_usd": [0.0, 0.05, 0.04, 0.15, 0.03],
        }
    ),
    "context_growth": pl.DataFrame(
        {
            "session": ["a", "a", "a", "b"],
            "elapsed_min": [0.0, 1.0, 2.5, 0.0],
            "context_tokens": [3000, 5200, 900, 4000],
        }
    ),
    "concurrent_sessions": pl.DataFrame(
        {"bucket_start": [T0, T0 + MIN], "active_sessions": [2, 3], "new_sessions": [2, 1]}
    ),
    "working_set": pl.DataFrame(
        {"bucket_start": [T0, T0, T0 + MIN], "ttl": ["5m TTL", "1h TTL", "5m TTL"], "tokens": [1e5, 2e5, 5e4]}
    ),
    "hit_ratio": pl.DataFrame(
        {
            "capacity_bytes": [1e9, 1e10, 1e11, 8e10],
            "hit_ratio": [0.2, 0.6, 0.9, None],
            "token_hit_ratio": [0.15, 0.55, 0.88, None],
            "tier": [None, None, None, "HBM"],
        }
    ),
    "ttft": pl.DataFrame({"lo_ms": [100.0, 178.0], "hi_ms": [178.0, 316.0], "requests": [4, 9]}),
    "dwpd": pl.DataFrame({"day": ["2026-08-01", "2026-08-02"], "dwpd": [0.4, 1.3], "rated_dwpd": [1.0, 1.0]}),
}


def _texts(spec: dict[str, object]) -> str:
    return json.dumps(spec)


def test_every_chart_has_a_sample() -> None:
    modules = sorted(p.stem for p in Path(render.__file__).parent.glob("*.py") if not p.stem.startswith("_"))
    charts = sorted(c.key for c in CHARTS)
    assert sorted(set(modules) - {"render", "report_data", "live", "demo"}) == charts
    assert sorted(SAMPLES) == charts


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_chart_builds_and_validates(key: str) -> None:
    module = importlib.import_module(f"traceflow.dashboards.{key}")
    spec = module.chart(SAMPLES[key]).to_dict(validate=True)
    assert "No data" not in _texts(spec)
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_chart_from_an_empty_frame_says_no_data(key: str) -> None:
    module = importlib.import_module(f"traceflow.dashboards.{key}")
    for empty in (SAMPLES[key].clear(), pl.DataFrame()):
        spec = module.chart(empty).to_dict(validate=True)
        assert "No data" in _texts(spec) or "No time-to-first-token" in _texts(spec)


def test_gap_chart_draws_the_ttl_rules() -> None:
    from traceflow.dashboards import gaps

    text = _texts(gaps.chart(SAMPLES["gaps"]).to_dict())
    assert "5 min TTL" in text and "1 h TTL" in text and '"type": "log"' in text


def test_pick_resolution_keeps_series_small() -> None:
    from traceflow.dashboards.report_data import MAX_BUCKETS, pick_resolution

    assert pick_resolution(0) == 60
    assert pick_resolution(3600) == 60
    for span in (86_400.0, 30 * 86_400.0, 400 * 86_400.0):
        assert span / pick_resolution(span) <= MAX_BUCKETS


def test_html_document_is_self_contained() -> None:
    charts = [
        (c, importlib.import_module(f"traceflow.dashboards.{c.key}").chart(SAMPLES[c.key])) for c in CHARTS
    ]
    page = render.html_document(charts, ["Reuse ratio 98%."], "full </script> text", notes=["a note"])
    assert "<script src=" not in page and "<link " not in page
    assert page.count('class="chart"') == len(CHARTS)
    assert "full &lt;/script&gt; text" in page
    for c in CHARTS:
        assert c.caption.split(".")[0][:40].replace("'", "&#x27;") in page


def test_notes_and_captions_render_code_spans_not_backticks() -> None:
    assert render._text("see `traceflow size` <here>") == "see <code>traceflow size</code> &lt;here&gt;"
    assert render._text("an odd ` stays") == "an odd ` stays"
    charts = [
        (c, importlib.import_module(f"traceflow.dashboards.{c.key}").chart(SAMPLES[c.key])) for c in CHARTS
    ]
    page = render.html_document(charts, ["x"], "", notes=["the defaults of `traceflow size`"], alerts=["ok"])
    assert "`" not in page.split("<main>")[1].split('<script type="application/json"')[0]
    # the parts in order: cost first (with the alerts), capacity last
    cost, cache, capacity = (page.index(f'id="part-{p}"') for p in ("cost", "cache", "capacity"))
    assert cost < page.index('id="sec-alerts"') < page.index('id="sec-cost"') < cache < capacity
    assert capacity < page.index('id="sec-dwpd"') and page.index('id="sec-gaps"') < capacity


def test_misses_chart_colours_each_cause_alike_in_every_panel() -> None:
    """The cause colours are one fixed scale: a selection without some causes keeps the others'
    colours (a scale from the data drew ``unexplained`` in ``ttl_expired``'s colour)."""
    from traceflow.dashboards import misses

    frame = SAMPLES["misses"].with_columns(pl.lit(None, pl.String).alias("session"))
    sessions = pl.DataFrame(
        {
            "session": ["s1"],
            "cause": ["unexplained"],
            "misses": [2],
            "missed_tokens": [10],
            "miss_cost_usd": [0.1],
        }
    )
    spec = misses.chart(pl.concat([frame.select(sessions.columns), sessions])).to_dict(validate=True)
    scales = [
        json.dumps(e["color"]["scale"], sort_keys=True)
        for e in _encodings(spec)
        if "color" in e and e["color"].get("field") == "cause"
    ]
    assert len(scales) == 3 and len(set(scales)) == 1  # the two cause panels and the sessions panel
    scale = json.loads(scales[0])
    assert scale["domain"][scale["range"].index(scale["range"][6])] == "unexplained"
    assert (
        scale["range"][scale["domain"].index("unexplained")]
        != scale["range"][scale["domain"].index("ttl_expired")]
    )


def _encodings(spec: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if isinstance(spec, dict):
        if isinstance(spec.get("encoding"), dict):
            found.append(spec["encoding"])
        for v in spec.values():
            found += _encodings(v)
    elif isinstance(spec, list):
        for v in spec:
            found += _encodings(v)
    return found


def test_report_data_and_files_from_a_lake(tmp_path: Path) -> None:
    from traceflow.replay.synth import generate, preset
    from traceflow.store.lake import Lake

    lake = Lake(tmp_path / "data")
    lake.append("requests", generate(preset("agentic-coding"), 600, seed=3).lake_frame())
    options = ReportOptions(ttls=(300.0, 900.0, 3600.0), resolution_s=60)
    written = render.write_report(lake, None, options, html=tmp_path / "r.html", svg_dir=tmp_path / "svg")
    required = [c.key for c in CHARTS if not c.optional]
    assert [k for k in written["charts"] if k in required] == required
    assert written["requests"] > 50 and written["headline"]
    assert "outlive 15m" in " ".join(written["headline"])  # the report's options reach the summary
    assert written["html_bytes"] < 3_000_000
    svgs = sorted(Path(p).name for p in written["svg"])
    assert svgs == sorted(f"{k}.svg" for k in written["charts"])
    assert "<svg" in (tmp_path / "svg" / "gaps.svg").read_text()


def test_report_on_an_empty_lake(tmp_path: Path) -> None:
    from traceflow.store.lake import Lake

    written = render.write_report(Lake(tmp_path / "data"), html=tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert written["requests"] == 0
    assert "No data in this selection" in page
    assert "No requests in the selection." in page


def test_dashboard_serves_the_report_and_rebuilds_it_on_new_data(tmp_path: Path) -> None:
    import asyncio

    import httpx

    from traceflow.dashboards.live import dashboard_app
    from traceflow.replay.synth import generate, preset
    from traceflow.store.lake import Lake

    lake = Lake(tmp_path / "data")
    app = dashboard_app(lake, refresh_s=5)

    async def get(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get(path)

    before = asyncio.run(get("/version")).text
    page = asyncio.run(get("/report"))
    assert page.status_code == 200 and "No requests in the selection." in page.text
    assert 'data-refresh="5"' in page.text
    lake.append("requests", generate(preset("agentic-coding"), 300, seed=5).lake_frame())
    assert asyncio.run(get("/version")).text != before
    assert "No requests in the selection." not in asyncio.run(get("/report")).text
