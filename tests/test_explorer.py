"""The shared explorer (``traceflow dashboard --host --tokens``, traceflow/dashboards/explorer): sign-in,
a team's viewer reading only its team's rows, and the JSON API answering what the CLI prints.

The team figures are computed here in plain DuckDB SQL over the lake's Parquet files; the API's
documents are compared, text for text, with ``traceflow COMMAND --format json``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import httpx
import pytest

from tests.explorer_support import TEAMS, TOKENS, fill, tokens_file
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def teams(lake: Lake) -> Lake:
    return fill(lake)


@pytest.fixture
def app(teams: Lake, tmp_path: Path) -> Any:
    from traceflow.dashboards.live import dashboard_app

    return dashboard_app(teams, tokens=tokens_file(tmp_path))


def _get(app: Any, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get(path, headers=headers, **kw)

    return asyncio.run(run())


def _per_day(lake: Lake, team: str | None) -> list[tuple[Any, ...]]:
    """Requests and token sums per UTC day of ``team``'s rows (None: every row), in plain SQL."""
    files = f"'{lake.root}/v1/requests/*/*.parquet'"
    text = f"""
        SELECT strftime(started_at AT TIME ZONE 'UTC', '%Y-%m-%d') AS day, count(*),
               sum(cold_input_tokens), sum(cache_read_tokens), sum(cache_write_tokens), sum(output_tokens)
        FROM read_parquet({files})
        WHERE ? IS NULL OR json_extract_string(attributes, '$.resource."team.id"') = ?
        GROUP BY day ORDER BY day"""
    return [tuple(r) for r in duckdb.connect().execute(text, [team, team]).fetchall()]


