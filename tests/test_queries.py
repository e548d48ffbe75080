"""Named queries: every file in queries/ has a header, runs on a tiny lake (through traceflow and as
plain SQL in a bare DuckDB), returns the columns its header promises, and is documented."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.test_analyses import fill
from traceflow.analysis import gaps
from traceflow.errors import MissingParameter, QueryError, UnknownQuery, UsageError
from traceflow.store import sql
from traceflow.store.lake import DERIVED, Lake
from traceflow.store.measures import macros_sql
from traceflow.store.selection import Selection

REPO = Path(__file__).resolve().parents[1]
NAMES = sql.names()


@pytest.fixture
def con(lake: Lake) -> Any:
    return fill(lake).connect()


def test_the_expected_queries_are_packaged() -> None:
    for name in (
        "gaps",
        "gap_histogram",
        "ttl",
        "ttl_validation",
        "sessions",
        "idle_returns",
        "compactions",
        "load",
        "working_set",
        "token_mix",
        "tokens_by_session",
        "tokens_by_model",
        "reuse_by_day",
        "misses",
    ):
        assert name in NAMES


def _documented_text(name: str) -> str:
    """The statement a query's header documents: a per-stream query with the window it reads."""
    q = sql.load(name)
    return sql.with_steps(q.text, sql.load("steps").text) if sql.reads_steps(q) else q.text


@pytest.mark.parametrize("name", NAMES)
def test_header_documents_the_query(name: str) -> None:
    q = sql.load(name)
    assert q.summary and q.summary.endswith(".")
    assert q.returns, "a '-- returns:' line"
    declared = {p.name for p in q.params}
    used = set(sql.used_params(_documented_text(name)))
    assert used == declared, f"params used {sorted(used)} but declared {sorted(declared)}"
    assert all(p.doc for p in q.params)
    if sql.reads_steps(q):  # says where request_steps comes from
        assert "Reads request_steps" in q.description and "steps.sql" in q.description


@pytest.mark.parametrize("name", NAMES)
def test_query_runs_on_a_tiny_lake_with_the_promised_columns(con: Any, name: str) -> None:
    frame = sql.run(con, name)
    assert list(frame.columns) == list(sql.load(name).returns)
    assert frame.height > 0


def sorted_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows in a stable order, floats rounded: parallel sums may add in another order."""
    return sorted((tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows), key=repr)


@pytest.mark.parametrize("name", NAMES)
def test_query_file_runs_in_a_bare_duckdb(lake: Lake, name: str) -> None:
    """The files are plain SQL over the views: no traceflow needed to run them. A per-stream query
    runs as steps.sql's header says: request_steps made first from steps.sql, then the file."""
    fill(lake)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for macro in macros_sql():  # reuse_ratio, token_share (traceflow.store.measures)
        con.execute(macro)
    for table in ("requests", "events", "metric_points", "spans"):
        con.execute(lake.view_sql(table))
    for view in DERIVED:  # request_steps and request_rollup: views over requests (misses reads steps)
        con.execute(lake.derived_view_sql(view))
    q = sql.load(name)
    text = (REPO / "queries" / f"{name}.sql").read_text()
    params = {p.name: p.default for p in q.params}
    if sql.reads_steps(q):
        steps = (REPO / "queries" / "steps.sql").read_text().rstrip().rstrip(";")
        window = {k: params[k] for k in ("since", "until")}
        params = {k: v for k, v in params.items() if k in sql.used_params(text)}
        con.execute(f"CREATE TEMP TABLE {sql.STEPS} AS {steps}", window)
    rows = con.execute(text, params).fetchall()
    assert rows
    # the same rows as traceflow's route (the window composed into the query)
    assert sorted_rows(rows) == sorted_rows(sql.run(lake.connect(), name).rows())


def test_the_window_is_written_once() -> None:
    """Only steps.sql orders the streams; every per-stream query reads its rows as request_steps."""
    texts = {name: (REPO / "queries" / f"{name}.sql").read_text() for name in NAMES}
    assert [n for n, t in texts.items() if "PARTITION BY stream_key" in t] == ["steps"]
    per_stream = {n for n in NAMES if sql.reads_steps(sql.load(n))}
    assert per_stream == {
        "gaps",
        "gap_histogram",
        "idle_returns",
        "compactions",
        "sessions",
        "ttl",
        "ttl_validation",
        "working_set",
        "misses",
        "load",
    }


def test_the_window_is_composed_as_the_first_cte() -> None:
    cte = "WITH request_steps AS NOT MATERIALIZED (\nSELECT 1 AS x\n)"
    plain = "-- q: a query.\nSELECT * FROM request_steps"
    assert sql.with_steps(plain, "SELECT 1 AS x") == f"{cte}\n{plain}"
    body = "a AS (SELECT * FROM request_steps) SELECT * FROM a"
    merged = sql.with_steps(f"-- q: a query.\n\nwith {body}", "SELECT 1 AS x")
    assert merged == f"{cte},\n{body}"
    assert duckdb.sql(merged).fetchall() == [(1,)]
    with pytest.raises(QueryError, match="RECURSIVE"):
        sql.with_steps("WITH RECURSIVE a AS (SELECT 1) SELECT * FROM a", "SELECT 1 AS x")


