"""The same numbers on every engine: each packaged query and each analysis on DuckDB (the reference)
and on Spark local mode (``traceflow.engines.spark``) over the same lakes, and the queries chDB
(embedded ClickHouse) can run; ``export`` writes the same bytes from both engines (Spark scans,
deduplicates and orders the requests, the hash ids are derived in the driver from its frame).

Lakes: the public traces in tests/data (the Mooncake conversation trace and the kv-cache-tester
sessions), a synthetic lake with duplicates and mixed schemas (tests/conformance_support.py),
that lake compacted (DuckDB reads the stored steps and rollup there, Spark the deduplicated base),
and that lake written to the S3 test server (moto): DuckDB and chDB read ``s3://`` and must find what
DuckDB finds in a local copy of the same objects (the engines are compared on the synthetic lake; Spark
would read that copy too, as its S3A connector needs the hadoop-aws jars, which CI does not download).
Counts, integer sums, times and strings must be identical, quantiles and other floats equal to 1e-12
relative (summation order). Spark runs once per session (``local[2]``, 2 shuffle partitions); CI
installs pyspark and Java (``.ci/run``), where a missing pyspark fails instead of skipping.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from tests.conformance_support import differences, same_object, synthetic_lake
from tests.conftest import FULL, TESTDATA, s3_test_server
from traceflow.analysis import gaps, load, misses, mix, sessions, ttl, working_set
from traceflow.importers import get
from traceflow.importers.run import run_import
from traceflow.replay.export import export, manifest_path
from traceflow.store import sql
from traceflow.store.lake import DERIVED, Lake
from traceflow.store.selection import Selection

pytestmark = pytest.mark.spark

#: The lakes every query and analysis runs on; the compacted and the S3 lake join them on CI (``FULL``).
#: A local run compares their views row for row instead: the compacted lake's on both engines
#: (:func:`test_compacted_views_on_both_engines`: DuckDB reads the stored steps and rollup, Spark
#: derives them from the deduplicated base), the S3 lake's with its local copy's
#: (:func:`test_s3_views_read_the_local_rows`). Each query and analysis is SQL over those views, which
#: the synthetic lake (the same rows before compaction) runs on both engines.
LAKES = ("public", "synthetic", *(("compacted", "s3") if FULL else ()))


#: The public lake's share of the public traces. CI (``FULL``): the first third of the Mooncake
#: conversation trace (its first 4,000 requests) and every third kv-cache-tester session by name (12
#: of 36: 584 requests and 845,331 of the 2,410,654 blocks, from the largest sessions to the smallest).
#: A local run: the first 1,000 Mooncake requests and every ninth session from the tenth (trace_0254,
#: trace_0291, trace_0489: a large, a middling and a small one). Spark's time grows with the blocks
#: that the block-level queries unnest.
MOONCAKE_REQUESTS = 4_000 if FULL else 1_000
KVCACHE_FIRST, KVCACHE_EVERY = (0, 3) if FULL else (9, 9)


def public_share(root: Path) -> tuple[Path, list[Path]]:
    """The Mooncake requests (a file under ``root``) and the kv-cache-tester traces the public lake holds."""
    mooncake = root / "mooncake_conversation_trace.jsonl"
    with (TESTDATA / mooncake.name).open("rb") as src:
        mooncake.write_bytes(b"".join(line for _, line in zip(range(MOONCAKE_REQUESTS), src, strict=False)))
    traces = sorted((TESTDATA / "weka_cc_traces").glob("trace_*.json"))[KVCACHE_FIRST::KVCACHE_EVERY]
    return mooncake, traces


class Lakes:
    """The local lakes by name, each built when a test first asks for it: the worker that runs the
    synthetic and S3 lakes' part of the module (:func:`spark_part`) does not import the public traces."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[str, Lake] = {}

    def __getitem__(self, name: str) -> Lake:
        if name not in self.built:
            self.built[name] = getattr(self, f"_{name}")(self.root / name)
        return self.built[name]

    def _public(self, path: Path) -> Lake:
        public = Lake(path)
        mooncake, traces = public_share(self.root)
        run_import(public, get("mooncake"), [mooncake])
        run_import(public, get("kvcache-tester"), traces)
        return public

    def _synthetic(self, path: Path) -> Lake:
        return synthetic_lake(path)

    def _compacted(self, path: Path) -> Lake:
        compacted = synthetic_lake(path)
        for table in ("requests", "events"):
            compacted.compact(table)
        return compacted


