"""The per-request steps that compaction stores (``queries/steps.sql`` → the ``request_steps`` view).

The analyses read the stored steps instead of recomputing the per-stream window (which always runs
over the whole lake, so the stored steps answer every selection); these tests check that every
per-stream analysis gives the same answer both ways, for the whole lake and for narrower selections,
on the 36 real Claude Code sessions of the kv-cache-tester corpus, and that stored steps are never
used when they are stale (rows added since).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from traceflow.store import sql
from traceflow.store.lake import STEPS_VIEW, Lake
from traceflow.store.selection import Selection

Cli = Callable[..., tuple[int, str, str]]

#: every per-stream analysis, as CLI argv (JSON output, so the whole result is compared)
ANALYSES = [
    ["gaps"],
    ["gaps", "--by", "model"],
    ["sessions"],
    ["sessions", "--list"],
    ["ttl"],
    ["working-set", "--ttl", "300"],
    ["working-set", "--ttl", "3600", "--resolution", "10"],
    ["query", "gap_histogram"],
    ["query", "idle_returns", "-p", "idle_after_s=600"],
    ["query", "compactions"],
    ["query", "ttl_validation"],
    ["query", "steps"],
    ["report"],
]


def _run_all(cli: Cli) -> dict[str, str]:
    out = {}
    for argv in ANALYSES:
        code, stdout, stderr = cli(*argv, "--format", "json")
        assert code == 0, (argv, stderr)
        out[" ".join(argv)] = stdout
    return out


def _materialised(lake: Lake) -> bool:
    return sql.materialised(lake.connect(["requests"]), STEPS_VIEW)


def _round(value: object) -> object:
    """Floats to 9 significant digits: parallel sums may add in another order (last-bit noise)."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def _normalise(text: str) -> object:
    data = _round(json.loads(text))
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        # rows of one query: the order of rows with equal sort keys is not part of the contract
        return sorted(json.dumps(r, sort_keys=True) for r in data)
    return data


@pytest.fixture
def weka_lake(testdata: Path, cli: Cli) -> None:
    code, _, err = cli("import", "kvcache-tester", str(testdata / "weka_cc_traces"))
    assert code == 0, err


def test_stored_steps_answer_like_the_window(weka_lake: None, lake: Lake, cli: Cli) -> None:
    assert not _materialised(lake)  # never compacted: the window runs
    before = _run_all(cli)
    code, out, err = cli("compact", "--format", "json")
    assert code == 0, err
    assert any(r["table"] == STEPS_VIEW and r["files_after"] >= 1 for r in json.loads(out))
    assert _materialised(lake)
    after = _run_all(cli)
    for name in before:
        assert _normalise(after[name]) == _normalise(before[name]), name
    # and the stored rows are the query's rows: one per request with tokens
    con = lake.connect()
    stored, requests = con.execute(
        f"SELECT (SELECT count(*) FROM {STEPS_VIEW}), (SELECT count(*) FROM requests WHERE total_tokens > 0)"
    ).fetchall()[0]
    assert stored == requests > 2000


def test_stale_steps_are_not_used(weka_lake: None, lake: Lake, cli: Cli) -> None:
    assert cli("compact")[0] == 0
    assert _materialised(lake)
    _, gaps_before, _ = cli("gaps", "--format", "json")
    code, _, err = cli("import", "claude-code", str(EXAMPLES / "claude-transcript.jsonl"))
    assert code == 0, err
    assert not _materialised(lake)  # a new file: the window runs again
    _, gaps_after, _ = cli("gaps", "--format", "json")
    assert json.loads(gaps_after)["gaps"] > json.loads(gaps_before)["gaps"]
    # the next compaction stores steps for the grown lake
    assert cli("compact")[0] == 0
    assert _materialised(lake)
    assert _normalise(cli("gaps", "--format", "json")[1]) == _normalise(gaps_after)


#: selections that narrow the lake (kv-cache-tester times start at 1970-01-01 00:00; median 00:29)
SELECTIONS = [
    ["--since", "1970-01-01T00:30:00Z"],
    ["--until", "1970-01-01T00:30:00Z"],
    ["--session", "trace_0276"],
    ["--since", "1970-01-01T00:10:00Z", "--until", "1970-01-01T01:00:00Z"],
]


