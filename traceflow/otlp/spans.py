"""OTLP traces -> ``spans`` rows, plus ``requests`` rows for the model calls among them.

* Every span is stored in ``spans`` (``event_id`` from its trace and span ids), its events and
  links in ``attributes``. The ``spans`` table has no parent column: spans keep ``session.id`` as
  ``session_id``.
* Claude Code's beta ``claude_code.llm_request`` span is also a request
  (:func:`traceflow.otlp.claude_code.llm_request_span`), as is any other span with OTel GenAI or
  OpenInference usage (:func:`traceflow.otlp.genai.span_request`). Spans of Codex and Gemini CLI
  are not turned into requests: their log events are the request record, counting both would
  double count.
* Content attributes are dropped unless ``keep_content``, from the span's events too.
* A span that ends before it starts is refused (a negative duration is no duration).
"""

from __future__ import annotations

from typing import Any

from traceflow.otlp.attributes import AGENT_NAMES, Resource, drop_content, hex_id, pb_attrs, text
from traceflow.otlp.claude_code import llm_request_span
from traceflow.otlp.genai import span_request
from traceflow.otlp.limits import span_times_problem
from traceflow.otlp.mapper import Mapped, Mapper, scope_groups
from traceflow.rows import stable_id


def map_traces(msg: Any, *, keep_content: bool = False, source: str = "otlp") -> Mapped:
    """An ``ExportTraceServiceRequest`` -> ``spans`` rows, plus ``requests`` for model calls."""
    m = Mapper(keep_content, source)
    for res, fam, ss in scope_groups(msg.resource_spans, "scope_spans"):
        for sp in ss.spans:
            _span(m, res, fam, sp)
    return m.result()


def _span(m: Mapper, res: Resource, fam_hint: str | None, sp: Any) -> None:
    """Map one span: a ``spans`` row, and a ``requests`` row when it is a model call with usage."""
    a = pb_attrs(sp.attributes)
    tid = hex_id(sp.trace_id)
    sid = hex_id(sp.span_id)
    name = sp.name
    start = sp.start_time_unix_nano
    end = sp.end_time_unix_nano
    if (why := span_times_problem(start, end)) is not None:
        m.problems.reject(f"a span that {why.split(' (')[0]}", f"{name!r} {why}")
        return
    status = sp.status.code
    fam = "claude" if name.startswith("claude_code.") else fam_hint
    if fam == "claude":
        if name == "claude_code.llm_request":
            llm_request_span(m, res, tid, sid, start, end, status, a)
    elif fam not in ("codex", "gemini", "qwen"):
        span_request(m, res, tid, sid, start, end, a)
    if tid and sid:
        event_id = stable_id("otlp-span", tid, sid)
    else:
        event_id = stable_id("otlp-span", res.service, name, start, end, repr(a))
    attrs = m.attrs(a, res, None, None)
    if sp.status.message:
        attrs.setdefault("status.message", sp.status.message)
    if len(sp.events):
        events = []
        for ev in sp.events:
            ea = pb_attrs(ev.attributes)
            if not m.keep_content:
                drop_content(ea)
            events.append({"name": ev.name, "time": ev.time_unix_nano // 1000, "attributes": ea})
        attrs.setdefault("events", events)
    if len(sp.links):
        attrs.setdefault(
            "links", [{"trace_id": hex_id(lk.trace_id), "span_id": hex_id(lk.span_id)} for lk in sp.links]
        )
    m.out.spans.append(
        {
            "event_id": event_id,
            "source": m.source,
            "agent": AGENT_NAMES.get(fam or "") or res.service,
            "session_id": text(a.get("session.id") or a.get("gen_ai.conversation.id")),
            "trace_id": tid,
            "span_id": sid,
            "parent_span_id": hex_id(sp.parent_span_id),
            "name": name,
            "kind": sp.kind,
            "started_at": start // 1000 if start else None,
            "ended_at": end // 1000 if end else None,
            "status_code": status,
            "attributes": attrs,
        }
    )
