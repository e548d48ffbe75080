"""Claude Code's local JSONL transcripts: ``~/.claude/projects/<project>/<session>.jsonl``.

One API response is written as one ``assistant`` line per content block, each repeating the whole
``usage`` (AGENT_TELEMETRY_SCHEMAS §2.3); before v2.1.97 the early copies carry a placeholder
``output_tokens``. We keep one row per ``(requestId, message.id)``: the most complete copy (largest
token total, then the last written). The lake's views apply the same rule across imports, so the
result does not depend on line order or on how a growing file was split between imports.

* ``event_id`` is derived from ``requestId`` alone (``stable_id("anthropic-request", id)``), the key
  the OTLP ``api_request`` event of the same request carries, so a transcript line and its OTLP
  event count once. Lines without ``requestId`` fall back to ``message.id``.
* ``<synthetic>`` lines (failed calls, zero usage) are not requests; they become ``api_error`` events.
* The cache write is the 5m + 1h breakdown when it is present (old versions reported
  ``cache_creation_input_tokens = 0`` beside a non-zero breakdown), else ``cache_creation_input_tokens``.
* Sub-agent transcripts (``<session>/subagents/agent-<id>.jsonl``, ``isSidechain``) become their own
  session ``agent-<id>`` with ``parent_session_id`` = the spawning session.
* ``prompt_id`` is the ``promptId`` of the user line that started the turn (tool-result lines and
  sub-agents carry the same id); older versions without ``promptId`` use that user line's ``uuid``.
* ``ended_at`` is the kept line's write time. The transcript has no request start; ``started_at`` is
  the write time of the user or tool-result line that triggered the request (flagged
  ``started_at_estimated`` in ``attributes``), else the first block's write time.

Only lines that contain ``"usage"`` are fully parsed; user lines are read with a few regular
expressions (their tool results can be large).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar

import orjson

from .base import FileContext, LineError, Parsed, Row, as_float, as_int, iso_micros, stable_id

_TYPE = re.compile(rb'"type"\s*:\s*"([a-z_-]+)"')
_PROMPT_ID = re.compile(rb'"promptId"\s*:\s*"([^"]+)"')
_UUID = re.compile(rb'"uuid"\s*:\s*"([^"]+)"')
_TIMESTAMP = re.compile(rb'"timestamp"\s*:\s*"([^"]+)"')
_SESSION = re.compile(rb'"sessionId"\s*:\s*"([^"]+)"')
_SUBTYPE = re.compile(rb'"subtype"\s*:\s*"([a-z_]+)"')
_DURATION = re.compile(rb'"durationMs"\s*:\s*([0-9.]+)')
_PRE_TOKENS = re.compile(rb'"preTokens"\s*:\s*([0-9]+)')
_TRIGGER = re.compile(rb'"trigger"\s*:\s*"([a-z]+)"')
_IS_META = re.compile(rb'"isMeta"\s*:\s*true')
_SIDECHAIN = re.compile(rb'"isSidechain"\s*:\s*true')
_AGENT_ID = re.compile(rb'"agentId"\s*:\s*"([^"]+)"')
_VERSION = re.compile(rb'"version"\s*:\s*"([^"]+)"')


def _search(pattern: re.Pattern[bytes], line: bytes) -> str | None:
    m = pattern.search(line)
    return m.group(1).decode() if m else None


def _total(row: Row) -> int:
    return (
        row["cold_input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"] + row["output_tokens"]
    )


class ClaudeCodeImporter:
    name: ClassVar[str] = "claude-code"
    whole_file: ClassVar[bool] = False
    source: ClassVar[str] = "claude-code-jsonl"

    def default_paths(self) -> list[Path]:
        env = os.environ.get("CLAUDE_CONFIG_DIR")
        if env:
            roots = [Path(p).expanduser() for p in env.split(",") if p.strip()]
        else:
            roots = [Path.home() / ".config" / "claude", Path.home() / ".claude"]
        return [r / "projects" for r in roots if (r / "projects").is_dir()]

    def discover(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return sorted(p for p in root.rglob("*.jsonl") if p.is_file())

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        st = ctx.state
        path = str(ctx.path)
        # A sub-agent transcript lives in <session>/subagents/agent-<id>.jsonl.
        file_agent = ctx.path.stem[len("agent-") :] if ctx.path.stem.startswith("agent-") else None
        kept: dict[str, Row] = {}
        last_user_ts: int | None = st.get("last_user_ts")
        prev_was_user = bool(st.get("prev_was_user"))
        first_block_ts: dict[str, int] = {}
        for no, line in enumerate(data.split(b"\n"), start=ctx.first_line):
            if not line.strip():
                continue
            if b'"usage"' in line:
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    out.errors.append(LineError(path, no, f"invalid JSON ({e}); line skipped"))
                    continue
                if not isinstance(rec, dict) or rec.get("type") != "assistant":
                    prev_was_user = False
                    continue
                try:
                    row = self._request_row(rec, path, no, file_agent, st)
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    out.errors.append(LineError(path, no, f"unreadable assistant usage record: {e!r}"))
                    continue
                if row is None:  # <synthetic> error line
                    out.events.append(self._error_event(rec, path, no, file_agent, st))
                    prev_was_user = False
                    continue
                key = row["event_id"]
                ts = row["ended_at"]
                if key not in first_block_ts:
                    start = last_user_ts if (prev_was_user and last_user_ts is not None) else None
                    first_block_ts[key] = ts if start is None or start > ts else start
                    row["attributes"]["started_at_estimated"] = start is not None
                else:
                    row["attributes"]["started_at_estimated"] = kept[key]["attributes"][
                        "started_at_estimated"
                    ]
                row["started_at"] = first_block_ts[key]
                old = kept.get(key)
                if old is None or _total(row) >= _total(old):
                    kept[key] = row
                prev_was_user = False
                continue
            kind = _search(_TYPE, line[:200]) or _search(_TYPE, line)
            if kind == "user":
                ts_s = _search(_TIMESTAMP, line)
                try:
                    ts = iso_micros(ts_s) if ts_s else None
                except ValueError:
                    out.errors.append(LineError(path, no, f"bad timestamp {ts_s!r}; line skipped"))
                    continue
                prompt = _search(_PROMPT_ID, line)
                is_tool_result = b'"tool_result"' in line
                is_prompt = not is_tool_result and not _IS_META.search(line)
                if is_prompt:
                    uuid = _search(_UUID, line)
                    st["prompt_id"] = prompt or uuid or st.get("prompt_id")
                    out.events.append(self._user_event(line, path, no, ts, file_agent, st))
                elif prompt:
                    st["prompt_id"] = prompt
                if ts is not None:
                    last_user_ts = ts
                prev_was_user = True
            elif kind == "system":
                sub = _search(_SUBTYPE, line)
                if sub in ("compact_boundary", "turn_duration"):
                    out.events.append(self._system_event(sub, line, path, no, file_agent, st))
            elif kind is None:
                try:
                    orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    out.errors.append(LineError(path, no, f"invalid JSON ({e}); line skipped"))
        st["last_user_ts"] = last_user_ts
        st["prev_was_user"] = prev_was_user
        out.requests = list(kept.values())
        return out

    # -- rows -------------------------------------------------------------------------------
    def _ids(self, rec: dict[str, Any], file_agent: str | None, st: dict[str, Any]) -> tuple[str, str | None]:
        session = rec.get("sessionId") or st.get("session_id")
        if session:
            st["session_id"] = session
        agent_id = rec.get("agentId") or file_agent
        if agent_id and (rec.get("isSidechain") or file_agent):
            return f"agent-{agent_id}", session
        return session, None

    def _request_row(
        self, rec: dict[str, Any], path: str, no: int, file_agent: str | None, st: dict[str, Any]
    ) -> Row | None:
        msg = rec["message"]
        model = msg.get("model")
        if model == "<synthetic>" or rec.get("isApiErrorMessage"):
            return None
        usage = msg["usage"]
        cold = as_int(usage.get("input_tokens")) or 0
        read = as_int(usage.get("cache_read_input_tokens")) or 0
        write = as_int(usage.get("cache_creation_input_tokens")) or 0
        w5 = w1 = None
        breakdown = usage.get("cache_creation")
        if isinstance(breakdown, dict):
            w5 = as_int(breakdown.get("ephemeral_5m_input_tokens")) or 0
            w1 = as_int(breakdown.get("ephemeral_1h_input_tokens")) or 0
            if w5 + w1 > 0:
                write = w5 + w1
        output = as_int(usage.get("output_tokens")) or 0
        details = usage.get("output_tokens_details")
        reasoning = as_int(details.get("thinking_tokens")) if isinstance(details, dict) else None
        request_id = rec.get("requestId")
        message_id = msg.get("id")
        if request_id:
            event_id = stable_id("anthropic-request", request_id)
        elif message_id:
            event_id = stable_id("claude-message", message_id)
        else:
            event_id = stable_id("claude-line", path, no)
        session, parent = self._ids(rec, file_agent, st)
        ts = iso_micros(rec["timestamp"])
        attributes: dict[str, Any] = {"message_id": message_id, "file": path}
        for src, dst in (
            ("cwd", "cwd"),
            ("gitBranch", "git_branch"),
            ("agentId", "agent_id"),
            ("uuid", "uuid"),
        ):
            v = rec.get(src)
            if v:
                attributes[dst] = v
        for src in ("speed", "service_tier"):
            v = usage.get(src)
            if v:
                attributes[src] = v
        if msg.get("stop_reason"):
            attributes["stop_reason"] = msg["stop_reason"]
        return {
            "event_id": event_id,
            "source": self.source,
            "agent": "claude-code",
            "agent_version": rec.get("version"),
            "user_id": None,
            "session_id": session,
            "parent_session_id": parent,
            "prompt_id": st.get("prompt_id"),
            "request_id": request_id,
            "started_at": ts,
            "ended_at": ts,
            "duration_ms": None,
            "ttft_ms": None,
            "model": model,
            "cold_input_tokens": cold,
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "cache_write_5m_tokens": w5,
            "cache_write_1h_tokens": w1,
            "output_tokens": output,
            "reasoning_tokens": reasoning,
            "cost_usd": as_float(rec.get("costUSD")),
            "attributes": attributes,
            "seq": no,
        }

    def _event(
        self,
        name: str,
        path: str,
        no: int,
        ts: int | None,
        session: str | None,
        parent: str | None,
        st: dict[str, Any],
        attributes: dict[str, Any],
        *,
        version: str | None = None,
        request_id: str | None = None,
    ) -> Row:
        return {
            "event_id": stable_id("claude-jsonl-event", path, no, name),
            "source": self.source,
            "agent": "claude-code",
            "agent_version": version,
            "user_id": None,
            "session_id": session,
            "parent_session_id": parent,
            "prompt_id": st.get("prompt_id"),
            "request_id": request_id,
            "name": name,
            "timestamp": ts,
            "attributes": attributes,
            "seq": no,
        }

    def _line_session(self, line: bytes, file_agent: str | None, st: dict[str, Any]) -> tuple[str | None, str | None]:
        session = _search(_SESSION, line) or st.get("session_id")
        if session:
            st["session_id"] = session
        agent_id = _search(_AGENT_ID, line) or file_agent
        if agent_id and (file_agent or _SIDECHAIN.search(line)):
            return f"agent-{agent_id}", session
        return session, None

    def _user_event(
        self, line: bytes, path: str, no: int, ts: int | None, file_agent: str | None, st: dict[str, Any]
    ) -> Row:
        session, parent = self._line_session(line, file_agent, st)
        attrs = {"uuid": _search(_UUID, line), "file": path}
        return self._event(
            "user_prompt", path, no, ts, session, parent, st, attrs, version=_search(_VERSION, line)
        )

    def _system_event(
        self, sub: str, line: bytes, path: str, no: int, file_agent: str | None, st: dict[str, Any]
    ) -> Row:
        session, parent = self._line_session(line, file_agent, st)
        ts_s = _search(_TIMESTAMP, line)
        attrs: dict[str, Any] = {"file": path}
        if sub == "turn_duration":
            d = _search(_DURATION, line)
            attrs["duration_ms"] = float(d) if d else None
            name = "turn_duration"
        else:
            pre = _search(_PRE_TOKENS, line)
            attrs["pre_tokens"] = int(pre) if pre else None
            attrs["trigger"] = _search(_TRIGGER, line)
            name = "compaction"
        return self._event(
            name, path, no, iso_micros(ts_s) if ts_s else None, session, parent, st, attrs,
            version=_search(_VERSION, line),
        )

    def _error_event(
        self, rec: dict[str, Any], path: str, no: int, file_agent: str | None, st: dict[str, Any]
    ) -> Row:
        session, parent = self._ids(rec, file_agent, st)
        ts = rec.get("timestamp")
        attrs: dict[str, Any] = {"file": path}
        for key in ("apiErrorStatus", "apiErrorType", "error"):
            if rec.get(key) is not None:
                attrs[key] = rec[key]
        return self._event(
            "api_error", path, no, iso_micros(ts) if ts else None, session, parent, st, attrs,
            version=rec.get("version"), request_id=rec.get("requestId"),
        )


IMPORTER = ClaudeCodeImporter()
