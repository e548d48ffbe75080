"""Gemini CLI's OTLP log events -> ``requests`` rows (docs/schemas.md#gemini-cli).

``gemini_cli.api_response`` (and Qwen Code's ``qwen-code.api_response``: Qwen Code is a Gemini CLI
fork whose event carries the same token attributes; docs/schemas.md#qwen-code) -> a request (cold =
input - cached, output = output + thoughts, reasoning = thoughts, write NULL); one without usage (an
error response) stays an event.
``gen_ai.client.inference.operation.details`` is an event, never a second request, and Gemini CLI
spans are not turned into requests (their log events are the request record).
"""

from __future__ import annotations

from typing import Any

from traceflow.otlp.attributes import AGENT_NAMES, Resource, num, text, toks
from traceflow.otlp.limits import duration_ms
from traceflow.otlp.mapper import Mapper, request_row
from traceflow.rows import split_inclusive, stable_id

#: agent family -> (event name prefix, ``event_id`` namespace) of the agents mapped here
PREFIXES = {"gemini": ("gemini_cli.", "gemini-otlp"), "qwen": ("qwen-code.", "qwen-otlp")}


def api_response(
    m: Mapper,
    res: Resource,
    t: int,
    ts: int | None,
    tid: str | None,
    sid: str | None,
    a: dict[str, Any],
    fam: str = "gemini",
) -> bool:
    """The ``requests`` row of an ``api_response`` event of agent family ``fam`` (a key of
    :data:`PREFIXES`); False when it has no usage (keep it as an event), True when it was mapped or
    refused."""
    prefix, namespace = PREFIXES[fam]
    try:
        inp, cached, out, thoughts = toks(
            a, "input_token_count", "cached_content_token_count", "output_token_count", "thoughts_token_count"
        )
    except ValueError as e:
        m.problems.reject(f"{prefix}api_response with an invalid token count", str(e))
        return True
    if inp is None and out is None:
        return False  # no usage (an error response): keep it as an event
    tokens = split_inclusive(inp or 0, cached or 0, None, (out or 0) + (thoughts or 0))
    session = text(a.get("session.id"))
    prompt = text(a.get("prompt_id"))
    dur = duration_ms(num(a.get("duration_ms")))
    stamp = a.get("event.timestamp") or t
    m.out.requests.append(
        request_row(
            m.origin(AGENT_NAMES[fam], a, res),
            event_id=stable_id(
                namespace,
                session,
                prompt,
                stamp,
                (tokens.cold_input, tokens.cache_read, tokens.output, thoughts),
            ),
            session_id=session,
            prompt_id=prompt,
            request_id=text(a.get("gen_ai.response.id") or a.get("response_id")),
            started_at=ts - round(dur * 1000) if ts is not None and dur is not None else None,
            ended_at=ts,
            duration_ms=dur,
            model=text(a.get("model")),
            tokens=tokens,
            reasoning_tokens=thoughts,
            attributes=m.attrs(a, res, tid, sid),
        )
    )
    return True
