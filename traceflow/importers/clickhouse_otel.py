"""The OpenTelemetry Collector ClickHouse exporter's tables: ``traceflow import clickhouse-otel PATH``.

Organisations that already land their agents' telemetry with the contrib ``clickhouse`` exporter
have it in ``otel_logs`` (and spans in ``otel_traces``). Export the table to Parquet, e.g.::

    clickhouse-client -q "SELECT * FROM otel_logs WHERE TimestampTime >= today() - 7
                          INTO OUTFILE 'otel_logs.parquet' FORMAT Parquet"

or let :func:`export_from_server` do it through ``clickhouse-connect`` (``pip install
clickhouse-connect``), then import the file. Each row is turned back into the OTLP record the
exporter received (resource and log attributes from the ``Map`` columns, ``EventName``, trace and
span ids, the nanosecond ``Timestamp``) and mapped exactly as the collectors map OTLP
(:func:`traceflow.otlp.logs.map_logs`, :func:`traceflow.otlp.spans.map_traces`), with
``source = "clickhouse"``: the rows get the same ``event_id`` as the same records received over OTLP.

* The exporter stores every attribute value as a string; the mapping reads token counts and costs
  from strings as well.
* A file is recognised by its columns: ``LogAttributes`` (``otel_logs``) or ``SpanAttributes``
  (``otel_traces``). The ``json: true`` variant (``JSON`` columns instead of ``Map``) exports as
  JSON text and is read too. ``EventName`` is optional (older exporters lack it).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext
from traceflow.rows import LineError, Parsed

#: Table name -> the column that identifies its Parquet export.
TABLES = {"otel_logs": "LogAttributes", "otel_traces": "SpanAttributes"}
_BATCH = 10_000


def _attrs(value: Any) -> dict[str, str]:
    """A ``Map(String, String)`` as pyarrow returns it (list of pairs), or JSON text, as a dict."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in value.items()}
    if isinstance(value, (str, bytes)):
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError:
            return {}
        return _attrs(obj) if isinstance(obj, Mapping) else {}
    return {str(k): str(v) for k, v in value}


def _kvs(target: Any, attrs: Mapping[str, str]) -> None:
    for k, v in attrs.items():
        kv = target.add()
        kv.key = k
        kv.value.string_value = v


def _ns(value: Any) -> int:
    """Nanoseconds since the epoch of a pyarrow timestamp value (int or datetime)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return int(value.timestamp()) * 1_000_000_000 + int(value.microsecond) * 1000


def _hex(value: Any) -> bytes:
    try:
        return bytes.fromhex(value or "")
    except ValueError:
        return b""


def _group_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    res = tuple(sorted(_attrs(row.get("ResourceAttributes")).items()))
    return (
        res,
        row.get("ResourceSchemaUrl") or "",
        row.get("ScopeName") or "",
        row.get("ScopeVersion") or "",
    )


def _scope_group(
    resource_groups: Any, scopes: str, groups: dict[tuple[Any, ...], Any], row: Mapping[str, Any]
) -> Any:
    """The scope group of ``row``'s resource and scope: the ``scopes`` entry (``scope_logs``,
    ``scope_spans``) of a new entry of ``resource_groups`` at the first row of that resource and scope,
    kept in ``groups`` for the rows after it. ``ServiceName`` stands in for a missing ``service.name``."""
    key = _group_key(row)
    group = groups.get(key)
    if group is None:
        rg = resource_groups.add()
        res = dict(key[0])
        if row.get("ServiceName") and "service.name" not in res:
            res["service.name"] = row["ServiceName"]
        _kvs(rg.resource.attributes, res)
        rg.schema_url = key[1]
        group = groups[key] = getattr(rg, scopes).add()
        group.scope.name, group.scope.version = key[2], key[3]
        _kvs(group.scope.attributes, _attrs(row.get("ScopeAttributes")))
    return group


def logs_request(rows: list[Mapping[str, Any]]) -> Any:
    """An ``ExportLogsServiceRequest`` holding ``otel_logs`` rows (one resource/scope per group)."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    req = ExportLogsServiceRequest()
    groups: dict[tuple[Any, ...], Any] = {}
    for row in rows:
        r = _scope_group(req.resource_logs, "scope_logs", groups, row).log_records.add()
        r.time_unix_nano = _ns(row.get("Timestamp"))
        r.severity_text = row.get("SeverityText") or ""
        r.severity_number = int(row.get("SeverityNumber") or 0)
        r.body.string_value = row.get("Body") or ""
        r.event_name = row.get("EventName") or ""
        r.trace_id, r.span_id = _hex(row.get("TraceId")), _hex(row.get("SpanId"))
        r.flags = int(row.get("TraceFlags") or 0)
        _kvs(r.attributes, _attrs(row.get("LogAttributes")))
    return req


