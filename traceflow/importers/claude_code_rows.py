"""What one Claude Code transcript line becomes: a request line tuple or an event row.

* An assistant line with ``usage`` becomes a tuple in :data:`COLUMNS` order (:func:`block`; the
  usual record through :func:`fast_block`, which must give exactly what :func:`block` gives). The
  tuples of a batch become request rows in :mod:`traceflow.importers.claude_code_frames`.
* ``<synthetic>`` lines (failed calls, zero usage) and API errors are not requests; they become
  ``api_error`` events (:func:`error_event`).
* A prompt, a turn's duration and a compaction become events (:func:`line_event`), from fields read
  off the line by the Python loop (:func:`user_event`, :func:`system_event`) or by the compiled
  scanner.
* Sub-agent lines (``isSidechain``, or any line of ``<session>/subagents/agent-<id>.jsonl``) belong
  to session ``agent-<id>`` with ``parent_session_id`` = the spawning session.
"""

from __future__ import annotations

import re
from typing import Any

from traceflow.rows import Row, as_float, as_int, iso_micros, stable_id

#: ``events.source`` and ``requests.source`` of this importer's rows.
SOURCE = "claude-code-jsonl"

_PROMPT_ID = re.compile(rb'"promptId"\s*:\s*"([^"]+)"')
_UUID = re.compile(rb'"uuid"\s*:\s*"([^"]+)"')
_TIMESTAMP = re.compile(rb'"timestamp"\s*:\s*"([^"]+)"')
_SESSION = re.compile(rb'"sessionId"\s*:\s*"([^"]+)"')
_DURATION = re.compile(rb'"durationMs"\s*:\s*([0-9.]+)')
_PRE_TOKENS = re.compile(rb'"preTokens"\s*:\s*([0-9]+)')
_TRIGGER = re.compile(rb'"trigger"\s*:\s*"([a-z]+)"')
_SIDECHAIN = re.compile(rb'"isSidechain"\s*:\s*true')
_AGENT_ID = re.compile(rb'"agentId"\s*:\s*"([^"]+)"')
_VERSION = re.compile(rb'"version"\s*:\s*"([^"]+)"')

#: Kinds of the events read off single lines (:func:`line_event`); the compiled scanner uses the
#: same numbers.
PROMPT_EVENT, TURN_EVENT, COMPACTION_EVENT = 0, 1, 2

