"""Codebuff chat files: ``$CODEBUFF_DATA_DIR/projects/<project>/chats/<chatId>/chat-messages.json``
(sources and versions in tests/data/SOURCES.md).

Codebuff (CodebuffAI/codebuff, whose data folder keeps its first name, ``~/.config/manicode``; the
development channel ``manicode-dev``) writes each chat as one JSON array of messages, rewritten as it
grows (so the importer is ``whole_file``). An assistant message carries ``metadata.model`` and
``metadata.usage`` = ``{inputTokens, outputTokens, cacheCreationInputTokens, cacheReadInputTokens}``
(Anthropic's split: ``inputTokens`` is the cold input), its ``timestamp`` and the ``credits`` it cost.
One request row per such message with tokens; the session is ``<channel>/<project>/<chatId>`` (the
data folder's name, the project folder, the chat folder), as ccusage names it. No reasoning split
(NULL); ``credits`` goes to ``attributes.credits``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext, request_row
from traceflow.importers.counts import usage_tokens
from traceflow.importers.files import default_paths, files_under
from traceflow.rows import LineError, Parsed, stable_id, text_micros

SOURCE = "codebuff-json"
AGENT = "codebuff"


class CodebuffImporter:
    """Rows from Codebuff chat files (whole file each time: a chat is rewritten as it grows)."""

    name: ClassVar[str] = "codebuff"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, "chat-messages.json*", ("chat-messages.json",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        path = str(ctx.path)
        try:
            messages = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            out.errors.append(LineError(path, ctx.first_line, f"invalid JSON: {exc}"))
            return out
        if not isinstance(messages, list):
            out.errors.append(
                LineError(path, ctx.first_line, "not a Codebuff chat (a JSON array of messages)")
            )
            return out
        chat = ctx.plain.parent
        session = f"{chat.parent.parent.parent.parent.name}/{chat.parent.parent.name}/{chat.name}"
        for i, msg in enumerate(messages, start=1):
            if not isinstance(msg, dict) or msg.get("role") != "assistant":
                continue
            meta = msg.get("metadata")
            usage = meta.get("usage") if isinstance(meta, dict) else None
            model = meta.get("model") if isinstance(meta, dict) else None
            if not isinstance(usage, dict) or not isinstance(model, str) or not model:
                continue
            tokens = usage_tokens(
                usage, "inputTokens", "cacheReadInputTokens", "cacheCreationInputTokens", "outputTokens"
            )
            ended = text_micros(msg.get("timestamp"))
            if ended is None:
                out.errors.append(LineError(path, ctx.first_line, f"message {i} without a valid timestamp"))
                continue
            if not any(tokens):
                continue
            mid = msg.get("id") if isinstance(msg.get("id"), str) else f"#{i}"
            attrs: dict[str, Any] = {"message_id": mid}
            if isinstance(msg.get("credits"), (int, float)):
                attrs["credits"] = msg["credits"]
            event_id = stable_id("codebuff-message", session, mid)
            out.requests.append(request_row(event_id, SOURCE, AGENT, session, ended, model, tokens, i, attrs))
        return out


IMPORTER = CodebuffImporter()
