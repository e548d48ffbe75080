"""The Parquet lake: immutable files published atomically, read through deduplicating DuckDB views.

Layout (docs/lake.md#storage)::

    <data>/v1/<table>/dt=YYYY-MM-DD/<time_ns>-<pid>-<rand>.parquet   published files (never modified)
    <data>/v1/_staging/                                              files being written
    <data>/v1/_state/                                                importer and collector bookkeeping
    <data>/v1/_derived/<view>/<generation>/*.parquet                 derived views stored by compaction

A file is written in ``_staging`` (outside every table tree, so readers' globs never see it),
fsynced, and renamed into its partition, then the partition directory is fsynced: once
:meth:`Lake.append` returns, the rows survive a crash. Several writers (an import and a running
collector) may publish at once; file names never collide.

Readers open an in-memory DuckDB with one view per table. A row may be stored more than once (the
same request imported twice, an exporter's retry, a transcript line and its OTLP event); the views
keep one row per ``event_id``, chosen by :func:`traceflow.store.measures.dedup_order`: the most complete
copy (largest token total), then the newest, then a total order over the other columns. The
``requests`` view adds the derived columns of :data:`traceflow.store.measures.REQUEST_COLUMNS`
(``request_time``, ``context_tokens``, ``total_tokens``) and each connection the ratio macros of
:data:`traceflow.store.measures.MACROS`.

Compaction also stores two derived views of the compacted requests: ``request_steps``
(``queries/steps.sql``: each request's stream, position, gap and reusable prefix, the window every
per-stream query reads) and ``request_rollup`` (``queries/rollup.sql``: token totals per day,
agent, model, session, user and source, what ``mix`` sums). While no request file has been added
since, each view reads its stored files and the analyses of the whole lake skip the window and the
full scan; otherwise the view is its query.

On an object store (``--data s3://bucket/prefix``, :mod:`traceflow.store.objects`) the layout under
the URL is the same, files are published with one conditional PUT each (no staging on the store,
no rename), and the compaction markers are objects under ``_state/deduped/<table>/`` and
``_state/derived/<view>/`` named by generation, never overwritten: readers take the newest. What
only concerns this machine stays on local disk, under :func:`traceflow.config.local_root`: the
staging files, the import offsets (they name local files), the collector's write-ahead log and
DuckDB's spills. DuckDB reads the store through s3fs (``register_filesystem``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from traceflow import config
from traceflow.errors import LakeError
from traceflow.schema import LAKE_VERSION, REQUESTS, STORED, TABLES, Table
from traceflow.store import staging as staging_files
from traceflow.store.measures import (
    CONFLICTS,
    SOURCE_FILE,
    SOURCE_ROW,
    STEPS,
    dedup_order,
    macros_sql,
    request_columns_sql,
)
from traceflow.store.row_frames import frame_from_rows as frame_from_rows  # re-exported
from traceflow.store.row_frames import to_micros as to_micros  # re-exported: imported from here elsewhere
from traceflow.store.sql import MATERIALISED, sql_string
from traceflow.store.sql import load as load_query

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from traceflow.store.objects import ObjectStore


#: Views derived from the requests and stored by compaction: view name -> packaged query. The view
#: carries the comment :data:`MATERIALISED` while it reads stored files instead of running its query.
STEPS_VIEW = STEPS
ROLLUP_VIEW = "request_rollup"
DERIVED = {STEPS_VIEW: "steps", ROLLUP_VIEW: "rollup"}
#: Seconds a file a compaction replaced stays on disk, no longer listed, for the readers that listed
#: it before (their views name it); the first compaction after that removes it (:meth:`Lake.retire`).
RETIRED_GRACE_S = 900.0


def _derived_sql(view: str) -> str:
    """The derived view's packaged query over the whole requests view (no selection, no parameters)."""
    query = load_query(DERIVED[view])
    return query.sql({"selection": "true"} if "/*@selection*/" in query.text else None)