def test_a_selection_reads_the_stored_steps_too(weka_lake: None, lake: Lake, cli: Cli) -> None:
    """The window is the whole lake's for every selection, so stored steps answer a narrowed
    selection too, with the same figures as the window composed into the query."""
    argvs = [[*a, *s] for a in (["gaps"], ["ttl"], ["sessions"], ["working-set"]) for s in SELECTIONS]
    before = {}
    for argv in argvs:
        code, out, err = cli(*argv, "--format", "json")
        assert code == 0, (argv, err)
        before[" ".join(argv)] = out
    assert cli("compact")[0] == 0
    con = lake.connect()
    assert _materialised(lake)
    block, params = sql.selection_block(Selection(since=dt.datetime(1970, 1, 1, 0, 30, tzinfo=dt.UTC)))
    text = sql.statement(con, sql.load("gaps"), {"selection": block}, params)
    assert "row_number() OVER" not in text and "t_start >= $sel_0" in text
    for argv in argvs:
        code, out, err = cli(*argv, "--format", "json")
        assert code == 0, (argv, err)
        assert _normalise(out) == _normalise(before[" ".join(argv)]), argv


def test_every_per_stream_query_reads_the_stored_steps_like_the_window(lake: Lake) -> None:
    """Each query that reads request_steps gives the same rows from the stored steps as from the
    window composed into it, and reads the stored steps only while they are fresh."""
    from tests.test_analyses import fill
    from tests.test_queries import sorted_rows

    con = fill(lake).connect()
    per_stream = [n for n in sql.names() if sql.reads_steps(sql.load(n))]
    assert len(per_stream) == 10
    names = [*per_stream, "steps"]
    before = {n: sql.run(con, n) for n in names}
    narrow = {n: sql.run(con, n, {"since": "2026-08-01T10:10:00Z"}) for n in names}
    for n in names:
        assert "row_number() OVER" in sql.statement(con, sql.load(n)), n
    lake.compact("requests")
    con = lake.connect()
    assert sql.materialised(con, STEPS_VIEW)
    for n in names:
        text = sql.statement(con, sql.load(n))
        read = text.replace("/*@rows*/ ", "")  # sessions.sql's relation is a block (--by project)
        assert "row_number() OVER" not in text and "FROM request_steps" in read, n
        assert sorted_rows(sql.run(con, n).rows()) == sorted_rows(before[n].rows()), n
    # a narrower selection reads the stored steps too, and filters their rows like the window's
    since = {"since": "2026-08-01T10:10:00Z"}
    for n in names:
        assert "row_number() OVER" not in sql.statement(con, sql.load(n), None, since), n
        assert sorted_rows(sql.run(con, n, since).rows()) == sorted_rows(narrow[n].rows()), n


MIXES = [
    [],
    ["--by", "day"],
    ["--by", "model", "--by", "agent"],
    ["--by", "session"],
    ["--by", "user,source"],
    ["--by", "day", "--since", "2020-01-01", "--until", "2030-01-01"],
    ["--since", "2025-06-01T12:30:00Z"],  # inside a day: the rollup cannot answer, requests are summed
]


def test_the_stored_rollup_answers_mix_like_the_requests(weka_lake: None, lake: Lake, cli: Cli) -> None:
    from traceflow.store.lake import ROLLUP_VIEW

    before = [cli("mix", *argv, "--format", "json")[1] for argv in MIXES]
    code, out, err = cli("compact", "--format", "json")
    assert code == 0, err
    assert any(r["table"] == ROLLUP_VIEW and r["files_after"] >= 1 for r in json.loads(out))
    con = lake.connect()
    assert sql.materialised(con, ROLLUP_VIEW)
    after = [cli("mix", *argv, "--format", "json")[1] for argv in MIXES]
    for argv, b, a in zip(MIXES, before, after, strict=True):
        assert json.loads(a) == json.loads(b), argv
    # a model filter is answered from the rollup too, and agrees with a plain SUM over requests
    model = con.execute("SELECT model FROM requests WHERE model IS NOT NULL LIMIT 1").fetchall()[0][0]
    row = json.loads(cli("mix", "--model", model, "--format", "json")[1])
    want = con.execute(
        "SELECT count(*), sum(cache_read_tokens) FROM requests WHERE model = ?", [model]
    ).fetchall()[0]
    assert (row["requests"], row["cache_read_tokens"]) == (want[0], want[1])


def test_the_rollup_takes_only_whole_days() -> None:
    import datetime as dt

    from traceflow.analysis.mix import _rollup_where
    from traceflow.store.selection import Selection

    day = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
    assert _rollup_where(Selection(since=day)) == ("day >= ?", ["2026-08-01"])
    assert _rollup_where(Selection(since=day + dt.timedelta(hours=1))) is None
    # midnight in another zone is not a UTC day boundary
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert _rollup_where(Selection(until=dt.datetime(2026, 8, 2, tzinfo=plus2))) is None
    assert _rollup_where(Selection(until=dt.datetime(2026, 8, 2, 2, tzinfo=plus2))) == (
        "day < ?",
        ["2026-08-02"],
    )
