"""Draw the report's charts and write them: one self-contained offline HTML file, PNG and SVG files.

This is the only module in ``dashboards/`` that does I/O. The HTML inlines the Vega, Vega-Lite and
Vega-Embed libraries (vl-convert's bundle, cached on disk after the first build because bundling
takes seconds), so it opens with no network. :func:`write_report` is the entry point the CLI calls.
"""

from __future__ import annotations

import datetime as dt
import html as html_mod
import importlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceflow import config
from traceflow.dashboards.report_data import DEFAULT_REPORT_OPTIONS
from traceflow.paths import output_file, output_folder
from traceflow.replay.writing import atomic_write

if TYPE_CHECKING:
    import altair as alt
    import duckdb

    from traceflow.dashboards.report_data import ReportData, ReportOptions
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection


@dataclass(frozen=True)
class ChartDef:
    """A chart of the report: its module in ``dashboards/``, heading, how to read it, and whether it
    is shown only when its frame has data (the optional sizing and latency charts)."""

    key: str
    heading: str
    caption: str
    optional: bool = False
    #: The part of the report it is in (:data:`PARTS`).
    part: str = "cache"


#: The report's parts, in order, and their headings: first what the agents cost and why (for the people
#: paying), then how they use the cache, then capacity planning (for the people sizing a cache).
PARTS = {
    "cost": "What the agents cost, and why",
    "cache": "How the agents use the prompt cache",
    "capacity": "Capacity planning: a KV cache of your own",
}

CHARTS: tuple[ChartDef, ...] = (
    ChartDef(
        "cost",
        "Cost per day, model, project and agent",
        "What the selection's requests cost at the price list, per day, per model, per project and per "
        "agent; each bar is split by model and ends in its total. Requests without a model name are not "
        "priced.",
        part="cost",
    ),
    ChartDef(
        "savings",
        "The bill against no caching",
        "Per day, what the requests cost with prompt caching (blue: cache reads at the read price, "
        "writes at the write price) and what the same tokens would have cost with every input token "
        "priced as cold input (grey). The gap between the lines is what caching saved.",
        part="cost",
    ),
    ChartDef(
        "misses",
        "Cache misses by cause",
        "Requests that missed the prompt cache, by cause: what re-writing their reusable prefix instead "
        "of reading it cost (left), and how many there were (right). Causes: the first request of a "
        "stream, a model switch, a compaction, an idle gap past the TTL in force, a restart of the agent "
        "process (restart), a read that fell back to the static prefix (prefix_break), or nothing the "
        "data explains. Below, the sessions that lost the most: click one for its timeline.",
        part="cost",
    ),
    ChartDef(
        "ttl_cost",
        "TTL what-if",
        "What the selection would cost (blue, left axis) if the cache kept prefixes for each TTL, and the "
        "share of requests whose prefix would have expired (red, right axis). Longer TTLs expire less but "
        "writes cost more (1.25x base at 5 min, 2x at 1 h); the green diamond is the cheapest TTL.",
        part="cost",
    ),
    ChartDef(
        "token_mix",
        "Token mix",
        "Each bar is 100 % of the tokens of one group (all traffic, then per model, agent and day), "
        "split into "
        "cache reads (blue: context the provider already held), cache writes (orange: context stored for "
        "reuse), cold input and output. A long blue bar means the agent mostly re-reads context it sent "
        "before: that is what a KV cache saves.",
    ),
    ChartDef(
        "tokens_over_time",
        "Tokens per second by kind",
        "Stacked token throughput per time bucket. The blue band is the prefill a cache avoids; orange "
        "spikes are new context being written (new sessions, or prefixes that expired and were rebuilt).",
    ),
    ChartDef(
        "reuse_ratio",
        "Reuse ratio per session",
        "How many sessions read what share of their input from the cache. Mass at the right (90 %+) is "
        "normal for agents that resend their growing context; sessions at the left were short or kept "
        "losing their cache.",
    ),
    ChartDef(
        "gaps",
        "Idle gaps against the cache TTLs",
        "Time between a request and the previous one's end in the same session, on a log axis; red are "
        "human gaps (a new prompt), blue agent gaps (tool loops). Every gap right of a dashed TTL line "
        "finds its cached prefix expired under that TTL and must write it again.",
    ),
    ChartDef(
        "context_growth",
        "Context growth per session",
        "Context tokens of each request of the longest sessions against minutes since each session "
        "started. Steady climbs are agents appending tool results; drops are compactions or resets; flat "
        "stretches are idle time.",
    ),
    ChartDef(
        "ttft",
        "Time to first token",
        "Requests by their reported time to first token (log bins). Cache hits start fast; a second mode "
        "to the right is usually cold prefills of long contexts.",
        optional=True,
    ),
    ChartDef(
        "concurrent_sessions",
        "Concurrent sessions",
        "Sessions open at once (blue area: between a session's first request and its last) and new "
        "sessions per bucket (orange bars). Concurrency, not request rate, decides how many contexts a "
        "cache must hold.",
        part="capacity",
    ),
    ChartDef(
        "working_set",
        "KV working set over time",
        "The context of every session whose last request ended within the TTL: what a cache must hold "
        "to serve every returning request from memory, for a 5 min and a 1 h TTL (in GB when a KV size "
        "per token is given, else tokens).",
        part="capacity",
    ),
    ChartDef(
        "hit_ratio",
        "Hit ratio versus cache capacity",
        "An LRU prefix cache replayed over the most recent requests at every capacity: the share of KV "
        "blocks found, and of prefix tokens a server could reuse. Where the curve flattens, more memory "
        "buys little; dashed lines mark tiers when given. Bytes assume the KV size per token noted below.",
        optional=True,
        part="capacity",
    ),
    ChartDef(
        "dwpd",
        "SSD tier: drive writes per day",
        "If every cache write were stored on an SSD tier (the assumed array is noted below), how many "
        "times a day the drives would be overwritten, against their rated endurance (red line). Bars "
        "above the line wear drives out before their warranty.",
        optional=True,
        part="capacity",
    ),
)


