"""Amp (Sourcegraph) thread files: ``$AMP_DATA_DIR/threads/T-<id>.json`` (sources and versions in
tests/data/SOURCES.md).

A thread file is one JSON object ``{id, created, title?, messages: [...], usageLedger?: {events:
[...]}}``, rewritten as the thread grows (so the importer is ``whole_file``). Two shapes carry usage:

* **Messages** (current): each assistant message's ``usage`` = ``{model, inputTokens, outputTokens,
  cacheCreationInputTokens, cacheReadInputTokens, totalInputTokens?, timestamp}``, Anthropic's split
  (``inputTokens`` is the cold input). One request row per assistant message with tokens.
* **Usage ledger** (older threads): ``usageLedger.events[]`` = ``{id, timestamp, model, credits,
  tokens: {input, output, total?}, fromMessageId, toMessageId}``, one per request; the cache read and
  write are on the assistant message the event's ``toMessageId`` names (``messages[].messageId``). When
  a thread has a ledger, its events are the requests (as ccusage reads it); an event whose message has
  no usage leaves read and write unknown (NULL).

``ended_at`` is the usage's (or event's) ``timestamp``; the thread id is the session. Amp records no
reasoning split (NULL) and no 5m/1h split (NULL). ``credits`` goes to ``attributes.credits``. A usage
without a model or a timestamp, or with no token at all, gives no row (ccusage skips it too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext, request_row
from traceflow.importers.counts import count
from traceflow.importers.files import data_folder, default_paths, files_under
from traceflow.rows import LineError, Parsed, Row, Tokens, stable_id, text_micros

SOURCE = "amp-json"
AGENT = "amp"


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def data_dir() -> Path:
    """Amp's data folder: ``$AMP_DATA_DIR``, else ``$XDG_DATA_HOME/amp``, else ``~/.local/share/amp``.
    (:func:`traceflow.importers.files.data_folder`)"""
    return data_folder("amp")


class AmpImporter:
    """Rows from Amp thread files (whole file each time: a thread is rewritten as it grows)."""

    name: ClassVar[str] = "amp"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, "*.json*", (".json",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        path = str(ctx.path)
        try:
            thread = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            out.errors.append(LineError(path, ctx.first_line, f"invalid JSON: {exc}"))
            return out
        tid = _text(thread.get("id")) if isinstance(thread, dict) else None
        if not isinstance(thread, dict) or tid is None:
            out.errors.append(LineError(path, ctx.first_line, "not an Amp thread (no id)"))
            return out
        messages = [m for m in thread.get("messages") or [] if isinstance(m, dict)]
        ledger = thread.get("usageLedger")
        events = ledger.get("events") if isinstance(ledger, dict) else None
        if isinstance(events, list):
            self._ledger(tid, [e for e in events if isinstance(e, dict)], messages, out)
        else:
            self._messages(tid, messages, out)
        return out

    @staticmethod
    def _row(
        tid: str, key: str, seq: int, model: str, ended: int, tokens: Tokens, attrs: dict[str, Any]
    ) -> Row:
        return request_row(
            stable_id("amp-usage", tid, key), SOURCE, AGENT, tid, ended, model, tokens, seq, attrs
        )

    def _messages(self, tid: str, messages: list[dict[str, Any]], out: Parsed) -> None:
        for i, msg in enumerate(messages, start=1):
            usage = msg.get("usage")
            if msg.get("role") != "assistant" or not isinstance(usage, dict):
                continue
            model = _text(usage.get("model")) or _text(msg.get("model"))
            ended = text_micros(usage.get("timestamp")) or text_micros(msg.get("timestamp"))
            tokens = Tokens(
                count(usage, "inputTokens") or 0,
                count(usage, "cacheReadInputTokens") or 0,
                count(usage, "cacheCreationInputTokens") or 0,
                count(usage, "outputTokens") or 0,
            )
            if model is None or ended is None or not any(tokens):
                continue
            mid = msg.get("messageId")
            attrs: dict[str, Any] = {"message_id": mid} if mid is not None else {}
            if isinstance(usage.get("credits"), (int, float)):
                attrs["credits"] = usage["credits"]
            key = f"message:{mid}" if mid is not None else f"index:{i}"
            out.requests.append(self._row(tid, key, i, model, ended, tokens, attrs))

    def _ledger(
        self, tid: str, events: list[dict[str, Any]], messages: list[dict[str, Any]], out: Parsed
    ) -> None:
        cache: dict[int, tuple[int | None, int | None]] = {}
        for msg in messages:
            mid = msg.get("messageId")
            if msg.get("role") == "assistant" and isinstance(mid, int) and not isinstance(mid, bool):
                usage = msg.get("usage")
                cache[mid] = (count(usage, "cacheReadInputTokens"), count(usage, "cacheCreationInputTokens"))
        for i, event in enumerate(events, start=1):
            model, ended = _text(event.get("model")), text_micros(event.get("timestamp"))
            tokens_obj = event.get("tokens")
            to = event.get("toMessageId")
            read, write = cache.get(to, (None, None)) if isinstance(to, int) else (None, None)
            tokens = Tokens(count(tokens_obj, "input") or 0, read, write, count(tokens_obj, "output") or 0)
            if model is None or ended is None or not any(tokens):
                continue
            attrs: dict[str, Any] = {"ledger_event": str(event.get("id"))}
            if isinstance(to, int):
                attrs["message_id"] = to
            if isinstance(event.get("credits"), (int, float)):
                attrs["credits"] = event["credits"]
            out.requests.append(self._row(tid, f"event:{event.get('id', i)}", i, model, ended, tokens, attrs))


IMPORTER = AmpImporter()
