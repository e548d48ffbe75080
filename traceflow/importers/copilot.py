"""GitHub Copilot CLI session events: ``$COPILOT_HOME/session-state/<sessionId>/events.jsonl`` (sources
and versions in tests/data/SOURCES.md).

Each line is an event ``{type, data, id, timestamp, parentId}`` (``session.start``, ``user.message``,
``assistant.message``, ``tool.execution_*``, ...), appended as the session runs, so the importer reads
only the new lines. **The file records no per-request usage**: the tokens are in the
``session.shutdown`` event written when the CLI process exits, as ``data.modelMetrics`` = ``{model:
{requests: {count, cost}, usage: {inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens,
reasoningTokens}}}``, the totals of that process (a resumed session writes another shutdown with the
totals of the next process, not cumulative).

So each (shutdown, model) becomes **one row standing for** ``requests.count`` **requests**
(``attributes.aggregate_requests``; ``attributes.premium_requests`` = ``requests.cost``), at the
shutdown's time (``ended_at``; ``started_at`` NULL). Token totals per day and session are right;
per-request analyses (gaps, misses, TTL) see one request where there were several, so they should
leave ``agent = 'copilot'`` out. Token split: ``inputTokens`` includes the cache read and write, so
``cold = input − read − write``; ``output = outputTokens``, which includes the reasoning for OpenAI
and Anthropic models (``reasoning = reasoningTokens``, a part of it), but not for Gemini models,
whose ``reasoningTokens`` are added to the output. Rows without any token (and no request) are skipped.
The request id is ``stable_id("copilot-shutdown", session, event id, model)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext, json_objects
from traceflow.importers.counts import count
from traceflow.importers.files import default_paths, files_under
from traceflow.rows import LineError, Parsed, Row, record_micros, split_inclusive, stable_id

SOURCE = "copilot-events"
AGENT = "copilot"


class BadEvent(ValueError):
    """An event that cannot be imported (becomes a LineError)."""


def _n(obj: Any, key: str, where: str) -> int:
    return count(obj, key, where, BadEvent) or 0


class CopilotImporter:
    """Rows from Copilot CLI session events (incremental: ``parse`` gets only the new lines)."""

    name: ClassVar[str] = "copilot"
    whole_file: ClassVar[bool] = False

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, "events.jsonl*", (".jsonl",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        path = str(ctx.path)
        st = ctx.state
        st.setdefault("session_id", ctx.plain.parent.name)
        for line_no, event in json_objects(data, ctx, out.errors, "event"):
            kind, body = event.get("type"), event.get("data")
            if kind == "session.start" and isinstance(body, dict):
                if isinstance(body.get("sessionId"), str):
                    st["session_id"] = body["sessionId"]
                if isinstance(body.get("copilotVersion"), str):
                    st["version"] = body["copilotVersion"]
            elif kind == "session.shutdown":
                try:
                    out.requests.extend(self._shutdown(event, line_no, st))
                except BadEvent as exc:
                    out.errors.append(LineError(path, line_no, str(exc)))
        return out

    @staticmethod
    def _shutdown(event: dict[str, Any], seq: int, st: dict[str, Any]) -> list[Row]:
        body = event.get("data")
        metrics = body.get("modelMetrics") if isinstance(body, dict) else None
        if not isinstance(metrics, dict):
            raise BadEvent("session.shutdown without data.modelMetrics")
        ended = record_micros(event.get("timestamp"), "session.shutdown without a timestamp", BadEvent)
        rows: list[Row] = []
        for model, m in metrics.items():
            usage = m.get("usage") if isinstance(m, dict) else None
            requests = m.get("requests") if isinstance(m, dict) else None
            where = f"modelMetrics[{model!r}].usage"
            inp, out = _n(usage, "inputTokens", where), _n(usage, "outputTokens", where)
            read, write = _n(usage, "cacheReadTokens", where), _n(usage, "cacheWriteTokens", where)
            reasoning = _n(usage, "reasoningTokens", where)
            count = _n(requests, "count", f"modelMetrics[{model!r}].requests")
            apart = model.startswith("gemini")  # Gemini's thoughts are outside its output
            if not (inp or out or read or write or (apart and reasoning) or count):
                continue
            tokens = split_inclusive(inp, read, write, out + (reasoning if apart else 0))
            attrs: dict[str, Any] = {"aggregate_requests": count, "shutdown_id": str(event.get("id"))}
            if isinstance(requests, dict) and isinstance(requests.get("cost"), (int, float)):
                attrs["premium_requests"] = requests["cost"]
            rows.append(
                {
                    "event_id": stable_id("copilot-shutdown", st["session_id"], event.get("id"), model),
                    "source": SOURCE,
                    "agent": AGENT,
                    "agent_version": st.get("version"),
                    "session_id": st["session_id"],
                    "parent_session_id": None,
                    "ended_at": ended,
                    "model": model,
                    **tokens.columns(),
                    "reasoning_tokens": reasoning,
                    "seq": seq,
                    "attributes": attrs,
                }
            )
        return rows


IMPORTER = CopilotImporter()
