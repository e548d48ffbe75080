"""``traceflow import clickhouse-otel``: rows of the OTel Collector ClickHouse exporter's ``otel_logs``
table (created with the exporter's DDL in chDB, embedded ClickHouse), exported to Parquet by
ClickHouse, imported, and mapped exactly as the same records received over OTLP."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import chdb.session as chdb_session  # a test dependency (.[test]): missing fails, not skips

from tests.collectors_support import api_request_logs
from traceflow.importers.clickhouse_otel import IMPORTER, logs_request
from traceflow.importers.run import run_import
from traceflow.otlp.logs import map_logs
from traceflow.store.lake import Lake, to_micros

#: The exporter's ``otel_logs`` DDL (exporter/clickhouseexporter/internal/sqltemplates/logs_table.sql,
#: with its database, table, engine and TTL placeholders filled in).
OTEL_LOGS_DDL = """
CREATE TABLE IF NOT EXISTS otel.otel_logs (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TimestampTime DateTime DEFAULT toDateTime(Timestamp),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    TraceFlags UInt8,
    SeverityText LowCardinality(String) CODEC(ZSTD(1)),
    SeverityNumber UInt8,
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    Body String CODEC(ZSTD(1)),
    ResourceSchemaUrl LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeSchemaUrl LowCardinality(String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion LowCardinality(String) CODEC(ZSTD(1)),
    ScopeAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    LogAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    EventName String CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_log_attr_key mapKeys(LogAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_log_attr_value mapValues(LogAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_body Body TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = MergeTree()
PARTITION BY toDate(TimestampTime)
PRIMARY KEY (ServiceName, TimestampTime)
ORDER BY (ServiceName, TimestampTime, Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""


def _q(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _map(attrs: list[tuple[str, str]]) -> str:
    return "map(" + ", ".join(f"{_q(k)}, {_q(v)}" for k, v in attrs) + ")" if attrs else "map()"


def _any(value: Any) -> object:
    """The Python value an OTLP ``AnyValue`` holds."""
    return getattr(value, value.WhichOneof("value") or "string_value")


def _value(v: object) -> str:
    """An attribute value as the exporter stores it (``AsString``)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def test_otel_logs_from_chdb_import_like_otlp(tmp_path: Path) -> None:
    session = str(uuid.uuid4())
    req, ids = api_request_logs(40, session=session, start_ns=1_764_620_000_123_456_789)
    # the exporter's INSERT: one row per log record, attributes as strings in Map columns
    rl = req.resource_logs[0]
    sl = rl.scope_logs[0]
    resource = [(kv.key, _value(_any(kv.value))) for kv in rl.resource.attributes]
    service = dict(resource)["service.name"]
    rows = []
    for r in sl.log_records:
        attrs = [(kv.key, _value(_any(kv.value))) for kv in r.attributes]
        rows.append(
            f"(fromUnixTimestamp64Nano({r.time_unix_nano}), '', '', 0, '', 0, {_q(service)}, "
            f"{_q(r.body.string_value)}, '', {_map(resource)}, '', {_q(sl.scope.name)}, "
            f"{_q(sl.scope.version)}, map(), {_map(attrs)}, '')"
        )
    ch = chdb_session.Session(str(tmp_path / "chdb"))
    ch.query("CREATE DATABASE IF NOT EXISTS otel")
    ch.query(OTEL_LOGS_DDL)
    ch.query(
        "INSERT INTO otel.otel_logs (Timestamp, TraceId, SpanId, TraceFlags, SeverityText, SeverityNumber, "
        "ServiceName, Body, ResourceSchemaUrl, ResourceAttributes, ScopeSchemaUrl, ScopeName, ScopeVersion, "
        "ScopeAttributes, LogAttributes, EventName) VALUES " + ", ".join(rows)
    )
    export = tmp_path / "otel_logs.parquet"
    export.write_bytes(ch.query("SELECT * FROM otel.otel_logs ORDER BY Timestamp", "Parquet").bytes())

    lake = Lake(tmp_path / "data")
    summary = run_import(lake, IMPORTER, [export])
    assert summary.rows["requests"] == 40 and not summary.errors

    con = lake.connect(["requests"])
    got = con.execute(
        "SELECT request_id, event_id, cold_input_tokens, output_tokens, cache_read_tokens, "
        "epoch_us(started_at), source FROM requests ORDER BY request_id"
    ).fetchall()
    con.close()
    # what the test computed: the values api_request_logs put in, the event ids OTLP gives
    otlp = {r["request_id"]: r for r in map_logs(req).parsed.requests}
    assert sorted(ids) == [g[0] for g in got]
    for request_id, event_id, cold, out, read, started_us, source in got:
        i = ids.index(request_id)
        assert (cold, out, read) == (11 + i % 7, 22 + i % 50, 4444 + i)
        # the same row as the record received over OTLP: id and start time
        assert event_id == otlp[request_id]["event_id"]
        started = otlp[request_id]["started_at"]
        assert started_us == (started if isinstance(started, int) else to_micros(started))
        assert source == "clickhouse"
    # rebuilt request maps the same as the original
    rebuilt = logs_request(
        [
            {
                "Timestamp": r.time_unix_nano,
                "ServiceName": service,
                "ResourceAttributes": resource,
                "ScopeName": sl.scope.name,
                "ScopeVersion": sl.scope.version,
                "Body": r.body.string_value,
                "LogAttributes": [(kv.key, _value(_any(kv.value))) for kv in r.attributes],
            }
            for r in sl.log_records
        ]
    )
    assert len(map_logs(rebuilt).parsed.requests) == 40
