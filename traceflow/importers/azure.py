"""Azure LLM inference traces (Azure/AzurePublicDataset ``AzureLLMInferenceTrace_{code,conv}*.csv``).

CSV with a header (docs/formats.md#azure-llm-inference-trace-2023)::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:17:03.9799600,4808,10

The 2023 (Splitwise) and 2024 (DynamoLLM, one week) files share these columns; the 2025 multimodal
file adds ``NumImages`` (kept in ``attributes``). Columns are found by name, so their order may vary.

Mapping to ``requests``:

* ``started_at`` = ``TIMESTAMP``, an absolute arrival time with 7 fractional digits (100 ns), read as
  UTC (the dataset states no zone) and rounded to the microsecond. No latency is recorded:
  ``ended_at`` and ``duration_ms`` are NULL.
* ``cold_input_tokens`` = ``ContextTokens`` (the whole prompt), ``output_tokens`` =
  ``GeneratedTokens``; cache reads and writes are 0 (the trace has no prefix information at all).
* No sessions, users or models: those columns are NULL. ``attributes.workload`` is ``code`` or
  ``conv`` when the file name says so.
* The header is kept in ``ctx.state``, so a grown file's new lines parse without it.
* ``event_id`` = ``stable_id("azure", file key, line)``; ``seq`` = line number.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator
from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.traces import TraceImporter, count, csv_records
from traceflow.rows import LineError, Row, stable_id

_TS = re.compile(
    r"^\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?\s*$"
)

_DEFAULT_HEADER = ["timestamp", "contexttokens", "generatedtokens"]


@functools.lru_cache(maxsize=4096)
def _day_micros(year: int, month: int, day: int) -> int:
    return (dt.date(year, month, day) - dt.date(1970, 1, 1)).days * 86_400_000_000


def datetime_micros(value: str) -> int:
    """Microseconds since the epoch of ``YYYY-MM-DD HH:MM:SS[.fffffff][Z|±HH:MM]`` (naive = UTC)."""
    m = _TS.match(value)
    if not m:
        raise ValueError(f"bad timestamp {value!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if hour > 23 or minute > 59 or second > 60:
        raise ValueError(f"bad time of day in {value!r}")
    micros = _day_micros(year, month, day) + ((hour * 60 + minute) * 60 + second) * 1_000_000
    frac, zone = m.group(7), m.group(8)
    if frac:
        scale = 10 ** len(frac)
        micros += (int(frac) * 2_000_000 + scale) // (2 * scale)  # rounded to the nearest µs
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        micros -= sign * (int(zone[1:3]) * 60 + int(zone[-2:])) * 60_000_000
    return micros


class AzureImporter(TraceImporter):
    name: ClassVar[str] = "azure"
    suffixes: ClassVar[tuple[str, ...]] = (".csv",)
    label: ClassVar[str] = "an Azure trace"

    def records(
        self, data: bytes, ctx: FileContext, errors: list[LineError]
    ) -> Iterator[tuple[int, bytes, Any]]:
        return csv_records(data, ctx, _DEFAULT_HEADER, "contexttokens", errors)

    def row(self, rec: dict[str, str], key: str, no: int, ctx: FileContext) -> Row:
        started = datetime_micros(rec["timestamp"]) if "timestamp" in rec else None
        if started is None:
            raise ValueError("no TIMESTAMP column")
        attributes: dict[str, Any] = {"file": ctx.plain.name}
        lowered = ctx.plain.name.lower()
        workload = "code" if "code" in lowered else "conv" if "conv" in lowered else None
        if workload:
            attributes["workload"] = workload
        if len(rec) > len(_DEFAULT_HEADER):
            attributes.update((c, v) for c, v in rec.items() if c not in _DEFAULT_HEADER)
        return {
            "event_id": stable_id(self.source, key, no),
            "source": self.source,
            "started_at": started,
            "cold_input_tokens": count(rec.get("contexttokens"), "ContextTokens"),
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "output_tokens": count(rec.get("generatedtokens"), "GeneratedTokens"),
            "attributes": attributes,
            "seq": no,
        }


IMPORTER = AzureImporter()