def chart_for(key: str, frame: Any) -> alt.TopLevelMixin:
    """Build chart ``key`` (the module ``dashboards/<key>.py``) from its frame."""
    module = importlib.import_module(f"{__package__}.{key}")
    return module.chart(frame)  # type: ignore[no-any-return]


def build_charts(data: ReportData, include_empty: bool = False) -> list[tuple[ChartDef, alt.TopLevelMixin]]:
    """The report's charts, in order; optional charts without data are left out unless ``include_empty``.

    Altair checks each piece of a chart against the Vega-Lite schema as it is built (seconds per
    report); here it does not: tests/test_dashboards.py validates every chart's spec instead."""
    from altair.utils.schemapi import debug_mode

    out = []
    with debug_mode(False):
        for c in CHARTS:
            frame = data.frames.get(c.key)
            if c.part == "capacity" and not data.capacity:
                continue  # gathered without the capacity-planning part (ReportOptions.capacity)
            if c.optional and not include_empty and (frame is None or frame.height == 0):
                continue
            out.append((c, chart_for(c.key, frame)))
    return out


def _vl_version() -> str | None:
    import altair as alt
    import vl_convert as vlc

    major_minor = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return major_minor if major_minor in vlc.get_vegalite_versions() else None


_BUNDLE_LOCK = threading.Lock()


def javascript_bundle() -> str:
    """Vega + Vega-Lite + Vega-Embed as one script defining ``window.vegaEmbed`` (cached on disk)."""
    with _BUNDLE_LOCK:  # one build at a time: a background warm-up and the writer may race
        return _bundle()


@cache
def _bundle() -> str:
    import vl_convert as vlc

    version = _vl_version()
    vlc_version = getattr(vlc, "__version__", "0")
    path = config.user_cache_dir() / f"vega-bundle-{vlc_version}-{version or 'latest'}.js"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    bundle: str = vlc.javascript_bundle(None, version)  # type: ignore[arg-type]  # None: the default snippet
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, bundle.encode("utf-8"))
    except OSError:
        pass
    return bundle


def _text(value: str) -> str:
    """``value`` as HTML text: escaped, and its Markdown code spans (`` `traceflow size` ``) as code,
    never raw backticks."""
    parts = html_mod.escape(value).split("`")
    if len(parts) % 2 == 0:  # an odd backtick: no code span, the text as it is
        return html_mod.escape(value)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _script_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(value, separators=(",", ":"), default=str)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f2937;color:#fff;padding:18px 28px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#cbd5e1;font-size:13px}
