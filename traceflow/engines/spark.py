"""The analyses on Apache Spark: a session pinned to UTC, the lake's tables as deduplicating temp views,
and :class:`SparkEngine`, which runs the packaged queries' DuckDB text through
:func:`traceflow.engines.rewrite.to_spark` (a syntax tree: exact translations, the rest refused).

``traceflow mix --engine spark`` (and gaps, ttl, sessions, load, working-set, misses) reads the same
Parquet files as the embedded DuckDB, through views that keep one row per ``event_id`` chosen
exactly as :meth:`traceflow.store.lake.Lake.view_sql` chooses it, so both engines give the same
numbers (``tests/test_conformance.py``). The master is ``local[*]`` unless ``--spark-remote`` names a
cluster (``spark://host:7077``, ``yarn``, ...) or a Spark Connect server (``sc://host:15002``); a
remote cluster must see the lake at the same path (a shared filesystem, or an object store).

An ``s3://bucket/prefix`` lake is read as ``s3a://bucket/prefix/...`` (:func:`spark_path`) with the
``spark.hadoop.fs.s3a.*`` settings that the AWS variables give (:func:`s3a_conf`: endpoint,
path-style access, region, credentials); Spark needs the hadoop-aws jars for that
(``--packages org.apache.hadoop:hadoop-aws:<Spark's Hadoop version>``, :data:`HADOOP_AWS`).

:func:`compact` is ``traceflow compact`` as a Spark job: the same global dedup, one file per ``dt``
partition, the same staging, publish and ``deduped`` marker, so DuckDB reads its output as a base.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from traceflow import config
from traceflow.errors import LakeError, QueryError, UsageError
from traceflow.schema import REQUESTS, TABLES
from traceflow.store.lake import Lake
from traceflow.store.measures import SOURCE_FILE, SOURCE_ROW, dedup_order, request_columns_sql

if TYPE_CHECKING:
    import polars as pl
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")
R = TypeVar("R")

#: The pyspark version the conformance suite runs (``pip install 'traceflow[spark]'``).
SPARK_VERSION = "4.3.0"

#: The hadoop-aws package for ``s3a://`` (its version must be the Hadoop of the pyspark jars: 3.5.0 in
#: pyspark 4.3.0's ``jars/hadoop-client-api-*.jar``).
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
_S3A = "spark.hadoop.fs.s3a."

#: Session settings every traceflow Spark session gets (``UTC`` is what makes days agree).
SETTINGS: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.mergeSchema": "true",
}

#: The lake's DuckDB column types that Spark SQL spells otherwise (``BIGINT``, ``DOUBLE`` and
#: ``BOOLEAN`` are the same in both).
_RENAMED_TYPES = {"VARCHAR": "STRING", "INTEGER": "INT", "TIMESTAMPTZ": "TIMESTAMP"}
_SAME_TYPES = frozenset({"BIGINT", "DOUBLE", "BOOLEAN"})


def spark_type(duck: str) -> str:
    """The Spark SQL type of a lake column's DuckDB type (``BIGINT[]`` -> ``ARRAY<BIGINT>``)."""
    if duck.endswith("[]"):
        return f"ARRAY<{spark_type(duck[:-2])}>"
    if duck in _SAME_TYPES:
        return duck
    return _RENAMED_TYPES[duck]


