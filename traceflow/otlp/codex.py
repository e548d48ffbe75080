"""Codex's OTLP log events -> ``requests`` rows (docs/schemas.md#codex).

``codex.sse_event`` with ``event.kind=response.completed`` and token counts -> a request (inclusive
input: cold = input - cached - cache_write, cached clamped to input; write = 0 when absent; session =
``conversation.id``); the token-less duplicate ``response.completed`` and the per-chunk
``sse_event`` records are not stored (:mod:`traceflow.otlp.logs`). Other Codex events go to
``events``. Codex spans are not turned into requests (their log events are the request record).
"""

from __future__ import annotations

from typing import Any

from traceflow.otlp.attributes import Resource, num, text, toks
from traceflow.otlp.limits import duration_ms
from traceflow.otlp.mapper import Mapper, request_row
from traceflow.rows import split_inclusive, stable_id


def response_completed(
    m: Mapper, res: Resource, t: int, ts: int | None, tid: str | None, sid: str | None, a: dict[str, Any]
) -> None:
    """The ``requests`` row of a ``response.completed`` SSE event (none without token counts)."""
    try:
        inp, out, cached, cw, reasoning = toks(
            a,
            "input_token_count",
            "output_token_count",
            "cached_token_count",
            "cache_write_token_count",
            "reasoning_token_count",
        )
    except ValueError as e:
        m.problems.reject("codex.sse_event response.completed with an invalid token count", str(e))
        return
    if inp is None and out is None:
        return  # the token-less duplicate of the completed record
    tokens = split_inclusive(inp or 0, cached or 0, cw or 0, out)
    session = text(a.get("conversation.id"))
    stamp = a.get("event.timestamp") or t
    m.out.requests.append(
        request_row(
            m.origin("codex", a, res),
            event_id=stable_id("codex-otlp", session, stamp, (*tokens, reasoning)),
            session_id=session,
            ended_at=ts,
            ttft_ms=duration_ms(num(a.get("ttft_ms"))),
            model=text(a.get("model") or a.get("slug")),
            tokens=tokens,
            reasoning_tokens=reasoning,
            attributes=m.attrs(a, res, tid, sid),
        )
    )