main{max-width:1200px;margin:0 auto;padding:12px 24px 40px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:14px 18px;margin:16px 0}
h2{font-size:17px;margin:0 0 6px}h2.part{font-size:20px;margin:28px 0 4px}h3{font-size:16px;margin:0 0 6px}
code{font-size:12.5px;background:#f3f4f6;padding:0 3px;border-radius:3px}
.chart{overflow-x:auto}ul.alerts li{margin:4px 0}
p.caption{color:#444;font-size:13.5px;line-height:1.45;margin:0 0 10px}
ul.headline li{margin:5px 0;line-height:1.4}
pre{font-size:11.5px;overflow-x:auto;background:#f6f8fa;padding:10px}
.chart{min-height:60px}.error{color:#b91c1c}nav a{margin-right:10px;font-size:13px}
"""

#: Opens the session timeline a misses-chart link points at (a closed <details> would stay shut).
_OPEN_LINKED = """<script>(function () {
  function open() {
    var el = location.hash && document.getElementById(location.hash.slice(1));
    if (el && el.tagName === 'DETAILS') { el.open = true; el.scrollIntoView(); }
  }
  window.addEventListener('hashchange', open); open();
})();</script>"""

_JS = """
(function () {
  var specs = JSON.parse(document.getElementById('tf-specs').textContent);
  var pending = Object.keys(specs).length;
  document.body.dataset.chartsPending = String(pending);
  Object.keys(specs).forEach(function (id) {
    var el = document.getElementById(id);
    vegaEmbed(el, specs[id], {renderer: 'svg', actions: false}).then(function () {
      el.dataset.rendered = 'true';
    }).catch(function (err) {
      el.dataset.rendered = 'error';
      el.innerHTML = '<p class="error">This chart could not be drawn: ' + String(err) + '</p>';
      console.error('traceflow chart ' + id + ': ' + err);
    }).finally(function () {
      pending -= 1;
      document.body.dataset.chartsPending = String(pending);
      if (pending === 0) { document.body.dataset.chartsDone = 'true'; }
    });
  });
  var every = Number(document.body.dataset.refresh || 0);
  if (every > 0) {
    var seen = document.body.dataset.version;
    setInterval(function () {
      fetch('version', {cache: 'no-store'}).then(function (r) { return r.text(); }).then(function (v) {
        if (v && v !== seen) { window.location.reload(); }
      }).catch(function () {});
    }, every * 1000);
  }
})();
"""


def html_document(
    charts: Sequence[tuple[ChartDef, alt.TopLevelMixin]],
    headline: Sequence[str],
    summary_text: str,
    *,
    title: str = "traceflow report",
    subtitle: str = "",
    notes: Sequence[str] = (),
    refresh_s: float | None = None,
    version: str = "",
    timelines: Mapping[str, str] | None = None,
    alerts: Sequence[str] = (),
    headings: Mapping[str, str] | None = None,
) -> str:
    """One self-contained HTML page: headline, the charts with captions under the headings of their
    parts (:data:`PARTS`; ``headings``: a chart's heading when it names what it assumes), the
    ``alerts`` of ``traceflow check`` in the first part, the ``timelines`` (session id -> text) the
    misses chart links to, notes, and the full text summary."""
    from traceflow.analysis.timeline import anchor

    esc = html_mod.escape
    heads = {c.key: (headings or {}).get(c.key, c.heading) for c, _ in charts}
    timeline_items = "".join(
        f'<details id="{anchor(s)}"><summary>{esc(s)}</summary><pre>{esc(text)}</pre></details>'
        for s, text in (timelines or {}).items()
    )
    timeline_section = (
        f'<section id="timelines"><h2>Session timelines</h2>{timeline_items}</section>{_OPEN_LINKED}'
        if timeline_items
        else ""
    )
    # not validated against the Vega-Lite schema here (seconds per report): tests/test_dashboards.py
    # validates every chart's spec
    specs = {f"chart-{c.key}": chart.to_dict(validate=False) for c, chart in charts}
    nav = " ".join(f'<a href="#sec-{c.key}">{esc(heads[c.key])}</a>' for c, _ in charts)
    blocks = []
    for part, title in PARTS.items():
        inside = [c for c, _ in charts if c.part == part]
        if not inside and not (part == "cost" and alerts):
            continue
        blocks.append(f'<h2 class="part" id="part-{part}">{esc(title)}</h2>')
        if part == "cost" and alerts:
            items = "".join(f"<li>{esc(a)}</li>" for a in alerts)
            blocks.append(
                '<section id="sec-alerts"><h3>Alerts (<code>traceflow check</code>)</h3>'
                f'<ul class="alerts">{items}</ul></section>'
            )
        blocks += [
            f'<section id="sec-{c.key}"><h3>{esc(heads[c.key])}</h3><p class="caption">{_text(c.caption)}</p>'
            f'<div class="chart" id="chart-{c.key}" data-chart="{c.key}"></div></section>'
            for c in inside
        ]
    sections = "\n".join(blocks)
    bullets = "".join(f"<li>{_text(line)}</li>" for line in headline)
    note_items = "".join(f"<li>{_text(n)}</li>" for n in notes)
    refresh = f"{refresh_s:g}" if refresh_s else "0"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{_CSS}</style>
<script>{javascript_bundle()}</script>
</head>
<body data-refresh="{refresh}" data-version="{esc(version)}">
<header><h1>{esc(title)}</h1><p>{esc(subtitle)}</p></header>
<main>
<section id="summary"><h2>Summary</h2><ul class="headline">{bullets}</ul><nav>{nav}</nav></section>
{sections}
{timeline_section}
<section id="notes"><h2>Notes</h2><ul>{note_items}</ul>
<details><summary>All numbers (the text report)</summary><pre>{esc(summary_text)}</pre></details></section>
</main>
<script type="application/json" id="tf-specs">{_script_json(specs)}</script>
<script>{_JS}</script>
</body></html>
"""


def write_images(
    charts: Sequence[tuple[ChartDef, alt.TopLevelMixin]], directory: Path, fmt: str, scale: float = 2.0
) -> list[Path]:
    """Write each chart as ``<directory>/<key>.png`` or ``.svg`` with vl-convert (no browser needed)."""
    import vl_convert as vlc

    if fmt not in ("png", "svg"):
        raise ValueError(f"image format {fmt!r}: use png or svg")
    directory.mkdir(parents=True, exist_ok=True)
    version = _vl_version()
    kw: dict[str, Any] = {"vl_version": version} if version else {}
    paths = []
    for c, chart in charts:
        spec = chart.to_dict(validate=False)  # validated in tests/test_dashboards.py
        path = directory / f"{c.key}.{fmt}"
        if fmt == "png":
            path.write_bytes(vlc.vegalite_to_png(spec, scale=scale, **kw))
        else:
            path.write_text(vlc.vegalite_to_svg(spec, **kw), encoding="utf-8")
        paths.append(path)
    return paths


def _describe(selection: Selection | None) -> str:
    if selection is None:
        return "all requests"
    parts = []
    if selection.since:
        parts.append(f"since {selection.since.isoformat()}")
    if selection.until:
        parts.append(f"until {selection.until.isoformat()}")
    for name, values in selection.named_lists():
        if values:
            parts.append(f"{name} {', '.join(values)}")
    return "; ".join(parts) or "all requests"


def _local(when: dt.datetime, zone: str) -> str:
    """``when`` in ``zone`` (the selection's): ``2026-12-02 21:00 JST``, ``2026-12-02 12:00 UTC``."""
    from traceflow.store import zones

    aware = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    local = aware.astimezone(zones.tzinfo(zone))
    return f"{local:%Y-%m-%d %H:%M} {local.tzname() or zone}"


def _notes(data: ReportData, given_kv: bool, zone: str, said: str | None = None) -> list[str]:
    from traceflow.kv.sizing import DEFAULT_SSD as SSD

    kv = f"{data.kv_bytes_per_token:,.0f} B of KV per token"
    notes = [
        f"Time series use {data.resolution_s:g}-second buckets (chosen so a long selection stays small)"
        + (f" and start at {_local(data.series_since, zone)}" if data.series_since else "")
        + "; the headline's working set and arrivals use the buckets named beside them, as "
        "`traceflow report` and `traceflow working-set` do.",
        f"Byte figures assume {kv}"
        + (
            f" ({said})."
            if said
            else "."
            if given_kv
            else " (MiniMax-M2 at FP8; give --kv-model NAME for yours)."
        ),
        f"The SSD chart assumes {SSD.drives} drives of {SSD.drive_bytes / 1e12:g} TB in {SSD.raid}, "
        f"rated {SSD.rated_dwpd:g} DWPD (the defaults of `traceflow size`); a partial day is scaled to "
        "a full day at its observed rate.",
        "The TTL what-if prices tokens with the built-in price list (see `traceflow ttl --help`).",
    ]
    if not data.capacity:  # the KV and SSD assumptions are the capacity part's (report --capacity)
        notes = [notes[0], notes[3]]
    return notes


def capacity_headings(data: ReportData, given_kv: bool) -> dict[str, str]:
    """The capacity charts' headings, each naming the model and hardware it assumes."""
    from traceflow.kv.sizing import DEFAULT_SSD as SSD

    kv = f"{data.kv_bytes_per_token:,.0f} B of KV per token" + ("" if given_kv else ", MiniMax-M2 at FP8")
    return {
        "working_set": "KV working set over time"
        + (f" (at {kv})" if given_kv else " (in tokens: no KV size per token given)"),
        "hit_ratio": f"Hit ratio versus cache capacity (an LRU cache of 512-token blocks; {kv})",
        "dwpd": (
            f"SSD tier: drive writes per day ({SSD.drives} drives of {SSD.drive_bytes / 1e12:g} TB in "
            f"{SSD.raid}, rated {SSD.rated_dwpd:g} DWPD; {kv})"
        ),
    }


def render_html(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    options: ReportOptions = DEFAULT_REPORT_OPTIONS,
    *,
    refresh_s: float | None = None,
    version: str = "",
    title: str = "traceflow report",
    data: ReportData | None = None,
) -> tuple[str, list[tuple[ChartDef, alt.TopLevelMixin]], ReportData]:
    """Gather (:func:`.report_data.gather` with ``options``, unless ``data`` is that gathered
    already), draw and lay out the report; returns the page, its charts and their data."""
    from traceflow.analysis.report import headline, render_text
    from traceflow.dashboards.report_data import gather
    from traceflow.store.selection import zone_of

    if data is None:
        data = gather(con, selection, options)
    charts = build_charts(data)
    zone = zone_of(selection)
    now = _local(dt.datetime.now(dt.UTC), zone)
    subtitle = f"{data.requests:,} requests · {_describe(selection)} · generated {now}"
    page = html_document(
        charts,
        headline(data.report),
        render_text(data.report),
        title=title,
        subtitle=subtitle,
        notes=_notes(data, options.kv_bytes_per_token is not None, zone, options.kv_said),
        refresh_s=refresh_s,
        version=version,
        timelines=data.timelines,
        alerts=data.alerts,
        headings=capacity_headings(data, options.kv_bytes_per_token is not None),
    )
    return page, charts, data


def write_report(
    lake: Lake | duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    options: ReportOptions = DEFAULT_REPORT_OPTIONS,
    *,
    html: str | Path | None = None,
    png_dir: str | Path | None = None,
    svg_dir: str | Path | None = None,
    data: ReportData | None = None,
) -> dict[str, Any]:
    """Write the HTML report and/or one PNG/SVG per chart for ``selection``; returns what was written.

    ``data``: the report gathered already (:func:`~traceflow.dashboards.report_data.gather` of this
    selection and ``options``, as ``traceflow report`` prints it first): drawn as it is, not gathered again.

    ``lake`` is a :class:`traceflow.store.lake.Lake` (or an open connection with its views);
    ``options`` are those of ``traceflow report`` (:class:`~traceflow.dashboards.report_data.ReportOptions`;
    the charts coarsen the buckets of long selections).
    The result (JSON-ready) has ``requests``, ``charts`` (their keys, in order), ``headline``
    (the summary's sentences), and the paths written.
    """
    from traceflow.analysis.report import headline

    # the paths first: a directory given for the HTML file fails before the charts are drawn
    html_path = output_file(Path(html), "--html") if html is not None else None
    png_path = output_folder(Path(png_dir), "--png") if png_dir is not None else None
    svg_path = output_folder(Path(svg_dir), "--svg") if svg_dir is not None else None
    con = lake.connect() if hasattr(lake, "connect") else lake
    page, charts, data = render_html(con, selection, options, data=data)
    written: dict[str, Any] = {
        "requests": data.requests,
        "charts": [c.key for c, _ in charts],
        "headline": headline(data.report),
    }
    if html_path is not None:
        atomic_write(html_path, page.encode("utf-8"))  # a failed write leaves no partial file behind
        written["html"] = str(html_path)
        written["html_bytes"] = html_path.stat().st_size
    if png_path is not None:
        written["png"] = [str(p) for p in write_images(charts, png_path, "png")]
    if svg_path is not None:
        written["svg"] = [str(p) for p in write_images(charts, svg_path, "svg")]
    return written