def local_defaults(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a session started here (not Spark Connect) gets unless the caller's ``conf`` says otherwise:
    the driver heap (``TRACEFLOW_SPARK_DRIVER_MEMORY``, 2g) and a shuffle width for a few cores."""
    return {
        "spark.driver.memory": config.get("spark_driver_memory", environ) or "2g",
        "spark.sql.shuffle.partitions": "8",
    }


def session(
    remote: str | None = None, *, app_name: str = "traceflow", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A Spark session: local mode (``local[*]``) by default, a master URL, or ``sc://`` Spark Connect."""
    try:
        import sqlglot  # noqa: F401  (traceflow.engines.rewrite translates the SQL with it)
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise UsageError(
            f"--engine spark needs {e.name or 'pyspark'}: pip install 'traceflow[spark]' "
            f"(pyspark=={SPARK_VERSION}, sqlglot, Java 17)"
        ) from None
    builder = SparkSession.builder.appName(app_name)
    if remote and remote.startswith("sc://"):
        builder = builder.remote(remote)
    else:
        builder = builder.master(remote or "local[*]")
        for key, value in local_defaults().items():
            builder = builder.config(key, value)
    for key, value in {**SETTINGS, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key in ("spark.sql.session.timeZone", "spark.sql.ansi.enabled"):  # a reused session keeps its own
        spark.conf.set(key, SETTINGS[key])
    return spark


def map_tasks(fn: Callable[[T], R], items: Sequence[T], remote: str | None = None) -> list[R]:
    """``[fn(x) for x in items]`` as one Spark task per item (``simulate --instances N --engine spark``).

    ``fn`` must be a module-level function (tasks pickle it by name) whose module the executors can
    import; results come back in order. Needs a master (``local[*]``, ``spark://``, ``yarn``): Spark
    Connect has no RDDs.
    """
    if remote and remote.startswith("sc://"):
        raise UsageError(
            f"--spark-remote {remote}: Spark tasks need a master URL (spark://host:7077, yarn, local[*]); "
            "Spark Connect cannot run Python tasks"
        )
    if not items:
        return []
    spark = session(remote, conf={"spark.ui.showConsoleProgress": "false"})
    results: list[R] = spark.sparkContext.parallelize(list(items), len(items)).map(fn).collect()
    return results


def spark_path(name: str) -> str:
    """The path Spark reads a lake file at: ``s3://b/k`` -> ``s3a://b/k`` (Hadoop's S3 connector);
    local paths as they are."""
    return "s3a://" + name[len("s3://") :] if name.startswith("s3://") else name


def s3a_conf(aws: Mapping[str, str]) -> dict[str, str]:
    """The ``spark.hadoop.fs.s3a.*`` settings for the store the AWS variables ``aws`` name
    (:func:`traceflow.config.aws_environment`), as s3fs reads the same variables for DuckDB.

    An endpoint (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``: MinIO, Ceph, a test server) gets
    path-style access (its buckets are no DNS names) and SSL as its scheme says; keys become the
    simple (with ``AWS_SESSION_TOKEN`` the temporary) credentials provider; ``AWS_PROFILE`` alone the
    SDK's profile provider. Without any, S3A's default chain (environment, instance role) applies.
    """
    conf: dict[str, str] = {}
    endpoint = aws.get("AWS_ENDPOINT_URL_S3") or aws.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf[_S3A + "endpoint"] = endpoint
        conf[_S3A + "path.style.access"] = "true"
        conf[_S3A + "connection.ssl.enabled"] = "false" if endpoint.startswith("http://") else "true"
    region = aws.get("AWS_REGION") or aws.get("AWS_DEFAULT_REGION")
    if region:
        conf[_S3A + "endpoint.region"] = region
    key, secret, token = (
        aws.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
    )
    if key and secret:
        conf[_S3A + "access.key"] = key
        conf[_S3A + "secret.key"] = secret
        provider = "TemporaryAWSCredentialsProvider" if token else "SimpleAWSCredentialsProvider"
        conf[_S3A + "aws.credentials.provider"] = f"org.apache.hadoop.fs.s3a.{provider}"
        if token:
            conf[_S3A + "session.token"] = token
    elif aws.get("AWS_PROFILE"):
        conf[_S3A + "aws.credentials.provider"] = (
            "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider"
        )
    return conf


def lake_session(lake: Lake, remote: str | None = None) -> SparkSession:
    """:func:`session` for ``lake``: with the S3A settings from the AWS variables for an ``s3://`` lake."""
    return session(remote, conf=s3a_conf(config.aws_environment()) if lake.url is not None else None)


def read_table(spark: SparkSession, lake: Lake, name: str) -> DataFrame:
    """The table's published files with exactly its columns and types (a column an older file lacks
    is NULL), not yet deduplicated, and where each row is stored
    (:data:`traceflow.store.measures.SOURCE_FILE`: the file's name,
    :data:`~traceflow.store.measures.SOURCE_ROW`: the row's index in it)."""
    spec = TABLES[name]
    files = [spark_path(f) for f in lake.file_names(name)]
    where = [f"_metadata.file_name AS {SOURCE_FILE}", f"_metadata.row_index AS {SOURCE_ROW}"]
    if not files:
        nulls = ", ".join(f"CAST(NULL AS {spark_type(t)}) AS {c}" for c, t in spec.columns.items())
        return spark.sql(
            f"SELECT {nulls}, CAST(NULL AS STRING) AS {SOURCE_FILE}, 0L AS {SOURCE_ROW} WHERE false"
        )
    raw = spark.read.option("mergeSchema", "true").parquet(*files)
    present = set(raw.columns)
    exprs = [
        f"CAST({c} AS {spark_type(t)}) AS {c}" if c in present else f"CAST(NULL AS {spark_type(t)}) AS {c}"
        for c, t in spec.columns.items()
    ]
    return raw.selectExpr(*exprs, *where)


def dedup_sql(name: str, source: str) -> str:
    """The deduplicating ``SELECT`` over ``source`` (a view of :func:`read_table`): one row per
    ``event_id``, the copy :meth:`Lake.view_sql` keeps, with the table's columns."""
    order = dedup_order(name)
    cols = ", ".join(TABLES[name].columns)
    return (
        f"SELECT {cols} FROM {source} QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {order}) = 1"
    )


def register(spark: SparkSession, lake: Lake, tables: Iterable[str] | None = None) -> list[str]:
    """Create one temp view per table (``requests``, ``events``, ...) as the DuckDB views define it."""
    names = list(tables or TABLES)
    for name in names:
        raw_view = f"_traceflow_raw_{name}"
        read_table(spark, lake, name).createOrReplaceTempView(raw_view)
        files = set(lake.file_names(name))
        deduped = bool(files) and files <= lake._deduped(name)
        cols = ", ".join(TABLES[name].columns)
        body = f"SELECT {cols} FROM {raw_view}" if deduped else dedup_sql(name, raw_view)
        extra = f", {request_columns_sql()}" if name == REQUESTS.name else ""
        spark.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * {extra} FROM ({body})")
    return names


class SparkEngine:
    """The packaged queries on Spark over one lake (see :class:`traceflow.store.sql.Engine`)."""

    name = "spark"

    def __init__(self, spark: SparkSession, lake: Lake, tables: Iterable[str] | None = None) -> None:
        self.spark = spark
        self.lake = lake
        self.tables = register(spark, lake, tables)

    def spark_sql(self, sql: str) -> str:
        """The Spark text of a DuckDB statement (for ``--explain`` and tests)."""
        from traceflow.engines.rewrite import to_spark

        return to_spark(sql)

    def frame(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pl.DataFrame:
        import polars as pl

        text = self.spark_sql(sql)
        args: Any
        if params is None or (not isinstance(params, Mapping) and not params):
            args = None
        elif isinstance(params, Mapping):
            args = dict(params)
        else:
            args = list(params)
        try:
            df = self.spark.sql(text, args=args) if args else self.spark.sql(text)
            table = df.toArrow()
        except Exception as e:  # pyspark's errors do not share one base class across local/Connect
            if type(e).__module__.startswith(("pyspark", "py4j")):
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise QueryError(
                    f"Spark could not run the query: {first}\n--- Spark SQL ---\n{text}"
                ) from None
            raise
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def materialised(self, view: str) -> bool:
        return False  # Spark computes the derived views (steps, rollup) from the requests each time

    def close(self) -> None:
        for name in self.tables:
            with contextlib.suppress(Exception):
                self.spark.catalog.dropTempView(name)
                self.spark.catalog.dropTempView(f"_traceflow_raw_{name}")


def connect(lake: Lake, tables: Iterable[str] | None = None, remote: str | None = None) -> SparkEngine:
    """A :class:`SparkEngine` over ``lake`` on a new or running session."""
    return SparkEngine(lake_session(lake, remote), lake, tables)


def compact(spark: SparkSession, lake: Lake, table: str) -> tuple[int, int]:
    """``traceflow compact`` for one table as a Spark job. Returns (files before, after).

    The dedup is :func:`dedup_sql` over every file of the table; each ``dt`` partition is written as
    one file into staging, renamed to a compacted name, published, recorded in the ``deduped`` marker,
    and only then are the old files removed (readers see every row once at every moment). The derived
    views are stored by DuckDB afterwards (:meth:`Lake.materialise_derived`), as ``compact`` does.
    All of it holds the lake's maintenance lock (:mod:`traceflow.store.maintenance`).
    """
    from traceflow.store.maintenance import maintenance

    with maintenance(lake, "compact"):
        return _compact(spark, lake, table)


def _compact(spark: SparkSession, lake: Lake, table: str) -> tuple[int, int]:
    """:func:`compact` without the lock."""
    spec = TABLES[table]
    files = lake.file_names(table)
    one_per_partition = len(files) == len({f.rsplit("/", 1)[0] for f in files})
    if not files or (one_per_partition and set(files) <= lake._deduped(table)):
        return len(files), len(files)
    lake.ensure()
    out = lake.staging / f"compact-spark-{time.time_ns()}-{secrets.token_hex(4)}"
    raw_view = f"_traceflow_compact_{table}"
    read_table(spark, lake, table).createOrReplaceTempView(raw_view)
    day = ", ".join(spec.partition_by)
    cols = ", ".join(spec.columns)
    deduped = spark.sql(
        f"SELECT {cols}, coalesce(date_format(coalesce({day}), 'yyyy-MM-dd'), 'unknown') AS dt "
        f"FROM ({dedup_sql(table, raw_view)})"
    )
    try:
        deduped.repartition("dt").write.partitionBy("dt").option("compression", "zstd").parquet(str(out))
    except Exception as e:
        shutil.rmtree(out, ignore_errors=True)
        raise LakeError(f"the Spark compaction of {table!r} failed: {str(e).splitlines()[0]}") from None
    finally:
        spark.catalog.dropTempView(raw_view)
    return lake.finish_compaction(table, out, files)
