"""Grok Build CLI (xAI) session updates: ``$GROK_HOME/sessions/<project>/<session>/updates.jsonl``,
else under ``~/.grok`` (sources and versions in tests/data/SOURCES.md).

Each line is an ACP session update ``{timestamp, params: {sessionId, update: {sessionUpdate, ...},
_meta: {eventId}}}``, appended as the session runs, so the importer reads only the new lines. Only
``sessionUpdate: "turn_completed"`` carries usage: ``update.usage`` = ``{inputTokens, outputTokens,
cachedReadTokens, reasoningTokens, totalTokens, modelUsage: {model: {same fields}}}``, one per turn
(the turn's model calls together, as the CLI sums them). Each model of ``modelUsage`` becomes a row
(no ``modelUsage``: one row, the model of the sibling ``summary.json``'s ``current_model_id``).

Token split: ``inputTokens`` includes the cached read (the xAI API's ``prompt_tokens`` does, and
ccusage 20.0.24 splits it so; the CLI's documentation does not say), so ``cold = inputTokens −
cachedReadTokens``, ``read = cachedReadTokens`` (clamped to the input), ``write`` unknown (NULL: Grok
records none), ``output = outputTokens + reasoningTokens`` (reasoning is billed as output; ccusage
20.0.24 leaves it out of its counts), ``reasoning = reasoningTokens``. A turn with none of the
four gives no row. The time is the line's ``timestamp`` (epoch seconds, as ccusage 20.0.24 reads it;
milliseconds or ISO are read too); the session is ``params.sessionId``, else the session folder's
name. Sub-agents are sibling session folders of their own (ccusage's README). The
request id is ``stable_id("grok-turn", eventId, model)``, else the session, time and model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext, parse_objects
from traceflow.importers.files import default_paths, files_under
from traceflow.rows import Parsed, Row, as_int, iso_micros, split_inclusive, stable_id

SOURCE = "grok-jsonl"
AGENT = "grok"
_FIELDS = ("inputTokens", "outputTokens", "cachedReadTokens", "reasoningTokens")


class BadUpdate(ValueError):
    """A line that cannot be imported (becomes a LineError)."""


def _micros(value: Any) -> int:
    if isinstance(value, bool):
        raise BadUpdate(f"bad timestamp {value!r}")
    if isinstance(value, (int, float)):
        ms = value if value > 1e12 else value * 1000
        return int(ms * 1000)
    if isinstance(value, str):
        try:
            return iso_micros(value)
        except ValueError as exc:
            raise BadUpdate(f"bad timestamp {value!r}") from exc
    raise BadUpdate("turn_completed without a timestamp")


def _counts(usage: Any, where: str) -> tuple[int, int, int, int]:
    if not isinstance(usage, dict):
        raise BadUpdate(f"{where} is not an object")
    out = []
    for key in _FIELDS:
        try:
            value = as_int(usage.get(key))
        except (TypeError, ValueError) as exc:
            raise BadUpdate(f"{where}.{key} is not a number: {usage.get(key)!r}") from exc
        out.append(max(0, value or 0))
    return out[0], out[1], out[2], out[3]


def _summary_model(updates: Path) -> str | None:
    try:
        summary = json.loads((updates.parent / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    model = summary.get("current_model_id") if isinstance(summary, dict) else None
    return model if isinstance(model, str) and model else None


class GrokImporter:
    """Rows from Grok Build CLI session updates (incremental: ``parse`` gets only the new lines)."""

    name: ClassVar[str] = "grok"
    whole_file: ClassVar[bool] = False

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, "updates.jsonl*", (".jsonl",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        return parse_objects(
            data,
            ctx,
            "update",
            BadUpdate,
            lambda line, no, out: out.requests.extend(self._turn(line, no, ctx)),
        )

    @staticmethod
    def _turn(line: dict[str, Any], seq: int, ctx: FileContext) -> list[Row]:
        params = line.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict) or update.get("sessionUpdate") != "turn_completed":
            return []
        usage = update.get("usage")
        if usage is None:
            return []
        assert isinstance(params, dict)
        session = params.get("sessionId")
        session = session if isinstance(session, str) and session else ctx.plain.parent.name
        meta = params.get("_meta")
        event = meta.get("eventId") if isinstance(meta, dict) else None
        per_model = usage.get("modelUsage") if isinstance(usage, dict) else None
        if isinstance(per_model, dict) and per_model:
            models = sorted(per_model.items())
        else:
            models = [(_summary_model(ctx.plain) or "unknown", usage)]
        rows: list[Row] = []
        ended: int | None = None
        for model, counts in models:
            inp, out, read, reasoning = _counts(counts, f"usage.modelUsage[{model!r}]")
            if not (inp or out or read or reasoning):
                continue
            ended = _micros(line.get("timestamp")) if ended is None else ended
            key = (event,) if isinstance(event, str) and event else (session, line.get("timestamp"))
            rows.append(
                {
                    "event_id": stable_id("grok-turn", *key, model),
                    "source": SOURCE,
                    "agent": AGENT,
                    "session_id": session,
                    "parent_session_id": None,
                    "request_id": event if isinstance(event, str) else None,
                    "ended_at": ended,
                    "model": model,
                    **split_inclusive(inp, read, None, out + reasoning).columns(),
                    "reasoning_tokens": reasoning,
                    "seq": seq,
                    "attributes": {"event_id": event} if isinstance(event, str) else {},
                }
            )
        return rows


IMPORTER = GrokImporter()
