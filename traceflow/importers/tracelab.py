"""TraceLab round traces (uw-syfi/TraceLab): real Claude Code and Codex rounds in TraceLab's format.

One JSON object per LLM round (``round_trace.jsonl``; docs/formats.md#tracelab-round-traces)::

    {"provider": "claude", "project": "project_4c7b8a1b", "session_id": "claude:92ee...",
     "round_index": 0, "round_id": "msg_...", "model": "claude-opus-4-8",
     "input_tokens_total": 32272, "prefix_tokens": 27217, "newly_append_tokens": 5055,
     "claude_uncached_input_tokens": 2892, "claude_cache_creation_input_tokens": 2163,
     "claude_cache_read_input_tokens": 27217, "output_tokens": 931, "reasoning_output_tokens": null,
     "timing_events": [{"event_type": "user_message", "timestamp": "2026-06-01T05:40:20.151Z"}, ...],
     "tools": [{"tool_name": "Bash", "tool_call_id": "toolu_...", "emitted_at": "...", "result_at": "...",
                "tool_wall_latency_ms": 860, "is_error": false, ...}], "store": ".claude", "trace_key": "..."}

Mapping to ``requests`` (one row per round):

* ``agent`` ``claude-code`` (``provider`` ``claude``) or ``codex``; ``source`` ``tracelab``;
  ``session_id`` the round's; ``model``; ``attributes.project`` the pseudonymised project (what
  ``--by project`` groups on), plus ``round_id``, ``round_index``, ``trace_key``, ``store`` and
  ``tool_calls`` (how many tools the round called).
* Tokens. Claude: cold = ``claude_uncached_input_tokens``, write =
  ``claude_cache_creation_input_tokens``, read = ``claude_cache_read_input_tokens`` (no 5m/1h write
  split). Codex: read = ``prefix_tokens`` (``cached_input_tokens``), cold = ``newly_append_tokens``,
  write 0 (OpenAI-style input includes the cached tokens). A Claude row without its split is read
  the Codex way. ``output_tokens`` as given (Codex's includes reasoning), ``reasoning_tokens`` =
  ``reasoning_output_tokens``.
* Timing from ``timing_events``: ``started_at`` is when the round's input was ready (its latest
  ``user_message`` or ``tool_result``; the first event when it has neither), ``ended_at`` its last
  event; ``ttft_ms`` the time to its first output event (``reasoning``, ``text``, ``tool_call``),
  ``duration_ms`` started to ended.
* ``prompt_id``: Codex rows carry ``turn_id``; a Claude round whose input holds a ``user_message``
  starts a prompt (``<session_id>:<round_index>``) that the tool-result rounds after it inherit.
* ``event_id`` = ``stable_id("tracelab", trace_key)`` (else the session, round id and index);
  ``seq`` = ``round_index``.

And ``events``: a ``user_prompt`` at each round's ``user_message``, and one ``tool_result`` per
entry of ``tools`` (at ``result_at``, else ``emitted_at``) with ``tool_name``, ``tool_use_id``,
``duration_ms`` (``tool_wall_latency_ms``), ``success`` (not ``is_error``), ``input_chars`` and
``result_chars``: the names and attributes Claude Code's own OTLP events use.
"""

from __future__ import annotations

from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.traces import TraceImporter, required_int
from traceflow.rows import Row, as_int, iso_micros, stable_id

SOURCE = "tracelab"
AGENTS = {"claude": "claude-code", "codex": "codex"}
_INPUT_EVENTS = ("user_message", "tool_result")
_OUTPUT_EVENTS = ("reasoning", "text", "tool_call")


def _ts(value: Any) -> int | None:
    return iso_micros(value) if isinstance(value, str) and value else None


def _count(rec: dict[str, Any], key: str) -> int | None:
    value = as_int(rec.get(key))
    if value is not None and value < 0:
        raise ValueError(f"negative {key}")
    return value


def tokens(rec: dict[str, Any]) -> tuple[int, int, int]:
    """(cold, read, write) of a round (see the module docstring)."""
    if rec.get("provider") == "claude":
        cold = _count(rec, "claude_uncached_input_tokens")
        write = _count(rec, "claude_cache_creation_input_tokens")
        read = _count(rec, "claude_cache_read_input_tokens")
        if cold is not None and write is not None:
            return cold, read if read is not None else required_int(rec, "prefix_tokens"), write
    return required_int(rec, "newly_append_tokens"), required_int(rec, "prefix_tokens"), 0


