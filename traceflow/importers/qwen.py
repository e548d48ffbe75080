"""Qwen Code chat records: ``$QWEN_DATA_DIR/projects/<project>/chats/<sessionId>.jsonl`` (sources and
versions in tests/data/SOURCES.md).

Qwen Code (QwenLM/qwen-code, a Gemini CLI fork) appends one ``ChatRecord`` per line: ``{uuid,
parentUuid, sessionId, timestamp, type: "user"|"assistant"|"tool_result"|"system", subtype?, cwd,
version, model?, usageMetadata?, isSidechain?, agentId?, forkedFrom?, systemPayload?}``. The file only
grows, so the importer reads only the new lines.

One request row per ``type: "assistant"`` record with ``usageMetadata`` (Gemini's
``GenerateContentResponseUsageMetadata``; docs/schemas.md#qwen-code): ``cold = promptTokenCount −
cachedContentTokenCount`` (the prompt includes the cache), ``read = cachedContentTokenCount``,
``write`` NULL (Qwen records none), ``output = candidatesTokenCount + thoughtsTokenCount`` (candidates
exclude thoughts), ``reasoning = thoughtsTokenCount``. ``ended_at`` is the record's ``timestamp``
(written when the reply ended).

Sessions: a sub-agent's records (``isSidechain`` with ``agentId``) form session ``agent-<agentId>``
with ``parent_session_id`` = the record's ``sessionId``, as Claude Code's do; a session spawned by
another names it in a ``system``/``parent_session`` record (``systemPayload.parentSessionId``), carried
to the later rows of the file. A user record starts a prompt (``prompt_id`` = its ``promptId``, else
its ``uuid``). The request id is ``stable_id("qwen-record", uuid)``: ``/branch`` copies records into
a new session with their ``uuid`` unchanged (and ``forkedFrom`` set), so a copied request counts once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext, parse_objects
from traceflow.importers.counts import count
from traceflow.importers.files import data_folder, default_paths, files_under
from traceflow.rows import Parsed, Row, record_micros, split_inclusive, stable_id

SOURCE = "qwen-jsonl"
AGENT = "qwen-code"


def data_dir() -> Path:
    """Qwen Code's folder: ``$QWEN_DATA_DIR``, else ``~/.qwen``.
    (:func:`traceflow.importers.files.data_folder`)"""
    return data_folder("qwen")


class BadRecord(ValueError):
    """A record that cannot be imported (becomes a LineError)."""


def _count(usage: dict[str, Any], key: str) -> int:
    return count(usage, key, "usageMetadata", BadRecord) or 0


class QwenImporter:
    """Rows from Qwen Code chat records (incremental: ``parse`` gets only the new lines)."""

    name: ClassVar[str] = "qwen"
    whole_file: ClassVar[bool] = False

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, "*.jsonl*", (".jsonl",), lambda p: p.parent.name == "chats")

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        return parse_objects(
            data, ctx, "record", BadRecord, lambda rec, no, out: self._record(rec, no, ctx, out)
        )

    def _record(self, rec: dict[str, Any], seq: int, ctx: FileContext, out: Parsed) -> None:
        st = ctx.state
        kind = rec.get("type")
        session = rec.get("sessionId") if isinstance(rec.get("sessionId"), str) else None
        session = session or st.get("session_id") or ctx.plain.stem
        st["session_id"] = session
        if kind == "system" and rec.get("subtype") == "parent_session":
            payload = rec.get("systemPayload")
            parent = payload.get("parentSessionId") if isinstance(payload, dict) else None
            if isinstance(parent, str) and parent:
                st["parent_session_id"] = parent
            return
        sub = rec.get("agentId") if rec.get("isSidechain") and isinstance(rec.get("agentId"), str) else None
        if kind == "user" and rec.get("subtype") is None:
            prompt = rec.get("promptId") or rec.get("uuid")
            if isinstance(prompt, str):
                st["agent_prompt" if sub else "prompt_id"] = prompt
            return
        if kind != "assistant" or rec.get("usageMetadata") is None:
            return
        usage = rec["usageMetadata"]
        if not isinstance(usage, dict):
            raise BadRecord("usageMetadata is not an object")
        prompt_tokens = _count(usage, "promptTokenCount")
        cached = _count(usage, "cachedContentTokenCount")
        candidates = _count(usage, "candidatesTokenCount")
        thoughts = _count(usage, "thoughtsTokenCount")
        if not (prompt_tokens or cached or candidates or thoughts):
            return
        uid = rec.get("uuid")
        if not isinstance(uid, str) or not uid:
            raise BadRecord("assistant record without a uuid")
        ended = record_micros(
            rec.get("timestamp"), f"assistant record {uid!r} without a timestamp", BadRecord
        )
        attrs: dict[str, Any] = {"uuid": uid}
        for key in ("cwd", "gitBranch", "agentName"):
            if isinstance(rec.get(key), str):
                attrs[key.lower() if key == "cwd" else key] = rec[key]
        forked = rec.get("forkedFrom")
        if isinstance(forked, dict) and isinstance(forked.get("sessionId"), str):
            attrs["forked_from"] = forked["sessionId"]
        if cached > prompt_tokens:
            attrs["cache_read_clamped_from"] = cached
        total = usage.get("totalTokenCount")
        if isinstance(total, int):
            attrs["total_tokens"] = total
        row: Row = {
            "event_id": stable_id("qwen-record", uid),
            "source": SOURCE,
            "agent": AGENT,
            "agent_version": rec.get("version") if isinstance(rec.get("version"), str) else None,
            "session_id": f"agent-{sub}" if sub else session,
            "parent_session_id": session if sub else st.get("parent_session_id"),
            "prompt_id": st.get("agent_prompt" if sub else "prompt_id") or st.get("prompt_id"),
            "ended_at": ended,
            "model": rec.get("model") if isinstance(rec.get("model"), str) else None,
            **split_inclusive(prompt_tokens, cached, None, candidates + thoughts).columns(),
            "reasoning_tokens": thoughts,
            "seq": seq,
            "attributes": attrs,
        }
        out.requests.append(row)


IMPORTER = QwenImporter()
