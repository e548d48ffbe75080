"""BurstGPT traces (HPMLL/BurstGPT ``data/BurstGPT_*.csv``, also ``BurstGPT_without_fails_*.csv``).

CSV with a header (docs/formats.md#burstgpt; the repository README)::

    Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
    5,ChatGPT,472,18,490,Conversation log

Releases from v1.2 add ``Session ID`` (conversation logs only) and ``Elapsed time`` (seconds from
submission to the last token). Columns are found by name, compared without case or spaces, so
``SessionID`` and ``Session ID`` both work; a file without a header is read in the v1.1 order above.

Mapping to ``requests``:

* ``started_at`` = :data:`~traceflow.importers.traces.RELATIVE_EPOCH_US` + ``Timestamp`` seconds
  (seconds from 00:00:00 of the trace's first day, date unpublished), so the time of day survives
  and the first day is 1970-01-01. ``Elapsed time``, when present, gives ``duration_ms`` and
  ``ended_at``; otherwise both are NULL.
* ``cold_input_tokens`` = ``Request tokens`` (the whole prompt: BurstGPT has no prefix information),
  ``output_tokens`` = ``Response tokens``, cache reads and writes 0, ``model`` = ``Model``.
  Failed requests (``Response tokens`` = 0 in the files with failures) keep their request tokens and
  are flagged ``attributes.failed``.
* ``session_id`` = ``Session ID`` where present and non-empty, else NULL; every row is its own user
  turn (``prompt_id`` = its event id). ``attributes.log_type`` keeps ``Log Type``.
* The header is kept in ``ctx.state``, so a grown file's new lines parse without it.
* ``event_id`` = ``stable_id("burstgpt", file key, line)``; ``seq`` = line number.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.traces import RELATIVE_EPOCH_US, TraceImporter, count, csv_records, seconds_to_micros
from traceflow.rows import LineError, Row, stable_id

_DEFAULT_HEADER = ["timestamp", "model", "requesttokens", "responsetokens", "totaltokens", "logtype"]
_KNOWN = {*_DEFAULT_HEADER, "sessionid", "elapsedtime"}


def _seconds(value: str | None, column: str) -> float:
    if value is None or value == "":
        raise ValueError(f"missing {column}")
    number = float(value)
    if number < 0 or number != number:  # negative or NaN
        raise ValueError(f"{column} is not a time: {value!r}")
    return number


class BurstGPTImporter(TraceImporter):
    name: ClassVar[str] = "burstgpt"
    suffixes: ClassVar[tuple[str, ...]] = (".csv",)
    label: ClassVar[str] = "a BurstGPT"

    def records(
        self, data: bytes, ctx: FileContext, errors: list[LineError]
    ) -> Iterator[tuple[int, bytes, Any]]:
        return csv_records(data, ctx, _DEFAULT_HEADER, "requesttokens", errors)

    def row(self, rec: dict[str, str], key: str, no: int, ctx: FileContext) -> Row:
        started = RELATIVE_EPOCH_US + seconds_to_micros(_seconds(rec.get("timestamp"), "Timestamp"))
        request = count(rec.get("requesttokens"), "Request tokens")
        response = count(rec.get("responsetokens"), "Response tokens")
        elapsed = rec.get("elapsedtime")
        duration_ms = _seconds(elapsed, "Elapsed time") * 1000 if elapsed else None
        attributes: dict[str, Any] = {"file": key.split("#", 1)[0]}
        if rec.get("logtype"):
            attributes["log_type"] = rec["logtype"]
        if response == 0:
            attributes["failed"] = True
        total = rec.get("totaltokens")
        if total and count(total, "Total tokens") != request + response:
            attributes["total_tokens"] = count(total, "Total tokens")
        for col, value in rec.items():
            if col not in _KNOWN and value != "":
                attributes[col] = value
        event_id = stable_id(self.source, key, no)
        return {
            "event_id": event_id,
            "source": self.source,
            "session_id": rec.get("sessionid") or None,
            "prompt_id": event_id,
            "started_at": started,
            "ended_at": started + round(duration_ms * 1000) if duration_ms is not None else None,
            "duration_ms": duration_ms,
            "model": rec.get("model") or None,
            "cold_input_tokens": request,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "output_tokens": response,
            "attributes": attributes,
            "seq": no,
        }


IMPORTER = BurstGPTImporter()
