"""Table and column names: the single source of truth for the lake's schema.

Column names are a contract (docs/lake.md#data-model): add columns freely, never rename. Every table is
stored as
Parquet under ``<data>/v1/<table>/dt=YYYY-MM-DD/``; the reader (``traceflow.store.lake``) exposes one DuckDB
view per table with duplicates removed by ``event_id``.

Rows travel through the importers and collectors as plain ``dict``s keyed by these column names;
``attributes`` holds a ``dict`` (stored as a JSON string). Missing keys are NULL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

#: Version folder of the lake layout; bumped only for incompatible changes.
LAKE_VERSION = "v1"

# Column types are DuckDB type names (the read side needs no polars); ``Table.schema`` maps them.
_TS = "TIMESTAMPTZ"


@dataclass(frozen=True)
class Table:
    """One lake table: its name, its columns, and the column that picks its ``dt=`` partition."""

    name: str
    columns: dict[str, str]  # column name -> DuckDB type
    partition_by: tuple[str, ...]  # first non-null of these timestamps decides dt=
    doc: str

    @property
    def schema(self) -> pl.Schema:
        """The polars schema of the table's Parquet files."""
        import polars as pl

        return pl.Schema({name: polars_type(t) for name, t in self.columns.items()})


def polars_type(duck: str) -> pl.DataType:
    """The polars dtype a DuckDB column type of the lake is written as."""
    import polars as pl

    if duck.endswith("[]"):
        return pl.List(polars_type(duck[:-2]))
    return {
        "VARCHAR": pl.String(),
        "BIGINT": pl.Int64(),
        "INTEGER": pl.Int32(),
        "DOUBLE": pl.Float64(),
        "BOOLEAN": pl.Boolean(),
        "TIMESTAMPTZ": pl.Datetime("us", "UTC"),
    }[duck]


#: The first columns of every table: the row's id, the importer or collector and the agent it came from.
_ORIGIN = {"event_id": "VARCHAR", "source": "VARCHAR", "agent": "VARCHAR"}

#: Requests and events then say whose call they belong to.
_CALL = {
    **_ORIGIN,
    "agent_version": "VARCHAR",
    "user_id": "VARCHAR",
    "session_id": "VARCHAR",
    "parent_session_id": "VARCHAR",
    "prompt_id": "VARCHAR",
    "request_id": "VARCHAR",
}

#: One row per model API call (docs/lake.md#data-model).
REQUESTS = Table(
    name="requests",
    columns={
        **_CALL,
        "started_at": _TS,
        "ended_at": _TS,
        "duration_ms": "DOUBLE",
        "ttft_ms": "DOUBLE",
        "model": "VARCHAR",
        "cold_input_tokens": "BIGINT",
        "cache_read_tokens": "BIGINT",
        "cache_write_tokens": "BIGINT",
        "cache_write_5m_tokens": "BIGINT",
        "cache_write_1h_tokens": "BIGINT",
        "output_tokens": "BIGINT",
        "reasoning_tokens": "BIGINT",
        "cost_usd": "DOUBLE",
        "attributes": "VARCHAR",
        # Additions to the original columns (additive, documented in docs/lake.md#data-model):
        "seq": "BIGINT",  # source order (line/record number) so equal timestamps keep their order
        "hash_ids": "BIGINT[]",  # prefix block ids where the source has them (Mooncake, ...)
        "block_size": "INTEGER",  # tokens per hash id block
        "ingested_at": _TS,  # when this copy was written; newest wins among equally complete copies
    },
    partition_by=("started_at", "ended_at"),
    doc="one row per model API call",
)

#: Other log events the agents send or write: user prompts, tool results, API errors, compactions, ...
EVENTS = Table(
    name="events",
    columns={
        **_CALL,
        "name": "VARCHAR",
        "timestamp": _TS,
        "attributes": "VARCHAR",
        "seq": "BIGINT",
        "ingested_at": _TS,
    },
    partition_by=("timestamp",),
    doc="non-request events: user_prompt, tool_result, api_error, compaction, ...",
)

#: Metric points converted to per-interval deltas (cumulative streams with resets handled).
METRIC_POINTS = Table(
    name="metric_points",
    columns={
        **_ORIGIN,
        "session_id": "VARCHAR",
        "user_id": "VARCHAR",
        "model": "VARCHAR",
        "name": "VARCHAR",
        "type": "VARCHAR",  # the point's `type` / token-type attribute, when it has one
        "unit": "VARCHAR",
        "temporality": "VARCHAR",  # delta | cumulative | gauge
        "start_time": _TS,
        "time": _TS,
        "value": "DOUBLE",  # as sent
        "delta": "DOUBLE",  # the increase over (start_time, time]; NULL for a cumulative baseline
        "attributes": "VARCHAR",
        "ingested_at": _TS,
    },
    partition_by=("time",),
    doc="metric points as per-interval deltas",
)

#: Spans (Claude Code beta tracing, OTel GenAI, OpenInference, ...).
SPANS = Table(
    name="spans",
    columns={
        **_ORIGIN,
        "session_id": "VARCHAR",
        "trace_id": "VARCHAR",
        "span_id": "VARCHAR",
        "parent_span_id": "VARCHAR",
        "name": "VARCHAR",
        "kind": "INTEGER",
        "started_at": _TS,
        "ended_at": _TS,
        "status_code": "INTEGER",
        "attributes": "VARCHAR",
        "ingested_at": _TS,
    },
    partition_by=("started_at", "ended_at"),
    doc="spans as received",
)

TABLES: dict[str, Table] = {t.name: t for t in (REQUESTS, EVENTS, METRIC_POINTS, SPANS)}

#: What ``traceflow retain`` and ``traceflow forget`` removed (docs/lake.md#personal-data): one row per
#: table and partition of each removal. Stored like the tables above and read through ``sql``, but
#: kept out of :data:`TABLES` (the agents' data): no analysis reads it and no removal removes it.
AUDIT = Table(
    name="audit",
    columns={
        "event_id": "VARCHAR",
        "removed_at": _TS,  # when the removal was done
        "action": "VARCHAR",  # retain | forget
        "subject": "VARCHAR",  # what was named: `older than 90d`, `user sha256:...`, `session sha256:...`
        "table_name": "VARCHAR",
        "partition_dir": "VARCHAR",  # dt=YYYY-MM-DD
        "rows_removed": "BIGINT",  # stored rows removed (copies of one request each count)
        "files_removed": "BIGINT",
        "files_written": "BIGINT",  # files rewritten without the rows (forget)
        "ingested_at": _TS,
    },
    partition_by=("removed_at",),
    doc="what retain and forget removed",
)

#: Every table stored in the lake: the agents' data and the audit table.
STORED: dict[str, Table] = {**TABLES, AUDIT.name: AUDIT}

#: The four token kinds, in the order reports show them.
TOKEN_KINDS = ("cold_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
