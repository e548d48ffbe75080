"""Alibaba Bailian traces (alibaba-edu/qwen-bailian-usagetraces-anon ``qwen_*_blksz_16.jsonl``).

One JSON object per line (REPLAY_FORMATS_AND_TRACES §2.1 and §4; the dataset README)::

    {"chat_id": 159, "parent_chat_id": 55, "timestamp": 61.114, "input_length": 521,
     "output_length": 132, "type": "text", "turn": 2, "hash_ids": [1089, 1090, ...]}

Mapping to ``requests``:

* ``started_at`` = :data:`~traceflow.importers.traces.RELATIVE_EPOCH_US` + ``timestamp`` seconds
  (seconds since the trace start). No latency is recorded: ``ended_at``/``duration_ms`` are NULL.
* A session is the root of the ``parent_chat_id`` chain (``-1`` = root), as AIPerf's
  ``bailian_trace`` loader defines it: ``session_id`` = ``<file stem>:<root chat_id>`` (chat ids are
  per-file integers). Every row is one user turn: ``prompt_id`` = ``<file stem>:<chat_id>``,
  ``request_id`` = ``chat_id``. The chat -> root map is kept in ``ctx.state`` so that a grown file's
  new turns join their sessions; a parent never seen is taken as the root.
* Every row carries the full context, so ``cold_input_tokens`` = ``input_length``, cache reads and
  writes 0; the reuse lives in ``hash_ids`` (salted SipHash of 16-token blocks remapped to integers,
  ``block_size`` = 16, comparable within one file: ``attributes.hash_scope``).
* ``type`` (text/search/image/file/thinking), ``turn`` and ``parent_chat_id`` go to ``attributes``.
* ``event_id`` = ``stable_id("bailian", file key, line)``; ``seq`` = line number.
"""

from __future__ import annotations

from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.traces import (
    RELATIVE_EPOCH_US,
    TraceImporter,
    int_list,
    required_int,
    seconds_to_micros,
)
from traceflow.rows import Row, stable_id

BLOCK_SIZE = 16


class BailianImporter(TraceImporter):
    name: ClassVar[str] = "bailian"
    source: ClassVar[str] = "bailian"
    label: ClassVar[str] = "a Bailian"

    def row(self, rec: Any, key: str, no: int, ctx: FileContext) -> Row:
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        chat = required_int(rec, "chat_id")
        parent_raw = rec.get("parent_chat_id")
        parent = -1 if parent_raw is None else int(parent_raw)
        ts = rec.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int | float):
            raise ValueError("missing or non-numeric timestamp")
        inp = required_int(rec, "input_length")
        outp = required_int(rec, "output_length")
        hashes = int_list(rec["hash_ids"]) if rec.get("hash_ids") is not None else None
        roots = ctx.state.get("roots")  # chat id -> root of its chain, carried to the next import
        if not isinstance(roots, dict):
            roots = ctx.state["roots"] = {}
        root = chat if parent < 0 else int(roots.get(str(parent), parent))
        roots[str(chat)] = root
        stem = ctx.path.stem
        attributes: dict[str, Any] = {
            "file": key.split("#", 1)[0],
            "hash_scope": f"bailian:{key}",
            "parent_chat_id": parent,
        }
        for extra in ("type", "turn"):
            if rec.get(extra) is not None:
                attributes[extra] = rec[extra]
        return {
            "event_id": stable_id(self.source, key, no),
            "source": self.source,
            "session_id": f"{stem}:{root}",
            "prompt_id": f"{stem}:{chat}",
            "request_id": str(chat),
            "started_at": RELATIVE_EPOCH_US + seconds_to_micros(ts),
            "cold_input_tokens": inp,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "output_tokens": outp,
            "attributes": attributes,
            "seq": no,
            "hash_ids": hashes,
            "block_size": BLOCK_SIZE if hashes is not None else None,
        }


IMPORTER = BailianImporter()