def _query_digest(view: str) -> str:
    """A digest of the derived view's query and of the definitions it reads (the requests view's
    derived columns, the macros): stored files of another version of them are stale."""
    text = "\n".join([_derived_sql(view), request_columns_sql(), *macros_sql()])
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def share_rollup(con: duckdb.DuckDBPyConnection) -> None:
    """Let every ``mix`` on ``con`` that the rollup answers (:mod:`traceflow.analysis.mix`) sum one copy
    of ``queries/rollup.sql``: computed once into a temporary table, as compaction stores it, where the
    lake has none stored. For a connection that runs many mixes (``traceflow report``: per day, model,
    agent, the alerts' days); the connection is a snapshot of the lake's files, so it never goes stale."""
    rows = con.execute(
        "SELECT comment FROM duckdb_views() WHERE view_name = ? AND NOT internal", [ROLLUP_VIEW]
    ).fetchall()
    if not rows or rows[0][0] == MATERIALISED:  # no requests view on con, or the rollup is stored
        return
    con.execute(f"CREATE TEMP TABLE IF NOT EXISTS _tf_rollup AS {_derived_sql(ROLLUP_VIEW)}")
    con.execute(f"CREATE OR REPLACE VIEW {ROLLUP_VIEW} AS SELECT * FROM _tf_rollup")
    con.execute(f"COMMENT ON VIEW {ROLLUP_VIEW} IS '{MATERIALISED}'")


def _read(paths: list[str]) -> str:
    """DuckDB's read of published files (a column an older file lacks is NULL)."""
    listing = ", ".join(sql_string(p) for p in paths)
    return f"read_parquet([{listing}], union_by_name = true, hive_partitioning = false)"


def _file_ranks(names: Iterable[str]) -> dict[str, int]:
    """Each published file's rank by its file name (``<time_ns>-<pid>-<rand>.parquet``: the order
    they were written in), the :data:`~traceflow.store.measures.SOURCE_FILE` of its rows."""
    return {n: i for i, n in enumerate(sorted(names, key=lambda n: (n.rsplit("/", 1)[-1], n)))}


def _positions(paths: list[str], ranks: Mapping[str, int]) -> str:
    """The :data:`~traceflow.store.measures.SOURCE_FILE` and
    :data:`~traceflow.store.measures.SOURCE_ROW` columns of a :func:`_read` of ``paths`` (DuckDB
    numbers the files of one read in the order given)."""
    listing = ", ".join(str(ranks[p]) for p in paths)
    return (
        f"list_extract([{listing}], CAST(file_index AS BIGINT) + 1) AS {SOURCE_FILE}, "
        f"CAST(file_row_number AS BIGINT) AS {SOURCE_ROW}"
    )


def _partition_values(table: Table, frame: pl.DataFrame) -> pl.Series:
    import polars as pl

    ts = pl.coalesce([pl.col(c) for c in table.partition_by])
    return frame.select(ts.dt.strftime("%Y-%m-%d").fill_null("unknown").alias("dt")).to_series()


def fsync_path(path: Path) -> None:
    """fsync a directory (making renames into it durable) or a file another process wrote."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json_durably(path: Path, value: Any) -> None:
    """Replace ``path`` with ``value`` as JSON atomically (temp file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(value))
    fsync_path(tmp)
    os.replace(tmp, path)


