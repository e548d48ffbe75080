"""The explorer's HTML pages: sign-in, the overview (figures, tokens per day, misses by cause, the
teams), a team's sessions, and one session's timeline. The server writes the page with its filters
and the JSON API's query for them; the page's script fetches the API and draws the tables and the
charts of :mod:`.charts` (Vega-Embed, served from ``/static/vega.js``), so every figure on a page
is one an endpoint answers.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from traceflow.dashboards.explorer import views

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f2937;color:#fff;padding:14px 28px;display:flex;gap:18px;align-items:baseline}
header h1{margin:0;font-size:20px}header a{color:#cbd5e1}header form{margin-left:auto}
main{max-width:1200px;margin:0 auto;padding:8px 24px 40px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:12px 16px;margin:14px 0}
h2{font-size:16px;margin:0 0 8px}form.filters{display:flex;flex-wrap:wrap;gap:8px;align-items:end}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#555}
form.filters input{width:130px;padding:4px}dl.figures{display:flex;gap:28px;margin:0}
dl.figures dt{font-size:12px;color:#555}dl.figures dd{margin:0;font-size:20px;font-weight:600}
table{border-collapse:collapse;font-size:13px;width:100%}th,td{padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}tr:nth-child(even){background:#f6f8fa}
.error{color:#b91c1c}.crumbs{font-size:13px;margin:10px 0}.chart{width:100%;min-height:60px}
td.miss{color:#b91c1c;font-weight:600}#teams,#sessions,#timeline{overflow-x:auto}
"""

_JS = r"""
(function () {
  var body = document.body, api = body.dataset.api, view = body.dataset.view;
  var specs = JSON.parse(document.getElementById('tf-specs').textContent);
  var links = JSON.parse(document.getElementById('tf-links').textContent);
  function q(extra) { return extra + (api ? (extra.indexOf('?') < 0 ? '?' : '&') + api : ''); }
  function get(path) {
    return fetch(path, {credentials: 'same-origin', cache: 'no-store'}).then(function (r) {
      return r.json().then(function (j) {
        if (!r.ok) { throw new Error(j.error || ('HTTP ' + r.status)); }
        return j;
      });
    });
  }
  function fmt(v, key) {
    if (v === null || v === undefined) { return ''; }
    if (typeof v === 'number') {
      if (/ratio|share/.test(key)) { return (100 * v).toFixed(1) + ' %'; }
      if (/usd/.test(key)) { return '$' + v.toFixed(4); }
      return Number.isInteger(v) ? v.toLocaleString('en-US') : v.toFixed(2);
    }
    return String(v);
  }
  function fail(id, err) {
    var el = document.getElementById(id);
    if (el) { el.innerHTML = ''; var p = document.createElement('p'); p.className = 'error';
      p.textContent = String(err.message || err); el.appendChild(p); }
  }
  function figures(m) {
    Object.keys(links.figures).forEach(function (key) {
      var dd = document.querySelector('#figures dd[data-key="' + key + '"]');
      if (dd) { dd.textContent = fmt(m[key], key); }
    });
  }
  function draw(id, rows) {
    var spec = specs[id], el = document.getElementById(id);
    spec.datasets = {}; spec.datasets[links.rows] = rows;
    return vegaEmbed(el, spec, {renderer: 'svg', actions: false}).then(function () {
      el.dataset.rendered = 'true';
    });
  }
  function table(id, columns, rows, href) {
    var el = document.getElementById(id), t = document.createElement('table');
    var head = t.createTHead().insertRow();
    columns.forEach(function (c) {
      var th = document.createElement('th'); th.textContent = c; head.appendChild(th);
    });
    var tb = t.createTBody();
    rows.forEach(function (r) {
      var tr = tb.insertRow();
      columns.forEach(function (c, i) {
        var td = tr.insertCell(), text = fmt(r[c], c), to = i === 0 && href ? href(r) : null;
        if (c === 'cause' && r[c]) { td.className = 'miss'; }
        if (to) {
          var a = document.createElement('a');
          a.href = to; a.textContent = text || '(none)'; td.appendChild(a);
        } else { td.textContent = text || (i === 0 ? '(none)' : ''); }
      });
    });
    el.innerHTML = ''; el.appendChild(t);
    el.dataset.rows = String(rows.length);
  }
  var jobs = [];
  function job(id, p) { jobs.push(p.catch(function (err) { fail(id, err); })); }
  if (view !== 'session') {
    job('figures', get(q('api/mix')).then(figures));
  }
  Object.keys(links.choices).forEach(function (name) {
    var key = links.choices[name], list = document.getElementById('choices-' + name);
    if (!list || !document.getElementById('filter-' + name)) { return; }
    var win = body.dataset.window;
    var path = 'api/mix?by=' + encodeURIComponent(key) + (win ? '&' + win : '');
    job('choices-' + name, get(path).then(function (rows) {
      rows.forEach(function (r) {
        if (r[key] === null) { return; }
        var o = document.createElement('option'); o.value = r[key]; list.appendChild(o);
      });
    }));
  });
  if (view === 'overview') {
    job('chart-days', get(q('api/mix?by=day')).then(function (rows) { return draw('chart-days', rows); }));
    job('chart-misses', get(q('api/misses')).then(function (r) {
      var rows = Object.keys(r.by_cause).map(function (c) {
        var v = r.by_cause[c]; return {cause: c, misses: v.misses, missed_tokens: v.missed_tokens,
          miss_cost_usd: v.miss_cost_usd};
      });
      return draw('chart-misses', rows);
    }));
    job('teams', get(q('api/mix?by=' + encodeURIComponent(links.team_key))).then(function (rows) {
      table('teams', [links.team_key, 'requests', 'total_tokens', 'reuse_ratio', 'cost_usd'], rows,
        function (r) {
          var team = r[links.team_key];
          return team === null ? null : links.sessions + encodeURIComponent(team);
        });
    }));
  } else if (view === 'sessions') {
    job('sessions', get(q('api/sessions?list=1&limit=' + links.limit)).then(function (rows) {
      rows.sort(function (a, b) { return String(b.started_at).localeCompare(String(a.started_at)); });
      table('sessions', ['root_session_id', 'started_at', 'requests', 'duration_s', 'turns', 'reuse_ratio'],
        rows, function (r) { return links.session + encodeURIComponent(r.root_session_id); });
    }));
  } else if (view === 'session') {
    job('timeline', get('api/timeline/' + encodeURIComponent(body.dataset.session)).then(function (rows) {
      rows.forEach(function (r, i) { r.request = i + 1; });
      table('timeline', ['request', 'started_at', 'subagent', 'gap_s', 'model', 'cold_input_tokens',
        'cache_read_tokens', 'cache_write_5m_tokens', 'cache_write_1h_tokens', 'output_tokens', 'cause',
        'missed_tokens'], rows.map(function (r) {
          var o = Object.assign({}, r); o.cause = r.cause || 'hit'; return o;
        }));
      document.querySelectorAll('#timeline td.miss').forEach(function (td) {
        if (td.textContent === 'hit') { td.className = ''; }
      });
      return draw('chart-timeline', rows);
    }));
  }
  Promise.all(jobs).then(function () { body.dataset.done = 'true'; });
})();
"""

