"""OTLP logs -> lake rows: ``requests`` for the agents' model calls, ``events`` for the rest.

* **Event names.** Claude Code puts ``claude_code.<name>`` in the body and ``<name>`` in the
  ``event.name`` attribute; Codex and Gemini CLI put the prefixed name in ``event.name``; newer SDKs
  fill ``LogRecord.event_name``. All three are read. ``events.name`` is the name without the agent
  prefix (``user_prompt``, ``tool_result``, ``api_error``, ...); the agent is in ``agent``.
* **Requests.** The name picks the agent's mapping: Claude Code ``api_request``
  (:mod:`traceflow.otlp.claude_code`), Codex ``sse_event`` (:mod:`traceflow.otlp.codex`), Gemini CLI
  ``api_response`` and Qwen Code ``qwen-code.api_response`` (:mod:`traceflow.otlp.gemini_cli`, one
  mapping for both). Every other record is an ``events`` row.
* **Attributes.** Every attribute is kept (content only with ``keep_content``), plus ``resource``
  (the resource attributes) and the record's ``trace_id``/``span_id``.
* **Ids.** Every row gets a deterministic ``event_id``: a record delivered twice maps to the same id,
  whichever encoding carried it. A Claude Code ``user_prompt`` with a ``prompt.id`` gets the id of
  the transcript's prompt line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from traceflow.otlp import claude_code, codex, gemini_cli
from traceflow.otlp.attributes import (
    AGENT_NAMES,
    Resource,
    agent_version,
    hex_id,
    iso,
    pb_attrs,
    pb_value,
    sessions,
    text,
    user_id,
)
from traceflow.otlp.mapper import Mapped, Mapper, scope_groups
from traceflow.rows import stable_id


def map_logs(msg: Any, *, keep_content: bool = False, source: str = "otlp") -> Mapped:
    """An ``ExportLogsServiceRequest`` -> ``requests`` and ``events`` rows."""
    return next(map_logs_chunks(msg, keep_content=keep_content, source=source))


def map_logs_chunks(
    msg: Any, *, keep_content: bool = False, source: str = "otlp", records: int = 0
) -> Iterator[Mapped]:
    """:func:`map_logs` of ``records`` log records at a time (all at once when 0), so that the rows of
    a large request never exist all at once (the sealer makes each chunk a frame)."""
    m = Mapper(keep_content, source)
    n = 0
    for res, fam, sl in scope_groups(msg.resource_logs, "scope_logs"):
        for r in sl.log_records:
            pb_log(m, res, fam, r)
            n += 1
            if n == records:
                yield m.result()
                m, n = Mapper(keep_content, source), 0
    yield m.result()


def pb_log(m: Mapper, res: Resource, fam: str | None, r: Any) -> None:
    """Map one protobuf log record ``r`` of resource ``res`` (scope family ``fam``) into ``m``."""
    b = r.body
    _log(
        m,
        res,
        fam,
        r.time_unix_nano,
        r.observed_time_unix_nano,
        b.string_value or pb_value(b),
        r.event_name,
        hex_id(r.trace_id),
        hex_id(r.span_id),
        pb_attrs(r.attributes),
        r,
    )


def _log(
    m: Mapper,
    res: Resource,
    fam_hint: str | None,
    t: int,
    observed: int,
    body: Any,
    event_name: str,
    tid: str | None,
    sid: str | None,
    a: dict[str, Any],
    record: Any = None,
) -> None:
    """Map one log record (its attributes already a dict) to a request of its agent, or an event."""
    fam, full, short = _names(fam_hint, body, event_name, a)
    tt = t or observed
    ts = tt // 1000 if tt else iso(a.get("event.timestamp"))
    if fam == "claude" and short == "api_request":
        claude_code.api_request(m, res, tt, ts, tid, sid, a)
        return
    if fam == "codex" and short == "sse_event":
        if a.get("event.kind") == "response.completed":
            codex.response_completed(m, res, tt, ts, tid, sid, a)
        return  # per-chunk SSE records are not stored
    if (
        fam in gemini_cli.PREFIXES
        and short == "api_response"
        and gemini_cli.api_response(m, res, tt, ts, tid, sid, a, fam)
    ):
        return
    _event(m, res, fam, full, short, t, observed, ts, tid, sid, a, body, record)


def _names(
    fam: str | None, body: Any, event_name: str, a: dict[str, Any]
) -> tuple[str | None, str | None, str | None]:
    """(agent family, full event name, name without the agent prefix) of a log record."""
    if type(body) is str and body.startswith("claude_code."):
        return "claude", body, body[12:]
    name = event_name or a.get("event.name")
    if type(name) is not str or not name:
        return fam, None, None
    if name.startswith("claude_code."):
        return "claude", name, name[12:]
    if name.startswith("codex."):
        return "codex", name, name[6:]
    if name.startswith("gemini_cli."):
        return "gemini", name, name[11:]
    if name.startswith("qwen-code."):
        return "qwen", name, name[10:]
    return fam, name, name


def _event(
    m: Mapper,
    res: Resource,
    fam: str | None,
    full: str | None,
    short: str | None,
    t: int,
    observed: int,
    ts: int | None,
    tid: str | None,
    sid: str | None,
    a: dict[str, Any],
    body: Any,
    record: Any,
) -> None:
    """The ``events`` row of a log record that is not a model call."""
    event_id = stable_id("otlp-log", res.service, full, t, observed, tid, sid, repr(body), repr(a))
    if fam == "claude" and short == "user_prompt" and a.get("prompt.id"):
        # = the transcript's prompt line (same promptId): one turn start, whichever copy arrives
        event_id = stable_id("claude-user-prompt", text(a.get("prompt.id")))
    if short == "api_response_body" and type(a.get("body")) is str:
        try:  # the response body's usage is the only OTEL source of the 5m/1h split on old versions
            usage = orjson.loads(a["body"]).get("usage")
            if isinstance(usage, dict):
                a.setdefault("usage", usage)
        except (orjson.JSONDecodeError, AttributeError):
            pass
    if body is not None and body != full and m.keep_content:
        a.setdefault("log.body", body)
    if record is not None:
        if record.severity_number:
            a.setdefault("severity_number", record.severity_number)
        if record.severity_text:
            a.setdefault("severity_text", record.severity_text)
    session = text(a.get("session.id") or a.get("conversation.id") or a.get("gen_ai.conversation.id"))
    if fam == "claude":
        sess, parent = sessions(a, session)
    else:
        sess, parent = session, None
    seq = a.get("event.sequence")
    m.out.events.append(
        {
            "event_id": event_id,
            "source": m.source,
            "agent": AGENT_NAMES.get(fam or "") or res.service,
            "agent_version": agent_version(a, res.version),
            "user_id": user_id(a, res.attrs),
            "session_id": sess,
            "parent_session_id": parent,
            "prompt_id": text(a.get("prompt.id") or a.get("prompt_id")),
            "request_id": text(a.get("request_id")),
            "name": short,
            "timestamp": ts,
            "attributes": m.attrs(a, res, tid, sid),
            "seq": seq if type(seq) is int else None,
        }
    )
