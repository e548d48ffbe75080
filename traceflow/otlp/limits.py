"""What a value must be for the lake to store it, checked once, where rows are made.

The mapping (:func:`traceflow.otlp.decode.map_request`) ends with :func:`fit_rows`, which drops the
rows a Parquet column cannot hold, counting each as a refused record with its reason, so that the
mapping never raises on a record that decoded: an integer outside BIGINT (``input_tokens`` sent as
the double ``1e300``), a timestamp outside the years 1-9999 (``duration_ms`` = 2**63-1 sends
``started_at`` there). Attribute values nested deeper than :data:`MAX_VALUE_DEPTH` (JSON cannot
write past 254 levels) are replaced by a placeholder in :func:`traceflow.otlp.attributes.pb_value`.

The bounds of the values the mapping reads (:data:`MAX_TOKENS`, :data:`MAX_DURATION_MS`) keep
arithmetic on them inside those ranges: :func:`traceflow.otlp.attributes.tok` refuses larger token
counts, and durations beyond the bound are stored as unknown.

:func:`suspicious` is the collector's cheap look at a protobuf payload at acknowledgement (a regular
expression over the bytes, no Python per record): only a payload it flags is mapped record by record
there (``collectors/ingest.py``) to refuse, in ``partial_success``, what the lake could not store.
"""

from __future__ import annotations

import re
from typing import Any

from traceflow.schema import TABLES

#: token counts above this are not token counts (a trillion tokens in one request)
MAX_TOKENS = 10**12
#: durations and latencies above this (ten years, in ms) are stored as unknown
MAX_DURATION_MS = 10 * 365 * 86_400_000.0
#: AnyValue nesting (arrays / kvlists) the mapping follows; deeper values become a placeholder string
MAX_VALUE_DEPTH = 64
DEEP_VALUE = f"(value nested deeper than {MAX_VALUE_DEPTH} levels, not stored)"

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
#: microseconds since the epoch of 0001-01-01 and of 9999-12-31T23:59:59.999999 (what dates can show)
TS_MIN = -62_135_596_800_000_000
TS_MAX = 253_402_300_799_999_999

_BOUNDS = {
    "BIGINT": (INT64_MIN, INT64_MAX),
    "INTEGER": (INT32_MIN, INT32_MAX),
    "TIMESTAMPTZ": (TS_MIN, TS_MAX),
}
#: per table: (column, low, high) of every integer and timestamp column
_CHECKED: dict[str, list[tuple[str, int, int]]] = {
    name: [(col, *_BOUNDS[t]) for col, t in table.columns.items() if t in _BOUNDS]
    for name, table in TABLES.items()
}


def row_problem(table: str, row: dict[str, Any]) -> str | None:
    """Why the lake cannot store ``row`` of ``table`` (None when it can)."""
    for col, low, high in _CHECKED[table]:
        v = row.get(col)
        if v is None:
            continue
        if type(v) is not int:
            if isinstance(v, int) or type(v).__name__ == "datetime":
                continue  # bool, datetime: polars takes those
            return f"{col} is {type(v).__name__}, not an integer"
        if not low <= v <= high:
            return f"{col} {v} is out of range"
    return None


def fit_rows(tables: dict[str, list[dict[str, Any]]]) -> tuple[int, list[str]]:
    """Drop, in place, the rows the lake cannot store; returns (rows dropped, reasons)."""
    dropped = 0
    reasons: list[str] = []
    for name, rows in tables.items():
        if name not in _CHECKED or not rows:
            continue
        bad = []
        for i, row in enumerate(rows):
            why = row_problem(name, row)
            if why is not None:
                bad.append(i)
                reasons.append(f"{name} row {why}")
        for i in reversed(bad):
            del rows[i]
        dropped += len(bad)
    return dropped, reasons


def span_times_problem(start_ns: int, end_ns: int) -> str | None:
    """Why a span's start and end times cannot be stored (None when they can): it ends before it
    starts (a negative duration). An unset time (0) is unknown, not wrong."""
    if start_ns and end_ns and end_ns < start_ns:
        return f"ends before it starts ({(start_ns - end_ns) / 1e6:.3f} ms early)"
    return None


def duration_ms(x: float | None) -> float | None:
    """A duration in ms within [0, MAX_DURATION_MS]; None for anything else."""
    return x if x is not None and 0.0 <= x <= MAX_DURATION_MS else None


# The value of an attribute whose key ends in ``tokens`` or ``_ms`` or has ``token_count`` in it
# (``*_tokens``, ``duration_ms``, ``ttft_ms``, ``*_token_count``, ``llm.token_count.prompt``: the keys
# the mapping reads as counts or durations) is KeyValue.value (field 2, tag 0x12) holding an
# AnyValue that is suspicious unless it is a small number:
#   anything but an int_value or a double_value (a string, bool, array, kvlist, bytes: tag 0x18/0x21
#   not first, or a value of 128 bytes or more);
#   a double_value (field 4, fixed64: tag 0x21, length 9) with |x| >= 2**38, negative, or not finite;
#   an int_value (field 3, varint: tag 0x18) of 6 or more bytes (>= 2**35, or negative).
# Three searches, each starting with a literal: the regular expression engine is many times slower
# with a character class or an alternation at the start (1-10 ms for a 270 kB payload here).
_VALUE = (
    rb"\x12(?:[\x80-\xff]|[\x01-\x7f][^\x18\x21]"
    rb"|\x09\x21.{6}(?:[\x50-\xff][\x42\xc2]|.[\x43-\xff])|[\x07-\x0b]\x18)"
)
# A key ending in ``timestamp`` (``event.timestamp``: a record without a time is dated by it, and
# ``started_at`` = it - ``duration_ms``) is suspicious unless its value is a short string_value that
# starts with a year from 1900 to 2199: a year near 1 or 9999 puts a derived time out of range.
_TIMESTAMP = rb"timestamp\x12(?:[\x80-\xff]|.(?:[^\x0a]|\x0a(?:[\x80-\xff]|.(?!(?:19|2[01])\d\d-))))"
_SUSPICIOUS = (
    *(re.compile(key + _VALUE, re.S) for key in (rb"tokens", rb"_ms", rb"token_count[a-z_.]*")),
    re.compile(_TIMESTAMP, re.S),
)


def suspicious(pb: bytes) -> bool:
    """True when a serialized export request may hold a count, duration or timestamp the mapping
    refuses (it flags every such value of the keys above; it may flag a harmless payload, which is
    then only checked more slowly). Other keys are not read as numbers or times by the mapping."""
    return any(p.search(pb) is not None for p in _SUSPICIOUS)
