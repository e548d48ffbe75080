"""A fake Anthropic Messages API for driving the real Claude Code CLI offline (stdlib only).

::

    python tests/fake_anthropic.py --port 0 --log api.jsonl
    # -> "fake-anthropic: listening on http://127.0.0.1:PORT" on stdout once it accepts connections

or in-process: ``with FakeAnthropic(log_path) as api: ... api.base_url ...``.

What it answers:

* ``POST /v1/messages`` (any query string, e.g. ``?beta=true``): a Server-Sent-Events stream
  exactly as the Anthropic API sends it when the body has ``"stream": true`` (``message_start``
  with usage, ``ping``, ``content_block_start``/``_delta``/``_stop`` per block, ``message_delta``
  with the stop reason and the final usage, ``message_stop``; chunked transfer encoding over
  HTTP/1.1 keep-alive), else one JSON message. Every response has a ``request-id`` header.
* ``POST /v1/messages/count_tokens``, ``GET /v1/models``, ``HEAD``/``GET /`` (Claude Code's
  connection warm-up): small canned answers.

Usage numbers: the k-th ``POST /v1/messages`` of this server (k = 1, 2, ... counted over every call,
failed ones included) returns input ``11+100(k-1)``, output ``22+100(k-1)``, cache creation
``333+100(k-1)`` (ephemeral 5m ``300+100(k-1)``, 1h ``33``) and cache read ``4444+100(k-1)``: the
last two digits name the kind, the hundreds name k, so every number that shows up downstream can
be traced to one request. (Keep them small: huge cache reads make Claude Code auto-compact.)

Markers, looked for in the text of the newest user message (so history does not re-trigger them):

==============  ==========================================================================
``USE_TOOL``    a Bash ``echo hi`` tool_use (``stop_reason: tool_use``)
``USE_AGENT``   a sub-agent call: tool ``Agent`` (``Task`` when the request offers no
                ``Agent`` tool, as older versions name it) with ``subagent_type:
                general-purpose`` and the prompt ``USE_TOOL run echo hi inside the
                subagent``, so the sub-agent makes a tool call of its own
``FAIL_400``    HTTP 400 ``invalid_request_error``; ``FAIL_429`` / ``FAIL_500`` /
                ``FAIL_529`` likewise (rate limit, api error, overloaded)
==============  ==========================================================================

A user message that carries a ``tool_result`` is answered with text and ``end_turn``; so is
anything else.

Log: one JSON line per request, written before the response is sent: ``t``, ``method``,
``path``, ``session_id`` (the ``x-claude-code-session-id`` header; a sub-agent's calls carry the
spawning session's id), ``k``, ``kind`` (``text``/``tool``/``agent``/``error``/``head``/...),
``status``, ``stream``, ``model``, ``request_id``, ``message_id``, ``usage`` (exactly what was
returned; ``null`` for errors), ``subagent`` (the call comes from the ``USE_AGENT`` sub-agent) and
``retry_count`` (``x-stainless-retry-count``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MARKERS_FAIL = {
    "FAIL_400": (400, "invalid_request_error"),
    "FAIL_429": (429, "rate_limit_error"),
    "FAIL_500": (500, "api_error"),
    "FAIL_529": (529, "overloaded_error"),
}
SUBAGENT_PROMPT = "USE_TOOL run echo hi inside the subagent"


def usage_for(k: int) -> dict[str, Any]:
    """The usage block the k-th ``/v1/messages`` call returns (k starts at 1)."""
    step = 100 * (k - 1)
    return {
        "input_tokens": 11 + step,
        "cache_creation_input_tokens": 333 + step,
        "cache_read_input_tokens": 4444 + step,
        "output_tokens": 22 + step,
        "cache_creation": {"ephemeral_5m_input_tokens": 300 + step, "ephemeral_1h_input_tokens": 33},
        "service_tier": "standard",
    }


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def plan_reply(body: dict[str, Any]) -> tuple[str, Any]:
    """What to answer: ``("text", None)``, ``("tool", None)``, ``("agent", tool_name)`` or
    ``("error", (status, error_type, marker))``, from the newest non-system message."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") != "system"]
    if not messages or messages[-1].get("role") != "user":
        return "text", None
    blocks = _blocks(messages[-1].get("content"))
    if any(b.get("type") == "tool_result" for b in blocks):
        return "text", None
    text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    for marker, (status, etype) in MARKERS_FAIL.items():
        if marker in text:
            return "error", (status, etype, marker)
    if "USE_AGENT" in text:
        names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        return "agent", "Task" if "Task" in names and "Agent" not in names else "Agent"
    if "USE_TOOL" in text:
        return "tool", None
    return "text", None