def test_a_selection_filters_the_rows_of_the_window(con: Any) -> None:
    """The window runs over every request of the sessions that have a selected request; the selection
    block filters its rows afterwards, with the request's time read as the steps' t_start."""
    block, params = sql.selection_block(
        Selection(since=dt.datetime(2026, 8, 1, tzinfo=dt.UTC), sessions=("B",))
    )
    text = sql.statement(con, sql.load("gaps"), {"selection": block, "order": ""}, params)
    assert text.startswith("WITH request_steps AS NOT MATERIALIZED (") and "/*@order*/  /*@end*/" in text
    window, _, query = text.partition("\n)\n-- gaps:")
    assert "/*@selection*/ true /*@end*/" in window  # the window's own rows: not filtered
    roots = "coalesce(parent_session_id, session_id, event_id)"
    assert f"/*@roots*/ {roots} IN (SELECT {roots} FROM requests WHERE" in window
    assert f"AND {block}) /*@end*/" in window  # the sessions that have a selected request
    assert "(t_start >= $sel_0 AND coalesce(parent_session_id, session_id) IN ($sel_1))" in query
    assert "request_time" not in query
    # without a selection the window runs over every request
    whole = sql.statement(con, sql.load("gaps"), {"selection": "(true)"}, {})
    assert "/*@roots*/ true /*@end*/" in whole
    # a query that does not read the window keeps its own selection block
    text = sql.statement(con, sql.load("token_mix"), {"selection": block}, params)
    assert "request_steps" not in text and "$sel_0" in text


def test_histogram_bins_match_the_library() -> None:
    text = (REPO / "queries" / "gap_histogram.sql").read_text()
    edges = [float(x) for x in re.findall(r"\(\d+, ([\d.]+), [\d.NUL]+\)", text)]
    assert tuple(edges) == gaps.BIN_EDGES
    # steps.sql's gap_bin: the same edges, in microseconds, numbered from 0
    steps = (REPO / "queries" / "steps.sql").read_text()
    bins = re.findall(r"prev_end_us, 0\) < (\d+) THEN (\d+)", steps)
    assert [int(us) / 1e6 for us, _ in bins] == list(gaps.BIN_EDGES[1:])
    assert [int(i) for _, i in bins] == list(range(len(gaps.BIN_EDGES) - 1))
    assert f"ELSE {len(gaps.BIN_EDGES) - 1} END AS gap_bin" in steps


def test_params_bind_from_strings(con: Any) -> None:
    a = sql.run(con, "ttl", {"ttl_s": "600"})
    assert a["ttl_s"].unique().to_list() == [600.0]
    later = sql.run(con, "gaps", {"since": "2026-08-01T10:10:00Z"})
    assert later.height == 4  # a3 (10:10:20), a4, a5, a6: a3 keeps its gap after a2
    top = sql.run(con, "tokens_by_session", {"limit": "2"})
    assert top.height == 2


def test_unknown_and_missing_parameters(con: Any) -> None:
    with pytest.raises(UnknownQuery, match="known: "):
        sql.load("no_such_query")
    with pytest.raises(UsageError, match="has no parameter colour"):
        sql.run(con, "gaps", {"colour": "red"})
    q = sql.parse(
        "needs",
        "-- needs: a query with a required parameter.\n-- params: $who VARCHAR  the user\n"
        "-- returns: n\n\nSELECT count(*) AS n FROM requests WHERE user_id = $who",
    )
    with pytest.raises(MissingParameter, match="--param who=VALUE"):
        sql.bind(q, q.text, {})
    assert sql.bind(q, q.text, {"who": "u1"}) == {"who": "u1"}


def test_header_parsing() -> None:
    q = sql.parse(
        "x",
        "-- x: what it answers.\n-- More words.\n-- params:  $a DOUBLE = 300   seconds\n"
        "--          $b VARCHAR = 'it''s'  a string\n--          $c TIMESTAMPTZ = NULL  a time\n"
        "-- returns: one, two,\n--          three\n\nSELECT 1",
    )
    assert q.summary == "what it answers." and q.description == "More words."
    assert [(p.name, p.type, p.default, p.has_default) for p in q.params] == [
        ("a", "DOUBLE", 300, True),
        ("b", "VARCHAR", "it's", True),
        ("c", "TIMESTAMPTZ", None, True),
    ]
    assert q.returns == ("one", "two", "three")
    with pytest.raises(QueryError):
        sql.parse("y", "SELECT 1")
    with pytest.raises(QueryError, match="names itself"):
        sql.parse("y", "-- z: wrong name.\nSELECT 1")


def test_blocks_and_selection(con: Any) -> None:
    q = sql.load("gaps")
    with pytest.raises(QueryError, match="no block"):
        q.sql({"nonexistent": "x"})
    block, params = sql.selection_block(Selection(agents=("claude-code",), sessions=("B", "C")))
    assert "$sel_0" in block and params == {"sel_0": "claude-code", "sel_1": "B", "sel_2": "C"}
    frame = sql.run(con, "gaps", params, blocks={"selection": block})
    assert set(frame["session_id"]) == {"B", "C"}


def test_used_params_ignores_comments_and_strings() -> None:
    assert sql.used_params("SELECT $a, '$b' -- $c\n/* $d */ FROM t WHERE x = $a AND y = $e") == ["a", "e"]


def test_listing() -> None:
    frame = sql.listing()
    assert frame["name"].to_list() == NAMES
    row = frame.filter(frame["name"] == "ttl").to_dicts()[0]
    assert "ttl_s=300" in row["params"] and "rewrite_tokens" in row["returns"]


def test_every_query_is_documented_in_the_docs() -> None:
    readme = (REPO / "docs" / "lake.md").read_text()
    assert [n for n in NAMES if f"`{n}`" not in readme] == []
