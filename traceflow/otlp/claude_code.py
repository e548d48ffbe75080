"""Claude Code's OTLP telemetry -> ``requests`` rows (docs/schemas.md#claude-code;
the captured payloads in tests/data/claude-code-otlp).

* **``api_request`` log event** -> one ``requests`` row: cold = ``input_tokens``, read =
  ``cache_read_tokens``, write = ``cache_creation_tokens`` (the 5m + 1h sum when the total is 0 or
  missing but the breakdown is not: :func:`traceflow.rows.anthropic_cache_write`), 5m/1h from
  ``cache_creation_{5m,1h}_tokens`` (2.1.332+),
  ``ended_at`` = ``timeUnixNano`` (else ``observedTimeUnixNano``, else ``event.timestamp``),
  ``started_at`` = ``ended_at`` - ``duration_ms``. ``event_id`` = ``stable_id("anthropic-request",
  request_id)``, the key the transcript importer uses, so the OTLP event and the transcript line of
  one request are one row; without a request id: ``stable_id("claude-otlp", session, time, model,
  tokens)``. Numbers sent as strings (before 2.1.122) are coerced; a token count that is not a
  number rejects the record (``Mapped.rejected``) instead of storing a guess.
* **Beta span ``claude_code.llm_request``** -> the same ``requests`` row (same ``event_id`` from
  ``request_id`` / ``gen_ai.response.id``; its ``input_tokens`` etc. have Anthropic exclusive
  semantics, its inclusive ``gen_ai.usage.*`` copies are ignored). The span has no ``prompt_id``,
  cost or 5m/1h split, so its row is written with ``ingested_at`` = the span's end: among equally
  complete copies the lake keeps the newest, which is then the ``api_request`` event or the
  transcript line whenever one exists. Failed calls (status ERROR, no tokens) add no row.
* **Sub-agents**: ``session_id`` = ``agent-<agent_id>`` under the ``session.id`` they were sent with
  (:func:`traceflow.otlp.attributes.sessions`); ``agent_id`` and ``query_source`` stay in
  ``attributes``.

Other Claude Code events (``user_prompt``, ``tool_result``, ``api_error``, ...) are ``events`` rows
(:mod:`traceflow.otlp.logs`).
"""

from __future__ import annotations

import math
from hashlib import blake2b
from typing import Any

from traceflow.otlp.attributes import Resource, agent_version, num, sessions, text, tok, toks
from traceflow.otlp.limits import MAX_DURATION_MS, MAX_TOKENS, duration_ms
from traceflow.otlp.mapper import Mapper, Origin, request_row
from traceflow.rows import Tokens, anthropic_cache_write, stable_id

_ANTHROPIC_REQUEST = b"\x1fanthropic-request\x1f"  # stable_id's framing of the first two parts


