"""Alibaba Bailian traces (alibaba-edu/qwen-bailian-usagetraces-anon ``qwen_*_blksz_16.jsonl``).

One JSON object per line (docs/formats.md#alibaba-bailian; the dataset README)::

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
from traceflow.importers.traces import HashedBlockImporter, required_int


class BailianImporter(HashedBlockImporter):
    name: ClassVar[str] = "bailian"
    label: ClassVar[str] = "a Bailian"
    block_size: ClassVar[int] = 16
    timestamp_us: ClassVar[int] = 1_000_000  # seconds from the trace start

    def ids(self, rec: dict[str, Any], ctx: FileContext) -> tuple[dict[str, str | None], dict[str, Any]]:
        chat = required_int(rec, "chat_id")
        parent_raw = rec.get("parent_chat_id")
        parent = -1 if parent_raw is None else int(parent_raw)
        roots = ctx.state.get("roots")  # chat id -> root of its chain, carried to the next import
        if not isinstance(roots, dict):
            roots = ctx.state["roots"] = {}
        root = chat if parent < 0 else int(roots.get(str(parent), parent))
        roots[str(chat)] = root
        stem = ctx.plain.stem
        extra: dict[str, Any] = {"parent_chat_id": parent}
        extra.update({name: rec[name] for name in ("type", "turn") if rec.get(name) is not None})
        return {"session_id": f"{stem}:{root}", "prompt_id": f"{stem}:{chat}", "request_id": str(chat)}, extra


IMPORTER = BailianImporter()
