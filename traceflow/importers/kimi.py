"""Kimi CLI / Kimi Code wire logs: ``$KIMI_DATA_DIR/sessions/.../wire.jsonl`` (sources and versions in
tests/data/SOURCES.md).

Two layouts, both appended line by line (the importer reads only the new lines):

* **Kimi CLI** ``sessions/<group>/<session>/wire.jsonl``: a ``StatusUpdate`` message after each
  model call, ``{timestamp: <epoch seconds>, message: {type: "StatusUpdate", payload: {token_usage:
  {input_other, output, input_cache_read, input_cache_creation}, message_id}}}``. The file names no
  model: it is the ``model`` of the folder's ``config.json`` (``<root>/config.json``), else
  ``kimi-for-coding``, as ccusage reads it.
* **Kimi Code** ``sessions/<workspace>/<session>/agents/<agent>/wire.jsonl``: ``{type: "usage.record",
  usageScope: "turn"|"session", model: "kimi-code/<model>", usage: {inputOther, output,
  inputCacheRead, inputCacheCreation}, time: <epoch ms>}``. Only ``turn`` records count (a
  ``session`` record is the running total of the ones before it); the model loses its ``kimi-code/``
  prefix. An agent folder other than ``main`` is a sub-agent: session ``agent-<agent>`` under the
  session folder.

The split is Anthropic's (``input_other`` is the cold input): cold, read, write, output as recorded;
no reasoning split (NULL). ``ended_at`` is the record's time. The request id hashes the session, the
agent, the message id (old format) or the record's time, and the counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext, json_objects
from traceflow.importers.counts import usage_tokens
from traceflow.importers.files import default_paths, files_under
from traceflow.rows import Parsed, Row, Tokens, as_int, stable_id

SOURCE = "kimi-wire"
AGENT = "kimi"
DEFAULT_MODEL = "kimi-for-coding"


def _layout(path: Path) -> tuple[Path, str, str | None]:
    """(data root, session id, sub-agent name or None) of a wire file."""
    parent = path.parent
    if parent.parent.name == "agents":
        session = parent.parent.parent
        agent = parent.name
        return session.parent.parent.parent, session.name, None if agent == "main" else agent
    return parent.parent.parent.parent, parent.name, None


def _configured_model(root: Path) -> str:
    try:
        doc = orjson.loads((root / "config.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return DEFAULT_MODEL
    model = doc.get("model") if isinstance(doc, dict) else None
    return model.strip() if isinstance(model, str) and model.strip() else DEFAULT_MODEL


class KimiImporter:
    """Rows from Kimi wire logs (incremental: ``parse`` gets only the new lines)."""

    name: ClassVar[str] = "kimi"
    whole_file: ClassVar[bool] = False

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, "wire.jsonl*", (".jsonl",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        root, session, sub = _layout(ctx.plain)
        model = None
        for line_no, rec in json_objects(data, ctx, out.errors, "record"):
            if rec.get("type") == "usage.record":
                row = self._record(rec, line_no)
            else:
                if model is None:
                    model = _configured_model(root)
                row = self._status(rec, line_no, model)
            if row is None:
                continue
            row["session_id"] = f"agent-{sub}" if sub else session
            row["parent_session_id"] = session if sub else None
            row["event_id"] = stable_id("kimi", session, sub, row.pop("_key"))
            out.requests.append(row)
        return out

    @staticmethod
    def _base(key: str, seq: int, ended: int | None, model: str, tokens: Tokens) -> Row | None:
        if ended is None or not any(tokens):
            return None
        return {
            "_key": key,
            "source": SOURCE,
            "agent": AGENT,
            "agent_version": None,
            "ended_at": ended,
            "model": model,
            **tokens.columns(),
            "reasoning_tokens": None,
            "seq": seq,
            "attributes": {},
        }

    def _record(self, rec: dict[str, Any], seq: int) -> Row | None:
        usage = rec.get("usage")
        if rec.get("usageScope") != "turn" or not isinstance(usage, dict):
            return None
        tokens = usage_tokens(usage, "inputOther", "inputCacheRead", "inputCacheCreation", "output")
        time = as_int(rec.get("time")) if isinstance(rec.get("time"), (int, float)) else None
        raw = rec.get("model")
        model = raw if isinstance(raw, str) and raw else DEFAULT_MODEL
        key = f"turn:{time}:{tuple(tokens)}"
        return self._base(
            key, seq, None if time is None else time * 1000, model.removeprefix("kimi-code/"), tokens
        )

    def _status(self, rec: dict[str, Any], seq: int, model: str) -> Row | None:
        message = rec.get("message")
        if not isinstance(message, dict) or message.get("type") != "StatusUpdate":
            return None
        payload = message.get("payload")
        usage = payload.get("token_usage") if isinstance(payload, dict) else None
        if not isinstance(usage, dict):
            return None
        tokens = usage_tokens(usage, "input_other", "input_cache_read", "input_cache_creation", "output")
        ts = rec.get("timestamp")
        ended = int(ts * 1_000_000) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None
        mid = payload.get("message_id") if isinstance(payload, dict) else None
        row = self._base(f"status:{mid}:{ts}:{tuple(tokens)}", seq, ended, model, tokens)
        if row is not None and isinstance(mid, str):
            row["attributes"]["message_id"] = mid
        return row


IMPORTER = KimiImporter()
