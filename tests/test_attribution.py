"""Attribution (``--by project``, ``host``, ``attr:NAME``, ``subagent_type``), the savings headline
and ``traceflow import tracelab``.

Every expected number comes from the construction of the fixtures or, for the TraceLab sample, from
the sample read here with plain ``json``: never from the code under test.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TESTDATA
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
T0 = 1785585600_000000  # 2026-08-01T12:00Z in microseconds

# (event_id, session, project (cwd), model, cold, read, write, write_1h, output, seconds after T0)
TRANSCRIPT_ROWS = [
    ("a1", "s1", "/src/web", "claude-sonnet-4-5", 100, 0, 5000, 0, 50, 0),
    ("a2", "s1", "/src/web", "claude-sonnet-4-5", 10, 5000, 300, 0, 40, 30),
    ("a3", "s1", "/src/web", "claude-sonnet-4-5", 20, 5300, 200, 200, 60, 60),
    ("b1", "s2", "/src/api", "claude-sonnet-4-5", 50, 0, 8000, 0, 30, 0),
    ("b2", "s2", "/src/api", "claude-sonnet-4-5", 5, 1000, 7100, 0, 20, 40),  # a miss: 7,000 below
]
# Codex rows (cached-input split, no writes) of a third project
CODEX_ROWS = [
    ("c1", "s3", "/src/web", "gpt-5", 900, 0, 0, 0, 70, 0),
    ("c2", "s3", "/src/web", "gpt-5", 100, 900, 0, 0, 10, 20),
]


def _rows(spec: list[tuple[Any, ...]], agent: str) -> list[dict[str, Any]]:
    return [
        {
            "event_id": e,
            "source": f"{agent}-test",
            "agent": agent,
            "model": model,
            "session_id": session,
            "started_at": T0 + at * 1_000_000,
            "ended_at": T0 + at * 1_000_000 + 1_000_000,
            "cold_input_tokens": cold,
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "cache_write_1h_tokens": w1h,
            "cache_write_5m_tokens": write - w1h,
            "output_tokens": out,
            "attributes": {"cwd": project, "git_branch": "main"},
            "seq": i,
        }
        for i, (e, session, project, model, cold, read, write, w1h, out, at) in enumerate(spec)
    ]


@pytest.fixture
def projects(lake: Lake) -> Lake:
    lake.append("requests", _rows(TRANSCRIPT_ROWS, "claude-code") + _rows(CODEX_ROWS, "codex"))
    return lake


def _by(out: str, key: str) -> dict[Any, dict[str, Any]]:
    return {g[key]: g for g in json.loads(out)}


def test_mix_by_project_sums_each_working_directory(projects: Lake, cli: Cli) -> None:
    code, out, err = cli("mix", "--by", "project", "-f", "json")
    assert code == 0, err
    got = _by(out, "project")
    every = TRANSCRIPT_ROWS + CODEX_ROWS
    for project in ("/src/web", "/src/api"):
        mine = [r for r in every if r[2] == project]
        g = got[project]
        assert g["requests"] == len(mine)
        assert g["cold_input_tokens"] == sum(r[4] for r in mine)
        assert g["cache_read_tokens"] == sum(r[5] for r in mine)
        assert g["cache_write_tokens"] == sum(r[6] for r in mine)
        assert g["output_tokens"] == sum(r[8] for r in mine)
    # by hand: /src/web = 3 Claude + 2 Codex requests; /src/api = 2
    assert (got["/src/web"]["requests"], got["/src/api"]["requests"]) == (5, 2)
    assert got["/src/api"]["cache_read_tokens"] == 1000


def test_misses_gaps_sessions_by_project(projects: Lake, cli: Cli) -> None:
    code, out, err = cli("misses", "--by", "project", "-f", "json")
    assert code == 0, err
    got = _by(out, "project")
    # /src/web: 2 first requests (s1, s3), no other miss; /src/api: first request + b2 (7,000 missed)
    assert (got["/src/web"]["requests"], got["/src/web"]["misses"]) == (5, 2)
    assert (got["/src/api"]["requests"], got["/src/api"]["misses"]) == (2, 2)
    assert got["/src/api"]["missed_tokens"] == (50 + 8000) - 1000
    code, out, err = cli("gaps", "--by", "project", "-f", "json")
    assert code == 0, err
    groups = {g["project"]: g for g in json.loads(out)["groups"]}
    assert (groups["/src/web"]["gaps"], groups["/src/api"]["gaps"]) == (3, 1)
    assert groups["/src/api"]["max_s"] == pytest.approx(39.0)  # 40 s start - 1 s request
    code, out, err = cli("sessions", "--by", "project", "-f", "json")
    assert code == 0, err
    sessions = _by(out, "project")
    assert (sessions["/src/web"]["sessions"], sessions["/src/api"]["sessions"]) == (2, 1)
    assert sessions["/src/web"]["requests"] == 5


def test_attr_name_reads_the_rows_own_attribute_and_bad_names_are_refused(projects: Lake, cli: Cli) -> None:
    code, out, _ = cli("mix", "--by", "attr:git_branch", "-f", "json")
    assert code == 0
    assert [(g["attr:git_branch"], g["requests"]) for g in json.loads(out)] == [("main", 7)]
    code, _, err = cli("mix", "--by", "attr:bad'name", "-f", "json")
    assert code != 0 and "cannot group by" in err
    code, _, err = cli("sessions", "--by", "subagent_type")
    assert code != 0 and "cannot group by" in err


def test_savings_headline_matches_a_hand_computation(projects: Lake, cli: Cli) -> None:
    # list prices: claude-sonnet $3 in / $15 out per million, gpt-5 (no match) the $3 / $15 default;
    # read 0.1x, 5-minute write 1.25x, 1-hour write 2x
    def cost(rows: list[tuple[Any, ...]]) -> tuple[float, float]:
        no_cache = billed = 0.0
        for _, _, _, _, cold, read, write, w1h, out, _ in rows:
            no_cache += (cold + read + write) * 3 / 1e6 + out * 15 / 1e6
            billed += (cold + 0.1 * read + 1.25 * (write - w1h) + 2.0 * w1h) * 3 / 1e6 + out * 15 / 1e6
        return no_cache, billed

    no_cache, billed = cost(TRANSCRIPT_ROWS + CODEX_ROWS)
    code, out, _ = cli("mix", "-f", "json")
    assert code == 0
    got = json.loads(out)
    assert got["cost_without_cache_usd"] == pytest.approx(no_cache)
    assert got["cost_usd"] == pytest.approx(billed)
    assert got["savings_usd"] == pytest.approx(no_cache - billed)
    assert got["savings_share"] == pytest.approx((no_cache - billed) / no_cache)
    _, table, _ = cli("mix")
    assert f"saved ${no_cache - billed:,.2f}" in table
    _, out, _ = cli("report", "-f", "json")
    assert any("saved" in line for line in json.loads(out)["headline"])
    assert json.loads(out)["mix"]["savings_usd"] == pytest.approx(no_cache - billed)


def _otlp_logs(resources: list[tuple[dict[str, str], list[tuple[str, int, int, int]]]]) -> dict[str, Any]:
    """OTLP/JSON logs: per resource (its attributes, [(session, cold, read, second)]) Claude Code
    ``api_request`` events."""

    def kv(k: str, v: str) -> dict[str, Any]:
        return {"key": k, "value": {"stringValue": v}}

    out = []
    for attrs, requests in resources:
        records = []
        for session, cold, read, second in requests:
            ns = (T0 + second * 1_000_000) * 1000
            stamp = dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            records.append(
                {
                    "timeUnixNano": str(ns),
                    "body": {"stringValue": "claude_code.api_request"},
                    "attributes": [
                        kv("event.name", "api_request"),
                        kv("event.timestamp", stamp),
                        kv("session.id", session),
                        kv("model", "claude-sonnet-4-5"),
                        kv("input_tokens", str(cold)),
                        kv("output_tokens", "10"),
                        kv("cache_read_tokens", str(read)),
                        kv("cache_creation_tokens", "0"),
                        kv("duration_ms", "1000"),
                        kv("request_id", f"req_{session}_{second}"),
                    ],
                }
            )
        out.append(
            {
                "resource": {
                    "attributes": [kv("service.name", "claude-code"), *(kv(k, v) for k, v in attrs.items())]
                },
                "scopeLogs": [{"scope": {"name": "com.anthropic.claude_code.events"}, "logRecords": records}],
            }
        )
    return {"resourceLogs": out}


def test_by_attr_team_and_host_on_otlp_resource_attributes(
    lake: Lake, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as OTEL_RESOURCE_ATTRIBUTES=team=alpha,project=web (host.name from the SDK) would send them
    payload = _otlp_logs(
        [
            ({"team": "alpha", "host.name": "ci-1", "proj": "web"}, [("o1", 100, 0, 0), ("o1", 10, 1000, 5)]),
            ({"team": "beta", "host.name": "ci-2", "proj": "api"}, [("o2", 200, 0, 0)]),
            ({"team": "alpha", "host.name": "ci-2", "proj": "api"}, [("o3", 300, 0, 0)]),
        ]
    )
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(payload))
    assert run_import(lake, get("otlp-json"), [path]).rows["requests"] == 4
    code, out, err = cli("mix", "--by", "attr:team", "-f", "json")
    assert code == 0, err
    got = _by(out, "attr:team")
    assert (got["alpha"]["requests"], got["alpha"]["cold_input_tokens"]) == (3, 100 + 10 + 300)
    assert (got["beta"]["requests"], got["beta"]["cold_input_tokens"]) == (1, 200)
    assert got["alpha"]["cache_read_tokens"] == 1000
    code, out, err = cli("misses", "--by", "attr:team", "-f", "json")
    assert code == 0, err
    assert {g["attr:team"]: g["requests"] for g in json.loads(out)} == {"alpha": 3, "beta": 1}
    code, out, _ = cli("sessions", "--by", "host", "-f", "json")
    assert {g["host"]: g["sessions"] for g in json.loads(out)} == {"ci-1": 1, "ci-2": 2}
    code, out, _ = cli("gaps", "--by", "attr:team", "-f", "json")
    assert {g["attr:team"]: g["gaps"] for g in json.loads(out)["groups"]} == {"alpha": 1}
    # the project's resource attribute is a setting
    monkeypatch.setenv("TRACEFLOW_PROJECT_ATTRIBUTE", "proj")
    code, out, _ = cli("mix", "--by", "project", "-f", "json")
    assert {g["project"]: g["requests"] for g in json.loads(out)} == {"api": 2, "web": 2}


def test_by_subagent_type_on_kvcache_tester_subagents(lake: Lake, cli: Cli) -> None:
    trace = TESTDATA / "weka_cc_traces"
    files = sorted(trace.glob("trace_*.json*"))
    with_subagents = []
    for f in files:
        import gzip

        raw = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
        doc = json.loads(raw)
        subs = [r for r in doc.get("requests", []) if r.get("type") == "subagent"]
        if subs:
            with_subagents.append((f, subs))
        if len(with_subagents) == 1:
            break
    f, subs = with_subagents[0]
    run_import(lake, get("kvcache-tester"), [f])
    expected: dict[str, int] = {}
    for s in subs:
        kind = s.get("subagent_type")
        expected[kind] = expected.get(kind, 0) + len(s.get("requests", []))
    code, out, err = cli("mix", "--by", "subagent_type", "-f", "json")
    assert code == 0, err
    got = {g["subagent_type"]: g["requests"] for g in json.loads(out) if g["subagent_type"] is not None}
    assert got == expected


SAMPLE = TESTDATA / "tracelab-example" / "round_trace.jsonl"


def test_tracelab_sample_imports_to_the_rows_its_fields_say(lake: Lake, cli: Cli) -> None:
    rounds = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    summary = run_import(lake, get("tracelab"), [SAMPLE])
    assert summary.rows["requests"] == len(rounds) == 19
    assert summary.rows["events"] == sum(len(r["tools"]) for r in rounds) + sum(
        1 for r in rounds for e in r["timing_events"] if e["event_type"] == "user_message"
    )
    con = lake.connect(["requests", "events"])
    got = {
        row[0]: row[1:]
        for row in con.execute(
            "SELECT request_id, agent, session_id, model, cold_input_tokens, cache_read_tokens, "
            "cache_write_tokens, output_tokens, reasoning_tokens, epoch_us(started_at), epoch_us(ended_at), "
            "json_extract_string(attributes, '$.project') FROM requests"
        ).fetchall()
    }

    def us(stamp: str) -> int:
        return int(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1_000_000)

    for r in rounds:
        if r["provider"] == "claude":
            tokens = (
                r["claude_uncached_input_tokens"],
                r["claude_cache_read_input_tokens"],
                r["claude_cache_creation_input_tokens"],
            )
            agent = "claude-code"
        else:
            tokens = (r["newly_append_tokens"], r["prefix_tokens"], 0)
            agent = "codex"
        assert sum(tokens) == r["input_tokens_total"]
        ready = [
            us(e["timestamp"])
            for e in r["timing_events"]
            if e["event_type"] in ("user_message", "tool_result")
        ]
        last = max(us(e["timestamp"]) for e in r["timing_events"])
        assert got[r["round_id"]] == (
            agent,
            r["session_id"],
            r["model"],
            *tokens,
            r["output_tokens"],
            r["reasoning_output_tokens"],
            max(ready),
            last,
            r.get("project"),
        )
    tools: dict[str, int] = {}
    for r in rounds:
        for t in r["tools"]:
            tools[t["tool_name"]] = tools.get(t["tool_name"], 0) + 1
    counted = dict(
        con.execute(
            "SELECT json_extract_string(attributes, '$.tool_name'), count(*) FROM events "
            "WHERE name = 'tool_result' GROUP BY 1"
        ).fetchall()
    )
    assert counted == tools
    # per project (the Codex rows name none)
    _, out, _ = cli("mix", "--by", "project", "-f", "json")
    by_project = {g["project"]: g for g in json.loads(out)}
    claude = [r for r in rounds if r["provider"] == "claude"]
    assert by_project["project_4c7b8a1b"]["requests"] == len(claude)
    assert by_project["project_4c7b8a1b"]["cache_read_tokens"] == sum(
        r["claude_cache_read_input_tokens"] for r in claude
    )
    assert by_project[None]["requests"] == len(rounds) - len(claude)
    # a second import adds nothing
    assert run_import(lake, get("tracelab"), [SAMPLE]).rows.get("requests", 0) == 0


#: The 240 requests of one session whose resource attributes change within it (issue 31): how many
#: carry each value, the truth every engine must give.
ABG = {"alpha": 77, "beta": 87, "gamma": 76}


def abg_order() -> list[str]:
    """The value of each of the 240 requests of :func:`alpha_beta_gamma`, in time order."""
    import random

    order = [v for v, n in ABG.items() for _ in range(n)]
    random.Random(31).shuffle(order)
    return order


def alpha_beta_gamma(path: Path) -> dict[str, int]:
    """Write OTLP/JSON logs of one Claude Code session, ``s1``, of 240 requests 30 s apart, each
    request's resource tagged ``project``, ``host.name`` (``h-`` + value) and ``team`` with one value
    of :data:`ABG` in a shuffled order (consecutive requests of one value share a resource entry, as
    an exporter batches them); returns the value of each request id's cold input, for checks."""
    order = abg_order()
    runs: list[tuple[dict[str, str], list[tuple[str, int, int, int]]]] = []
    cold: dict[str, int] = dict.fromkeys(ABG, 0)
    for k, value in enumerate(order):
        request = ("s1", 1 + k, 0, 30 * k)
        cold[value] += 1 + k
        if runs and runs[-1][0]["team"] == value:
            runs[-1][1].append(request)
        else:
            runs.append(({"project": value, "host.name": f"h-{value}", "team": value}, [request]))
    assert len(runs) > 100  # the values alternate: a per-stream value cannot be right
    path.write_text(json.dumps(_otlp_logs(runs)))
    return cold


