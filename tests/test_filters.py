"""``--where`` (traceflow.store.filters): each command's figures for one team equal the same figures
computed here in plain SQL over that team's rows, read straight from the lake's Parquet files.

The fixture: 4 sessions of Claude Code traffic carrying ``team.id`` as a resource attribute (as
``OTEL_RESOURCE_ATTRIBUTES`` sends it). One request carries none and is its session's (``alpha``);
session ``s4`` changes team half-way, so a request's team is its own, not its session's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
T0 = 1785585600_000000  # 2026-08-01T12:00Z in microseconds

# (session, team or None, seconds after T0, cold, read, write, output); every request lasts 2 s
SPEC = [
    ("s1", "alpha", 0, 100, 0, 5000, 50),
    ("s1", None, 30, 10, 5000, 300, 40),  # no team of its own: its session's
    ("s1", "alpha", 400, 20, 0, 5400, 60),  # after 6 min idle: its prefix expired
    ("s2", "beta", 0, 50, 0, 8000, 30),
    ("s2", "beta", 40, 5, 1000, 7100, 20),  # a miss: 7,050 tokens below its reusable prefix
    ("s2", "beta", 4000, 5, 8000, 200, 20),
    ("s3", "alpha", 10, 900, 0, 0, 70),
    ("s3", "alpha", 20, 100, 900, 0, 10),
    ("s4", "alpha", 0, 300, 0, 2000, 10),
    ("s4", "beta", 50, 30, 2000, 100, 10),  # the session moved to team beta
]


@pytest.fixture
def teams(lake: Lake) -> Lake:
    rows = []
    for i, (session, team, at, cold, read, write, out) in enumerate(SPEC):
        rows.append(
            {
                "event_id": f"e{i}",
                "source": "otlp",
                "agent": "claude-code",
                "model": "claude-sonnet-4-5",
                "session_id": session,
                "user_id": f"u-{session}",
                "prompt_id": f"p{i}",
                "started_at": T0 + at * 1_000_000,
                "ended_at": T0 + at * 1_000_000 + 2_000_000,
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "cache_write_5m_tokens": write,
                "cache_write_1h_tokens": 0,
                "output_tokens": out,
                "attributes": {"resource": {"team.id": team}} if team else {},
                "seq": i,
            }
        )
    lake.append("requests", rows)
    return lake


def _team_rows(lake: Lake) -> str:
    """The requests with their team and stream order, in plain SQL over the Parquet files: a request's
    team is its own ``team.id``, else the last one before it in its session."""
    files = f"'{lake.root}/v1/requests/*/*.parquet'"
    own = "json_extract_string(attributes, '$.resource.\"team.id\"')"
    return f"""
        SELECT *, cold_input_tokens + cache_read_tokens + cache_write_tokens AS ctx,
               coalesce({own}, last_value({own} IGNORE NULLS) OVER (
                   PARTITION BY session_id ORDER BY started_at
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS team,
               row_number() OVER (PARTITION BY session_id ORDER BY started_at) AS pos,
               lag(cold_input_tokens + cache_read_tokens + cache_write_tokens)
                   OVER (PARTITION BY session_id ORDER BY started_at) AS prev_ctx,
               max(ended_at) OVER (PARTITION BY session_id ORDER BY started_at
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
               min(ended_at) OVER (PARTITION BY session_id ORDER BY started_at
                   ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS next_end
        FROM read_parquet({files})"""


def _sql(lake: Lake, query: str, team: str) -> tuple[Any, ...]:
    """``query`` over ``t``, the rows of ``team`` (the team bound as a parameter)."""
    text = f"WITH everything AS ({_team_rows(lake)}), t AS (SELECT * FROM everything WHERE team = ?) {query}"
    row = duckdb.connect().execute(text, [team]).fetchone()
    assert row is not None
    return tuple(row)


def _json(cli: Cli, *args: str) -> Any:
    code, out, err = cli(*args, "-f", "json")
    assert code == 0, err
    return json.loads(out)


TEAMS = ("alpha", "beta")


@pytest.mark.parametrize("team", TEAMS)
def test_mix_where_team_equals_sql_over_its_rows(teams: Lake, cli: Cli, team: str) -> None:
    got = _json(cli, "mix", "--where", f"attr:team.id={team}")
    want = _sql(
        teams,
        "SELECT count(*), sum(cold_input_tokens), sum(cache_read_tokens), sum(cache_write_tokens), "
        "sum(output_tokens) FROM t",
        team,
    )
    kinds = ("requests", "cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
    assert tuple(got[k] for k in kinds) == want
    assert want[0] == {"alpha": 6, "beta": 4}[team]  # by hand: e1 inherits alpha, e9 is beta's


@pytest.mark.parametrize("team", TEAMS)
def test_misses_where_team_equals_sql_over_its_rows(teams: Lake, cli: Cli, team: str) -> None:
    got = _json(cli, "misses", "--where", f"attr:team.id={team}")
    # a miss: the first request of its session, or a read more than 1,024 tokens below the reusable
    # prefix (the smaller of the previous request's context and its own); missed = prefix - read
    want = _sql(
        teams,
        """SELECT count(*),
                  count(*) FILTER (WHERE pos = 1 OR cache_read_tokens < least(prev_ctx, ctx) - 1024),
                  coalesce(sum(CASE WHEN pos > 1 AND cache_read_tokens < least(prev_ctx, ctx) - 1024
                                    THEN least(prev_ctx, ctx) - cache_read_tokens END), 0)
           FROM t""",
        team,
    )
    assert (got["requests"], got["misses"], got["missed_tokens"]) == want
    if team == "beta":  # by hand: s2's first request and its second (8,050 - 1,000 = 7,050 missed)
        assert want == (4, 2, 7050)


@pytest.mark.parametrize("team", TEAMS)
def test_gaps_where_team_equals_sql_over_its_rows(teams: Lake, cli: Cli, team: str) -> None:
    got = _json(cli, "gaps", "--where", f"attr:team.id={team}")
    # a gap: from the end of the session's earlier requests to this one's start (not the first)
    gap = "greatest(epoch_us(started_at) - epoch_us(prev_end), 0) / 1e6"
    want = _sql(teams, f"SELECT count(*), max({gap}), avg({gap}) FROM t WHERE pos > 1", team)
    assert got["gaps"] == want[0]
    assert got["max_s"] == pytest.approx(want[1])
    assert got["mean_s"] == pytest.approx(want[2])


@pytest.mark.parametrize("team", TEAMS)
def test_working_set_where_team_equals_sql_over_its_rows(teams: Lake, cli: Cli, team: str) -> None:
    got = _json(cli, "working-set", "--ttl", "5m", "--where", f"attr:team.id={team}")
    got = got[0] if isinstance(got, list) else got
    # each request holds its context from its end until 5 min later or a later request of its
    # session ends: the series' integral (token-seconds) is the sum of those intervals
    end = "epoch_us(ended_at)"
    held = f"(least({end} + 300e6, coalesce(epoch_us(next_end), {end} + 300e6)) - {end}) / 1e6"
    (integral,) = _sql(teams, f"SELECT sum(ctx * {held}) FROM t", team)
    assert got["mean_tokens"] * got["buckets"] * got["resolution_s"] == pytest.approx(integral, rel=1e-9)
    assert integral > 0


@pytest.mark.parametrize("team", TEAMS)
def test_export_aiperf_where_team_equals_sql_over_its_rows(
    teams: Lake, cli: Cli, team: str, tmp_path: Path
) -> None:
    out = tmp_path / f"{team}.jsonl"
    code, _, err = cli("export", "aiperf", "-o", str(out), "--where", f"attr:team.id={team}")
    assert code == 0, err
    turns = [json.loads(line) for line in out.read_text().splitlines()]
    sessions = "list(DISTINCT session_id ORDER BY session_id)"
    want = _sql(teams, f"SELECT count(*), sum(output_tokens), {sessions} FROM t", team)
    assert len(turns) == want[0]
    assert sum(t["output_length"] for t in turns) == want[1]
    # AIPerf sessions are the lake's sessions (a session split after a prefix break gets "~n")
    assert sorted({t["session_id"].split("~")[0] for t in turns}) == want[2]
    manifest = json.loads((tmp_path / f"{team}.manifest.json").read_text())
    assert manifest["source"]["selection"]["where"] == [f"attr:team.id={team}"]


@pytest.mark.parametrize("team", TEAMS)
def test_report_where_team_equals_sql_over_its_rows(teams: Lake, cli: Cli, team: str) -> None:
    got = _json(cli, "report", "--where", f"attr:team.id={team}")
    want = _sql(
        teams,
        "SELECT count(*), sum(cache_read_tokens), sum(ctx), count(DISTINCT session_id), "
        "count(*) FILTER (WHERE pos > 1) FROM t",
        team,
    )
    assert (got["mix"]["requests"], got["mix"]["cache_read_tokens"]) == want[:2]
    assert got["mix"]["reuse_ratio"] == pytest.approx(want[1] / want[2])
    assert got["sessions"]["sessions"] == want[3]
    assert got["gaps"]["gaps"] == want[4]


def test_not_equal_lists_and_and(teams: Lake, cli: Cli) -> None:
    def requests(*where: str) -> int:
        args = [a for w in where for a in ("--where", w)]
        return int(_json(cli, "mix", *args)["requests"])

    assert requests("attr:team.id!=beta") == 6  # every request has a team: != beta is alpha
    assert requests("attr:team.id=alpha,beta") == 10
    assert requests("attr:team.id=beta", "user=u-s4") == 1  # ANDed: s4's request of team beta
    assert requests("user!=u-s1,u-s2") == 4
    assert requests("attr:team.id=beta", "attr:team.id!=beta") == 0
    # a request without the attribute at all counts under != (it is not that value)
    assert requests("attr:missing!=x") == 10
    assert requests("model=claude-sonnet-4-5", "project!=x") == 10


@pytest.mark.parametrize(
    "value",
    ["alpha'; DROP TABLE requests; --", "x' OR '1'='1", "beta;", "';", "alpha' --"],
)
def test_a_value_with_a_quote_or_semicolon_is_data(teams: Lake, cli: Cli, value: str) -> None:
    for command in ("mix", "misses", "gaps"):
        code, out, err = cli(command, "--where", f"attr:team.id={value}", "-f", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert (doc["gaps"] if command == "gaps" else doc["requests"]) == 0
    code, out, err = cli("mix", "--where", f"model={value}", "-f", "json")
    assert code == 0 and json.loads(out)["requests"] == 0, err
    # nothing was broken: the lake answers as before
    assert _json(cli, "mix")["requests"] == len(SPEC)


@pytest.mark.parametrize("value", ["alpha'; DROP TABLE requests; --", "x' OR '1'='1", "beta;"])
def test_a_quote_or_semicolon_selects_nothing_in_sizing_report_and_export(
    teams: Lake, cli: Cli, value: str, tmp_path: Path
) -> None:
    where = ("--where", f"attr:team.id={value}")
    assert _json(cli, "working-set", "--ttl", "5m", *where)["buckets"] == 0
    report = _json(cli, "report", *where)
    assert (report["mix"]["requests"], report["sessions"]["sessions"], report["gaps"]["gaps"]) == (0, 0, 0)
    out = tmp_path / "none.jsonl"
    code, _, err = cli("export", "aiperf", "-o", str(out), *where)
    assert code == 2 and "no requests with tokens match the selection" in err  # nothing to replay
    assert not out.exists()
    # nothing was broken: every team's requests are still there
    assert _json(cli, "mix", "--where", "attr:team.id=alpha,beta")["requests"] == len(SPEC)


@pytest.mark.parametrize(
    ("item", "says"),
    [
        (
            "team=alpha",
            "unknown key 'team'; choose from: agent, model, user, source, version, project, host, attr:NAME",
        ),
        ("attr:bad'name=x", "not an attribute name"),
        ("model", "is not KEY=VALUE"),
        ("model=", "has no value"),
        ("session=s1", "unknown key 'session'"),
    ],
)
def test_bad_where_is_a_usage_error_naming_the_keys(teams: Lake, cli: Cli, item: str, says: str) -> None:
    code, _, err = cli("mix", "--where", item)
    assert code == 2
    assert says in err


def test_everyday_views_take_where(teams: Lake, cli: Cli) -> None:
    code, out, err = cli("daily", "--json", "--where", "attr:team.id=beta", "--timezone", "UTC")
    assert code == 0, err
    (want,) = _sql(teams, "SELECT sum(cache_read_tokens) FROM t", "beta")
    assert json.loads(out)["totals"]["cacheReadTokens"] == want


@pytest.mark.spark
def test_duckdb_equals_spark_with_where(teams: Lake, spark: Any) -> None:
    from traceflow.analysis.gaps import gap_summary
    from traceflow.analysis.mix import token_mix_rows
    from traceflow.engines.spark import SparkEngine
    from traceflow.store import filters
    from traceflow.store.selection import Selection

    sel = Selection(conditions=filters.parse(["attr:team.id=beta", "model!=x'; --"]))
    engine = SparkEngine(spark, teams, ["requests", "events"])
    con = teams.connect(["requests", "events"])
    try:
        duck = token_mix_rows(con, sel, ["user"])
        assert [(r[0], r[1]) for r in duck.rows] == [("u-s2", 3), ("u-s4", 1)]  # beta's, by hand
        assert token_mix_rows(engine, sel, ["user"]).rows == duck.rows
        assert gap_summary(engine, sel).to_dicts() == gap_summary(con, sel).to_dicts()
    finally:
        engine.close()


def test_a_compacted_lake_answers_alike(teams: Lake, cli: Cli) -> None:
    """After ``compact`` the per-stream queries read the stored steps and ``mix`` could read the
    rollup: a --where gives the same figures as over the fresh lake."""
    where = ("--where", "attr:team.id=beta")
    before = [_json(cli, c, *where) for c in ("mix", "misses", "gaps")]
    teams.compact("requests")
    teams.materialise_derived()
    assert all(teams.fresh_derived(v) is not None for v in ("request_steps", "request_rollup"))
    assert [_json(cli, c, *where) for c in ("mix", "misses", "gaps")] == before
    assert before[0]["requests"] == 4