class Lake:
    """A data directory (or ``s3://bucket/prefix``) holding the hive-partitioned Parquet tables.

    ``location`` is what was given (a path or a URL); ``root`` and ``base`` are always local: the
    data directory itself, or for an object-store lake the directory of this machine's own files.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.location = config.normalise_location(root)
        self.url = self.location.rstrip("/") if config.is_url(self.location) else None
        self.root = config.local_root(self.location)
        self.base = self.root / LAKE_VERSION
        self._store: ObjectStore | None = None

    @property
    def store(self) -> ObjectStore:
        """The object store of an ``s3://`` lake."""
        if self.url is None:
            raise LakeError(f"{self.location} is a local directory, not an object store")
        if self._store is None:
            from traceflow.store.objects import ObjectStore

            self._store = ObjectStore(self.url)
        return self._store

    @property
    def published_base(self) -> str:
        """Where the tables' files are: ``<data>/v1``, or ``s3://bucket/prefix/v1``."""
        return f"{self.url}/{LAKE_VERSION}" if self.url is not None else str(self.base)

    # -- paths --------------------------------------------------------------------------------
    @property
    def staging(self) -> Path:
        return self.base / "_staging"

    @property
    def state_dir(self) -> Path:
        return self.base / "_state"

    def table_dir(self, table: str) -> Path:
        return self.base / table

    def glob(self, table: str) -> str:
        """Depth-explicit glob of a table's published files (never matches staging files; matches the
        files a compaction retired, :meth:`retire`, until they are removed)."""
        if self.url is not None:
            return f"{self.published_base}/{table}/dt=*/*.parquet"
        return str(self.table_dir(table) / "dt=*" / "*.parquet")

    def files(self, table: str) -> list[Path]:
        """A local lake's published files of ``table`` (:meth:`file_names` works for both kinds)."""
        if self.url is not None:
            raise LakeError(f"{self.location} is on an object store: list it with file_names()")
        return [Path(n) for n in self.file_names(table)]

    def file_names(self, table: str) -> list[str]:
        """Every published file of ``table``, as paths or ``s3://`` URLs (what DuckDB reads); not
        those a compaction retired (:meth:`retire`)."""
        if self.url is None:
            names = [str(f) for f in sorted(self.table_dir(table).glob("dt=*/*.parquet"))]
        else:
            prefix = f"{self.published_base}/{table}/"
            names = [
                name
                for name in self.store.list(prefix)
                if name.endswith(".parquet")
                and (rel := name[len(prefix) :].split("/"))
                and len(rel) == 2
                and rel[0].startswith("dt=")
            ]
        retired = {self._name(table, rel) for rel in self._retired(table)}
        return [n for n in names if n not in retired] if retired else names

    def _rel(self, table: str, name: str) -> str:
        """``dt=.../file.parquet``: a published file's name under its table."""
        prefix = f"{self.published_base}/{table}/"
        if self.url is None:
            return str(Path(name).relative_to(self.table_dir(table)))
        return name[len(prefix) :]

    def _name(self, table: str, rel: str) -> str:
        return f"{self.published_base}/{table}/{rel}" if self.url else str(self.table_dir(table) / rel)

    def ensure(self) -> None:
        """Create the data directory's bookkeeping folders, or say why that is impossible."""
        try:
            self.staging.mkdir(parents=True, exist_ok=True)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            (self.state_dir / "imports").mkdir(exist_ok=True)
        except OSError as e:
            raise LakeError(
                f"cannot create the data directory {self.root}: {e.strerror}. "
                "Pass --data DIR or set TRACEFLOW_DATA to a writable directory."
            ) from None

    # -- writing ------------------------------------------------------------------------------
    def staging_path(self) -> Path:
        self.ensure()
        return self.staging / staging_files.name()

    def write_staged(self, table: str, frame: pl.DataFrame) -> list[tuple[Path, str]]:
        """Write a frame into staging files, one per ``dt`` partition; publish them with :meth:`publish`."""
        if frame.is_empty():
            return []
        spec = STORED[table]
        parts = frame.with_columns(_partition_values(spec, frame).alias("__dt"))
        staged: list[tuple[Path, str]] = []
        for (day,), part in parts.group_by("__dt", maintain_order=True):
            path = self.staging_path()
            with open(path, "wb") as fh:
                part.drop("__dt").write_parquet(fh, compression="zstd", statistics=True)
                fh.flush()
                os.fsync(fh.fileno())
            staged.append((path, f"{table}/dt={day}"))
        return staged

    def append_many(self, frames: Mapping[str, pl.DataFrame]) -> list[Path]:
        """Durably add several tables' frames at once (one publish for all their files)."""
        staged: list[tuple[Path, str]] = []
        for table, frame in frames.items():
            staged += self.write_staged(table, frame)
        return self.publish(staged)

    def publish_compacted(self, table: str, out: Path) -> list[Path]:
        """Publish the compacted Parquet files under ``out`` (``dt=*/*.parquet``) into ``table`` and
        mark them deduplicated (a compaction's last step, before it removes the files it read)."""
        staged = []
        for part in sorted(out.glob("dt=*")):
            for i, f in enumerate(sorted(part.glob("*.parquet"))):
                fsync_path(f)
                target = f.with_name(f"{time.time_ns()}-{os.getpid()}-compacted-{i}.parquet")
                f.rename(target)
                staged.append((target, f"{table}/{part.name}"))
        published = self.publish(staged)
        names = [str(p.relative_to(self.table_dir(table))) for p in published]
        self._write_marker("deduped", table, names)
        return published

    def publish(self, staged: Iterable[tuple[Path, str]]) -> list[Path]:
        """Move staged files into their partitions atomically and make the renames durable.

        On an object store each file is uploaded with one conditional PUT (then its staged copy
        removed); the returned paths are then the objects' names under :attr:`root` (their URL is
        :meth:`published_base` + the same relative path).
        """
        if self.url is not None:
            return self._upload(staged)
        published: list[Path] = []
        dirs: set[Path] = set()
        for path, rel in staged:
            target_dir = self.base / rel
            target_dir.mkdir(parents=True, exist_ok=True)
            target = target_dir / path.name
            os.replace(path, target)
            published.append(target)
            dirs.add(target_dir)
        for d in dirs:
            fsync_path(d)
        return published

    def _upload(self, staged: Iterable[tuple[Path, str]]) -> list[Path]:
        published: list[Path] = []
        for path, rel in staged:
            self.store.put_file(path, f"{self.published_base}/{rel}/{path.name}")
            path.unlink()
            published.append(self.base / rel / path.name)
        return published

    def append(self, table: str, rows: Sequence[Mapping[str, Any]] | pl.DataFrame) -> list[Path]:
        """Durably add rows to a table; returns the published files (none for no rows)."""
        if isinstance(rows, Sequence):
            return self.publish(self.write_staged(table, frame_from_rows(STORED[table], rows)))
        return self.publish(self.write_staged(table, rows))

    # -- reading ------------------------------------------------------------------------------
    def connect(self, tables: Iterable[str] | None = None) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with one deduplicating view per table."""
        import duckdb  # here, not at the top: writers (imports, the collector) never load it

        con = duckdb.connect(":memory:")
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"SET temp_directory = {sql_string(self.base / '_tmp')}")  # spills stay in the data dir
        self._register(con)
        limit = config.get("memory_limit")
        if limit:
            con.execute("SET memory_limit = ?", [limit])
        for macro in macros_sql():
            con.execute(macro)
        names = list(tables or STORED)  # the audit table too, for `sql`
        for name in names:
            con.execute(self.view_sql(name))
        if REQUESTS.name in names:
            current = self._request_files()
            for view in DERIVED:
                stored = self.fresh_derived(view, current)
                con.execute(self.derived_view_sql(view, stored))
                if stored:
                    con.execute(f"COMMENT ON VIEW {view} IS '{MATERIALISED}'")
        return con

    def _register(self, con: duckdb.DuckDBPyConnection) -> None:
        """Let DuckDB read ``s3://`` through s3fs (the httpfs extension needs a download)."""
        if self.url is not None:
            con.register_filesystem(self.store.fs)

    # -- markers ------------------------------------------------------------------------------
    def _read_marker(self, kind: str, name: str) -> Any:
        """The newest ``_state/<kind>/<name>`` record (None when there is none or it is unreadable)."""
        try:
            if self.url is None:
                path = self.state_dir / kind / f"{name}.json"
                return orjson.loads(path.read_bytes()) if path.exists() else None
            names = self._marker_names(kind, name)
            data = self.store.read(names[-1]) if names else None
            return orjson.loads(data) if data is not None else None
        except orjson.JSONDecodeError:
            return None

    def _marker_names(self, kind: str, name: str) -> list[str]:
        names = self.store.list(f"{self.published_base}/_state/{kind}/{name}/")
        return [n for n in names if n.endswith(".json")]

    def _write_marker(self, kind: str, name: str, value: Any) -> None:
        """Record ``value`` as the newest ``_state/<kind>/<name>``: an atomic replace on disk; on an
        object store a new object named by generation (never overwritten), the older ones but the
        previous removed."""
        if self.url is None:
            _write_json_durably(self.state_dir / kind / f"{name}.json", value)
            return
        prefix = f"{self.published_base}/_state/{kind}/{name}/"
        self.store.put(f"{prefix}{time.time_ns():020d}-{secrets.token_hex(4)}.json", orjson.dumps(value))
        self.store.delete(self._marker_names(kind, name)[:-2])

    # -- derived views (stored by compaction) -------------------------------------------------
    def _request_files(self) -> set[str]:
        return {self._rel(REQUESTS.name, f) for f in self.file_names(REQUESTS.name)}

    def fresh_derived(self, view: str, current: set[str] | None = None) -> list[str] | None:
        """The view's stored files, when they were computed from exactly today's request files
        (``current``, the requests' file names under their table, when the caller has them)."""
        record = self._read_marker("derived", view)
        if record is None:
            return None
        try:
            computed_from = set(record["requests"])
            files = [f"{self.published_base}/{f}" for f in record["files"]]
            query = record.get("query")
        except (KeyError, TypeError, AttributeError):
            return None
        if query != _query_digest(view):  # stored by another version of the view's query
            return None
        if current is None:
            current = self._request_files()
        if current != computed_from:
            return None
        if self.url is None:
            present = all(Path(f).exists() for f in files)
        else:
            present = set(files) <= set(self.store.list(f"{self.published_base}/_derived/{view}/"))
        return files if present else None

    def derived_view_sql(self, view: str, files: list[str] | None = None) -> str:
        """A derived view: its stored ``files`` (see :meth:`fresh_derived`), else its query."""
        if files:
            listing = ", ".join(sql_string(p) for p in files)
            body = f"SELECT * FROM read_parquet([{listing}], hive_partitioning = false)"
        else:
            body = _derived_sql(view)
        return f"CREATE OR REPLACE VIEW {view} AS {body}"

    def materialise_derived(self) -> dict[str, int]:
        """Store every derived view over the whole (compacted) requests table; returns rows per view.

        A view whose stored files are fresh is skipped, and nothing is stored while the requests
        table is not one deduplicated base (run :meth:`compact`: the window over a base is cheap).
        """
        table = REQUESTS.name
        files = self.file_names(table)
        if not files or not set(files) <= self._deduped(table):
            return {}
        stored: dict[str, int] = {}
        for view in DERIVED:
            if self.fresh_derived(view) is None:
                stored[view] = self._materialise(view, files)
        return stored

    def _materialise(self, view: str, files: list[str]) -> int:
        self.ensure()
        gen = f"{time.time_ns()}-{secrets.token_hex(4)}"
        out = self.staging / f"{view}-{gen}"
        out.mkdir()
        con = self.connect([REQUESTS.name])
        try:
            con.execute("SET preserve_insertion_order = false")
            # LZ4 with Parquet v2 encodings (delta for sorted integers) reads about twice as fast
            # as zstd here; these files are derived, so read speed beats size
            rows = con.execute(
                f"COPY ({_derived_sql(view)}) TO {sql_string(out)} "
                "(FORMAT parquet, COMPRESSION lz4_raw, PARQUET_VERSION V2, PER_THREAD_OUTPUT true)"
            ).fetchall()
        finally:
            con.close()
        if self.url is not None:
            return self._upload_derived(view, gen, out, files, rows)
        for f in out.glob("*.parquet"):
            fsync_path(f)
        root = self.base / "_derived" / view
        root.mkdir(parents=True, exist_ok=True)
        target = root / gen
        os.replace(out, target)
        fsync_path(root)
        record = {
            "query": _query_digest(view),
            "requests": sorted(self._rel(REQUESTS.name, f) for f in files),
            "files": sorted(str(f.relative_to(self.base)) for f in target.glob("*.parquet")),
        }
        self._write_marker("derived", view, record)
        # keep the previous generation for readers that opened it a moment ago
        for old in sorted(p for p in root.iterdir() if p.name != gen)[:-1]:
            shutil.rmtree(old, ignore_errors=True)
        return int(rows[0][0]) if rows else 0

    def _upload_derived(self, view: str, gen: str, out: Path, files: list[str], rows: list[Any]) -> int:
        """Publish a derived view's generation to the object store, then its marker."""
        prefix = f"{self.published_base}/_derived/{view}/"
        uploaded = []
        for f in sorted(out.glob("*.parquet")):
            self.store.put_file(f, f"{prefix}{gen}/{f.name}")
            uploaded.append(f"_derived/{view}/{gen}/{f.name}")
        shutil.rmtree(out, ignore_errors=True)
        sources = sorted(self._rel(REQUESTS.name, f) for f in files)
        self._write_marker(
            "derived", view, {"query": _query_digest(view), "requests": sources, "files": uploaded}
        )
        # keep the previous generation for readers that opened it a moment ago
        gens = sorted({n[len(prefix) :].split("/")[0] for n in self.store.list(prefix)} - {gen})
        self.store.delete(n for n in self.store.list(prefix) if n[len(prefix) :].split("/")[0] in gens[:-1])
        return int(rows[0][0]) if rows else 0

    def _deduped(self, table: str) -> set[str]:
        """Names (as :meth:`file_names` gives them) of the files the last ``compact`` wrote."""
        names = self._read_marker("deduped", table)
        return {self._name(table, n) for n in names} if isinstance(names, list) else set()

    def deduped_files(self, table: str) -> set[Path]:
        """Files the last ``compact`` wrote: together they hold each ``event_id`` once."""
        return {Path(n) for n in self._deduped(table)}

    def view_sql(self, name: str) -> str:
        """The deduplicating view of a table.

        Files written by ``compact`` (the *base*) hold each ``event_id`` once, so they are read
        without a window; only rows written since (and the base rows they duplicate) go through the
        ``row_number()`` dedup. A never-compacted table is deduplicated whole.
        """
        spec = STORED[name]
        files = self.file_names(name)
        base_set = self._deduped(name)
        base = [f for f in files if f in base_set]
        new = [f for f in files if f not in base_set]
        typed = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in spec.columns.items())
        cols = ", ".join(spec.columns)
        window = f"QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {dedup_order(name)}) = 1"
        ranks = _file_ranks(files)

        def positioned(paths: list[str]) -> str:  # the typed rows and where each is stored
            return f"SELECT {typed}, {_positions(paths, ranks)} FROM {_read(paths)}"

        if not files:
            nulls = ", ".join(f"CAST(NULL AS {t}) AS {c}" for c, t in spec.columns.items())
            raw = f"(SELECT {nulls} WHERE false)"
        elif not new:
            raw = f"(SELECT {typed} FROM {_read(base)})"
        elif not base:
            raw = f"(SELECT {cols} FROM ({positioned(new)}) {window})"
        else:
            fresh_ids = f"(SELECT DISTINCT event_id FROM {_read(new)})"
            raw = (
                f"(SELECT b.* FROM (SELECT {typed} FROM {_read(base)}) b ANTI JOIN {fresh_ids} n "
                "ON b.event_id = n.event_id "
                f"UNION ALL SELECT {cols} FROM ({positioned(new)} UNION ALL "
                f"SELECT b.* FROM ({positioned(base)}) b SEMI JOIN {fresh_ids} n "
                f"ON b.event_id = n.event_id) {window})"
            )
        extra = f", {request_columns_sql()}" if name == REQUESTS.name else ""
        return f"CREATE OR REPLACE VIEW {name} AS SELECT * {extra} FROM {raw}"

    # -- copies that disagree -----------------------------------------------------------------
    def _count_conflicts(self, files: list[str]) -> int:
        """:data:`~traceflow.store.measures.CONFLICTS` over the stored request ``files`` (before dedup)."""
        if not files:
            return 0
        import duckdb  # here, not at the top: writers (imports, the collector) never load it

        listing = ", ".join(sql_string(f) for f in files)
        rows = f"read_parquet([{listing}], union_by_name = true, hive_partitioning = false)"
        con = duckdb.connect(":memory:")
        self._register(con)
        try:
            row = con.execute(CONFLICTS.format(rows=rows)).fetchone()
        finally:
            con.close()
        return int(row[0]) if row else 0

    def conflicts(self) -> int:
        """How many request ids were stored with copies that disagree on ``user_id`` or ``session_id``
        (one request replayed as another user's or session's): the views keep one copy of each
        (:func:`~traceflow.store.measures.dedup_order`). Counted over the stored rows, plus the ids each
        compaction found among the rows it merged (it keeps only the surviving copy; an id found
        again after a compaction counts again)."""
        record = self._read_marker("conflicts", REQUESTS.name)
        resolved = record.get("resolved", 0) if isinstance(record, dict) else 0
        return int(resolved) + self._count_conflicts(self.file_names(REQUESTS.name))

    # -- maintenance --------------------------------------------------------------------------
    def compact(self, table: str) -> tuple[int, int]:
        """Rewrite a table as one deduplicated file per partition (:meth:`_compact`), holding the
        lake's maintenance lock (:mod:`traceflow.store.maintenance`). Returns (files before, after)."""
        from traceflow.store.maintenance import maintenance

        with maintenance(self, "compact"):
            return self._compact(table)

    def _compact(self, table: str) -> tuple[int, int]:
        """Rewrite a table as one deduplicated file per partition. Returns (files before, after).

        The dedup is global (a request's copies may sit in different partitions), done by DuckDB
        out of core. The new files are published and recorded as the deduplicated *base* before the
        old ones are retired (:meth:`retire`: unlisted, removed after :data:`RETIRED_GRACE_S`), so a
        concurrent reader sees every row at every moment, once, also one that listed the old files.
        """
        spec = TABLES[table]
        files = self.file_names(table)
        one_per_partition = len(files) == len({f.rsplit("/", 1)[0] for f in files})
        if not files or (one_per_partition and set(files) <= self._deduped(table)):
            self.remove_retired(table)
            if table == REQUESTS.name:
                self.materialise_derived()  # a lake compacted before derived views were stored
            return len(files), len(files)
        self.ensure()
        out = self.staging / f"compact-{time.time_ns()}-{secrets.token_hex(4)}"
        cols = ", ".join(spec.columns)
        day = " , ".join(spec.partition_by)
        order = dedup_order(table)
        rows = f"SELECT *, {_positions(files, _file_ranks(files))} FROM {_read(files)}"
        import duckdb  # here, not at the top: writers (imports, the collector) never load it

        con = duckdb.connect(":memory:")
        self._register(con)
        try:
            con.execute("SET preserve_insertion_order = false")
            con.execute(
                f"COPY (SELECT {cols}, coalesce(strftime(coalesce({day}) AT TIME ZONE 'UTC', '%Y-%m-%d'), "
                f"'unknown') AS dt FROM ({rows}) "
                f"QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {order}) = 1) "
                f"TO {sql_string(out)} (FORMAT parquet, PARTITION_BY (dt), COMPRESSION zstd)"
            )
        finally:
            con.close()
        return self.finish_compaction(table, out, files)

    def finish_compaction(self, table: str, out: Path, files: list[str]) -> tuple[int, int]:
        """The end of a compaction on any engine: publish the deduplicated partitions written to the
        staging directory ``out`` (:meth:`publish_compacted`), retire the ``files`` they replace, and
        store the derived views again after ``requests``. Returns (files before, files after)."""
        if table == REQUESTS.name:  # the copies that lose are removed below: keep their count
            found = self._count_conflicts(files)
            if found:
                record = self._read_marker("conflicts", table)
                before = record.get("resolved", 0) if isinstance(record, dict) else 0
                self._write_marker("conflicts", table, {"resolved": int(before) + found})
        published = self.publish_compacted(table, out)
        self.retire(table, files)
        shutil.rmtree(out, ignore_errors=True)
        if table == REQUESTS.name:
            self.materialise_derived()
        return len(files), len(published)

    def retire(self, table: str, files: Iterable[str]) -> None:
        """Stop listing the published ``files`` (a compaction's inputs, their rows published again)
        but leave them on disk: a reader that listed them before (its views name them) still reads
        them. The files retired :data:`RETIRED_GRACE_S` ago or more are removed now."""
        names = [self._rel(table, f) for f in files]
        if names:
            now = time.time()
            self._write_marker("retired", table, {**self._retired(table), **dict.fromkeys(names, now)})
        self.remove_retired(table)

    def remove_retired(self, table: str, grace_s: float | None = None) -> None:
        """Remove the files of ``table`` retired ``grace_s`` (default :data:`RETIRED_GRACE_S`)
        seconds ago or more (:meth:`retire`)."""
        record = self._retired(table)
        grace = RETIRED_GRACE_S if grace_s is None else grace_s
        now = time.time()
        due = [rel for rel, at in record.items() if now - at >= grace]
        if due:  # removed before they leave the record: never listed again, even after a crash
            self.remove_compacted([self._name(table, rel) for rel in due])
            self._write_marker("retired", table, {r: at for r, at in record.items() if r not in due})

    def _retired(self, table: str) -> dict[str, float]:
        """The retired files of ``table`` (names under the table) and when each was retired."""
        record = self._read_marker("retired", table)
        if not isinstance(record, dict):
            return {}
        return {str(rel): float(at) for rel, at in record.items() if isinstance(at, (int, float))}

    def remove_compacted(self, files: Iterable[str]) -> None:
        """Remove the published ``files`` (:meth:`file_names`) a compaction read, once their rows are
        published again: only those files (what was published since stays), and a local partition
        left empty."""
        names = list(files)
        if self.url is not None:
            self.store.delete(names)
            return
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                Path(name).unlink()
        for d in {Path(f).parent for f in names}:
            with contextlib.suppress(OSError):
                d.rmdir()  # a partition whose rows all moved elsewhere

    def clean_staging(self, older_than_s: float = 3600) -> int:
        """Remove staging files left by crashed writers, never the ones being written now
        (:func:`traceflow.store.staging.clean`)."""
        return staging_files.clean(self.staging, older_than_s)