@pytest.fixture(scope="session")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> Lakes:
    return Lakes(tmp_path_factory.mktemp("conformance"))


#: The module's two parts (tests/conftest.py sends each to one pytest-xdist worker, one JVM each), by
#: lake: the synthetic and the S3 lake's tests; the public and the compacted lake's with the tests of
#: no lake. Each part costs about 240 s of CPU (docs/testing.md).
SYNTHETIC_PART = ("synthetic", "s3")


def spark_part(item: pytest.Item) -> str:
    """The part of the module ``item`` runs in (read by tests/conftest.py)."""
    callspec = getattr(item, "callspec", None)
    lake = callspec.params.get("lake_name") if callspec else None
    return "synthetic+s3" if lake in SYNTHETIC_PART else "public+compacted"


@pytest.fixture(scope="module")
def s3_lakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lake, Lake]]:
    """The synthetic lake written through the lake's own publishing to ``s3://conformance/lake`` on
    the S3 test server (moto, 127.0.0.1, a free port), and a local copy of its objects (s3fs) that
    Spark reads. The AWS variables name the server while this module runs."""
    with s3_test_server(tmp_path_factory.mktemp("s3-state")):
        from traceflow.store.objects import filesystem

        fs = filesystem()
        fs.mkdir("conformance")  # the bucket
        lake = synthetic_lake("s3://conformance/lake")
        copy = Lake(tmp_path_factory.mktemp("s3-copy"))
        fs.get("conformance/lake/v1", str(copy.base), recursive=True)
        for table in ("requests", "events"):  # the same objects, by name
            names = [sorted(lk._rel(table, n) for n in lk.file_names(table)) for lk in (lake, copy)]
            assert names[0] and names[0] == names[1]
        yield lake, copy


def _lakes(request: pytest.FixtureRequest, lakes: Lakes, name: str) -> tuple[Lake, Lake]:
    """The lake the reference reads and the one it is compared with: the same, except for ``s3`` (the
    local copy of its objects)."""
    if name == "s3":
        pair: tuple[Lake, Lake] = request.getfixturevalue("s3_lakes")
        return pair
    return lakes[name], lakes[name]


#: The views both engines register: misses.sql reads the agents' restarts from metric_points.
VIEWS = ["requests", "events", "metric_points"]


