"""kv-cache-tester (WEKA) Claude Code session traces (callanjfox/kv-cache-tester ``traces/trace_NNNN.json``).

One JSON document per file, one Claude Code session each
(docs/formats.md#kv-cache-tester-claude-code-sessions)::

    {"id": "trace_0010", "models": [...], "block_size": 64, "hash_id_scope": "local",
     "tool_tokens": ..., "system_tokens": ..., "totals": {...},
     "requests": [{"t": 0.0, "type": "n", "model": "...", "in": 17209, "out": 275,
                   "hash_ids": [...], "input_types": ["text"], "output_types": ["tool_use"],
                   "stop": "tool_use", "api_time": 8.81, "think_time": 0.0},
                  {"t": 100.65, "type": "subagent", "agent_id": "agent_001", "requests": [...], ...}]}

Mapping to ``requests``:

* Times: ``t`` counts seconds from the conversation start; a sub-agent's requests count from the
  sub-agent entry's ``t``. ``started_at`` = :data:`~traceflow.importers.traces.RELATIVE_EPOCH_US`
  + ``t`` (so every session starts at 1970-01-01T00:00:00Z: the traces carry no absolute time),
  ``duration_ms`` = ``api_time`` × 1000 and ``ended_at`` = start + ``api_time`` (NULL where a
  streamed request has no ``api_time``), ``ttft_ms`` = ``ttft`` × 1000 for streamed (``"s"``) ones.
  ``think_time`` (the client delay before the request) is kept in ``attributes.think_time_s``; it
  equals ``started_at`` minus the previous request's ``ended_at`` within ±1 s (``t`` is rounded).
* Sessions: ``session_id`` = the trace ``id`` (file stem if absent); a sub-agent's requests get
  ``session_id`` = ``<id>/<agent_id>`` and ``parent_session_id`` = ``<id>``. ``agent`` is
  ``claude-code``. A parent request whose ``input_types`` has no ``tool_result`` starts a new user
  turn: ``prompt_id`` = ``<id>:<its request index>``; tool-result requests and sub-agents inherit it.
* Tokens: ``in`` is the whole prompt and the files record no cache outcome, so the cache read is
  derived from the hash ids: the leading run of the request's ids that already appeared in an
  earlier request of the same trace (parent and sub-agents share the id namespace), × ``block_size``
  — an unbounded prompt cache within the session, which is what Claude Code's prompt caching
  approximates while gaps stay under the TTL (the TTL analyses then decide what expires).
  ``cache_write_tokens`` = ``in`` − read (Claude Code caches the whole prompt), cold input 0,
  ``attributes.cache_derived`` = ``"trace-prefix"``.
* ``hash_ids`` and ``block_size`` (64) are kept as given: ``len == floor(in / 64)`` (the partial tail
  block is not hashed, unlike Mooncake's ceil rule), and ids are local to the trace
  (``attributes.hash_scope``).
* ``events``: one ``trace_info`` event per file (models, block size, tool/system tokens, totals)
  and one ``subagent`` event per sub-agent entry (type, status, duration, tool uses, total tokens).
* ``event_id`` = ``stable_id("kvcache-tester", file name, trace id, request index[, sub index])``;
  ``seq`` = position in the file (sub-agent requests at their entry), so equal times keep file order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext
from traceflow.importers.traces import (
    RELATIVE_EPOCH_US,
    discover_files,
    int_list,
    required_int,
    seconds_to_micros,
)
from traceflow.rows import LineError, Parsed, Row, as_float, stable_id

DEFAULT_BLOCK_SIZE = 64
_SUBAGENT_FIELDS = (
    "agent_id",
    "subagent_type",
    "duration_ms",
    "total_tokens",
    "tool_use_count",
    "status",
    "models",
    "tool_tokens",
    "system_tokens",
)
_TRACE_FIELDS = ("models", "block_size", "hash_id_scope", "tool_tokens", "system_tokens", "totals")


@dataclass(frozen=True)
class _Trace:
    """What every row of one trace file shares."""

    fname: str
    trace: str
    block_size: int
    scope: str


@dataclass
class _Pending:
    row: Row
    hashes: list[int] | None
    tokens_in: int


def _time(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is missing or not a number")
    return float(value)


class KVCacheTesterImporter:
    name: ClassVar[str] = "kvcache-tester"
    whole_file: ClassVar[bool] = True
    source: ClassVar[str] = "kvcache-tester"

    def default_paths(self) -> list[Path]:
        return []

    def discover(self, root: Path) -> list[Path]:
        return discover_files(root, (".json",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        path = str(ctx.path)
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            out.errors.append(LineError(path, 1, f"invalid JSON ({e}); file skipped"))
            return out
        if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list):
            out.errors.append(
                LineError(path, 1, "not a kv-cache-tester trace (no requests list); file skipped")
            )
            return out
        trace = str(doc.get("id") or ctx.plain.stem)
        block = as_float(doc.get("block_size"))
        block_size = int(block) if block and block > 0 else DEFAULT_BLOCK_SIZE
        tr = _Trace(ctx.plain.name, trace, block_size, f"{self.source}:{trace}")
        pending: list[_Pending] = []
        prompt: str | None = None
        seq = 0
        info = {"file": tr.fname, **{k: doc[k] for k in _TRACE_FIELDS if k in doc}}
        out.events.append(
            self._event(
                "trace_info", stable_id(self.source, tr.fname, trace, "trace"), trace, None, None, 0, 0, info
            )
        )
        for i, entry in enumerate(doc["requests"]):
            seq += 1
            where = f"requests[{i}]"
            if not isinstance(entry, dict):
                out.errors.append(LineError(path, i + 1, f"{where} is not an object; skipped"))
                continue
            if entry.get("type") == "subagent":
                try:
                    base_t = _time(entry.get("t"), f"{where}.t")
                    subs = entry.get("requests") or []
                    if not isinstance(subs, list):
                        raise ValueError(f"{where}.requests is not a list")
                except ValueError as e:
                    out.errors.append(LineError(path, i + 1, f"{e}; sub-agent skipped"))
                    continue
                agent = str(entry.get("agent_id") or f"subagent_{i}")
                session = f"{trace}/{agent}"
                attrs = {k: entry[k] for k in _SUBAGENT_FIELDS if k in entry}
                attrs["requests"] = len(subs)
                event_id = stable_id(self.source, tr.fname, trace, i, "subagent")
                offset = seconds_to_micros(base_t)
                out.events.append(
                    self._event("subagent", event_id, session, trace, prompt, offset, seq, attrs)
                )
                kind = entry.get("subagent_type")
                for j, sub in enumerate(subs):
                    seq += 1
                    try:
                        pending.append(
                            self._request(tr, sub, base_t, (i, j), session, trace, prompt, seq, kind)
                        )
                    except (TypeError, ValueError, KeyError) as e:
                        out.errors.append(LineError(path, i + 1, f"{where}.requests[{j}]: {e}; skipped"))
                continue
            types = entry.get("input_types")
            turn = prompt
            if turn is None or not (isinstance(types, list) and "tool_result" in types):
                turn = f"{trace}:{i}"
            try:
                pending.append(self._request(tr, entry, 0.0, (i,), trace, None, turn, seq, None))
            except (TypeError, ValueError, KeyError) as e:
                out.errors.append(LineError(path, i + 1, f"{where}: {e}; skipped"))
                continue
            prompt = turn
        self._derive_cache(pending, tr.block_size)
        out.requests = [p.row for p in pending]
        return out

    def _request(
        self,
        tr: _Trace,
        rec: Any,
        base_t: float,
        index: tuple[int, ...],
        session: str,
        parent: str | None,
        prompt: str | None,
        seq: int,
        subagent_type: Any,
    ) -> _Pending:
        if not isinstance(rec, dict):
            raise ValueError("not an object")
        start = RELATIVE_EPOCH_US + seconds_to_micros(base_t + _time(rec.get("t"), "t"))
        tokens_in = required_int(rec, "in")
        tokens_out = required_int(rec, "out")
        hashes = int_list(rec["hash_ids"]) if rec.get("hash_ids") is not None else None
        api = as_float(rec.get("api_time"))
        ttft = as_float(rec.get("ttft"))
        attributes: dict[str, Any] = {
            "file": tr.fname,
            "hash_scope": tr.scope,
            "cache_derived": "trace-prefix",
        }
        for src, dst in (
            ("type", "type"),
            ("stop", "stop"),
            ("input_types", "input_types"),
            ("output_types", "output_types"),
            ("think_time", "think_time_s"),
        ):
            if rec.get(src) is not None:
                attributes[dst] = rec[src]
        if subagent_type is not None:
            attributes["subagent_type"] = subagent_type
        row: Row = {
            "event_id": stable_id(self.source, tr.fname, tr.trace, *index),
            "source": self.source,
            "agent": "claude-code",
            "session_id": session,
            "parent_session_id": parent,
            "prompt_id": prompt,
            "started_at": start,
            "ended_at": start + seconds_to_micros(api) if api is not None else None,
            "duration_ms": api * 1000 if api is not None else None,
            "ttft_ms": ttft * 1000 if ttft is not None else None,
            "model": rec.get("model"),
            "cold_input_tokens": 0,
            "output_tokens": tokens_out,
            "attributes": attributes,
            "seq": seq,
            "hash_ids": hashes,
            "block_size": tr.block_size if hashes is not None else None,
        }
        return _Pending(row, hashes, tokens_in)

    @staticmethod
    def _derive_cache(pending: list[_Pending], block_size: int) -> None:
        """Cache read = the leading ids already seen in an earlier request of the trace, in time order."""
        seen: set[int] = set()
        for p in sorted(pending, key=lambda p: (p.row["started_at"], p.row["seq"])):
            hit = 0
            if p.hashes:
                for h in p.hashes:
                    if h not in seen:
                        break
                    hit += 1
                seen.update(p.hashes)
            read = min(p.tokens_in, hit * block_size)
            p.row["cache_read_tokens"] = read
            p.row["cache_write_tokens"] = p.tokens_in - read

    def _event(
        self,
        name: str,
        event_id: str,
        session: str,
        parent: str | None,
        prompt: str | None,
        offset_us: int,
        seq: int,
        attributes: dict[str, Any],
    ) -> Row:
        return {
            "event_id": event_id,
            "source": self.source,
            "agent": "claude-code",
            "session_id": session,
            "parent_session_id": parent,
            "prompt_id": prompt,
            "name": name,
            "timestamp": RELATIVE_EPOCH_US + offset_us,
            "attributes": attributes,
            "seq": seq,
        }


IMPORTER = KVCacheTesterImporter()