def is_subagent_call(body: dict[str, Any]) -> bool:
    """Whether this call comes from the sub-agent that ``USE_AGENT`` spawned (its conversation
    starts with :data:`SUBAGENT_PROMPT`; Claude Code sends it with the parent's session id)."""
    for m in body.get("messages") or []:
        if isinstance(m, dict) and m.get("role") == "user":
            return any(SUBAGENT_PROMPT in str(b.get("text", "")) for b in _blocks(m.get("content")))
    return False


def content_for(kind: str, k: int, arg: Any) -> tuple[list[dict[str, Any]], str]:
    """The assistant content blocks and stop reason for a planned reply."""
    if kind == "tool":
        tool = {
            "type": "tool_use",
            "id": f"toolu_fake{k:04d}",
            "name": "Bash",
            "input": {"command": "echo hi", "description": "Print hi"},
        }
        return [{"type": "text", "text": "I'll run it."}, tool], "tool_use"
    if kind == "agent":
        tool = {
            "type": "tool_use",
            "id": f"toolu_fake{k:04d}",
            "name": arg,
            "input": {
                "description": "probe subagent",
                "subagent_type": "general-purpose",
                "prompt": SUBAGENT_PROMPT,
                "run_in_background": False,
            },
        }
        return [{"type": "text", "text": "I'll delegate it."}, tool], "tool_use"
    return [{"type": "text", "text": f"Hello from the fake API (reply {k})."}], "end_turn"


