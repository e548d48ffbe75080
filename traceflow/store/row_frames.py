"""Row dicts as a polars frame of a table's columns (:func:`frame_from_rows`): column by column when the
rows share their keys (a mapping's rows do), else row by row."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from traceflow.errors import LakeError
from traceflow.schema import Table, polars_type

if TYPE_CHECKING:
    import polars as pl

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def to_micros(value: dt.datetime) -> int:
    """Microseconds since the Unix epoch of an aware (or UTC-naive) datetime."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def frame_by_column(table: Table, rows: Sequence[Mapping[str, Any]], raw_schema: dict[str, Any]) -> Any:
    """The frame of rows that all have the same keys in the same order (a mapping's rows do), built
    column by column; None when they do not, or a column does not convert strictly (then
    :func:`frame_by_row` builds it, or says what is wrong)."""
    import polars as pl

    keys = tuple(rows[0])
    if any(tuple(row) != keys for row in rows) or not set(keys) <= raw_schema.keys():
        return None
    columns = dict(zip(keys, zip(*(row.values() for row in rows), strict=True), strict=True))
    attrs = columns.get("attributes")
    if attrs is not None:
        columns["attributes"] = tuple(
            a
            if a is None or isinstance(a, str)
            else orjson.dumps(a, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
            for a in attrs
        )
    n = len(rows)
    series = []
    try:
        for name, dtype in raw_schema.items():
            values = columns.get(name)
            if values is None:
                series.append(pl.Series(name, [None] * n, dtype=dtype))
            else:  # a datetime in a timestamp column (Int64 here) raises: it is converted row by row
                series.append(pl.Series(name, values, dtype=dtype, strict=True))
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return None
    return pl.DataFrame(series)


def frame_by_row(
    table: Table, rows: Sequence[Mapping[str, Any]], cols: dict[str, Any], raw_schema: dict[str, Any]
) -> Any:
    """:func:`frame_from_rows` of rows of any keys (unknown ones an error)."""
    import polars as pl

    known = cols.keys()
    prepared: list[Mapping[str, Any]] = []
    checked: set[frozenset[str]] = set()
    for row in rows:
        keys = frozenset(row)
        if keys not in checked:
            extra = keys - known
            if extra:
                raise LakeError(f"unknown column(s) {sorted(extra)} for table {table.name!r}")
            checked.add(keys)
        attrs = row.get("attributes")
        needs_fix = attrs is not None and not isinstance(attrs, str)
        if not needs_fix:
            for name, dtype in cols.items():
                if isinstance(dtype, pl.Datetime) and isinstance(row.get(name), dt.datetime):
                    needs_fix = True
                    break
        if needs_fix:
            fixed = dict(row)
            if attrs is not None and not isinstance(attrs, str):
                fixed["attributes"] = orjson.dumps(
                    attrs, option=orjson.OPT_NON_STR_KEYS, default=str
                ).decode()
            for name, value in row.items():
                if isinstance(value, dt.datetime):
                    fixed[name] = to_micros(value)
            prepared.append(fixed)
        else:
            prepared.append(row)
    return pl.from_dicts(prepared, schema=raw_schema) if prepared else pl.DataFrame(schema=raw_schema)


def frame_from_rows(table: Table, rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Build a frame with exactly the table's schema from row dicts.

    Timestamps in rows are ``int`` microseconds since the epoch (UTC) or aware ``datetime``s;
    ``attributes`` may be a ``dict`` (serialised to JSON here). Unknown keys are an error: they
    would be silently lost otherwise.
    """
    import polars as pl

    cols = {name: polars_type(t) for name, t in table.columns.items()}
    raw_schema = {
        name: (pl.Int64() if isinstance(dtype, pl.Datetime) else dtype) for name, dtype in cols.items()
    }
    frame: pl.DataFrame | None = frame_by_column(table, rows, raw_schema) if rows else None
    if frame is None:
        frame = frame_by_row(table, rows, cols, raw_schema)
    now = int(time.time() * 1_000_000)
    return frame.with_columns(
        [
            (pl.col(name).fill_null(now) if name == "ingested_at" else pl.col(name)).cast(dtype)
            for name, dtype in cols.items()
            if isinstance(dtype, pl.Datetime)
        ]
    )