def api_request(
    m: Mapper, res: Resource, t: int, ts: int | None, tid: str | None, sid: str | None, a: dict[str, Any]
) -> None:
    """The ``requests`` row of a ``claude_code.api_request`` event (its attributes ``a``)."""
    # the hot path (one call per Claude Code API request): typed ints skip tok()
    get = a.get
    try:
        cold, read, write, out, w5, w1 = [
            x if type(x) is int and 0 <= x <= MAX_TOKENS else tok(x) for x in map(get, TOKEN_KEYS)
        ]
    except ValueError as e:
        m.problems.reject(f"claude_code.api_request with an invalid {_bad_count(a)}", str(e))
        return
    write = anthropic_cache_write(write, w5, w1)
    x = get("session.id")
    session = x if type(x) is str and x else text(x)
    x = get("model")
    model = x if type(x) is str and x else text(x)
    x = get("request_id")
    rid = x if type(x) is str and x else text(x)
    if rid:  # = stable_id("anthropic-request", rid), inlined on the hot path
        event_id = blake2b(_ANTHROPIC_REQUEST + rid.encode(), digest_size=16).hexdigest()
    else:
        event_id = stable_id("claude-otlp", session, t, model, (cold, read, write, out))
    x = get("duration_ms")
    dur = float(x) if type(x) is int else num(x)
    if dur is not None and not 0.0 <= dur <= MAX_DURATION_MS:
        m.problems.reject("claude_code.api_request with a duration_ms out of range", repr(x))
        return
    x = get("ttft_ms")
    ttft = duration_ms(float(x) if type(x) is int else num(x))
    x = get("cost_usd")
    cost = x if type(x) is float and math.isfinite(x) else num(x)
    if cost is None:
        micros = num(get("cost_usd_micros"))
        cost = micros / 1e6 if micros is not None else None
    seq = get("event.sequence")
    agent_id = get("agent_id")
    sess: str | None = session
    parent: str | None = None
    if agent_id:
        sess, parent = f"agent-{agent_id}", session
    m.out.requests.append(
        {
            "event_id": event_id,
            "source": m.source,
            "agent": "claude-code",
            "agent_version": res.version or text(get("app.version")),
            "user_id": text(get("user.id")),
            "session_id": sess,
            "parent_session_id": parent,
            "prompt_id": text(get("prompt.id")),
            "request_id": rid,
            "started_at": ts - round(dur * 1000) if ts is not None and dur is not None else None,
            "ended_at": ts,
            "duration_ms": dur,
            "ttft_ms": ttft,
            "model": model,
            "cold_input_tokens": cold,
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "cache_write_5m_tokens": w5,
            "cache_write_1h_tokens": w1,
            "output_tokens": out,
            "reasoning_tokens": None,
            "cost_usd": cost,
            "attributes": m.attrs(a, res, tid, sid, prefixed=False),
            "seq": seq if type(seq) is int else None,
        }
    )


#: an api_request's token attributes (the columnar decoder, otlp/logs_columnar.py, reads them first)
TOKEN_KEYS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
    "output_tokens",
    "cache_creation_5m_tokens",
    "cache_creation_1h_tokens",
)


def _bad_count(a: dict[str, Any]) -> str:
    """The first token count of ``a`` that :func:`tok` refuses (for the message)."""
    for k in TOKEN_KEYS:
        try:
            tok(a.get(k))
        except ValueError:
            return k
    return "token count"


def llm_request_span(
    m: Mapper,
    res: Resource,
    tid: str | None,
    sid: str | None,
    start: int,
    end: int,
    status: int,
    a: dict[str, Any],
) -> None:
    """The ``requests`` row of a ``claude_code.llm_request`` span with usage (none for a failed call)."""
    try:
        cold, read, write, out = toks(a, *TOKEN_KEYS[:4])
    except ValueError as e:
        m.problems.warn("claude_code.llm_request span with an invalid token count", str(e))
        return
    if status == 2 or (cold is None and read is None and write is None and out is None):
        return  # a failed call carries no tokens
    rid = text(a.get("request_id") or a.get("gen_ai.response.id"))
    session = text(a.get("session.id"))
    model = text(a.get("model") or a.get("gen_ai.response.model") or a.get("gen_ai.request.model"))
    ended = end // 1000 if end else None
    dur = duration_ms(num(a.get("duration_ms")))
    if dur is None and start and end:
        dur = (end - start) / 1e6
    sess, parent = sessions(a, session)
    row = request_row(
        Origin(m.source, "claude-code", agent_version(a, res.version), text(a.get("user.id"))),
        event_id=stable_id("anthropic-request", rid) if rid else stable_id("claude-otlp-span", tid, sid),
        session_id=sess,
        parent_session_id=parent,
        request_id=rid,
        started_at=start // 1000 if start else None,
        ended_at=ended,
        duration_ms=dur,
        ttft_ms=duration_ms(num(a.get("ttft_ms"))),
        model=model,
        tokens=Tokens(cold, read, write, out),
        attributes=m.span_request_attrs(a, res, tid, sid),
    )
    row["ingested_at"] = ended  # loses to the api_request / transcript copy (see module doc)
    m.out.requests.append(row)