class Engines:
    """The DuckDB connection over one lake and the engine it is compared with: Spark over the same lake
    (Spark's views are per session, so they are registered again when a test moves to another lake),
    or, for the ``s3`` lake, DuckDB over the local copy of its objects (what ``s3://`` adds is the
    reading through S3; Spark is compared with DuckDB on the same rows in the synthetic lake)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.current: str | None = None
        self.engine: Any = None
        self.connections: dict[str, Any] = {}  # one per lake (a connection to S3 lists it: seconds)

    def pair(self, name: str, lake: Lake, other_lake: Lake | None = None) -> tuple[Any, Any]:
        from traceflow.engines.spark import SparkEngine

        if name not in self.connections:
            self.connections[name] = lake.connect(VIEWS)
        if name == "s3":
            assert other_lake is not None and other_lake.url is None
            if "s3-copy" not in self.connections:
                self.connections["s3-copy"] = other_lake.connect(VIEWS)
            return self.connections[name], self.connections["s3-copy"]
        if self.current != name:
            self.engine = SparkEngine(self.spark, other_lake or lake, VIEWS)
            self.current = name
        return self.connections[name], self.engine


@pytest.fixture(scope="session")
def engines(spark: Any) -> Engines:
    return Engines(spark)


def _check(reference: Any, other: Any) -> None:
    found = same_object(reference, other)
    assert not found, "\n".join(found[:10])


# -- every packaged query ---------------------------------------------------------------------------

#: Parameters besides the defaults that each query also runs with (a window inside the data).
WINDOW = {"since": "2026-03-01 23:00:00", "until": "2026-03-02 03:00:00"}


@pytest.mark.parametrize("name", sql.names())
@pytest.mark.parametrize("lake_name", LAKES)  # lake by lake: Spark registers its views once per lake
def test_query(
    request: pytest.FixtureRequest, engines: Engines, lakes: Lakes, lake_name: str, name: str
) -> None:
    con, other = engines.pair(lake_name, *_lakes(request, lakes, lake_name))
    _check(sql.run(con, name), sql.run(other, name))
    if lake_name == "synthetic" and "since" in {p.name for p in sql.load(name).params}:
        _check(sql.run(con, name, WINDOW), sql.run(other, name, WINDOW))


@pytest.mark.parametrize("view", [*VIEWS, *DERIVED])
@pytest.mark.parametrize("lake_name", ("compacted",))
def test_compacted_views_on_both_engines(engines: Engines, lakes: Lakes, lake_name: str, view: str) -> None:
    """The compacted lake on both engines: each table view holds the same rows, and so do the steps
    and the rollup (their packaged queries), which DuckDB reads from the files the compaction stored
    and Spark derives from the compacted, deduplicated base."""
    con, spark = engines.pair(lake_name, lakes[lake_name])
    if view in DERIVED:
        assert sql.materialised(con, view)  # DuckDB reads what the compaction stored
        reference, other = sql.run(con, DERIVED[view]), sql.run(spark, DERIVED[view])
    else:
        query = f"SELECT * FROM {view}"
        reference, other = sql.query_frame(con, query), sql.query_frame(spark, query)
    assert reference.height > 0 or view == "metric_points"
    _check(reference, other)


@pytest.mark.parametrize("view", [*VIEWS, *DERIVED])
@pytest.mark.parametrize("lake_name", ("s3",))
def test_s3_views_read_the_local_rows(
    request: pytest.FixtureRequest, engines: Engines, lakes: Lakes, lake_name: str, view: str
) -> None:
    """Each view of the S3 lake (read through s3fs) holds the rows of the same view over a local copy
    of its objects: every column, deduplicated alike, derived alike."""
    con, copy = engines.pair(lake_name, *_lakes(request, lakes, lake_name))
    query = f"SELECT * FROM {view}"
    reference = sql.query_frame(con, query)
    assert reference.height > 0 or view == "metric_points"
    _check(reference, sql.query_frame(copy, query))


# -- every analysis ---------------------------------------------------------------------------------

SEL = Selection(models=("claude-sonnet-4-5", "gpt-5"))

ANALYSES: dict[str, Callable[[Any], Any]] = {
    "mix": lambda c: mix.token_mix(c),
    "mix_by": lambda c: mix.token_mix(c, SEL, ("model", "day", "agent")),
    "gaps": lambda c: gaps.gap_report(c, None, gaps.DEFAULT_TTLS, ("kind", "day")),
    "gaps_histogram": lambda c: gaps.gap_histogram(c),
    "gaps_rows": lambda c: gaps.gap_rows(c, SEL),
    "ttl": lambda c: ttl.ttl_report(c, None, ttl.ttl_list([60.0, 1800.0])).as_dict(),
    "sessions": lambda c: sessions.sessions(c),
    "sessions_summary": lambda c: sessions.session_summary(c, None, ("day",)),
    "load": lambda c, s=None: load.load_series(c, s, 60.0),
    "working_set": lambda c, s=None: working_set.working_set_summary(c, s, (300.0, 3600.0), 60.0),
    "misses": lambda c: misses.miss_rows(c),
    "misses_by": lambda c: misses.miss_counts(c, SEL, ("day",)),
}


#: The analyses over one time axis, and the selection each lake needs for one time base (the public
#: lake holds two public traces, each its own base, which those analyses refuse to mix).
ONE_AXIS = ("load", "working_set")
ONE_BASE = {"public": Selection(sources=("kvcache-tester",))}


@pytest.mark.parametrize("analysis", ANALYSES)
@pytest.mark.parametrize("lake_name", LAKES)
def test_analysis(
    request: pytest.FixtureRequest, engines: Engines, lakes: Lakes, lake_name: str, analysis: str
) -> None:
    con, other = engines.pair(lake_name, *_lakes(request, lakes, lake_name))
    if analysis in ONE_AXIS and lake_name in ONE_BASE:
        sel = ONE_BASE[lake_name]
        _check(ANALYSES[analysis](con, sel), ANALYSES[analysis](other, sel))
        return
    _check(ANALYSES[analysis](con), ANALYSES[analysis](other))


def test_quantiles_are_exact(engines: Engines, lakes: Lakes) -> None:
    """The quantiles Spark computes by rank (``traceflow.store.quantiles``, not ``percentile``) are
    DuckDB's ``quantile_cont`` bit for bit, grouped or not."""
    con, spark = engines.pair("synthetic", lakes["synthetic"])
    cols = ["p50_s", "p90_s", "p99_s", "human_p50_s", "human_p90_s", "agent_p99_s"]
    for by in ((), ("kind", "day")):
        a = gaps.gap_summary(con, by=by).select([*by, *cols]).rows()
        b = gaps.gap_summary(spark, by=by).select([*by, *cols]).rows()
        assert a == b
    scols = ["day", "requests_p50", "duration_p90_s", "context_end_p90", "growth_per_turn_p50"]
    a = sessions.session_summary(con, None, ("day",)).select(scols).rows()
    b = sessions.session_summary(spark, None, ("day",)).select(scols).rows()
    assert a == b