def traces_request(rows: list[Mapping[str, Any]]) -> Any:
    """An ``ExportTraceServiceRequest`` holding ``otel_traces`` rows."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    groups: dict[tuple[Any, ...], Any] = {}
    for row in rows:
        s = _scope_group(req.resource_spans, "scope_spans", groups, row).spans.add()
        start = _ns(row.get("Timestamp"))
        s.start_time_unix_nano = start
        s.end_time_unix_nano = start + int(row.get("Duration") or 0)
        s.name = row.get("SpanName") or ""
        s.trace_id, s.span_id = _hex(row.get("TraceId")), _hex(row.get("SpanId"))
        s.parent_span_id = _hex(row.get("ParentSpanId"))
        _kvs(s.attributes, _attrs(row.get("SpanAttributes")))
    return req


def _batches(table: Any) -> Iterator[list[Mapping[str, Any]]]:
    """Rows as dicts, the timestamps as int nanoseconds since the epoch (exactly)."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            column = table.column(i).cast(pa.timestamp("ns", field.type.tz)).cast(pa.int64())
            table = table.set_column(i, field.name, column)
    for batch in table.to_batches(max_chunksize=_BATCH):
        rows: list[Mapping[str, Any]] = batch.to_pylist()
        yield rows


class ClickHouseOtelImporter:
    name: ClassVar[str] = "clickhouse-otel"
    whole_file: ClassVar[bool] = True
    source: ClassVar[str] = "clickhouse"

    def default_paths(self) -> list[Path]:
        return []

    def discover(self, root: Path) -> list[Path]:
        return [root] if root.is_file() else sorted(root.rglob("*.parquet"))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        import pyarrow.parquet as pq

        from traceflow.otlp.logs import map_logs
        from traceflow.otlp.spans import map_traces

        out = Parsed()
        path = str(ctx.path)
        try:
            table = pq.read_table(io.BytesIO(data))
        except Exception as e:
            out.errors.append(LineError(path, 0, f"not a Parquet file ({e}); file skipped"))
            return out
        columns = set(table.column_names)
        if "LogAttributes" in columns:
            build, mapper = logs_request, map_logs
        elif "SpanAttributes" in columns:
            build, mapper = traces_request, map_traces
        else:
            out.errors.append(
                LineError(
                    path,
                    0,
                    "neither an otel_logs export (no LogAttributes column) nor an otel_traces export "
                    "(no SpanAttributes column); export the table with SELECT * ... FORMAT Parquet",
                )
            )
            return out
        for rows in _batches(table):
            mapped = mapper(build(rows), source=self.source)
            out.extend(mapped.parsed)
            if mapped.rejected:
                out.errors.append(LineError(path, 0, f"{mapped.rejected} records skipped: {mapped.message}"))
        return out


def export_from_server(client: Any, out: Path, table: str = "otel_logs", where: str = "true") -> Path:
    """Write ``SELECT * FROM table WHERE where`` of a ClickHouse server to the Parquet file ``out``.

    ``client`` is a ``clickhouse_connect`` client (``clickhouse_connect.get_client(host=...)``);
    import the file with ``traceflow import clickhouse-otel``.
    """
    if table.split(".")[-1] not in TABLES:
        raise ValueError(f"table {table!r} is not one of {', '.join(TABLES)}")
    stream = client.raw_stream(f"SELECT * FROM {table} WHERE {where}", fmt="Parquet")
    with open(out, "wb") as fh:
        for chunk in stream:
            fh.write(chunk)
    return out


IMPORTER = ClickHouseOtelImporter()