_KINDS = ("day", "requests", "cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def test_without_a_token_the_api_is_401_and_a_page_is_the_sign_in_form(app: Any) -> None:
    for path in ("/api/mix", "/api/sessions?list=1", "/api/misses", "/api/timeline/p1", "/version"):
        assert _get(app, path).status_code == 401, path
        assert _get(app, path, "not-a-token-of-the-file-at-all").status_code == 401, path
    got = _get(app, "/api/mix")
    assert got.headers["www-authenticate"].startswith("Bearer") and "Bearer" in got.json()["error"]
    page = _get(app, "/sessions?team=search")
    assert page.status_code == 303 and page.headers["location"] == "signin?next=%2Fsessions%3Fteam%3Dsearch"
    form = _get(app, "/signin?next=/sessions")
    assert form.status_code == 200 and 'name="token"' in form.text and 'value="/sessions"' in form.text
    assert 'value="//evil.example"' not in _get(app, "/signin?next=//evil.example").text


@pytest.mark.parametrize("team", sorted(TEAMS))
def test_a_team_viewer_gets_only_its_team_from_api_mix(app: Any, teams: Lake, team: str) -> None:
    got = _get(app, "/api/mix?by=day", TOKENS[team])
    assert got.status_code == 200
    mine = [tuple(r[k] for k in _KINDS) for r in got.json()]
    assert mine == _per_day(teams, team)
    assert mine != _per_day(teams, None)  # the other team has rows on the same days
    by_team = _get(app, "/api/mix?by=attr:team.id", TOKENS[team]).json()
    assert [r["attr:team.id"] for r in by_team] == [team]
    # asking for the other team's rows gives nothing: the two conditions are ANDed
    other = next(t for t in TEAMS if t != team)
    assert _get(app, f"/api/mix?where=attr:team.id%3D{other}", TOKENS[team]).json()["requests"] == 0


def test_the_administrator_sees_every_team(app: Any, teams: Lake) -> None:
    rows = _get(app, "/api/mix?by=day", TOKENS["*"]).json()
    assert [tuple(r[k] for k in _KINDS) for r in rows] == _per_day(teams, None)
    assert {r["attr:team.id"] for r in _get(app, "/api/mix?by=attr:team.id", TOKENS["*"]).json()} == set(
        TEAMS
    )


@pytest.mark.parametrize(
    ("path", "argv"),
    [
        (
            "/api/mix?by=day&where=attr:team.id%3Dpayments",
            ["mix", "--by", "day", "--where", "attr:team.id=payments"],
        ),
        ("/api/mix", ["mix"]),
        ("/api/sessions?list=1", ["sessions", "--list"]),
        (
            "/api/sessions?by=attr:team.id&since=2026-08-02",
            ["sessions", "--by", "attr:team.id", "--since", "2026-08-02"],
        ),
        ("/api/sessions", ["sessions"]),
        ("/api/misses", ["misses"]),
        (
            "/api/misses?by=day&where=project%3Dindexer",
            ["misses", "--by", "day", "--where", "project=indexer"],
        ),
        ("/api/misses?list=1&until=2026-08-02", ["misses", "--list", "--until", "2026-08-02"]),
        ("/api/timeline/p2", ["timeline", "p2"]),
    ],
)
def test_the_api_answers_what_the_cli_prints(app: Any, cli: Cli, path: str, argv: list[str]) -> None:
    code, out, err = cli(*argv, "--format", "json")
    assert code == 0, err
    got = _get(app, path, TOKENS["*"])
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("application/json")
    assert got.text == out.rstrip("\n")
    assert json.loads(got.text)  # something, not an empty document


def test_the_misses_endpoint_counts_the_ttl_expiries(app: Any) -> None:
    """By hand: each of the 5 sessions starts with a miss and misses again after its 11-minute gap."""
    for team, (sessions, *_) in TEAMS.items():
        got = _get(app, "/api/misses", TOKENS[team]).json()
        assert got["requests"] == 5 * len(sessions)
        assert got["by_cause"]["first_request"]["misses"] == len(sessions)
        assert got["by_cause"]["ttl_expired"]["misses"] == len(sessions)


def test_a_team_viewer_opens_its_sessions_timelines_only(app: Any) -> None:
    assert _get(app, "/api/timeline/p1", TOKENS["payments"]).status_code == 200
    refused = _get(app, "/api/timeline/s1", TOKENS["payments"])
    assert refused.status_code == 400 and "no requests of session 's1'" in refused.json()["error"]
    listed = _get(app, "/api/sessions?list=1", TOKENS["search"]).json()
    assert [r["root_session_id"] for r in listed] == ["s1", "s2"]


@pytest.mark.parametrize("value", ["x'; DROP TABLE requests; --", "payments' OR '1'='1"])
def test_a_filter_value_with_a_quote_or_semicolon_is_data(app: Any, value: str) -> None:
    got = _get(app, f"/api/mix?where={quote('attr:team.id=' + value)}", TOKENS["*"])
    assert got.status_code == 200 and got.json()["requests"] == 0
    assert _get(app, "/api/mix", TOKENS["*"]).json()["requests"] == 25


def test_bad_parameters_are_400_naming_the_problem(app: Any) -> None:
    for path, says in (
        ("/api/mix?where=nokey", "is not KEY=VALUE"),
        ("/api/mix?prices=/etc/passwd", "unknown parameter(s) prices"),
        ("/api/sessions?list=maybe", "is not a flag"),
        ("/api/misses?list=1&by=day", "takes no --by"),
    ):
        got = _get(app, path, TOKENS["*"])
        assert got.status_code == 400 and says in got.json()["error"], (path, got.text)
    assert _get(app, "/api/nothing", TOKENS["*"]).status_code == 404


def test_sign_in_sets_an_http_only_cookie_and_sign_out_ends_it(app: Any) -> None:
    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            bad = await client.post("/signin", data={"token": "wrong-token-0123456789", "next": "/"})
            assert bad.status_code == 401 and "not in the tokens file" in bad.text
            good = await client.post("/signin", data={"token": TOKENS["search"], "next": "/sessions?x=1"})
            assert good.status_code == 303 and good.headers["location"] == "/sessions?x=1"
            cookie = good.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie
            mix = await client.get("/api/mix?by=attr:team.id")
            assert [r["attr:team.id"] for r in mix.json()] == ["search"]
            page = await client.get("/?model=gpt-5-codex")
            assert page.status_code == 200 and "team search" in page.text
            assert 'value="gpt-5-codex"' in page.text  # the filter from the URL is in the form
            assert "where=model%3Dgpt-5-codex" in page.text  # and in the API query the page fetches
            elsewhere = {"Origin": "https://evil.example"}
            forged = await client.post("/signin", data={"token": TOKENS["*"]}, headers=elsewhere)
            assert forged.status_code == 403 and "set-cookie" not in forged.headers
            assert (await client.post("/signout", headers=elsewhere)).status_code == 403
            assert (await client.get("/api/mix")).status_code == 200  # still signed in
            await client.post("/signout", headers={"Origin": "http://127.0.0.1"})
            client.cookies.set("traceflow_session", good.cookies["traceflow_session"])
            assert (await client.get("/api/mix")).status_code == 401

    asyncio.run(run())


def test_a_token_removed_from_the_file_is_refused(teams: Lake, tmp_path: Path) -> None:
    from traceflow.collectors.tokens import RELOAD_INTERVAL_S
    from traceflow.dashboards.live import dashboard_app

    path = tokens_file(tmp_path)
    app = dashboard_app(teams, tokens=path)
    assert _get(app, "/api/mix", TOKENS["search"]).status_code == 200
    path.write_text(f"payments {TOKENS['payments']}\n")
    time.sleep(RELOAD_INTERVAL_S + 0.2)  # the file is looked at once per interval
    assert _get(app, "/api/mix", TOKENS["search"]).status_code == 401
    assert _get(app, "/api/mix", TOKENS["payments"]).status_code == 200


def test_dashboard_on_another_host_without_tokens_exits_2(teams: Lake, cli: Cli, tmp_path: Path) -> None:
    code, _, err = cli("dashboard", "--host", "0.0.0.0")
    assert code == 2
    assert cli("dashboard", "--host", "0.0.0.0", "--data", str(tmp_path / "none"), data=False)[2] == err
    assert "--tokens FILE" in err and "0.0.0.0" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad-tokens"
    bad.write_text("payments short\n")
    code, _, err = cli("dashboard", "--host", "0.0.0.0", "--tokens", str(bad))
    assert code == 2 and "bad-tokens line 1" in err


def test_the_report_of_a_view_is_the_teams(app: Any) -> None:
    page = _get(app, "/report?project=indexer", TOKENS["payments"])
    assert page.status_code == 200 and "No requests in the selection." in page.text
    assert "No requests in the selection." not in _get(app, "/report", TOKENS["payments"]).text


def test_the_dashboards_own_selection_options_bound_every_view(teams: Lake, tmp_path: Path) -> None:
    from traceflow.dashboards.live import dashboard_app
    from traceflow.store.selection_options import build_selection

    base = build_selection(agent=["codex"], since="2026-08-02")
    app = dashboard_app(teams, base, tokens=tokens_file(tmp_path))
    everything = _get(app, "/api/mix?by=day", TOKENS["*"]).json()
    # by hand: codex is the search team's; from the 2nd only s2 (5 requests) is left
    assert [(r["day"], r["requests"]) for r in everything] == [("2026-08-02", 5)]
    assert _get(app, "/api/mix", TOKENS["payments"]).json()["requests"] == 0
    assert _get(app, "/api/mix?since=2026-07-01&agent=claude-code", TOKENS["*"]).json()["requests"] == 0
