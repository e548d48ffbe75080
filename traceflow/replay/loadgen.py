"""``traceflow synth --send URL``: replay a trace as Claude-Code-shaped OTLP log telemetry.

Every request becomes one ``claude_code.api_request`` log record, exactly as Claude Code emits it
(docs/schemas.md#claude-code; ``traceflow.otlp.claude_code`` maps it back to a request row):
body ``claude_code.api_request``, ``event.name = api_request``, ``session.id``, ``prompt.id``,
``request_id``, ``event.sequence``, ``event.timestamp``, ``model``, ``input_tokens`` (cold),
``cache_read_tokens``, ``cache_creation_tokens``, ``output_tokens``, ``duration_ms`` (and
``ttft_ms``, ``cost_usd`` where known), ``user.id``; sub-agent requests carry the parent's
``session.id`` and an ``agent_id``. The resource says ``service.name = claude-code``.

Records go through the OpenTelemetry SDK (``LoggerProvider`` + ``BatchLogRecordProcessor``) and its
OTLP exporters: ``http/protobuf`` (``URL`` gets ``/v1/logs`` when it has no path) or ``grpc``
(``host:port``; ``http://`` means plaintext). The Python SDK has no ``http/json`` log exporter.

Timing: a record is emitted at its request's end (when Claude Code logs it). With ``speedup`` = k
the trace plays k× faster than recorded, in real time, with records stamped at their send time;
``speedup = inf`` (``--no-wait``) sends everything at once, stamped with the trace's own spacing
so that it ends now (a backfill). Session, prompt and
request ids are fresh per run (derived from the originals and a run nonce), so a replay never
merges into the sessions it came from.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from traceflow.errors import UsageError

if TYPE_CHECKING:
    import polars as pl

PROTOCOLS: tuple[str, ...] = ("http/protobuf", "grpc")
CLAUDE_CODE_VERSION = "2.1.332"
_FLUSH_EVERY = 16_384


def _exporter(endpoint: str, protocol: str, headers: Mapping[str, str] | None, timeout_s: float) -> Any:
    if protocol == "http/protobuf":
        from urllib.parse import urlsplit

        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpExporter

        url = endpoint if "://" in endpoint else f"http://{endpoint}"
        if urlsplit(url).path in ("", "/"):
            url = url.rstrip("/") + "/v1/logs"
        return HttpExporter(endpoint=url, headers=dict(headers or {}), timeout=timeout_s)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcExporter

        insecure = not endpoint.startswith("https://")
        target = endpoint.split("://", 1)[-1].rstrip("/")
        return GrpcExporter(
            endpoint=target, insecure=insecure, headers=dict(headers or {}), timeout=int(max(timeout_s, 1))
        )
    raise UsageError(f"--protocol {protocol!r} is not one of: {', '.join(PROTOCOLS)}")


def _fresh(nonce: str, *parts: object) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(nonce.encode())
    for p in parts:
        h.update(b"\x1f" + str(p).encode())
    x = h.hexdigest()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:32]}"


def _iso(ns: int) -> str:
    return (
        dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def emit_api_request(logger: Any, ts: int, attrs: dict[str, Any]) -> None:
    """Emit one ``claude_code.api_request`` event at ``ts`` (ns) through an OpenTelemetry ``logger``."""
    from opentelemetry._logs import LogRecord

    logger.emit(
        LogRecord(
            timestamp=ts,
            observed_timestamp=ts,
            body="claude_code.api_request",
            attributes=attrs,
            event_name="claude_code.api_request",
        )
    )


def build_records(frame: pl.DataFrame, nonce: str) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """(event offsets in µs from the first request's start, attributes) per request, in send order.

    ``frame`` is shaped as :func:`traceflow.replay.prefix.load_requests` returns requests (``read`` = cache
    read; the cache write is ``ctx − read − cold`` with cold input 0 unless the frame has
    ``cold_input_tokens``).
    """
    n = frame.height
    t = np.asarray(frame["t_us"].to_numpy(), dtype=np.int64)
    end_known = np.asarray(frame["end_us"].is_not_null().to_numpy(), dtype=bool)
    end = np.where(end_known, np.asarray(frame["end_us"].fill_null(0).to_numpy(), dtype=np.int64), t)
    order = np.argsort(end, kind="stable")
    t0 = int(t.min()) if n else 0
    offsets = end[order] - t0
    cols = set(frame.columns)

    def col(name: str) -> list[Any]:
        return frame[name].to_list() if name in cols else [None] * n

    session, parent, prompt, model = (
        col("session_id"),
        col("parent_session_id"),
        col("prompt_id"),
        col("model"),
    )
    user, rid, ctx, out, read = col("user_id"), col("request_id"), col("ctx"), col("out"), col("read")
    cold_c, dur, ttft = col("cold_input_tokens"), col("duration_ms"), col("ttft_ms")
    cost = col("cost_usd")
    seqs: dict[str, int] = {}
    records: list[dict[str, Any]] = []
    for i in order.tolist():
        root = parent[i] or session[i] or f"request-{i}"
        sess = _fresh(nonce, "session", root)
        cold = int(cold_c[i] or 0)
        r = int(read[i] or 0)
        c = int(ctx[i] or 0)
        attrs: dict[str, Any] = {
            "user.id": hashlib.sha256(f"{nonce}:{user[i] or 'user'}".encode()).hexdigest(),
            "session.id": sess,
            "terminal.type": "traceflow-synth",
            "event.name": "api_request",
            "event.sequence": seqs.setdefault(sess, 0),
            "prompt.id": _fresh(nonce, "prompt", prompt[i] or root),
            "model": model[i] or "claude-sonnet-4-5",
            "input_tokens": cold,
            "output_tokens": int(out[i] or 0),
            "cache_read_tokens": r,
            "cache_creation_tokens": max(c - r - cold, 0),
            "duration_ms": round(dur[i]) if dur[i] is not None else 0,
            "request_id": f"req_tf{_fresh(nonce, 'request', rid[i] or i).replace('-', '')[:24]}",
        }
        seqs[sess] += 1
        if ttft[i] is not None:
            attrs["ttft_ms"] = round(ttft[i])
        if cost[i] is not None:
            attrs["cost_usd"] = float(cost[i])
        if parent[i] is not None and session[i] is not None:
            attrs["agent_id"] = _fresh(nonce, "agent", session[i]).replace("-", "")[:17]
        records.append(attrs)
    return offsets, records


def send(
    frame: pl.DataFrame,
    endpoint: str,
    *,
    protocol: str = "http/protobuf",
    speedup: float = 1.0,
    headers: Mapping[str, str] | None = None,
    service_version: str = CLAUDE_CODE_VERSION,
    timeout_s: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Send ``frame``'s requests to an OTLP endpoint; returns a summary."""
    try:
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        raise UsageError(
            "synth --send needs the OpenTelemetry SDK and its OTLP exporters: "
            "pip install opentelemetry-sdk opentelemetry-exporter-otlp"
        ) from None

    if frame.is_empty():
        raise UsageError("nothing to send: the trace has no requests")
    if not (speedup > 0):
        raise UsageError(f"--speedup {speedup} must be positive")
    if protocol not in PROTOCOLS:
        raise UsageError(f"--protocol {protocol!r} is not one of: {', '.join(PROTOCOLS)}")
    nonce = secrets.token_hex(6)
    offsets_us, records = build_records(frame, nonce)
    try:
        exporter = _exporter(endpoint, protocol, headers, timeout_s)
    except ImportError:
        raise UsageError(
            f"synth --send --protocol {protocol} needs opentelemetry-exporter-otlp: "
            "pip install opentelemetry-exporter-otlp"
        ) from None
    resource = Resource.create(
        {"service.name": "claude-code", "service.version": service_version, "traceflow.synthetic": True}
    )
    provider = LoggerProvider(resource=resource)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(exporter, max_queue_size=4 * _FLUSH_EVERY, max_export_batch_size=512)
    )
    logger = provider.get_logger("com.anthropic.claude_code.events", service_version)
    wait = math.isfinite(speedup)
    span_us = float(offsets_us[-1]) if len(offsets_us) else 0.0
    start = clock()
    # timestamps: the send schedule (real time), or a backfill ending now (no waiting)
    base_ns = int(start * 1e9) if wait else int(start * 1e9 - span_us * 1000)
    scale = 1.0 / speedup if wait else 1.0
    ok = True
    n = len(records)
    for k, (off, attrs) in enumerate(zip(offsets_us.tolist(), records, strict=True)):
        due = off / 1e6 * scale
        if wait:
            delay = start + due - clock()
            if delay > 0:
                sleep(delay)
        ts = base_ns + int(off * 1000 * scale)
        attrs["event.timestamp"] = _iso(ts)
        emit_api_request(logger, ts, attrs)
        if (k + 1) % _FLUSH_EVERY == 0:
            ok = provider.force_flush(int(timeout_s * 1000) * 6) and ok
        if progress is not None and ((k + 1) % 1000 == 0 or k + 1 == n):
            progress(k + 1, n)
    ok = provider.force_flush(int(timeout_s * 1000) * 6) and ok
    provider.shutdown()
    wall = clock() - start
    return {
        "endpoint": endpoint,
        "protocol": protocol,
        "requests": n,
        "sessions": len({r["session.id"] for r in records}),
        "speedup": speedup if wait else None,
        "trace_span_s": round(span_us / 1e6, 3),
        "wall_s": round(wall, 3),
        "records_per_s": round(n / wall, 1) if wall > 0 else None,
        "flushed": ok,
    }