def test_attribution_is_per_request_within_a_session(lake: Lake, tmp_path: Path) -> None:
    """``mix --by project|host|attr:team`` over one session whose requests' resource attributes
    differ: each request counts under its own values, 77 / 87 / 76, run after run (before, one
    arbitrary value per stream: e.g. 44 / 131 / 65, then 44 / 109 / 87)."""
    from traceflow.analysis.mix import token_mix

    path = tmp_path / "abg.json"
    cold = alpha_beta_gamma(path)
    assert run_import(lake, get("otlp-json"), [path]).rows["requests"] == 240
    for _ in range(3):
        con = lake.connect(["requests", "events"])
        for by, prefix in (("project", ""), ("host", "h-"), ("attr:team", "")):
            got = token_mix(con, None, [by])
            assert {r[by]: r["requests"] for r in got.iter_rows(named=True)} == {
                prefix + v: n for v, n in ABG.items()
            }, by
            assert {r[by]: r["cold_input_tokens"] for r in got.iter_rows(named=True)} == {
                prefix + v: c for v, c in cold.items()
            }, by
        con.close()


def test_a_request_without_a_value_inherits_from_its_stream(lake: Lake, cli: Cli, tmp_path: Path) -> None:
    """Only a request that carries no value inherits: from the nearest earlier request of its stream
    that carries one, else from the earliest later one. Stream s1: none, a, none, b, none (30 s
    apart) -> a, a, a, b, b; stream s2 carries none at all: NULL."""
    payload = _otlp_logs(
        [
            ({}, [("s1", 1, 0, 0)]),
            ({"team": "a"}, [("s1", 10, 0, 30)]),
            ({}, [("s1", 100, 0, 60), ("s2", 7, 0, 60)]),
            ({"team": "b"}, [("s1", 1000, 0, 90)]),
            ({}, [("s1", 10000, 0, 120)]),
        ]
    )
    path = tmp_path / "inherit.json"
    path.write_text(json.dumps(payload))
    assert run_import(lake, get("otlp-json"), [path]).rows["requests"] == 6
    code, out, err = cli("mix", "--by", "attr:team", "-f", "json")
    assert code == 0, err
    got = {g["attr:team"]: (g["requests"], g["cold_input_tokens"]) for g in json.loads(out)}
    assert got == {"a": (3, 111), "b": (2, 11000), None: (1, 7)}
    # the window does not change a request's value: the last request alone still inherits b
    since = dt.datetime.fromtimestamp((T0 + 100 * 1_000_000) / 1e6, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    code, out, err = cli("mix", "--by", "attr:team", "--since", since, "-f", "json")
    assert code == 0, err
    assert {g["attr:team"]: g["requests"] for g in json.loads(out)} == {"b": 1}


def test_misses_gaps_and_sessions_attribute_each_request(lake: Lake, cli: Cli, tmp_path: Path) -> None:
    """``misses``, ``gaps`` and ``sessions --by project`` over the 240 requests of one session whose
    project changes request by request: each request (a miss, the gap that ends at it, a session's
    requests) counts under its own project. Counted here from the order the requests were written
    in: every request is a turn (no prompt ids), only the first misses (no read, and a context that
    grows by one token a request), and request k > 0 ends a 29 s gap (30 s apart, 1 s long). Before,
    all 240 went to the project of the session's first request."""
    path = tmp_path / "abg.json"
    alpha_beta_gamma(path)
    order = abg_order()
    assert run_import(lake, get("otlp-json"), [path]).rows["requests"] == 240
    requests = {v: order.count(v) for v in ABG}
    assert requests == ABG
    code, out, err = cli("misses", "--by", "project", "-f", "json")
    assert code == 0, err
    got = {g["project"]: (g["requests"], g["misses"]) for g in json.loads(out)}
    assert got == {v: (requests[v], int(v == order[0])) for v in ABG}
    code, out, err = cli("gaps", "--by", "project", "-f", "json")
    assert code == 0, err
    ended = {v: order[1:].count(v) for v in ABG}  # a gap belongs to the request that ends it
    groups = {g["project"]: g for g in json.loads(out)["groups"]}
    assert {v: g["gaps"] for v, g in groups.items()} == ended
    assert {v: g["max_s"] for v, g in groups.items()} == dict.fromkeys(ABG, pytest.approx(29.0))
    code, out, err = cli("sessions", "--by", "project", "-f", "json")
    assert code == 0, err
    rows = {g["project"]: g for g in json.loads(out)}
    # the one session is in each project's group, with that project's requests and turns only
    assert {v: (g["sessions"], g["requests"], g["turns"]) for v, g in rows.items()} == {
        v: (1, n, n) for v, n in requests.items()
    }
    # --by host (h-alpha, ...) and attr:team split the same way, from the steps compaction stores too
    lake.compact("requests")
    code, out, err = cli("misses", "--by", "host,attr:team", "-f", "json")
    assert code == 0, err
    assert {(g["host"], g["attr:team"]): g["requests"] for g in json.loads(out)} == {
        ("h-" + v, v): n for v, n in requests.items()
    }
    code, out, err = cli("sessions", "--by", "host,attr:team", "-f", "json")
    assert code == 0, err
    assert {(g["host"], g["attr:team"]): (g["sessions"], g["requests"]) for g in json.loads(out)} == {
        ("h-" + v, v): (1, n) for v, n in requests.items()
    }


def test_attributed_values_follow_the_rule_on_random_streams() -> None:
    """``groups.attributed_sql`` (which runs its window only over the streams with a request that
    carries no value) gives every request of 3,000 random ones the value the module's rule gives,
    computed here in Python: its own, else the nearest earlier of its stream's in (time, seq,
    event_id) order, else the earliest later; a request without a session keeps its own."""
    import random

    import duckdb

    from traceflow.store import groups

    rng = random.Random(34)
    rows = []
    for i in range(3000):
        session = rng.choice([None, *(f"s{k}" for k in range(60))])
        parent = rng.choice([None, None, None, "s1", "s2"])
        cwd = rng.choice(['{"cwd":"/a"}', '{"cwd":"/b"}', "{}", None, '{"project":"P"}'])
        if session is not None and int(session[1:]) % 3 == 0:  # a third of the streams: all carry one
            cwd = '{"cwd":"/c"}'
        rows.append((f"e{i:04d}", session, parent, rng.randint(0, 40), rng.randint(0, 2), cwd))
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE raw (event_id VARCHAR, session_id VARCHAR, parent_session_id VARCHAR, t INTEGER, "
        "seq BIGINT, attributes VARCHAR)"
    )
    con.executemany("INSERT INTO raw VALUES (?, ?, ?, ?, ?, ?)", rows)
    con.execute("CREATE VIEW requests AS SELECT *, to_timestamp(t) AS request_time FROM raw")
    got = dict(con.execute(f"SELECT event_id, attr_g0 FROM {groups.attributed_sql(['project'])}").fetchall())

    def own(attributes: str | None) -> str | None:
        parsed = json.loads(attributes) if attributes else {}
        return parsed.get("project") or parsed.get("cwd")

    streams: dict[tuple[str, str | None], list[tuple[int, int, str, str | None]]] = {}
    expected = {}
    for event, session, parent, t, seq, attributes in rows:
        if session is None:
            expected[event] = own(attributes)
        else:
            streams.setdefault((session, parent), []).append((t, seq, event, own(attributes)))
    for stream in streams.values():
        stream.sort(key=lambda r: (r[0], r[1], r[2]))
        for i, (_, _, event, value) in enumerate(stream):
            earlier = [v for *_, v in stream[:i] if v is not None]
            later = [v for *_, v in stream[i + 1 :] if v is not None]
            expected[event] = value or (earlier[-1] if earlier else later[0] if later else None)
    assert got == expected
    assert sum(v is None for v in expected.values()) > 0 and len(set(expected.values())) == 5