def sse_events(
    message_id: str, model: str, content: list[dict[str, Any]], stop_reason: str, usage: dict[str, Any]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of a streamed message, in the order the Anthropic API sends them.

    ``message_start`` carries the input-side usage and a provisional ``output_tokens`` of 1;
    ``message_delta`` carries the final (cumulative) usage, as the API does nowadays.
    """
    start_usage = {**usage, "output_tokens": 1}
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        },
    )
    yield "ping", {"type": "ping"}
    for i, block in enumerate(content):
        if block["type"] == "text":
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            text = block["text"]
            half = len(text) // 2
            for part in (text[:half], text[half:]):
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "text_delta", "text": part},
                    },
                )
        else:  # tool_use
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {
                        "type": "tool_use",
                        "id": block["id"],
                        "name": block["name"],
                        "input": {},
                    },
                },
            )
            raw = json.dumps(block["input"])
            half = len(raw) // 2
            for part in (raw[:half], raw[half:]):
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": part},
                    },
                )
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    final = {k: usage[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")}
    final["output_tokens"] = usage["output_tokens"]
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": final,
        },
    )
    yield "message_stop", {"type": "message_stop"}


class FakeAnthropic:
    """The fake API on 127.0.0.1 in a background thread; ``port=0`` picks a free port."""

    def __init__(
        self,
        log_path: Path | str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        request_id_prefix: str = "req_fake",
    ) -> None:
        self.log_path = Path(log_path) if log_path is not None else None
        self.request_id_prefix = request_id_prefix
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._log_file = open(self.log_path, "a", encoding="utf-8") if self.log_path else None  # noqa: SIM115
        self.records: list[dict[str, Any]] = []
        self.httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def next_k(self) -> int:
        with self._lock:
            return next(self._counter)

    def log(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.records.append(record)
            if self._log_file is not None:
                self._log_file.write(json.dumps(record, sort_keys=True) + "\n")
                self._log_file.flush()

    def start(self) -> FakeAnthropic:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _make_handler(api: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "fake-anthropic/1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        # -- helpers -----------------------------------------------------------------------
        def _base(self, k: int | None, kind: str, status: int, **extra: Any) -> dict[str, Any]:
            h = self.headers
            return {
                "t": time.time(),
                "method": self.command,
                "path": self.path,
                "session_id": h.get("x-claude-code-session-id"),
                "user_agent": h.get("user-agent"),
                "retry_count": h.get("x-stainless-retry-count"),
                "k": k,
                "kind": kind,
                "status": status,
                **extra,
            }

        def _read_body(self) -> bytes:
            if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()
            n = int(self.headers.get("content-length") or 0)
            return self.rfile.read(n) if n else b""

        def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        # -- routes ------------------------------------------------------------------------
        def do_HEAD(self) -> None:
            api.log(self._base(None, "head", 200))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path.startswith("/v1/models"):
                api.log(self._base(None, "models", 200))
                models = [
                    {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                    for m in ("claude-opus-5-5", "claude-sonnet-4-5", "claude-haiku-4-5")
                ]
                self._json(200, {"data": models, "has_more": False, "first_id": None, "last_id": None})
            elif path in ("/", ""):
                api.log(self._base(None, "head", 200))
                self._json(200, {"ok": True})
            else:
                api.log(self._base(None, "not_found", 404))
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})

        def do_POST(self) -> None:
            raw = self._read_body()
            path = self.path.split("?", 1)[0].rstrip("/")
            try:
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("body is not an object")
            except ValueError as e:
                api.log(self._base(None, "bad_json", 400))
                self._json(
                    400, {"type": "error", "error": {"type": "invalid_request_error", "message": str(e)}}
                )
                return
            if path == "/v1/messages/count_tokens":
                api.log(self._base(None, "count_tokens", 200))
                self._json(200, {"input_tokens": 1234})
                return
            if path != "/v1/messages":
                api.log(self._base(None, "not_found", 404))
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
                return
            self._messages(body)

        def _messages(self, body: dict[str, Any]) -> None:
            k = api.next_k()
            kind, arg = plan_reply(body)
            model = str(body.get("model") or "claude-opus-5-5")
            stream = bool(body.get("stream"))
            subagent = is_subagent_call(body)
            request_id = f"{api.request_id_prefix}{k:04d}"
            headers = {"request-id": request_id, "anthropic-organization-id": "fake-org"}
            if kind == "error":
                status, etype, marker = arg
                api.log(
                    self._base(
                        k,
                        "error",
                        status,
                        stream=stream,
                        model=model,
                        request_id=request_id,
                        message_id=None,
                        usage=None,
                        marker=marker,
                        subagent=subagent,
                    )
                )
                if status in (429, 529):
                    headers["retry-after"] = "0"
                self._json(
                    status,
                    {
                        "type": "error",
                        "error": {"type": etype, "message": f"fake {status}"},
                        "request_id": request_id,
                    },
                    headers,
                )
                return
            usage = usage_for(k)
            message_id = f"msg_fake{k:04d}"
            content, stop_reason = content_for(kind, k, arg)
            api.log(
                self._base(
                    k,
                    kind,
                    200,
                    stream=stream,
                    model=model,
                    request_id=request_id,
                    message_id=message_id,
                    usage=usage,
                    subagent=subagent,
                )
            )
            if not stream:
                self._json(
                    200,
                    {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": content,
                        "stop_reason": stop_reason,
                        "stop_sequence": None,
                        "usage": usage,
                    },
                    headers,
                )
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            for hk, hv in headers.items():
                self.send_header(hk, hv)
            self.end_headers()
            for event, data in sse_events(message_id, model, content, stop_reason, usage):
                self._chunk(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="A fake Anthropic Messages API on 127.0.0.1 (see the module doc)."
    )
    p.add_argument("--port", type=int, default=0, help="0 (default) picks a free port")
    p.add_argument("--log", type=Path, default=None, help="append one JSON line per request here")
    p.add_argument("--request-id-prefix", default="req_fake")
    a = p.parse_args(argv)
    api = FakeAnthropic(a.log, port=a.port, request_id_prefix=a.request_id_prefix)
    sys.stdout.write(f"fake-anthropic: listening on {api.base_url}\n")
    sys.stdout.flush()
    try:
        api.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        api.httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