#: Columns of the per-line tuples :func:`block` and :func:`fast_block` return.
COLUMNS: dict[str, str] = {
    "file": "str",
    "seq": "i64",
    "request_id": "str",
    "message_id": "str",
    "ts": "str",
    "trigger_ts": "str",
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


_INT_OR_NONE = frozenset((int, type(None)))
_STR_OR_NONE = frozenset((str, type(None)))


def fast_block(
    rec: dict[str, Any], no: int, file_agent: str | None, st: dict[str, Any], trigger_ts: str | None
) -> tuple[Any, ...] | None:
    """:func:`block` for the usual record, or None for any other.

    Usual: a dict ``message`` with a dict ``usage`` whose token counts are ints (or absent), a
    string timestamp, no ``costUSD`` but a float, text (or nothing) in the text columns, not
    ``<synthetic>`` nor an API error. Anything else (and so every record that makes :func:`block`
    raise) is left to the general code, which this function must match exactly; it changes ``st``
    only when it returns a row.
    """
    get = rec.get
    msg = get("message")
    if type(msg) is not dict:
        return None
    mget = msg.get
    usage = mget("usage")
    ts = get("timestamp")
    model = mget("model")
    if type(usage) is not dict or type(ts) is not str or model == "<synthetic>" or get("isApiErrorMessage"):
        return None
    uget = usage.get
    cold = uget("input_tokens")
    read = uget("cache_read_input_tokens")
    write = uget("cache_creation_input_tokens")
    output = uget("output_tokens")
    breakdown = uget("cache_creation")
    details = uget("output_tokens_details")
    cost = get("costUSD")
    thinking = details.get("thinking_tokens") if type(details) is dict else None
    if type(breakdown) is dict:
        w5 = breakdown.get("ephemeral_5m_input_tokens")
        w1 = breakdown.get("ephemeral_1h_input_tokens")
        if (
            not {type(cold), type(read), type(write), type(output), type(thinking), type(w5), type(w1)}
            <= _INT_OR_NONE
        ):
            return None
        w5 = w5 or 0
        w1 = w1 or 0
    else:
        if not {type(cold), type(read), type(write), type(output), type(thinking)} <= _INT_OR_NONE:
            return None
        w5 = w1 = None
    if cost is not None and type(cost) is not float:
        return None
    # _ids, without its side effect until the row is known to be usual.
    own_session = get("sessionId") or st.get("session_id")
    agent = get("agentId")
    agent_id = agent or file_agent
    session: Any
    parent: Any
    if agent_id and (get("isSidechain") or file_agent):
        session, parent = f"agent-{agent_id}", own_session
    else:
        session, parent = own_session, None
    row = (
        no,
        get("requestId"),
        mget("id"),
        ts,
        trigger_ts,
        session,
        parent,
        st.get("prompt_id"),
        get("version"),
        model,
        cold or 0,
        read or 0,
        write or 0,
        w5,
        w1,
        output or 0,
        thinking,
        cost,
        get("cwd"),
        get("gitBranch"),
        agent,
        get("uuid"),
        uget("speed"),
        uget("service_tier"),
        mget("stop_reason"),
    )
    # The text columns hold text (or nothing): what claude_code_frames.requests_frame_fast relies on.
    if (
        not {
            type(row[1]),
            type(row[2]),
            type(trigger_ts),
            type(session),
            type(parent),
            type(row[7]),
            type(row[8]),
            type(model),
            type(row[18]),
            type(row[19]),
            type(agent),
            type(row[21]),
            type(row[22]),
            type(row[23]),
            type(row[24]),
        }
        <= _STR_OR_NONE
    ):
        return None
    if own_session:
        st["session_id"] = own_session
    return row


def block(
    rec: dict[str, Any],
    msg: dict[str, Any],
    no: int,
    file_agent: str | None,
    st: dict[str, Any],
    trigger_ts: str | None,
) -> tuple[Any, ...]:
    """The fields of one assistant block line, in :data:`COLUMNS` order."""
    usage = msg["usage"]
    breakdown = usage.get("cache_creation")
    w5: int | None
    w1: int | None
    if isinstance(breakdown, dict):
        w5 = as_int(breakdown.get("ephemeral_5m_input_tokens")) or 0
        w1 = as_int(breakdown.get("ephemeral_1h_input_tokens")) or 0
    else:
        w5 = w1 = None
    details = usage.get("output_tokens_details")
    session, parent = _ids(rec, file_agent, st)
    ts = rec["timestamp"]
    if not isinstance(ts, str):
        raise ValueError(f"timestamp {ts!r} is not an ISO-8601 string")
    return (
        no,
        rec.get("requestId"),
        msg.get("id"),
        ts,
        trigger_ts,
        session,
        parent,
        st.get("prompt_id"),
        rec.get("version"),
        msg.get("model"),
        as_int(usage.get("input_tokens")) or 0,
        as_int(usage.get("cache_read_input_tokens")) or 0,
        as_int(usage.get("cache_creation_input_tokens")) or 0,
        w5,
        w1,
        as_int(usage.get("output_tokens")) or 0,
        as_int(details.get("thinking_tokens")) if isinstance(details, dict) else None,
        as_float(rec.get("costUSD")),
        rec.get("cwd"),
        rec.get("gitBranch"),
        rec.get("agentId"),
        rec.get("uuid"),
        usage.get("speed"),
        usage.get("service_tier"),
        msg.get("stop_reason"),
    )


def error_event(rec: dict[str, Any], path: str, no: int, file_agent: str | None, st: dict[str, Any]) -> Row:
    """The ``api_error`` event of a ``<synthetic>`` or API-error assistant line."""
    session, parent = _ids(rec, file_agent, st)
    ts = rec.get("timestamp")
    attrs: dict[str, Any] = {"file": path}
    for key in ("apiErrorStatus", "apiErrorType", "error"):
        if rec.get(key) is not None:
            attrs[key] = rec[key]
    return _event(
        "api_error",
        path,
        no,
        iso_micros(ts) if ts else None,
        session,
        parent,
        st.get("prompt_id"),
        attrs,
        version=rec.get("version"),
        request_id=rec.get("requestId"),
    )


def user_event(
    line: bytes, path: str, no: int, ts: int | None, file_agent: str | None, st: dict[str, Any]
) -> Row:
    """The ``user_prompt`` event of a prompt line (not a tool result), read with byte searches."""
    session, parent = _line_session(line, file_agent, st)
    version, uuid = _search(_VERSION, line), _search(_UUID, line)
    prompt_key = _search(_PROMPT_ID, line)
    return line_event(
        path, PROMPT_EVENT, no, ts, session, parent, st.get("prompt_id"), version, uuid, None, prompt_key
    )


def system_event(
    sub: str, line: bytes, path: str, no: int, file_agent: str | None, st: dict[str, Any]
) -> Row:
    """The ``turn_duration`` or ``compaction`` event of a system line (``sub`` = its subtype)."""
    session, parent = _line_session(line, file_agent, st)
    ts_s = _search(_TIMESTAMP, line)
    if sub == "turn_duration":
        kind, a, b = TURN_EVENT, _search(_DURATION, line), None
    else:
        kind, a, b = COMPACTION_EVENT, _search(_PRE_TOKENS, line), _search(_TRIGGER, line)
    ts = iso_micros(ts_s) if ts_s else None
    return line_event(
        path, kind, no, ts, session, parent, st.get("prompt_id"), _search(_VERSION, line), a, b, None
    )


def line_event(
    path: str,
    kind: int,
    no: int,
    ts: int | None,
    session: str | None,
    parent: str | None,
    prompt_id: str | None,
    version: str | None,
    a: str | None,
    b: str | None,
    prompt_key: str | None,
) -> Row:
    """The row of a prompt or system event from the fields read off its line (by the Python
    loop or the compiled scanner, whose event tuples are these arguments after ``path``).

    ``a`` / ``b``: the prompt's uuid; the turn's ``durationMs``; the compaction's ``preTokens``
    and ``trigger``. ``prompt_key``: the prompt's ``promptId``, the OTLP ``user_prompt`` event's
    ``prompt.id``, which becomes the event id of a main-session prompt.
    """
    attrs: dict[str, Any]
    if kind == PROMPT_EVENT:
        name, attrs = "user_prompt", {"uuid": a, "file": path}
    elif kind == TURN_EVENT:
        name, attrs = "turn_duration", {"file": path, "duration_ms": float(a) if a else None}
    else:
        name = "compaction"
        attrs = {"file": path, "pre_tokens": int(a) if a else None, "trigger": b}
    row = _event(name, path, no, ts, session, parent, prompt_id, attrs, version=version)
    if prompt_key and parent is None:
        row["event_id"] = stable_id("claude-user-prompt", prompt_key)
    return row


def _ids(rec: dict[str, Any], file_agent: str | None, st: dict[str, Any]) -> tuple[str | None, str | None]:
    """(session_id, parent_session_id) of a parsed record; remembers its session in ``st``."""
    session = rec.get("sessionId") or st.get("session_id")
    if session:
        st["session_id"] = session
    agent_id = rec.get("agentId") or file_agent
    if agent_id and (rec.get("isSidechain") or file_agent):
        return f"agent-{agent_id}", session
    return session, None


def _line_session(line: bytes, file_agent: str | None, st: dict[str, Any]) -> tuple[str | None, str | None]:
    """:func:`_ids` for an unparsed line, with byte searches."""
    session = _search(_SESSION, line) or st.get("session_id")
    if session:
        st["session_id"] = session
    agent_id = _search(_AGENT_ID, line) or file_agent
    if agent_id and (file_agent or _SIDECHAIN.search(line)):
        return f"agent-{agent_id}", session
    return session, None


def _event(
    name: str,
    path: str,
    no: int,
    ts: int | None,
    session: str | None,
    parent: str | None,
    prompt_id: str | None,
    attributes: dict[str, Any],
    *,
    version: str | None = None,
    request_id: str | None = None,
) -> Row:
    """An ``events`` row of this importer."""
    return {
        "event_id": stable_id("claude-jsonl-event", path, no, name),
        "source": SOURCE,
        "agent": "claude-code",
        "agent_version": version,
        "user_id": None,
        "session_id": session,
        "parent_session_id": parent,
        "prompt_id": prompt_id,
        "request_id": request_id,
        "name": name,
        "timestamp": ts,
        "attributes": attributes,
        "seq": no,
    }


def _search(pattern: re.Pattern[bytes], line: bytes) -> str | None:
    m = pattern.search(line)
    return m.group(1).decode() if m else None
