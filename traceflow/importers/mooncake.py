"""Mooncake traces (kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl`` and the same format elsewhere).

One JSON object per line (docs/formats.md#mooncake)::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

Mapping to ``requests``:

* ``started_at`` = :data:`~traceflow.importers.traces.RELATIVE_EPOCH_US` + ``timestamp`` ms. The
  released traces count milliseconds from the trace start, so their requests fall on 1970-01-01 from
  00:00 on; analyses use only differences. A file with absolute epoch-ms timestamps (traceflow's own
  ``mooncake-flat`` export) lands on its true dates. There is no latency: ``ended_at`` and
  ``duration_ms`` are NULL.
* ``cold_input_tokens`` = ``input_length`` (the whole prompt); ``cache_read_tokens`` =
  ``cache_write_tokens`` = 0. The trace reports no cache outcome: its reuse structure is in
  ``hash_ids`` (512-token prefix blocks, ``block_size`` = 512, ``len == ceil(input_length/512)``),
  from which the replay and simulation code computes hits for a given cache.
* Hash ids are only comparable within one file: ``attributes.hash_scope`` names that scope.
* No session or user fields exist (prefix sharing is the only linkage, and it branches), so
  ``session_id`` is NULL unless a row carries AIPerf's optional ``session_id``.
* ``event_id`` = ``stable_id("mooncake", file key, line)``, where the file key is the file name plus
  a hash of its first record, so re-importing (or importing a copy under the same name) adds nothing;
  ``seq`` = line number, so the many equal timestamps keep file order.
"""

from __future__ import annotations

from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.traces import HashedBlockImporter


class MooncakeImporter(HashedBlockImporter):
    name: ClassVar[str] = "mooncake"
    label: ClassVar[str] = "a Mooncake"
    block_size: ClassVar[int] = 512
    timestamp_us: ClassVar[int] = 1_000  # milliseconds from the trace start
    timestamp_note: ClassVar[str] = " (delay-only rows are not supported)"

    def ids(self, rec: dict[str, Any], ctx: FileContext) -> tuple[dict[str, str | None], dict[str, Any]]:
        session = rec.get("session_id")
        extra: dict[str, Any] = {name: rec[name] for name in ("priority", "delay", "extra") if name in rec}
        return {"session_id": str(session) if session is not None else None}, extra


IMPORTER = MooncakeImporter()
