"""Spans with token usage from other instrumentations -> ``requests`` rows
(docs/schemas.md#opentelemetry-genai-spans-and-other-instrumentations).

OTel GenAI ``gen_ai.usage.*`` (inclusive input, cache read and ``cache_write`` / older
``cache_creation`` subsets, reasoning) and OpenInference ``llm.token_count.*``. Legacy underscore
keys (``gen_ai.usage.cache_read_input_tokens``...) are read as exclusive for Anthropic or when input
< read + write. Agent/tool/workflow spans (``invoke_agent``...) that repeat their children's usage
are not requests. All counts are clamped with ``max(0, ...)``, and an inclusive input is split
with :func:`~traceflow.rows.split_inclusive` (read clamped to the input, write to what the read leaves).
"""

from __future__ import annotations

from typing import Any

from traceflow.otlp.attributes import Resource, first, num, text, tok, user_id
from traceflow.otlp.limits import duration_ms
from traceflow.otlp.mapper import Mapper, Origin, request_row
from traceflow.rows import Tokens, split_inclusive, stable_id

#: gen_ai.operation.name values whose spans repeat (or lack) the usage of a model call
_NON_INFERENCE_OPS = frozenset(
    {"invoke_agent", "create_agent", "invoke_workflow", "execute_tool", "retrieval", "embeddings", "plan"}
)


def span_request(
    m: Mapper, res: Resource, tid: str | None, sid: str | None, start: int, end: int, a: dict[str, Any]
) -> None:
    """The ``requests`` row of a model-call span with GenAI or OpenInference usage, if it is one."""
    gen = (
        "gen_ai.usage.input_tokens" in a
        or "gen_ai.usage.output_tokens" in a
        or "gen_ai.usage.prompt_tokens" in a
        or "gen_ai.usage.completion_tokens" in a
    )
    oi = "llm.token_count.prompt" in a or "llm.token_count.completion" in a
    if not (gen or oi) or a.get("gen_ai.operation.name") in _NON_INFERENCE_OPS:
        return
    try:
        if gen:
            inp = tok(first(a, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"))
            d_read = a.get("gen_ai.usage.cache_read.input_tokens")
            d_write = first(
                a, "gen_ai.usage.cache_write.input_tokens", "gen_ai.usage.cache_creation.input_tokens"
            )
            l_read = a.get("gen_ai.usage.cache_read_input_tokens")
            l_write = first(
                a, "gen_ai.usage.cache_creation_input_tokens", "gen_ai.usage.cache_write_input_tokens"
            )
            read = tok(d_read if d_read is not None else l_read)
            write = tok(d_write if d_write is not None else l_write)
            legacy = d_read is None and d_write is None and (l_read is not None or l_write is not None)
            provider = a.get("gen_ai.provider.name") or a.get("gen_ai.system")
            exclusive = legacy and (provider == "anthropic" or (inp or 0) < (read or 0) + (write or 0))
            out = tok(first(a, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"))
            reasoning = tok(a.get("gen_ai.usage.reasoning.output_tokens"))
            model = first(a, "gen_ai.response.model", "gen_ai.request.model")
            session = first(
                a, "gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id"
            )
            rid = text(a.get("gen_ai.response.id"))
            ttfc = num(a.get("gen_ai.response.time_to_first_chunk"))
            ttft = duration_ms(ttfc * 1000) if ttfc is not None else None
            key = ("genai-response", rid) if rid else ("genai-span", tid, sid)
        else:
            if a.get("openinference.span.kind") not in (None, "LLM"):
                return
            inp = tok(a.get("llm.token_count.prompt"))
            read = tok(a.get("llm.token_count.prompt_details.cache_read"))
            write = tok(a.get("llm.token_count.prompt_details.cache_write"))
            exclusive = False
            out = tok(a.get("llm.token_count.completion"))
            reasoning = tok(a.get("llm.token_count.completion_details.reasoning"))
            model = first(a, "llm.response.model_name", "llm.model_name", "llm.request.model_name")
            session = a.get("session.id")
            rid = None
            ttft = None
            key = ("openinference-span", tid, sid)
    except ValueError as e:
        m.problems.warn("span usage attribute that is not a number", str(e))
        return
    tokens = (
        Tokens(inp, read, write, out) if exclusive or inp is None else split_inclusive(inp, read, write, out)
    )
    ended = end // 1000 if end else None
    m.out.requests.append(
        request_row(
            Origin(m.source, res.service, res.version, user_id(a, res.attrs)),
            event_id=stable_id(*key),
            session_id=text(session),
            request_id=rid,
            started_at=start // 1000 if start else None,
            ended_at=ended,
            duration_ms=(end - start) / 1e6 if start and end else None,
            ttft_ms=ttft,
            model=text(model),
            tokens=tokens,
            reasoning_tokens=reasoning,
            cost_usd=num(a.get("llm.cost.total")),
            attributes=m.span_request_attrs(a, res, tid, sid),
        )
    )
