"""Gemini CLI chat recordings: ``$GEMINI_DIR/tmp/<projectHash>/chats/*.jsonl`` (docs/schemas.md#gemini-cli).

A recording starts with a metadata record ``{sessionId, projectHash, startTime, lastUpdated, kind}``,
followed by MessageRecords ``{id, timestamp, type, content, model?, tokens?, ...}``, metadata updates
``{"$set": {...}}`` and rewinds ``{"$rewindTo": "<msgId>"}``. The CLI appends a message again each time
it changes it (tokens arrive after the text), so **the last write of a message id wins**; a ``$set``
with ``messages`` is a checkpoint that replaces the whole message list, and ``$rewindTo`` drops that
message and everything after it. Because earlier records are superseded by later ones, the importer is
``whole_file``: it always gets the whole file and rebuilds the conversation from scratch.

One request row per ``type: "gemini"`` message with tokens (docs/schemas.md#the-four-token-kinds):
``cold = input − cached`` (``input`` = promptTokenCount includes the cache), ``read = cached`` (clamped
to ≤ input), ``write = 0`` (Gemini reports no per-request cache write; 5m/1h stay NULL),
``output = output + thoughts`` (candidates exclude thoughts), ``reasoning = thoughts``.
``tokens.tool`` (toolUsePromptTokenCount, outside promptTokenCount) goes to ``attributes.tool_tokens``.

Decisions where the sources are silent:

* Messages dropped by a later ``$rewindTo`` or checkpoint were still real API calls (and a file
  imported before the rewind already put them in the lake, which never deletes), so they keep their
  rows, tagged ``attributes.superseded = "rewind" | "checkpoint"``; filter on it to see only the
  conversation's final state. A message written again later is live again. A ``user`` message
  that only ever appears inside a checkpoint (a compression summary the CLI put into the history)
  is not a prompt: it gives no ``user_prompt`` event and no ``prompt_id``.
* A later write whose ``tokens`` is null does not erase tokens an earlier write of that id reported.
* ``seq`` is the line where the message id first appeared (its place in the conversation), so a
  message whose tokens arrive later keeps its position; ``prompt_id`` is the id of the nearest
  ``type: "user"`` message before it in the message list as of its last write.
* ``ended_at`` is the message ``timestamp`` (the CLI records a model message when its stream ends).
* Legacy ``session-*.json`` files (one ConversationRecord with a ``messages`` array) are read as a
  metadata record plus a checkpoint; ``seq`` is then the message's 1-based index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext, json_records
from traceflow.importers.compressed import plain_path, with_compressed
from traceflow.rows import LineError, Parsed, Row, as_int, iso_micros, split_inclusive, stable_id

SOURCE = "gemini-jsonl"
AGENT = "gemini-cli"


class BadRecord(ValueError):
    """A record that cannot be imported (becomes a LineError)."""


@dataclass
class _Msg:
    """Everything known about one message id."""

    id: str
    first_seq: int
    record: dict[str, Any]
    tokens: dict[str, Any] | None = None
    model: str | None = None
    prompt_id: str | None = None
    superseded: str | None = None
    ts: int | None = None
    synthetic: bool = False  # first seen inside a $set.messages checkpoint, never appended itself


@dataclass
class _Conversation:
    """The chat as the CLI would load it, plus every message ever written."""

    order: list[str] = field(default_factory=list)  # live message ids, in order
    pos: dict[str, int] = field(default_factory=dict)  # id → index in order
    nearest_user: list[str | None] = field(default_factory=list)  # per index: last user id at or before
    msgs: dict[str, _Msg] = field(default_factory=dict)  # every id ever written
    meta: dict[str, Any] = field(default_factory=dict)
    first_session_id: str | None = None

    def _is_user(self, mid: str) -> bool:
        msg = self.msgs[mid]
        return msg.record.get("type") == "user" and not msg.synthetic

    def _recompute_from(self, i: int) -> None:
        prev = self.nearest_user[i - 1] if i > 0 else None
        for j in range(i, len(self.order)):
            mid = self.order[j]
            prev = mid if self._is_user(mid) else prev
            self.nearest_user[j] = prev

    def write(self, rec: dict[str, Any], seq: int, ts: int, checkpoint: bool = False) -> None:
        mid: str = rec["id"]
        known = self.msgs.get(mid)
        was_user = known is not None and self._is_user(mid)
        if known is None:
            known = self.msgs[mid] = _Msg(id=mid, first_seq=seq, record=rec, synthetic=checkpoint)
        elif not checkpoint:
            known.synthetic = False
        known.record = rec
        known.ts = ts
        known.superseded = None
        tokens = rec.get("tokens")
        if isinstance(tokens, dict):
            known.tokens = tokens
        model = rec.get("model")
        if isinstance(model, str) and model:
            known.model = model
        i = self.pos.get(mid)
        if i is None:
            i = len(self.order)
            self.order.append(mid)
            self.pos[mid] = i
            self.nearest_user.append(None)
            self._recompute_from(i)
        elif was_user != self._is_user(mid):
            self._recompute_from(i)
        known.prompt_id = self.nearest_user[i - 1] if i > 0 else None

    def truncate(self, i: int, why: str) -> None:
        for mid in self.order[i:]:
            self.msgs[mid].superseded = why
            del self.pos[mid]
        del self.order[i:]
        del self.nearest_user[i:]

    def rewind(self, mid: str) -> None:
        # As the CLI's loader: drop the message and all after it; an unknown id drops everything.
        self.truncate(self.pos.get(mid, 0), "rewind")


def _timestamp(rec: dict[str, Any]) -> int:
    ts = rec.get("timestamp")
    if not isinstance(ts, str):
        raise BadRecord(f"message {rec.get('id')!r} without a timestamp")
    try:
        return iso_micros(ts)
    except ValueError as exc:
        raise BadRecord(f"message {rec.get('id')!r}: bad timestamp {ts!r}") from exc


def _num(tokens: dict[str, Any], key: str) -> int | None:
    try:
        return as_int(tokens.get(key))
    except (TypeError, ValueError) as exc:
        raise BadRecord(f"tokens.{key} is not a number: {tokens.get(key)!r}") from exc


class GeminiImporter:
    """Rows from Gemini CLI chat recordings (whole file each time: records rewrite earlier ones)."""

    name: ClassVar[str] = "gemini"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        from traceflow.store import local_logs

        return [Path(p) for p in local_logs.default_folders(self.name)]

    def discover(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        if not root.is_dir():
            return []
        found: set[Path] = set()
        lines = with_compressed((".jsonl",))
        plain = set()
        for p in root.rglob("*.jsonl*"):
            if p.name.endswith(lines) and p.is_file() and "chats" in p.parent.parts[-2:]:
                found.add(p)
                plain.add(plain_path(p))
        legacy = with_compressed((".json",))
        for p in root.rglob("session-*.json*"):
            # Legacy single-record files; once resumed, the CLI migrates them to a .jsonl sibling.
            sibling = plain_path(p).with_suffix(".jsonl")
            if p.name.endswith(legacy) and p.is_file() and p.parent.name == "chats" and sibling not in plain:
                found.add(p)
        return sorted(found)

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        conv = _Conversation()
        path = str(ctx.path)
        if ctx.plain.suffix == ".json":
            self._legacy(data, ctx, conv, out)
        else:
            for line_no, _, rec in json_records(data, ctx, out.errors, "invalid JSON: {}"):
                try:
                    self._record(rec, line_no, conv)
                except BadRecord as exc:
                    out.errors.append(LineError(path, line_no, str(exc)))
        self._emit(ctx, conv, out)
        return out

    # -- reading -------------------------------------------------------------------------------
    def _record(self, rec: Any, seq: int, conv: _Conversation) -> None:
        if not isinstance(rec, dict):
            raise BadRecord("record is not a JSON object")
        if "$rewindTo" in rec:
            target = rec["$rewindTo"]
            if not isinstance(target, str):
                raise BadRecord("$rewindTo is not a message id")
            conv.rewind(target)
        elif "$set" in rec:
            upd = rec["$set"]
            if not isinstance(upd, dict):
                raise BadRecord("$set is not an object")
            self._metadata(upd, conv)
            if "messages" in upd:
                self._checkpoint(upd["messages"], seq, conv)
        elif isinstance(rec.get("id"), str):
            self._check_tokens(rec)
            conv.write(rec, seq, _timestamp(rec))
        elif isinstance(rec.get("sessionId"), str):
            self._metadata(rec, conv)
        # anything else: a record type this importer does not know; the CLI ignores it too

    @staticmethod
    def _check_tokens(rec: dict[str, Any]) -> None:
        tokens = rec.get("tokens")
        if tokens is not None and not isinstance(tokens, dict):
            raise BadRecord(f"message {rec['id']!r}: tokens is not an object")
        if isinstance(tokens, dict):
            for key in ("input", "output", "cached", "thoughts", "tool", "total"):
                _num(tokens, key)

    @staticmethod
    def _metadata(upd: dict[str, Any], conv: _Conversation) -> None:
        sid = upd.get("sessionId")
        if isinstance(sid, str) and sid and conv.first_session_id is None:
            conv.first_session_id = sid
        conv.meta.update({k: v for k, v in upd.items() if k != "messages"})

    def _checkpoint(self, messages: Any, seq: int, conv: _Conversation) -> None:
        if not isinstance(messages, list):
            raise BadRecord("$set.messages is not a list")
        good: list[tuple[dict[str, Any], int]] = []
        for m in messages:
            if not (isinstance(m, dict) and isinstance(m.get("id"), str)):
                raise BadRecord("$set.messages holds a record without an id")
            self._check_tokens(m)
            good.append((m, _timestamp(m)))
        conv.truncate(0, "checkpoint")
        for m, ts in good:
            conv.write(m, seq, ts, checkpoint=True)

    def _legacy(self, data: bytes, ctx: FileContext, conv: _Conversation, out: Parsed) -> None:
        path = str(ctx.path)
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            out.errors.append(LineError(path, ctx.first_line, f"invalid JSON: {exc}"))
            return
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            out.errors.append(LineError(path, ctx.first_line, "not a ConversationRecord"))
            return
        self._metadata(doc, conv)
        for i, m in enumerate(doc["messages"], start=1):
            try:
                if not (isinstance(m, dict) and isinstance(m.get("id"), str)):
                    raise BadRecord(f"message {i} without an id")
                self._check_tokens(m)
                conv.write(m, i, _timestamp(m))
            except BadRecord as exc:
                out.errors.append(LineError(path, ctx.first_line, str(exc)))

    # -- rows ----------------------------------------------------------------------------------
    def _emit(self, ctx: FileContext, conv: _Conversation, out: Parsed) -> None:
        session_id = conv.first_session_id or ctx.plain.stem
        parent_session_id: str | None = None
        # Sub-agents record to chats/<parentSessionId>/<sessionId>.jsonl.
        if ctx.path.parent.parent.name == "chats" and ctx.path.parent.name != "chats":
            parent_session_id = ctx.path.parent.name
        kind = conv.meta.get("kind")
        project = conv.meta.get("projectHash")
        for msg in sorted(conv.msgs.values(), key=lambda m: (m.first_seq, m.ts or 0, m.id)):
            mtype = msg.record.get("type")
            if mtype not in ("user", "gemini"):
                continue
            attrs: dict[str, Any] = {"message_id": msg.id}
            if isinstance(project, str):
                attrs["project_hash"] = project
            if isinstance(kind, str):
                attrs["kind"] = kind
            if msg.superseded:
                attrs["superseded"] = msg.superseded
            base: Row = {
                "event_id": stable_id("gemini-message", session_id, msg.id),
                "source": SOURCE,
                "agent": AGENT,
                "agent_version": None,
                "session_id": session_id,
                "parent_session_id": parent_session_id,
                "seq": msg.first_seq,
            }
            if mtype == "user":
                if msg.synthetic:
                    continue  # a summary or other turn the CLI put into history, not a prompt
                content = msg.record.get("content")
                text = _text(content)
                if text is not None:
                    attrs["prompt_length"] = len(text)
                base.update(
                    {"prompt_id": msg.id, "name": "user_prompt", "timestamp": msg.ts, "attributes": attrs}
                )
                out.events.append(base)
                continue
            row = self._request(msg, base, attrs)
            if row is not None:
                out.requests.append(row)

    @staticmethod
    def _request(msg: _Msg, base: Row, attrs: dict[str, Any]) -> Row | None:
        t = msg.tokens
        if t is None:
            return None  # still streaming, or an error before usage arrived
        inp = max(0, _num(t, "input") or 0)
        cached = max(0, _num(t, "cached") or 0)
        output = max(0, _num(t, "output") or 0)
        thoughts = max(0, _num(t, "thoughts") or 0)
        if inp == 0 and cached == 0 and output == 0 and thoughts == 0:
            return None
        tokens = split_inclusive(inp, cached, 0, output + thoughts)
        if cached > inp:
            attrs["cache_read_clamped_from"] = cached
        tool = _num(t, "tool")
        if tool:
            attrs["tool_tokens"] = tool
        total = _num(t, "total")
        if total is not None:
            attrs["total_tokens"] = total
        calls = msg.record.get("toolCalls")
        if isinstance(calls, list) and calls:
            attrs["tool_calls"] = len(calls)
        base.update(
            {
                "prompt_id": msg.prompt_id,
                "ended_at": msg.ts,
                "model": msg.model,
                **tokens.columns(),
                "reasoning_tokens": thoughts,
                "attributes": attrs,
            }
        )
        return base


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts)
    return None


IMPORTER = GeminiImporter()
