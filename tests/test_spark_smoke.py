"""Spark in a local run: one small lake on one Spark session, a handful of queries that must give
DuckDB's answers. The full cross-engine suites (tests/test_conformance.py, tests/test_differential.py:
every packaged query, analysis and export over several lakes) run on CI (``CI=1``); a local run
leaves them there (tests/conftest.py ``LEFT_TO_CI``) and checks with this module that Spark still
starts, registers the lake's views (deduplication, the derived columns) and runs translated queries,
a ``--where`` selection and an export alike. The other Spark tests a local run keeps share this
session (one JVM): tests/test_filters.py's (rank quantiles under a ``--where``) and
tests/test_fleet.py's (Python tasks on Spark).

The lake is the conformance suite's synthetic lake at a tenth of its sessions: sub-agents, requests
without a session, duplicates that must lose and duplicates that must win, files in an older schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conformance_support import differences, same_object, synthetic_lake
from traceflow.analysis import mix
from traceflow.replay.export import export
from traceflow.store import filters, sql
from traceflow.store.lake import Lake
from traceflow.store.selection import Selection

pytestmark = pytest.mark.spark

#: The views both engines register (misses.sql reads the agents' restarts from metric_points).
VIEWS = ["requests", "events", "metric_points"]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    return synthetic_lake(tmp_path_factory.mktemp("smoke") / "lake", sessions=12)


@pytest.fixture(scope="module")
def pair(spark: Any, small: Lake) -> Iterator[tuple[Any, Any]]:
    """The small lake's DuckDB connection and a Spark engine over it."""
    from traceflow.engines.spark import SparkEngine

    con = small.connect(VIEWS)
    engine = SparkEngine(spark, small, VIEWS)
    try:
        yield con, engine
    finally:
        engine.close()
        con.close()


def _check(reference: Any, other: Any) -> None:
    found = same_object(reference, other)
    assert not found, "\n".join(found[:10])


def test_the_views_hold_the_same_rows(pair: tuple[Any, Any], small: Lake) -> None:
    """Every column of the deduplicated requests (the derived ones included): the copies that must
    lose are gone on both engines."""
    con, engine = pair
    query = "SELECT * FROM requests"
    reference = sql.query_frame(con, query)
    raw = sum(pq.ParquetFile(f).metadata.num_rows for f in small.files("requests"))
    assert 0 < reference.height < raw
    assert not differences(reference, sql.query_frame(engine, query))


@pytest.mark.parametrize("name", ["token_mix", "sessions", "gaps", "misses"])
def test_query(pair: tuple[Any, Any], name: str) -> None:
    con, engine = pair
    reference = sql.run(con, name)
    assert reference.height > 0
    _check(reference, sql.run(engine, name))


def test_mix_under_a_where(pair: tuple[Any, Any]) -> None:
    """The mix by model under a ``--where`` selection (the conditions become SQL on both engines; the
    rank quantiles under one are tests/test_filters.py's Spark test, which a local run keeps)."""
    con, engine = pair
    sel = Selection(conditions=filters.parse(["model!=gpt-5"]))
    by_model = mix.token_mix(con, sel, ("model",))
    assert "gpt-5" not in by_model["model"].to_list() and by_model.height > 1
    _check(by_model, mix.token_mix(engine, sel, ("model",)))


def test_export_is_byte_identical(pair: tuple[Any, Any], small: Lake, tmp_path: Path) -> None:
    """The Mooncake export: the scan, dedup and order on Spark, the hash ids in the driver."""
    _, engine = pair
    by_duck, by_spark = tmp_path / "duck.jsonl", tmp_path / "spark.jsonl"
    export(small, None, "mooncake", by_duck)
    export(engine, None, "mooncake", by_spark)
    assert by_duck.read_bytes() == by_spark.read_bytes() and by_duck.stat().st_size > 0
