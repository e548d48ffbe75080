"""pi (badlogic/pi-mono's coding agent) session files: ``$PI_AGENT_DIR/<project>/<time>_<sessionId>.jsonl``,
else ``~/.pi/agent/sessions`` and oh-my-pi's ``~/.omp/agent/sessions`` (sources and versions in
tests/data/SOURCES.md).

Each line is an entry ``{type, id, parentId, timestamp, ...}``, appended as the session runs (the
importer reads only the new lines). A ``type: "message"`` entry whose ``message.role`` is
``assistant`` and that has ``message.usage`` = ``{input, output, cacheRead, cacheWrite, totalTokens,
cost: {total, ...}}`` is one request. pi-ai normalises every provider's usage to exclusive counts
(``input`` is the cold input), so they are stored as recorded; no reasoning split (NULL);
``cost.total`` is pi's own figure (``cost_usd``). The session id is the file name after its first
``_`` (as ccusage reads it), the project the folder under ``sessions``; ``ended_at`` is the entry's
``timestamp``; the model is ``message.model`` as recorded (ccusage labels it ``[pi] <model>``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext, json_objects, request_row
from traceflow.importers.counts import usage_tokens
from traceflow.importers.files import default_paths, files_under
from traceflow.rows import LineError, Parsed, Row, Tokens, stable_id, text_micros

SOURCE = "pi-jsonl"
AGENT = "pi"


def message_row(
    agent: str,
    session: str,
    eid: object,
    ended: int,
    model: Any,
    tokens: Tokens,
    usage: dict[str, Any],
    seq: int,
    attrs: dict[str, Any],
) -> Row:
    """The request row of an assistant message in pi's format (pi, OpenClaw): its id
    ``stable_id("<agent>-entry", session, eid)``, its cost ``usage.cost.total``."""
    cost = usage.get("cost")
    total = cost.get("total") if isinstance(cost, dict) else None
    event_id = stable_id(f"{agent}-entry", session, eid)
    cost_usd = float(total) if isinstance(total, (int, float)) else None
    return request_row(event_id, f"{agent}-jsonl", agent, session, ended, model, tokens, seq, attrs, cost_usd)


class PiImporter:
    """Rows from pi session files (incremental: ``parse`` gets only the new lines)."""

    name: ClassVar[str] = "pi"
    whole_file: ClassVar[bool] = False

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, "*.jsonl*", (".jsonl",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        stem = ctx.plain.stem
        session = stem.split("_", 1)[1] if "_" in stem else stem
        project = ctx.plain.parent.name
        for line_no, rec in json_objects(data, ctx, out.errors, "entry"):
            msg = rec.get("message")
            if rec.get("type", "message") != "message" or not isinstance(msg, dict):
                continue
            usage = msg.get("usage")
            if msg.get("role") != "assistant" or not isinstance(usage, dict):
                continue
            tokens = usage_tokens(usage, "input", "cacheRead", "cacheWrite", "output")
            if not any(tokens):
                continue
            ts = rec.get("timestamp")
            ended = text_micros(ts)
            if ended is None:
                out.errors.append(
                    LineError(str(ctx.path), line_no, "assistant message without a valid timestamp")
                )
                continue
            attrs: dict[str, Any] = {"project": project}
            for key in ("provider", "api", "stopReason"):
                if isinstance(msg.get(key), str):
                    attrs[key] = msg[key]
            eid = rec.get("id") if isinstance(rec.get("id"), str) else f"{ts}:{tuple(tokens)}"
            model = msg.get("model") if isinstance(msg.get("model"), str) else None
            out.requests.append(message_row(AGENT, session, eid, ended, model, tokens, usage, line_no, attrs))
        return out


IMPORTER = PiImporter()