def timing(events: list[dict[str, Any]]) -> tuple[int | None, int | None, int | None]:
    """(started_at, ended_at, first output) in microseconds from a round's ``timing_events``."""
    stamped = [(t, e.get("event_type")) for e in events if (t := _ts(e.get("timestamp"))) is not None]
    if not stamped:
        return None, None, None
    inputs = [t for t, kind in stamped if kind in _INPUT_EVENTS]
    start = max(inputs) if inputs else min(t for t, _ in stamped)
    end = max(t for t, _ in stamped)
    outputs = [t for t, kind in stamped if kind in _OUTPUT_EVENTS and t >= start]
    return start, max(end, start), min(outputs) if outputs else None


class TraceLabImporter(TraceImporter):
    name: ClassVar[str] = "tracelab"
    label: ClassVar[str] = "a TraceLab round"

    def row(self, rec: Any, key: str, no: int, ctx: FileContext) -> Row:
        return self.request(rec, key, no, ctx)[0]

    def request(self, rec: Any, key: str, no: int, ctx: FileContext) -> tuple[Row, list[Row]]:
        """The request row of one round and its events."""
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        provider = rec.get("provider")
        if provider not in AGENTS:
            raise ValueError(f"provider {provider!r} is neither claude nor codex")
        session = rec.get("session_id")
        session = str(session) if session else None
        index = as_int(rec.get("round_index"))
        cold, read, write = tokens(rec)
        events = rec.get("timing_events") or []
        if not isinstance(events, list):
            raise ValueError("timing_events is not a list")
        start, end, first_out = timing([e for e in events if isinstance(e, dict)])
        asked = [e for e in events if isinstance(e, dict) and e.get("event_type") == "user_message"]
        prompts: dict[str, str] = ctx.state.setdefault("prompts", {})
        turn = rec.get("turn_id")
        if isinstance(turn, str) and turn:
            prompt: str | None = turn
        elif asked or (session and session not in prompts):
            prompt = f"{session}:{index}"
        else:
            prompt = prompts.get(session or "")
        if session and prompt:
            prompts[session] = prompt
        trace_key = rec.get("trace_key")
        event_id = (
            stable_id(SOURCE, trace_key)
            if trace_key
            else stable_id(SOURCE, session, rec.get("round_id"), index)
        )
        tools = [t for t in rec.get("tools") or [] if isinstance(t, dict)]
        attributes: dict[str, Any] = {"tool_calls": len(tools)}
        for field in ("project", "round_id", "round_index", "trace_key", "store"):
            if rec.get(field) is not None:
                attributes[field] = rec[field]
        agent = AGENTS[provider]
        row: Row = {
            "event_id": event_id,
            "source": SOURCE,
            "agent": agent,
            "session_id": session,
            "prompt_id": prompt,
            "request_id": rec.get("round_id"),
            "started_at": start,
            "ended_at": end,
            "duration_ms": (end - start) / 1000 if start is not None and end is not None else None,
            "ttft_ms": (first_out - start) / 1000 if first_out is not None and start is not None else None,
            "model": rec.get("model") or None,
            "cold_input_tokens": cold,
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "output_tokens": _count(rec, "output_tokens") or 0,
            "reasoning_tokens": _count(rec, "reasoning_output_tokens"),
            "attributes": attributes,
            "seq": index if index is not None else no,
        }
        base = {"source": SOURCE, "agent": agent, "session_id": session, "prompt_id": prompt, "seq": no}
        out: list[Row] = []
        for i, e in enumerate(asked):
            chars = e.get("content_chars")
            out.append(
                {
                    **base,
                    "event_id": stable_id(SOURCE, event_id, "user_prompt", i),
                    "name": "user_prompt",
                    "timestamp": _ts(e.get("timestamp")),
                    "attributes": {"prompt_length": chars} if chars is not None else {},
                }
            )
        for i, t in enumerate(tools):
            attrs = {
                "tool_name": t.get("tool_name"),
                "tool_use_id": t.get("tool_call_id"),
                "duration_ms": t.get("tool_wall_latency_ms"),
                "internal_duration_ms": t.get("tool_internal_latency_ms"),
                "success": None if t.get("is_error") is None else not t["is_error"],
                "input_chars": t.get("input_chars"),
                "result_chars": t.get("result_chars"),
                "emitted_at": t.get("emitted_at"),
            }
            out.append(
                {
                    **base,
                    "event_id": stable_id(SOURCE, event_id, "tool_result", i),
                    "request_id": rec.get("round_id"),
                    "name": "tool_result",
                    "timestamp": _ts(t.get("result_at")) or _ts(t.get("emitted_at")),
                    "attributes": {k: v for k, v in attrs.items() if v is not None},
                }
            )
        return row, out


IMPORTER = TraceLabImporter()
