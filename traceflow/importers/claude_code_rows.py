"""What one decoded Claude Code transcript line becomes: a request line tuple or an event row.

* An assistant line with ``usage`` becomes a tuple in :data:`COLUMNS` order (:func:`block`). The
  tuples of a batch become request rows in :mod:`traceflow.importers.claude_code_frames`.
* ``<synthetic>`` lines (failed calls, zero usage) and API errors are not requests; they become
  ``api_error`` events (:func:`error_event`).
* A prompt, a turn's duration and a compaction become events (:func:`prompt_event`,
  :func:`system_event`).
* Sub-agent lines (``isSidechain``, or any line of ``<session>/subagents/agent-<id>.jsonl``) belong
  to session ``agent-<id>`` with ``parent_session_id`` = the spawning session.
"""

from __future__ import annotations

from typing import Any

from traceflow.importers.claude_code_records import Assistant, Message, System, Usage, User, micros
from traceflow.importers.compressed import plain_name
from traceflow.rows import Row, stable_id

#: ``events.source`` and ``requests.source`` of this importer's rows.
SOURCE = "claude-code-jsonl"

#: Columns of the per-line tuples :func:`block` returns (``ts``, ``trigger_ts``: microseconds).
COLUMNS: dict[str, str] = {
    "file": "str",
    "seq": "i64",
    "request_id": "str",
    "message_id": "str",
    "ts": "i64",
    "trigger_ts": "i64",
    "session_id": "str",
    "parent_session_id": "str",
    "prompt_id": "str",
    "agent_version": "str",
    "model": "str",
    "cold_input_tokens": "i64",
    "cache_read_tokens": "i64",
    "cache_creation": "i64",
    "cache_write_5m_tokens": "i64",
    "cache_write_1h_tokens": "i64",
    "output_tokens": "i64",
    "reasoning_tokens": "i64",
    "cost_usd": "f64",
    "cwd": "str",
    "git_branch": "str",
    "agent_id": "str",
    "uuid": "str",
    "speed": "str",
    "service_tier": "str",
    "stop_reason": "str",
}


def block(
    rec: Assistant,
    msg: Message,
    usage: Usage,
    ts: int,
    no: int,
    file_agent: str | None,
    st: dict[str, Any],
    trigger_ts: int | None,
) -> tuple[Any, ...]:
    """The fields of one assistant block line, in :data:`COLUMNS` order (without ``file``)."""
    w5, w1 = usage.ttl_split()
    details = usage.output_tokens_details
    session, parent = ids(rec, file_agent, st)
    return (
        no,
        rec.requestId,
        msg.id,
        ts,
        trigger_ts,
        session,
        parent,
        st.get("prompt_id"),
        rec.version,
        msg.model,
        usage.input_tokens or 0,
        usage.cache_read_input_tokens or 0,
        usage.cache_creation_input_tokens or 0,
        w5,
        w1,
        usage.output_tokens or 0,
        details.thinking_tokens if details is not None else None,
        rec.costUSD,
        rec.cwd,
        rec.gitBranch,
        rec.agentId,
        rec.uuid,
        usage.speed,
        usage.service_tier,
        msg.stop_reason,
    )


def error_event(rec: Assistant, path: str, no: int, file_agent: str | None, st: dict[str, Any]) -> Row:
    """The ``api_error`` event of a ``<synthetic>`` or API-error assistant line."""
    session, parent = ids(rec, file_agent, st)
    attrs: dict[str, Any] = {"file": path}
    for key, value in (
        ("apiErrorStatus", rec.apiErrorStatus),
        ("apiErrorType", rec.apiErrorType),
        ("error", rec.error),
    ):
        if value is not None:
            attrs[key] = value
    row = _event("api_error", path, no, rec, session, parent, st.get("prompt_id"), attrs)
    row["request_id"] = rec.requestId
    return row


def prompt_event(rec: User, path: str, no: int, file_agent: str | None, st: dict[str, Any]) -> Row:
    """The ``user_prompt`` event of a prompt line (not a tool result).

    A main-session prompt's event id derives from its ``promptId``, the OTLP ``user_prompt`` event's
    ``prompt.id``, so that both count once.
    """
    session, parent = ids(rec, file_agent, st)
    attrs = {"uuid": rec.uuid, "file": path}
    row = _event("user_prompt", path, no, rec, session, parent, st.get("prompt_id"), attrs)
    if rec.promptId and parent is None:
        row["event_id"] = stable_id("claude-user-prompt", rec.promptId)
    return row


def restart_event(rec: User, path: str, no: int, st: dict[str, Any]) -> Row:
    """The ``session_restart`` event of the first prompt after a ``cost-state`` line: the session
    went on in a new agent process (``--continue`` or ``--resume``; the transcript does not say
    which), at the prompt's time."""
    session, parent = ids(rec, None, st)
    attrs = {"file": path, "start_type": "restart", "evidence": "cost-state"}
    return _event("session_restart", path, no, rec, session, parent, st.get("prompt_id"), attrs)


def system_event(rec: System, path: str, no: int, file_agent: str | None, st: dict[str, Any]) -> Row:
    """The ``turn_duration`` or ``compaction`` event of a system line."""
    session, parent = ids(rec, file_agent, st)
    attrs: dict[str, Any]
    if rec.subtype == "turn_duration":
        name = "turn_duration"
        attrs = {"file": path, "duration_ms": float(rec.durationMs) if rec.durationMs is not None else None}
    else:
        meta = rec.compactMetadata
        name = "compaction"
        attrs = {
            "file": path,
            "pre_tokens": meta.preTokens if meta is not None else None,
            "trigger": meta.trigger if meta is not None else None,
        }
    return _event(name, path, no, rec, session, parent, st.get("prompt_id"), attrs)


def ids(
    rec: Assistant | User | System, file_agent: str | None, st: dict[str, Any]
) -> tuple[str | None, str | None]:
    """(session_id, parent_session_id) of a record; remembers its session in ``st``."""
    session = rec.sessionId or st.get("session_id")
    if session:
        st["session_id"] = session
    agent_id = rec.agentId or file_agent
    if agent_id and (rec.isSidechain or file_agent):
        return f"agent-{agent_id}", session
    return session, None


def _event(
    name: str,
    path: str,
    no: int,
    rec: Assistant | User | System,
    session: str | None,
    parent: str | None,
    prompt_id: str | None,
    attributes: dict[str, Any],
) -> Row:
    """An ``events`` row of this importer."""
    return {
        # The name without .gz/.zst: a transcript compressed in place keeps its ids.
        "event_id": stable_id("claude-jsonl-event", plain_name(path), no, name),
        "source": SOURCE,
        "agent": "claude-code",
        "agent_version": rec.version,
        "user_id": None,
        "session_id": session,
        "parent_session_id": parent,
        "prompt_id": prompt_id,
        "request_id": None,
        "name": name,
        "timestamp": micros(rec.timestamp) if rec.timestamp is not None else None,
        "attributes": attributes,
        "seq": no,
    }
