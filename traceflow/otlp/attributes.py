"""OTLP attribute values as Python values, the content rule, and who sent a record.

* **Values.** ``pb_attrs`` turns a repeated ``KeyValue`` field into a dict; ``tok`` reads a token
  count (numbers sent as strings, as Claude Code did before 2.1.122, are coerced; anything else is a
  ``ValueError`` so that the caller refuses the record instead of storing a guess; counts are clamped
  with ``max(0, ...)``); ``num`` a duration or cost; ``text`` an id or name.
* **agent** is ``claude-code``, ``codex``, ``gemini-cli`` or ``qwen-code`` for those agents
  (recognised by the event prefix, the instrumentation scope or ``service.name``: :func:`family`;
  the transcript importers use the same names, :data:`AGENT_NAMES`), else the resource
  ``service.name``. ``service.name`` itself stays in ``attributes.resource``.
* **Sub-agents.** Events and spans of a Claude Code sub-agent carry ``agent_id``; their
  ``session_id`` is ``agent-<agent_id>`` and ``parent_session_id`` the ``session.id`` they were sent
  with (the spawning session), exactly as the transcript importer names sub-agent sessions
  (:func:`sessions`).
* **Content** (prompt, response, tool input/parameters/output, raw API bodies, GenAI/OpenInference
  messages, commands and file paths: :data:`CONTENT_KEYS`) is dropped from ``attributes`` unless
  ``keep_content`` (:func:`drop_content`).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any

from traceflow.otlp.limits import DEEP_VALUE, MAX_TOKENS, MAX_VALUE_DEPTH
from traceflow.rows import iso_micros

AGENT_NAMES = {"claude": "claude-code", "codex": "codex", "gemini": "gemini-cli", "qwen": "qwen-code"}

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


def pb_value(v: Any, depth: int = 0) -> Any:
    """An ``AnyValue`` message as a Python value (bytes as base64 text; empty -> None; a value
    nested deeper than :data:`~traceflow.otlp.limits.MAX_VALUE_DEPTH` -> a placeholder string)."""
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
    if w == "array_value" or w == "kvlist_value":
        if depth >= MAX_VALUE_DEPTH:
            return DEEP_VALUE
        if w == "array_value":
            return [pb_value(x, depth + 1) for x in v.array_value.values]
        return pb_attrs(v.kvlist_value.values, depth + 1)
    return base64.b64encode(v.bytes_value).decode()


def pb_attrs(kvs: Any, depth: int = 0) -> dict[str, Any]:
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
            d[kv.key] = pb_value(v, depth)
    return d


def hex_id(b: bytes) -> str | None:
    """A trace/span id as lowercase hex; None when empty or all zero (absent per OTLP)."""
    if not b or not b.lstrip(b"\x00"):
        return None
    return b.hex()


def tok(x: Any) -> int | None:
    """A token count: int, integral float or numeric string; None when absent. ValueError otherwise
    (also for counts above :data:`~traceflow.otlp.limits.MAX_TOKENS`)."""
    n = _tok(x)
    if n is not None and n > MAX_TOKENS:
        raise ValueError(f"{x!r} is more than {MAX_TOKENS} tokens")
    return n


def toks(a: dict[str, Any], *keys: str) -> tuple[int | None, ...]:
    """The token counts (:func:`tok`) of ``keys`` in ``a``, in order; ValueError names the first bad one."""
    return tuple(tok(a.get(k)) for k in keys)


def _tok(x: Any) -> int | None:
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


def _strip_kvs(kvs: Any) -> None:
    for i in reversed(range(len(kvs))):
        k = kvs[i].key
        if k in CONTENT_KEYS or k.startswith(_CONTENT_PREFIXES):
            del kvs[i]


def strip_request_content(signal: str, msg: Any) -> None:
    """Remove, in place, what :func:`drop_content` drops from an export request message: content
    attributes of log records, spans and span events, and log bodies other than an event name."""
    if signal == "logs":
        for rl in msg.resource_logs:
            for sl in rl.scope_logs:
                for r in sl.log_records:
                    _strip_kvs(r.attributes)
                    body = r.body.string_value
                    if r.body.WhichOneof("value") is not None and not (
                        body
                        and (
                            body == r.event_name
                            or body.startswith(("claude_code.", "codex.", "gemini_cli.", "qwen-code."))
                        )
                    ):
                        r.ClearField("body")
    elif signal == "traces":
        for rs in msg.resource_spans:
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    _strip_kvs(sp.attributes)
                    for ev in sp.events:
                        _strip_kvs(ev.attributes)


def family(service: str | None, scope: str | None) -> str | None:
    """Which agent a resource/scope belongs to: ``claude``, ``codex``, ``gemini``, ``qwen`` or None."""
    s = (service or "").lower()
    sc = scope or ""
    if s.startswith(("claude-code", "claude_code")) or sc.startswith("com.anthropic.claude_code"):
        return "claude"
    if s.startswith("codex") or sc.startswith("codex"):
        return "codex"
    if s.startswith(("gemini-cli", "gemini_cli")) or sc.startswith(("gemini-cli", "gemini_cli")):
        return "gemini"
    if s.startswith(("qwen-code", "qwen_code")) or sc.startswith(("qwen-code", "qwen_code")):
        return "qwen"
    return None


def first(a: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        v = a.get(k)
        if v is not None and v != "":
            return v
    return None


def user_id(a: dict[str, Any], res: dict[str, Any]) -> str | None:
    return text(
        first(a, "user.id", "user.account_id", "user.account_uuid", "installation.id", "enduser.id")
        or first(res, "user.id", "enduser.id")
    )


def agent_version(a: dict[str, Any], ver: str | None) -> str | None:
    return ver or text(a.get("app.version"))


def sessions(a: dict[str, Any], session: str | None) -> tuple[str | None, str | None]:
    """(session_id, parent_session_id): Claude sub-agents become ``agent-<id>`` under their parent."""
    agent_id = a.get("agent_id")
    if agent_id:
        return f"agent-{agent_id}", session
    return session, None


@dataclass
class Resource:
    """The resource of a batch of records: its attributes, ``service.name`` and ``service.version``."""

    attrs: dict[str, Any]
    service: str | None
    version: str | None

    @classmethod
    def of(cls, res_msg: Any) -> Resource:
        attrs = pb_attrs(res_msg.attributes)
        return cls(attrs, text(attrs.get("service.name")), text(attrs.get("service.version")))
