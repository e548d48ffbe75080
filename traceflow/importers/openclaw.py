"""OpenClaw session transcripts: ``$OPENCLAW_DIR/agents/<agentId>/sessions/<sessionId>.jsonl``, else
under ``~/.openclaw`` (sources and versions in tests/data/SOURCES.md).

OpenClaw runs pi's agent core (:mod:`traceflow.importers.pi`), and its transcripts are pi's entries:
an assistant ``message`` entry's ``message.usage`` = ``{input, output, cacheRead, cacheWrite,
totalTokens, cost: {total}}``, exclusive counts. The model is the message's ``model`` (or
``modelId``), else the one the last ``model_change`` entry (or ``custom`` ``model-snapshot``) set.
The time is ``message.timestamp`` (epoch ms or ISO), else the entry's ``timestamp``. The session id
is the file name before ``.jsonl``: a transcript OpenClaw reset or deleted keeps its rows
(``<id>.jsonl.reset.<time>``, ``<id>.jsonl.deleted.<time>``, read as ccusage reads them). The
importer reads only the new lines of a growing transcript and carries the current model in
``ctx.state``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext, json_records
from traceflow.importers.counts import usage_tokens
from traceflow.importers.files import default_paths, files_under
from traceflow.importers.pi import message_row
from traceflow.rows import LineError, Parsed, text_micros

SOURCE = "openclaw-jsonl"
AGENT = "openclaw"


def _time(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1000 if value > 0 else None
    return text_micros(value)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


class OpenClawImporter:
    """Rows from OpenClaw transcripts (incremental: ``parse`` gets only the new lines)."""

    name: ClassVar[str] = "openclaw"
    whole_file: ClassVar[bool] = False

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(
            root, "*.jsonl*", keep=lambda p: p.parent.name == "sessions" and ".jsonl" in p.name
        )

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        st = ctx.state
        name = ctx.path.name
        session = name[: name.index(".jsonl")] or name
        agent_id = ctx.path.parent.parent.name
        for line_no, _, rec in json_records(data, ctx, out.errors, "invalid JSON: {}"):
            if not isinstance(rec, dict):
                out.errors.append(LineError(str(ctx.path), line_no, "entry is not a JSON object"))
                continue
            kind = rec.get("type")
            if kind == "model_change" or (kind == "custom" and rec.get("customType") == "model-snapshot"):
                inner = rec.get("data")
                src = inner if isinstance(inner, dict) else rec
                model = _text(src.get("modelId")) or _text(src.get("model"))
                if model:
                    st["model"] = model
                continue
            msg = rec.get("message")
            if kind != "message" or not isinstance(msg, dict) or msg.get("role") != "assistant":
                continue
            usage = msg.get("usage")
            if not isinstance(usage, dict):
                continue
            tokens = usage_tokens(usage, "input", "cacheRead", "cacheWrite", "output")
            if not any(tokens):
                continue
            ended = _time(msg.get("timestamp")) or _time(rec.get("timestamp"))
            if ended is None:
                out.errors.append(LineError(str(ctx.path), line_no, "assistant message without a time"))
                continue
            attrs: dict[str, Any] = {"openclaw_agent": agent_id}
            if isinstance(msg.get("provider"), str):
                attrs["provider"] = msg["provider"]
            eid = rec.get("id") if isinstance(rec.get("id"), str) else f"{ended}:{tuple(tokens)}"
            model = _text(msg.get("modelId")) or _text(msg.get("model")) or st.get("model")
            out.requests.append(message_row(AGENT, session, eid, ended, model, tokens, usage, line_no, attrs))
        return out


IMPORTER = OpenClawImporter()