def test_quantiles_by_rank_on_adversarial_values(spark: Any) -> None:
    """The rank SQL on Spark against DuckDB's quantile_cont over extremes, subnormals, infinities,
    NaN, repeated values and groups of one and two values, bit for bit (zeros' signs aside)."""
    import duckdb

    from tests.test_quantiles import COLUMNS, KEYS, _bits, adversarial_rows
    from traceflow.engines.rewrite import to_spark
    from traceflow.store.groups import Keys
    from traceflow.store.quantiles import grouped_sql

    rows = adversarial_rows()
    con = duckdb.connect()
    con.execute("CREATE TABLE t (grp VARCHAR, kind VARCHAR, x DOUBLE, i BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    frame = spark.createDataFrame(rows, "grp STRING, kind STRING, x DOUBLE, i BIGINT")
    frame.createOrReplaceTempView("adversarial_t")
    try:
        for keys in (KEYS, Keys("", "", "")):
            want = con.sql(grouped_sql(keys, COLUMNS).replace("{q}", "(SELECT * FROM t)")).fetchall()
            text = to_spark(
                grouped_sql(keys, COLUMNS, by_rank=True).replace("{q}", "(SELECT * FROM adversarial_t)")
            )
            got = [tuple(r) for r in spark.sql(text).collect()]
            assert len(got) == len(want)
            for w, g in zip(want, got, strict=True):
                assert _bits(list(g)) == _bits(list(w)), (w, g)
    finally:
        spark.catalog.dropTempView("adversarial_t")


def test_duplicates_resolved_alike(engines: Engines, lakes: Lakes) -> None:
    """The synthetic lake's duplicates: the complete copy beats a later, less complete one; among
    equally complete copies the newest wins, on both engines."""
    con, spark = engines.pair("synthetic", lakes["synthetic"])
    q = "SELECT agent_version, count(*) AS n, sum(output_tokens) AS out FROM requests GROUP BY 1 ORDER BY 1"
    a, b = sql.query_frame(con, q), sql.query_frame(spark, q)
    assert a["agent_version"].to_list() == ["1.0", "2.0"]
    assert not differences(a, b, ordered=True)
    raw = sum(pq.ParquetFile(f).metadata.num_rows for f in lakes["synthetic"].files("requests"))
    assert raw > a["n"].sum()


def test_replayed_copies_resolved_alike(spark: Any, tmp_path: Path) -> None:
    """One capture replayed for five users (the same request ids, equally complete, stored at the
    same time): both engines' views and compactions keep the same copy of every request, the one
    stored first (traceflow.store.measures.dedup_order), and the gaps agree."""
    from tests.test_dedup_order import _replayed
    from traceflow.engines.spark import SparkEngine, compact

    by_duck, by_spark = Lake(tmp_path / "duck"), Lake(tmp_path / "spark")
    _replayed(by_duck, sessions=30, turns=8, files=3)
    _replayed(by_spark, sessions=30, turns=8, files=3)
    q = "SELECT event_id, user_id, session_id FROM requests ORDER BY event_id"
    kept = sql.query_frame(by_duck.connect(), q)
    assert kept["user_id"].unique().to_list() == ["user-0"]  # written first
    engine = SparkEngine(spark, by_duck, ["requests", "events"])
    assert not differences(kept, sql.query_frame(engine, q), ordered=True)
    _check(gaps.gap_report(by_duck.connect()), gaps.gap_report(engine))
    compact(spark, by_spark, "requests")
    assert not differences(kept, sql.query_frame(by_spark.connect(), q), ordered=True)


# -- export ---------------------------------------------------------------------------------------

EXPORTS = {"mooncake": "trace.jsonl", "aiperf": "trace.jsonl", "kvcache-tester": "traces"}


def _exported(out: Path) -> dict[str, bytes]:
    """The bytes of an export (a file, or a directory's files by name)."""
    files = sorted(out.iterdir()) if out.is_dir() else [out]
    return {f.name: f.read_bytes() for f in files}


def _manifest(out: Path) -> dict[str, Any]:
    """The export's manifest without its one moment-dependent field (``created_at``)."""
    manifest = orjson.loads(manifest_path(out).read_bytes())
    assert manifest.pop("created_at")
    return dict(manifest)


@pytest.mark.parametrize("fmt", EXPORTS)
@pytest.mark.parametrize("lake_name", ("public", "synthetic", "s3"))
def test_export_is_byte_identical(
    request: pytest.FixtureRequest,
    engines: Engines,
    lakes: Lakes,
    lake_name: str,
    fmt: str,
    tmp_path: Path,
) -> None:
    """The lake scan, dedup and order run on Spark, the hash ids in the driver: the same files (for
    ``s3``: reading through S3 writes what the local copy writes)."""
    duck_lake, other_lake = _lakes(request, lakes, lake_name)
    _, other = engines.pair(lake_name, duck_lake, other_lake)
    by_duck, by_other = tmp_path / "duck" / EXPORTS[fmt], tmp_path / "other" / EXPORTS[fmt]
    by_duck.parent.mkdir()  # an output file's folder must exist
    by_other.parent.mkdir()
    sel = ONE_BASE.get(lake_name)  # an export is one time axis
    export(duck_lake, sel, fmt, by_duck)
    export(other, sel, fmt, by_other)
    assert _exported(by_duck) == _exported(by_other)
    assert _manifest(by_duck) == _manifest(by_other)


def test_export_command_on_spark(spark: Any, lakes: Lakes, tmp_path: Path) -> None:
    """``traceflow export --engine spark`` (the session is the fixture's: getOrCreate) with a
    selection and --limit writes what the DuckDB default writes."""
    from typer.testing import CliRunner

    from traceflow.cli.app import app, register_all

    register_all()
    summaries = []
    for engine in ("duckdb", "spark"):
        out = tmp_path / engine / "trace.jsonl"
        out.parent.mkdir()  # an output file's folder must exist
        args = ["export", "aiperf", "-o", str(out), "--data", str(lakes["synthetic"].root), "--limit", "300"]
        result = CliRunner().invoke(app, [*args, "--model", "gpt-5", "--engine", engine, "--format", "json"])
        assert result.exit_code == 0, result.output
        summaries.append(
            {k: v for k, v in orjson.loads(result.stdout).items() if k not in ("output", "manifest")}
        )
    spark.conf.set("spark.sql.shuffle.partitions", "2")  # the CLI's session() set its own default
    assert summaries[0] == summaries[1] and summaries[0]["requests"] == 300
    assert _exported(tmp_path / "duckdb" / "trace.jsonl") == _exported(tmp_path / "spark" / "trace.jsonl")


# -- Spark compaction -------------------------------------------------------------------------------


def test_spark_compaction_matches_duckdb(spark: Any, tmp_path: Path) -> None:
    from traceflow.engines.spark import SparkEngine, compact

    by_duck = synthetic_lake(tmp_path / "duck")
    by_spark = synthetic_lake(tmp_path / "spark")
    before = sorted(f.parent.name for f in by_spark.files("requests"))
    assert by_duck.compact("requests")[1] == compact(spark, by_spark, "requests")[1]
    assert set(by_spark.files("requests")) == by_spark.deduped_files("requests")  # the marker
    assert len(by_spark.files("requests")) == len(set(before))  # one file per partition
    assert (by_spark.state_dir / "derived" / "request_steps.json").exists()  # derived views stored
    q = "SELECT * EXCLUDE (ingested_at) FROM requests"
    _check(sql.query_frame(by_duck.connect(), q), sql.query_frame(by_spark.connect(), q))
    engine = SparkEngine(spark, by_spark, ["requests", "events"])
    _check(gaps.gap_report(by_duck.connect()), gaps.gap_report(engine))
    assert compact(spark, by_spark, "requests") == (len(set(before)), len(set(before)))  # nothing to do


# -- chDB (embedded ClickHouse) ----------------------------------------------------------------------


@pytest.mark.parametrize("lake_name", ("synthetic", "s3"))
def test_chdb_mix(request: pytest.FixtureRequest, lakes: Lakes, lake_name: str) -> None:
    """chDB reads the lake (local files, or the S3 test server through its ``s3`` table function)
    with the same dedup (``LIMIT 1 BY``) and gives the same mix."""
    import chdb  # a test dependency (.[test]): missing fails, not skips

    lake, _ = _lakes(request, lakes, lake_name)
    glob = lake.glob("requests")
    if lake.url is not None:
        endpoint = os.environ["AWS_ENDPOINT_URL"]
        source = f"s3('{endpoint}/{glob[len('s3://') :]}', 'testing', 'testing', 'Parquet')"
    else:
        source = f"file('{glob}', Parquet)"
    dedup = (
        f"SELECT * FROM {source} ORDER BY event_id, "
        "coalesce(cold_input_tokens, 0) + coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0)"
        " + coalesce(output_tokens, 0) DESC, ingested_at DESC LIMIT 1 BY event_id"
    )
    got = chdb.query(
        f"SELECT count(), sum(cold_input_tokens), sum(cache_read_tokens), sum(cache_write_tokens), "
        f"sum(output_tokens) FROM ({dedup})",
        "CSV",
    )
    row = [int(v) for v in str(got).strip().split(",")]
    ref = mix.token_mix(lake.connect()).row(0)
    assert row == list(ref[:5])