#: The overview's headline figures: the ``traceflow mix`` field -> its label.
FIGURES = {
    "requests": "requests",
    "total_tokens": "tokens",
    "reuse_ratio": "reuse ratio",
    "cost_usd": "cost (USD)",
}
#: Sessions a team's page lists at most (the API's ``limit``).
SESSIONS_LIMIT = 500


def _esc(value: str) -> str:
    return html.escape(value, quote=True)


def _script_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


def _document(title: str, body: str, *, attrs: str = "", scripts: str = "") -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head>\n"
        f"<body{attrs}>{body}{scripts}</body></html>\n"
    )


def signin(next_url: str, error: str = "") -> str:
    """The sign-in form: a token, posted to ``/signin``, then back to ``next_url``."""
    message = f'<p class="error" id="signin-error">{_esc(error)}</p>' if error else ""
    body = (
        "<header><h1>traceflow dashboard</h1></header><main><section><h2>Sign in</h2>"
        "<p>Give your team's token (from the tokens file of the collector, <code>serve --tokens</code>).</p>"
        f'{message}<form method="post" action="signin" id="signin">'
        f'<input type="hidden" name="next" value="{_esc(next_url)}">'
        '<label>token <input type="password" name="token" id="token" autocomplete="current-password" '
        'required autofocus></label> <button type="submit">Sign in</button></form></section></main>'
    )
    return _document("traceflow: sign in", body)


