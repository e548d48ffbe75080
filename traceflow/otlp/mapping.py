"""OTLP logs and traces -> lake rows (``requests``, ``events``, ``spans``). Pure functions, no I/O.

Mapping decisions (AGENT_TELEMETRY_SCHEMAS §1, §3, §4, §5, §6.4, §8; CLAUDE_CODE_REAL_CLIENT.md):

* **Event names.** Claude Code puts ``claude_code.<name>`` in the body and ``<name>`` in the
  ``event.name`` attribute; Codex and Gemini CLI put the prefixed name in ``event.name``; newer SDKs
  fill ``LogRecord.event_name``. All three are read. ``events.name`` is the name without the agent
  prefix (``user_prompt``, ``tool_result``, ``api_error``, ...); the agent is in ``agent``.
* **agent** is ``claude-code``, ``codex`` or ``gemini-cli`` for those agents (recognised by the event
  prefix, the instrumentation scope or ``service.name``; the transcript importers use the same
  names), else the resource ``service.name``. ``service.name`` itself stays in ``attributes.resource``.
* **Claude Code ``api_request``** -> one ``requests`` row: cold = ``input_tokens``, read =
  ``cache_read_tokens``, write = ``cache_creation_tokens`` (the 5m + 1h sum when the total is 0 or
  missing but the breakdown is not), 5m/1h from ``cache_creation_{5m,1h}_tokens`` (2.1.332+),
  ``ended_at`` = ``timeUnixNano`` (else ``observedTimeUnixNano``, else ``event.timestamp``),
  ``started_at`` = ``ended_at`` - ``duration_ms``. ``event_id`` = ``stable_id("anthropic-request",
  request_id)``, the key the transcript importer uses, so the OTLP event and the transcript line of
  one request are one row; without a request id: ``stable_id("claude-otlp", session, time, model,
  tokens)``. Numbers sent as strings (before 2.1.122) are coerced; a token count that is not a
  number rejects the record (``Mapped.rejected``) instead of storing a guess.
* **Claude Code beta span ``claude_code.llm_request``** -> the same ``requests`` row (same
  ``event_id`` from ``request_id`` / ``gen_ai.response.id``; its ``input_tokens`` etc. have Anthropic
  exclusive semantics, its inclusive ``gen_ai.usage.*`` copies are ignored). The span has no
  ``prompt_id``, cost or 5m/1h split, so its row is written with ``ingested_at`` = the span's end:
  among equally complete copies the lake keeps the newest, which is then the ``api_request`` event
  or the transcript line whenever one exists. Failed calls (status ERROR, no tokens) add no row.
  Every span is also stored in ``spans``.
* **Sub-agents.** Events and spans of a Claude Code sub-agent carry ``agent_id``; their
  ``session_id`` is ``agent-<agent_id>`` and ``parent_session_id`` the ``session.id`` they were sent
  with (the spawning session), exactly as the transcript importer names sub-agent sessions, so the
  two copies of a request agree. ``agent_id`` and ``query_source`` stay in ``attributes``. (The
  ``spans`` table has no parent column: spans keep ``session.id`` as ``session_id``.)
* **Codex** ``codex.sse_event`` with ``event.kind=response.completed`` and token counts -> a request
  (inclusive input: cold = input - cached - cache_write, cached clamped to input; write = 0 when
  absent; session = ``conversation.id``); the token-less duplicate ``response.completed`` and the
  per-chunk ``sse_event`` records are not stored. Other Codex events go to ``events``.
* **Gemini CLI** ``gemini_cli.api_response`` -> a request (cold = input - cached, output = output +
  thoughts, reasoning = thoughts, write NULL). ``gen_ai.client.inference.operation.details`` is an
  event, never a second request.
* **Other spans with token usage** (OTel GenAI ``gen_ai.usage.*`` -- inclusive input, cache read and
  ``cache_write`` / older ``cache_creation`` subsets, reasoning; OpenInference ``llm.token_count.*``)
  -> requests; legacy underscore keys (``gen_ai.usage.cache_read_input_tokens``...) are read as
  exclusive for Anthropic or when input < read + write. Spans of Codex and Gemini CLI are not turned
  into requests (their log events are the request record; counting both would double count), nor
  are agent/tool/workflow spans (``invoke_agent``...) that repeat their children's usage. All counts
  are clamped with ``max(0, ...)``.
* **Content** (prompt, response, tool input/parameters/output, raw API bodies, GenAI/OpenInference
  messages, commands and file paths) is dropped from ``attributes`` unless ``keep_content``. Every
  other attribute is kept, plus ``resource`` (the resource attributes) and the record's
  ``trace_id``/``span_id``.
* **Ids.** Every row gets a deterministic ``event_id``: a record delivered twice maps to the same id,
  whichever encoding carried it.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any

import orjson

from traceflow.rows import Parsed, Row, iso_micros, stable_id

AGENT_NAMES = {"claude": "claude-code", "codex": "codex", "gemini": "gemini-cli"}

_ANTHROPIC_REQUEST = b"\x1fanthropic-request\x1f"  # stable_id's framing of the first two parts

#: attributes that hold prompt / response / tool text; dropped unless keep_content
CONTENT_KEYS = frozenset(
    {
        "prompt",
        "prompt_text",
        "response",
        "response_text",
        "request_text",
        "user_prompt",
        "system_prompt",
        "system_prompt_preview",
        "system_reminders",
        "new_context",
        "tool_input",
        "tool_parameters",
        "tool",
        "tools",
        "function_args",
        "arguments",
        "output",
        "body",
        "content",
        "full_command",
        "bash_command",
        "file_path",
        "response.model_output",
        "log.body",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.prompt",
        "gen_ai.completion",
        "input.value",
        "output.value",
        "llm.prompts",
        "llm.input_messages",
        "llm.output_messages",
        "llm.tools",
        "llm.prompt_template.template",
        "llm.prompt_template.variables",
    }
)
_CONTENT_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.prompts.",
    "llm.tools.",
)

#: gen_ai.operation.name values whose spans repeat (or lack) the usage of a model call
_NON_INFERENCE_OPS = frozenset(
    {"invoke_agent", "create_agent", "invoke_workflow", "execute_tool", "retrieval", "embeddings", "plan"}
)


@dataclass
class Mapped:
    """What one export request mapped to.

    ``rejected`` counts records that were refused (not stored), for OTLP ``partial_success``;
    ``message`` says why (empty when all is well; may hold a warning with ``rejected == 0``).
    ``dropped`` counts metric points dropped as duplicates or out of order (not an error).
    """

    parsed: Parsed
    rejected: int = 0
    message: str = ""
    dropped: int = 0


class Problems:
    """Counts refused records and collects a short message about them."""

    def __init__(self) -> None:
        self.rejected = 0
        self.dropped = 0
        self._counts: dict[str, int] = {}
        self._examples: dict[str, str] = {}

    def reject(self, why: str, example: str = "") -> None:
        self.rejected += 1
        self.warn(why, example)

    def warn(self, why: str, example: str = "") -> None:
        self._counts[why] = self._counts.get(why, 0) + 1
        if example and why not in self._examples:
            self._examples[why] = example

    def message(self) -> str:
        parts = []
        for why, n in list(self._counts.items())[:5]:
            ex = self._examples.get(why)
            parts.append(f"{why}{f' (e.g. {ex})' if ex else ''}{f' x{n}' if n > 1 else ''}")
        if len(self._counts) > 5:
            parts.append(f"and {len(self._counts) - 5} other problems")
        return "; ".join(parts)

    def mapped(self, parsed: Parsed) -> Mapped:
        return Mapped(parsed, self.rejected, self.message(), self.dropped)


# -- values ----------------------------------------------------------------------------------------
def pb_value(v: Any) -> Any:
    """An ``AnyValue`` message as a Python value (bytes as base64 text; empty -> None)."""
    w = v.WhichOneof("value")
    if w == "string_value":
        return v.string_value
    if w == "int_value":
        return v.int_value
    if w == "double_value":
        return v.double_value
    if w == "bool_value":
        return v.bool_value
    if w is None:
        return None
    if w == "array_value":
        return [pb_value(x) for x in v.array_value.values]
    if w == "kvlist_value":
        return pb_attrs(v.kvlist_value.values)
    return base64.b64encode(v.bytes_value).decode()


def pb_attrs(kvs: Any) -> dict[str, Any]:
    """A repeated ``KeyValue`` field as a dict (hot path: the common variants inline)."""
    d: dict[str, Any] = {}
    for kv in kvs:
        v = kv.value
        s = v.string_value
        if s:
            d[kv.key] = s
            continue
        w = v.WhichOneof("value")
        if w == "string_value":
            d[kv.key] = s
        elif w == "int_value":
            d[kv.key] = v.int_value
        elif w == "double_value":
            d[kv.key] = v.double_value
        elif w == "bool_value":
            d[kv.key] = v.bool_value
        else:
            d[kv.key] = pb_value(v)
    return d


def hex_id(b: bytes) -> str | None:
    """A trace/span id as lowercase hex; None when empty or all zero (absent per OTLP)."""
    if not b or not b.lstrip(b"\x00"):
        return None
    return b.hex()


def tok(x: Any) -> int | None:
    """A token count: int, integral float or numeric string; None when absent. ValueError otherwise."""
    t = type(x)
    if t is int:
        return x if x >= 0 else 0
    if x is None or x == "":
        return None
    if t is str:
        try:
            n = int(x)
        except ValueError:
            f = float(x)  # ValueError for non-numbers
            if not math.isfinite(f):
                raise ValueError(f"not a finite number: {x!r}") from None
            n = int(f)
        return n if n >= 0 else 0
    if t is float:
        if not math.isfinite(x):
            raise ValueError(f"not a finite number: {x!r}")
        return max(0, int(x))
    raise ValueError(f"not a number: {x!r}")


def num(x: Any) -> float | None:
    """A duration, cost, ...: a float, or None when absent or not a number (never raises)."""
    t = type(x)
    if t is int or t is float:
        f = float(x)
    elif t is str and x:
        try:
            f = float(x)
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def text(x: Any) -> str | None:
    """An id or name as a string; None for missing or empty."""
    if type(x) is str:
        return x or None
    if x is None or isinstance(x, (dict, list)):
        return None
    return str(x)


def iso(x: Any) -> int | None:
    if type(x) is not str or not x:
        return None
    try:
        return iso_micros(x)
    except ValueError:
        return None


def drop_content(a: dict[str, Any], prefixed: bool = True) -> None:
    """Remove prompt/response/tool text from an attribute dict in place.

    ``prefixed=False`` skips the check for per-message keys (``gen_ai.prompt.0.content``, ...),
    which only span instrumentations write.
    """
    for k in CONTENT_KEYS.intersection(a):
        del a[k]
    if not prefixed:
        return
    keys = "\x00".join(a)
    if "gen_ai.prompt." in keys or "gen_ai.completion." in keys or "llm." in keys:
        for k in [k for k in a if k.startswith(_CONTENT_PREFIXES)]:
            del a[k]


def family(service: str | None, scope: str | None) -> str | None:
    """Which agent a resource/scope belongs to: ``claude``, ``codex``, ``gemini`` or None."""
    s = (service or "").lower()
    sc = scope or ""
    if s.startswith(("claude-code", "claude_code")) or sc.startswith("com.anthropic.claude_code"):
        return "claude"
    if s.startswith("codex") or sc.startswith("codex"):
        return "codex"
    if s.startswith(("gemini-cli", "gemini_cli")) or sc.startswith(("gemini-cli", "gemini_cli")):
        return "gemini"
    return None


def _first(a: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        v = a.get(k)
        if v is not None and v != "":
            return v
    return None


def _user(a: dict[str, Any], res: dict[str, Any]) -> str | None:
    return text(
        _first(a, "user.id", "user.account_id", "user.account_uuid", "installation.id", "enduser.id")
        or _first(res, "user.id", "enduser.id")
    )


def _agent_version(a: dict[str, Any], ver: str | None) -> str | None:
    return ver or text(a.get("app.version"))


def _sessions(a: dict[str, Any], session: str | None) -> tuple[str | None, str | None]:
    """(session_id, parent_session_id): Claude sub-agents become ``agent-<id>`` under their parent."""
    agent_id = a.get("agent_id")
    if agent_id:
        return f"agent-{agent_id}", session
    return session, None


# -- the mapper -----------------------------------------------------------------------------------
@dataclass
class _Resource:
    attrs: dict[str, Any]
    service: str | None
    version: str | None

    @classmethod
    def of(cls, res_msg: Any) -> _Resource:
        attrs = pb_attrs(res_msg.attributes)
        return cls(attrs, text(attrs.get("service.name")), text(attrs.get("service.version")))


@dataclass
class LogMapper:
    keep_content: bool
    source: str
    out: Parsed = field(default_factory=Parsed)
    problems: Problems = field(default_factory=Problems)

    # -- shared -----------------------------------------------------------------------------------
    def _attrs(
        self, a: dict[str, Any], res: _Resource, tid: str | None, sid: str | None, prefixed: bool = True
    ) -> dict[str, Any]:
        if not self.keep_content:
            drop_content(a, prefixed)
        if res.attrs:
            a.setdefault("resource", res.attrs)
        if tid:
            a.setdefault("trace_id", tid)
        if sid:
            a.setdefault("span_id", sid)
        return a

    def result(self) -> Mapped:
        return self.problems.mapped(self.out)

    # -- logs -------------------------------------------------------------------------------------
    def log(
        self,
        res: _Resource,
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
        """Map one log record (its attributes already a dict)."""
        fam: str | None = fam_hint
        full: str | None = None
        short: str | None = None
        if type(body) is str and body.startswith("claude_code."):
            fam, full, short = "claude", body, body[12:]
        else:
            name = event_name or a.get("event.name")
            if type(name) is str and name:
                full = name
                if name.startswith("claude_code."):
                    fam, short = "claude", name[12:]
                elif name.startswith("codex."):
                    fam, short = "codex", name[6:]
                elif name.startswith("gemini_cli."):
                    fam, short = "gemini", name[11:]
                else:
                    short = name
        tt = t or observed
        ts = tt // 1000 if tt else iso(a.get("event.timestamp"))
        if fam == "claude" and short == "api_request":
            self._claude_request(res, tt, ts, tid, sid, a)
            return
        if fam == "codex" and short == "sse_event":
            if a.get("event.kind") == "response.completed":
                self._codex_request(res, tt, ts, tid, sid, a)
            return  # per-chunk SSE records are not stored
        if fam == "gemini" and short == "api_response" and self._gemini_request(res, tt, ts, tid, sid, a):
            return
        self._event(res, fam, full, short, t, observed, ts, tid, sid, a, body, record)

    def _claude_request(
        self, res: _Resource, t: int, ts: int | None, tid: str | None, sid: str | None, a: dict[str, Any]
    ) -> None:
        # the hot path (one call per Claude Code API request): typed ints skip tok()
        get = a.get
        try:
            x = get("input_tokens")
            cold = x if type(x) is int and x >= 0 else tok(x)
            x = get("cache_read_tokens")
            read = x if type(x) is int and x >= 0 else tok(x)
            x = get("cache_creation_tokens")
            write = x if type(x) is int and x >= 0 else tok(x)
            x = get("output_tokens")
            out = x if type(x) is int and x >= 0 else tok(x)
            x = get("cache_creation_5m_tokens")
            w5 = x if type(x) is int and x >= 0 else tok(x)
            x = get("cache_creation_1h_tokens")
            w1 = x if type(x) is int and x >= 0 else tok(x)
        except ValueError as e:
            self.problems.reject("claude_code.api_request with a token count that is not a number", str(e))
            return
        if not write and (w5 or w1):
            write = (w5 or 0) + (w1 or 0)
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
        x = get("ttft_ms")
        ttft = float(x) if type(x) is int else num(x)
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
        self.out.requests.append(
            {
                "event_id": event_id,
                "source": self.source,
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
                "attributes": self._attrs(a, res, tid, sid, prefixed=False),
                "seq": seq if type(seq) is int else None,
            }
        )

    def _codex_request(
        self, res: _Resource, t: int, ts: int | None, tid: str | None, sid: str | None, a: dict[str, Any]
    ) -> None:
        try:
            inp = tok(a.get("input_token_count"))
            out = tok(a.get("output_token_count"))
            cached = tok(a.get("cached_token_count"))
            cw = tok(a.get("cache_write_token_count"))
            reasoning = tok(a.get("reasoning_token_count"))
        except ValueError as e:
            self.problems.reject(
                "codex.sse_event response.completed with a token count that is not a number", str(e)
            )
            return
        if inp is None and out is None:
            return  # the token-less duplicate of the completed record
        inp = inp or 0
        read = min(cached or 0, inp)
        write = min(cw or 0, inp - read)
        cold = inp - read - write
        session = text(a.get("conversation.id"))
        stamp = a.get("event.timestamp") or t
        self.out.requests.append(
            {
                "event_id": stable_id("codex-otlp", session, stamp, (cold, read, write, out, reasoning)),
                "source": self.source,
                "agent": "codex",
                "agent_version": _agent_version(a, res.version),
                "user_id": _user(a, res.attrs),
                "session_id": session,
                "parent_session_id": None,
                "prompt_id": None,
                "request_id": None,
                "started_at": None,
                "ended_at": ts,
                "duration_ms": None,
                "ttft_ms": num(a.get("ttft_ms")),
                "model": text(a.get("model") or a.get("slug")),
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "cache_write_5m_tokens": None,
                "cache_write_1h_tokens": None,
                "output_tokens": out,
                "reasoning_tokens": reasoning,
                "cost_usd": None,
                "attributes": self._attrs(a, res, tid, sid),
                "seq": None,
            }
        )

    def _gemini_request(
        self, res: _Resource, t: int, ts: int | None, tid: str | None, sid: str | None, a: dict[str, Any]
    ) -> bool:
        try:
            inp = tok(a.get("input_token_count"))
            cached = tok(a.get("cached_content_token_count"))
            out = tok(a.get("output_token_count"))
            thoughts = tok(a.get("thoughts_token_count"))
        except ValueError as e:
            self.problems.reject("gemini_cli.api_response with a token count that is not a number", str(e))
            return True
        if inp is None and out is None:
            return False  # no usage (an error response): keep it as an event
        inp = inp or 0
        read = min(cached or 0, inp)
        cold = inp - read
        output = (out or 0) + (thoughts or 0)
        session = text(a.get("session.id"))
        prompt = text(a.get("prompt_id"))
        dur = num(a.get("duration_ms"))
        stamp = a.get("event.timestamp") or t
        self.out.requests.append(
            {
                "event_id": stable_id("gemini-otlp", session, prompt, stamp, (cold, read, output, thoughts)),
                "source": self.source,
                "agent": "gemini-cli",
                "agent_version": _agent_version(a, res.version),
                "user_id": _user(a, res.attrs),
                "session_id": session,
                "parent_session_id": None,
                "prompt_id": prompt,
                "request_id": text(a.get("gen_ai.response.id")),
                "started_at": ts - round(dur * 1000) if ts is not None and dur is not None else None,
                "ended_at": ts,
                "duration_ms": dur,
                "ttft_ms": None,
                "model": text(a.get("model")),
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": None,
                "cache_write_5m_tokens": None,
                "cache_write_1h_tokens": None,
                "output_tokens": output,
                "reasoning_tokens": thoughts,
                "cost_usd": None,
                "attributes": self._attrs(a, res, tid, sid),
                "seq": None,
            }
        )
        return True

    def _event(
        self,
        res: _Resource,
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
        if body is not None and body != full and self.keep_content:
            a.setdefault("log.body", body)
        if record is not None:
            if record.severity_number:
                a.setdefault("severity_number", record.severity_number)
            if record.severity_text:
                a.setdefault("severity_text", record.severity_text)
        session = text(a.get("session.id") or a.get("conversation.id") or a.get("gen_ai.conversation.id"))
        if fam == "claude":
            sess, parent = _sessions(a, session)
        else:
            sess, parent = session, None
        seq = a.get("event.sequence")
        self.out.events.append(
            {
                "event_id": event_id,
                "source": self.source,
                "agent": AGENT_NAMES.get(fam or "") or res.service,
                "agent_version": _agent_version(a, res.version),
                "user_id": _user(a, res.attrs),
                "session_id": sess,
                "parent_session_id": parent,
                "prompt_id": text(a.get("prompt.id") or a.get("prompt_id")),
                "request_id": text(a.get("request_id")),
                "name": short,
                "timestamp": ts,
                "attributes": self._attrs(a, res, tid, sid),
                "seq": seq if type(seq) is int else None,
            }
        )

    # -- traces -----------------------------------------------------------------------------------
    def span(self, res: _Resource, fam_hint: str | None, sp: Any) -> None:
        """Map one span: a ``spans`` row, and a ``requests`` row when it is a model call with usage."""
        a = pb_attrs(sp.attributes)
        tid = hex_id(sp.trace_id)
        sid = hex_id(sp.span_id)
        name = sp.name
        start = sp.start_time_unix_nano
        end = sp.end_time_unix_nano
        status = sp.status.code
        fam = "claude" if name.startswith("claude_code.") else fam_hint
        if fam == "claude":
            if name == "claude_code.llm_request":
                self._claude_span_request(res, tid, sid, start, end, status, a)
        elif fam not in ("codex", "gemini"):
            self._genai_span_request(res, tid, sid, start, end, status, a)
        if tid and sid:
            event_id = stable_id("otlp-span", tid, sid)
        else:
            event_id = stable_id("otlp-span", res.service, name, start, end, repr(a))
        attrs = self._attrs(a, res, None, None)
        if sp.status.message:
            attrs.setdefault("status.message", sp.status.message)
        if len(sp.events):
            events = []
            for ev in sp.events:
                ea = pb_attrs(ev.attributes)
                if not self.keep_content:
                    drop_content(ea)
                events.append({"name": ev.name, "time": ev.time_unix_nano // 1000, "attributes": ea})
            attrs.setdefault("events", events)
        if len(sp.links):
            attrs.setdefault(
                "links", [{"trace_id": hex_id(lk.trace_id), "span_id": hex_id(lk.span_id)} for lk in sp.links]
            )
        self.out.spans.append(
            {
                "event_id": event_id,
                "source": self.source,
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

    def _request_attrs(
        self, a: dict[str, Any], res: _Resource, tid: str | None, sid: str | None
    ) -> dict[str, Any]:
        ra = dict(a)
        ra["derived_from"] = "span"
        return self._attrs(ra, res, tid, sid)

    def _claude_span_request(
        self,
        res: _Resource,
        tid: str | None,
        sid: str | None,
        start: int,
        end: int,
        status: int,
        a: dict[str, Any],
    ) -> None:
        try:
            cold = tok(a.get("input_tokens"))
            read = tok(a.get("cache_read_tokens"))
            write = tok(a.get("cache_creation_tokens"))
            out = tok(a.get("output_tokens"))
        except ValueError as e:
            self.problems.warn("claude_code.llm_request span with a token count that is not a number", str(e))
            return
        if status == 2 or (cold is None and read is None and write is None and out is None):
            return  # a failed call carries no tokens
        rid = text(a.get("request_id") or a.get("gen_ai.response.id"))
        session = text(a.get("session.id"))
        model = text(a.get("model") or a.get("gen_ai.response.model") or a.get("gen_ai.request.model"))
        ended = end // 1000 if end else None
        dur = num(a.get("duration_ms"))
        if dur is None and start and end:
            dur = (end - start) / 1e6
        sess, parent = _sessions(a, session)
        self.out.requests.append(
            {
                "event_id": stable_id("anthropic-request", rid)
                if rid
                else stable_id("claude-otlp-span", tid, sid),
                "source": self.source,
                "agent": "claude-code",
                "agent_version": _agent_version(a, res.version),
                "user_id": text(a.get("user.id")),
                "session_id": sess,
                "parent_session_id": parent,
                "prompt_id": None,
                "request_id": rid,
                "started_at": start // 1000 if start else None,
                "ended_at": ended,
                "duration_ms": dur,
                "ttft_ms": num(a.get("ttft_ms")),
                "model": model,
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "cache_write_5m_tokens": None,
                "cache_write_1h_tokens": None,
                "output_tokens": out,
                "reasoning_tokens": None,
                "cost_usd": None,
                "attributes": self._request_attrs(a, res, tid, sid),
                "seq": None,
                "ingested_at": ended,  # loses to the api_request / transcript copy (see module doc)
            }
        )

    def _genai_span_request(
        self,
        res: _Resource,
        tid: str | None,
        sid: str | None,
        start: int,
        end: int,
        status: int,
        a: dict[str, Any],
    ) -> None:
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
                inp = tok(_first(a, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"))
                d_read = a.get("gen_ai.usage.cache_read.input_tokens")
                d_write = _first(
                    a, "gen_ai.usage.cache_write.input_tokens", "gen_ai.usage.cache_creation.input_tokens"
                )
                l_read = a.get("gen_ai.usage.cache_read_input_tokens")
                l_write = _first(
                    a, "gen_ai.usage.cache_creation_input_tokens", "gen_ai.usage.cache_write_input_tokens"
                )
                read = tok(d_read if d_read is not None else l_read)
                write = tok(d_write if d_write is not None else l_write)
                legacy = d_read is None and d_write is None and (l_read is not None or l_write is not None)
                provider = a.get("gen_ai.provider.name") or a.get("gen_ai.system")
                exclusive = legacy and (provider == "anthropic" or (inp or 0) < (read or 0) + (write or 0))
                out = tok(_first(a, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"))
                reasoning = tok(a.get("gen_ai.usage.reasoning.output_tokens"))
                model = _first(a, "gen_ai.response.model", "gen_ai.request.model")
                session = _first(
                    a, "gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id"
                )
                rid = text(a.get("gen_ai.response.id"))
                ttfc = num(a.get("gen_ai.response.time_to_first_chunk"))
                ttft = ttfc * 1000 if ttfc is not None else None
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
                model = _first(a, "llm.response.model_name", "llm.model_name", "llm.request.model_name")
                session = a.get("session.id")
                rid = None
                ttft = None
                key = ("openinference-span", tid, sid)
        except ValueError as e:
            self.problems.warn("span usage attribute that is not a number", str(e))
            return
        if exclusive or inp is None:
            cold = inp
        else:
            read_c = min(read or 0, inp)
            cold = max(0, inp - read_c - (write or 0))
            if read is not None:
                read = read_c
        ended = end // 1000 if end else None
        self.out.requests.append(
            {
                "event_id": stable_id(*key),
                "source": self.source,
                "agent": res.service,
                "agent_version": res.version,
                "user_id": _user(a, res.attrs),
                "session_id": text(session),
                "parent_session_id": None,
                "prompt_id": None,
                "request_id": rid,
                "started_at": start // 1000 if start else None,
                "ended_at": ended,
                "duration_ms": (end - start) / 1e6 if start and end else None,
                "ttft_ms": ttft,
                "model": text(model),
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "cache_write_5m_tokens": None,
                "cache_write_1h_tokens": None,
                "output_tokens": out,
                "reasoning_tokens": reasoning,
                "cost_usd": num(a.get("llm.cost.total")),
                "attributes": self._request_attrs(a, res, tid, sid),
                "seq": None,
            }
        )


# -- walkers over the export requests -------------------------------------------------------------------
def map_logs(msg: Any, *, keep_content: bool = False, source: str = "otlp") -> Mapped:
    """An ``ExportLogsServiceRequest`` -> ``requests`` and ``events`` rows."""
    m = LogMapper(keep_content, source)
    log = m.log
    for rl in msg.resource_logs:
        res = _Resource.of(rl.resource)
        for sl in rl.scope_logs:
            fam = family(res.service, sl.scope.name)
            for r in sl.log_records:
                b = r.body
                body = b.string_value or pb_value(b)
                log(
                    res,
                    fam,
                    r.time_unix_nano,
                    r.observed_time_unix_nano,
                    body,
                    r.event_name,
                    hex_id(r.trace_id),
                    hex_id(r.span_id),
                    pb_attrs(r.attributes),
                    r,
                )
    return m.result()


def map_traces(msg: Any, *, keep_content: bool = False, source: str = "otlp") -> Mapped:
    """An ``ExportTraceServiceRequest`` -> ``spans`` rows, plus ``requests`` for model calls."""
    m = LogMapper(keep_content, source)
    for rs in msg.resource_spans:
        res = _Resource.of(rs.resource)
        for ss in rs.scope_spans:
            fam = family(res.service, ss.scope.name)
            for sp in ss.spans:
                m.span(res, fam, sp)
    return m.result()


__all__ = ["CONTENT_KEYS", "Mapped", "Problems", "Row", "map_logs", "map_traces"]