def _filter_form(view: str, filters: Mapping[str, str], team: str | None, session: str | None) -> str:
    fields = []
    for name in (*views.FILTERS, *views.WINDOW):
        if name == "team" and team is not None:
            fields.append(f'<label>team <input name="team-fixed" value="{_esc(team)}" disabled></label>')
            continue
        hint = " (7d, 2026-08-01)" if name in views.WINDOW else ""
        value = _esc(filters.get(name, ""))
        choices = f' list="choices-{name}"' if name in views.FILTERS else ""
        fields.append(
            f'<label>{name}{hint} <input name="{name}" id="filter-{name}" value="{value}"{choices}>'
            f'<datalist id="choices-{name}"></datalist></label>'
        )
    target = {"overview": ".", "sessions": "sessions", "session": "session"}[view]
    hidden = f'<input type="hidden" name="id" value="{_esc(session)}">' if session else ""
    return (
        f'<form class="filters" method="get" action="{target}" id="filters">{hidden}{"".join(fields)}'
        '<button type="submit" id="apply">Apply</button> <a href="?">clear</a></form>'
    )


def explorer(
    view: str,
    filters: Mapping[str, str],
    charts: Mapping[str, dict[str, Any]],
    *,
    team: str | None,
    signed_in: bool,
    session: str | None = None,
) -> str:
    """A page of the explorer: ``view`` is ``overview``, ``sessions`` (the sessions of the filters:
    a team's, from the overview's teams table) or ``session`` (the timeline of ``session``)."""
    from traceflow.dashboards.explorer.api import TEAM_KEY
    from traceflow.dashboards.explorer.charts import ROWS

    shown = dict(filters)
    crumbs = [f'<a href="{_esc(views.link(".", shown))}">overview</a>']
    if view in ("sessions", "session"):
        name = shown.get("team") or team or "all teams"
        crumbs.append(f'<a href="{_esc(views.link("sessions", shown))}">sessions of {_esc(name)}</a>')
    if view == "session" and session is not None:
        crumbs.append(f"session <code>{_esc(session)}</code>")
    figures = "".join(f'<div><dt>{label}</dt><dd data-key="{k}">…</dd></div>' for k, label in FIGURES.items())
    sections = ""
    if view != "session":
        sections += f'<section><h2>In this view</h2><dl class="figures" id="figures">{figures}</dl></section>'
    if view == "overview":
        sections += (
            '<section><h2>Tokens per day</h2><div class="chart" id="chart-days"></div></section>'
            '<section><h2>Cache misses by cause</h2><div class="chart" id="chart-misses"></div></section>'
            "<section><h2>Teams</h2><p>Click a team for its sessions "
            f'(or see <a href="{_esc(views.link("sessions", shown))}" id="all-sessions">all the view\'s '
            'sessions</a>).</p><div id="teams"></div></section>'
        )
    elif view == "sessions":
        sections += (
            f"<section><h2>Sessions</h2><p>The first {SESSIONS_LIMIT} sessions of the view, newest first; "
            'click one for its timeline.</p><div id="sessions"></div></section>'
        )
    else:
        sections += (
            "<section><h2>Timeline</h2><p>The session's requests in order (its sub-agents' too): tokens "
            'by kind, and each cache miss with its cause.</p><div class="chart" id="chart-timeline"></div>'
            '<div id="timeline"></div></section>'
        )
    others = {k: v for k, v in shown.items() if k != "team"}
    page_links = {
        "figures": FIGURES,
        "rows": ROWS,
        "team_key": TEAM_KEY,
        "limit": SESSIONS_LIMIT,
        "choices": {name: key for name, key in views.FILTERS.items() if not (name == "team" and team)},
        "sessions": views.link("sessions", others) + ("&" if others else "?") + "team=",
        "session": views.link("session", shown) + ("&" if shown else "?") + "id=",
    }
    signout = (
        '<form method="post" action="signout"><button type="submit" id="signout">Sign out</button></form>'
        if signed_in
        else ""
    )
    who = f"team {_esc(team)}" if team is not None else "all teams"
    report = _esc(views.link("report", shown))
    body = (
        f'<header><h1>traceflow dashboard</h1><span>{who}</span><a href="{report}">full report</a>'
        f"{signout}</header><main>{_filter_form(view, shown, team, session)}"
        f'<nav class="crumbs">{" › ".join(crumbs)}</nav>{sections}</main>'
        f'<script type="application/json" id="tf-specs">{_script_json(dict(charts))}</script>'
        f'<script type="application/json" id="tf-links">{_script_json(page_links)}</script>'
    )
    attrs = (
        f' data-view="{view}" data-api="{_esc(urlencode(views.api_params(shown)))}"'
        f' data-session="{_esc(session or "")}"'
        f' data-window="{_esc(urlencode([(k, v) for k, v in shown.items() if k in views.WINDOW]))}"'
    )
    return _document(
        "traceflow dashboard",
        body,
        attrs=attrs,
        scripts=f'<script src="static/vega.js"></script><script>{_JS}</script>',
    )
