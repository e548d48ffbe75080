"""Claude Code's local JSONL transcripts: ``~/.claude/projects/<project>/<session>.jsonl``.

One API response is written as one ``assistant`` line per content block, each repeating the whole
``usage`` (AGENT_TELEMETRY_SCHEMAS §2.3); before v2.1.97 the early copies carry a placeholder
``output_tokens``. We keep one row per ``(requestId, message.id)``: the most complete copy (largest
token total, then the last written). The lake's views apply the same rule across imports, so the
result does not depend on line order or on how a growing file was split between imports.

* ``event_id`` is derived from ``requestId`` alone (``stable_id("anthropic-request", id)``), the key
  the OTLP ``api_request`` event of the same request carries, so a transcript line and its OTLP
  event count once. Lines without ``requestId`` fall back to ``message.id``.
* ``<synthetic>`` lines (failed calls, zero usage) are not requests; they become ``api_error`` events.
* The cache write is the 5m + 1h breakdown when it is present (old versions reported
  ``cache_creation_input_tokens = 0`` beside a non-zero breakdown), else ``cache_creation_input_tokens``.
* Sub-agent transcripts (``<session>/subagents/agent-<id>.jsonl``, ``isSidechain``) become their own
  session ``agent-<id>`` with ``parent_session_id`` = the spawning session.
* ``prompt_id`` is the ``promptId`` of the user line that started the turn (tool-result lines and
  sub-agents carry the same id); older versions without ``promptId`` use that user line's ``uuid``.
* ``ended_at`` is the kept line's write time. The transcript has no request start; ``started_at`` is
  the write time of the user or tool-result line that triggered the request (flagged
  ``started_at_estimated`` in ``attributes``), else the first block's write time.

Only lines that contain ``"usage"`` are fully parsed; user lines are read with a few regular
expressions (their tool results can be large).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar

import orjson

from .base import FileContext, LineError, Parsed, Row, as_float, as_int, iso_micros, stable_id

_TYPE = re.compile(rb'"type"\s*:\s*"([a-z_-]+)"')
_PROMPT_ID = re.compile(rb'"promptId"\s*:\s*"([^"]+)"')
_UUID = re.compile(rb'"uuid"\s*:\s*"([^"]+)"')
_TIMESTAMP = re.compile(rb'"timestamp"\s*:\s*"([^"]+)"')
_SESSION = re.compile(rb'"sessionId"\s*:\s*"([^"]+)"')
_SUBTYPE = re.compile(rb'"subtype"\s*:\s*"([a-z_]+)"')
_DURATION = re.compile(rb'"durationMs"\s*:\s*([0-9.]+)')
_PRE_TOKENS = re.compile(rb'"preTokens"\s*:\s*([0-9]+)')
_TRIGGER = re.compile(rb'"trigger"\s*:\s*"([a-z]+)"')
_IS_META = re.compile(rb'"isMeta"\s*:\s*true')
_SIDECHAIN = re.compile(rb'"isSidechain"\s*:\s*true')
_AGENT_ID = re.compile(rb'"agentId"\s*:\s*"([^"]+)"')
_VERSION = re.compile(rb'"version"\s*:\s*"([^"]+)"')


_WINDOW = 1024
#: Record types that never carry tokens or turn boundaries.
_SKIP_TYPES = (
    b"file-history-snapshot",
    b"summary",
    b"attachment",
    b"queue-operation",
    b"progress",
    b"api-request",
    b"api-request-blob",
    b"api-request-shape",
    b"atis-latch",
    b"tools-used",
    b"last-prompt",
    b"mode",
    b"cost-state",
)


def _skippable(data: bytes, k: _Keys, start: int, win: int) -> bool:
    """Whether the window shows a record type we ignore."""
    i = data.find(k.type, start, win)
    while i >= 0:
        j = i + len(k.type) + 1
        q = data.find(b'"', j, win)
        if q > 0 and data[j:q] in _SKIP_TYPES:
            return True
        i = data.find(k.type, i + 1, win)
    return False


class _Keys:
    """The byte markers of the keys we look for, in compact or spaced JSON."""

    def __init__(self, sep: bytes) -> None:
        self.user = b'"type"' + sep + b'"user"'
        self.system = b'"type"' + sep + b'"system"'
        self.type = b'"type"' + sep
        self.timestamp = b'"timestamp"' + sep + b'"'
        self.prompt_id = b'"promptId"' + sep + b'"'
        self.uuid = b'"uuid"' + sep + b'"'
        self.subtype = b'"subtype"' + sep + b'"'
        self.is_meta = b'"isMeta"' + sep + b"true"


_COMPACT = _Keys(b":")  # what Claude Code writes (JSON.stringify)
_SPACED = _Keys(b": ")  # what Python's json.dumps writes (redacted or hand-edited copies)


def _field(data: bytes, key: bytes, start: int, end: int) -> str | None:
    """The string value of a compact ``"key":"value"`` pair within ``data[start:end]``.

    Claude Code writes compact JSON; an escaped copy of the key inside a string value reads
    ``\\"key\\"`` and cannot match, so the first match is the record's own key.
    """
    i = data.find(key, start, end)
    if i < 0:
        return None
    i += len(key)
    j = data.find(b'"', i, end)
    return data[i:j].decode() if j > 0 else None


def _invalid(line: memoryview) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return True
    return False


def _search(pattern: re.Pattern[bytes], line: bytes) -> str | None:
    m = pattern.search(line)
    return m.group(1).decode() if m else None


class ClaudeCodeImporter:
    name: ClassVar[str] = "claude-code"
    whole_file: ClassVar[bool] = False
    source: ClassVar[str] = "claude-code-jsonl"

    def default_paths(self) -> list[Path]:
        env = os.environ.get("CLAUDE_CONFIG_DIR")
        if env:
            roots = [Path(p).expanduser() for p in env.split(",") if p.strip()]
        else:
            roots = [Path.home() / ".config" / "claude", Path.home() / ".claude"]
        return [r / "projects" for r in roots if (r / "projects").is_dir()]

    def discover(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return sorted(p for p in root.rglob("*.jsonl") if p.is_file())

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        st = ctx.state
        path = str(ctx.path)
        # A sub-agent transcript lives in <session>/subagents/agent-<id>.jsonl.
        file_agent = ctx.path.stem[len("agent-") :] if ctx.path.stem.startswith("agent-") else None
        acc: list[tuple[Any, ...]] = []  # one tuple per assistant block line, see _COLUMNS
        last_user_ts: str | None = st.get("last_user_ts")
        prev_was_user = bool(st.get("prev_was_user"))
        loads = orjson.loads
        view = memoryview(data)
        find = data.find
        pos, size, no = 0, len(data), ctx.first_line - 1
        head = data[:4096]
        k = _SPACED if (b'": "' in head and b'":"' not in head) else _COMPACT
        # Lines are visited in place (bytes.find over ranges, memoryview slices for the JSON parser):
        # no copy of the tool results and file contents that make up most of a transcript.
        while pos < size:
            end = find(b"\n", pos)
            if end < 0:
                end = size
            no += 1
            start, pos = pos, end + 1
            if end - start < 2:
                continue
            # The record's own "type" sits in its first few hundred bytes for every line type but
            # assistant (whose message, usage included, may come first): classify on that window
            # and scan a whole line only for the usage of an assistant record.
            win = min(end, start + _WINDOW)
            is_user = find(k.user, start, win) >= 0
            if not is_user and find(k.system, start, win) < 0 and _skippable(data, k, start, win):
                continue
            if not is_user and find(b'"usage"', start, end) >= 0:
                try:
                    rec = loads(view[start:end])
                except orjson.JSONDecodeError as e:
                    out.errors.append(LineError(path, no, f"invalid JSON ({e}); line skipped"))
                    continue
                if not isinstance(rec, dict) or rec.get("type") != "assistant":
                    prev_was_user = False
                    continue
                try:
                    msg = rec["message"]
                    if msg.get("model") == "<synthetic>" or rec.get("isApiErrorMessage"):
                        out.events.append(self._error_event(rec, path, no, file_agent, st))
                    else:
                        acc.append(
                            self._block(rec, msg, no, file_agent, st, last_user_ts if prev_was_user else None)
                        )
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    out.errors.append(LineError(path, no, f"unreadable assistant usage record: {e!r}"))
                    continue
                prev_was_user = False
                continue
            if is_user:
                if data[end - 1 : end] != b"}" and _invalid(view[start:end]):
                    out.errors.append(LineError(path, no, "truncated JSON line; line skipped"))
                    continue
                ts_s = _field(data, k.timestamp, start, end)
                prompt = _field(data, k.prompt_id, start, end)
                if (
                    find(b'"tool_result"', start, min(end, start + 2 * _WINDOW)) < 0
                    and find(k.is_meta, start, end) < 0
                ):
                    line = data[start:end] if end - start < 4096 else None
                    try:
                        ts = iso_micros(ts_s) if ts_s else None
                    except ValueError:
                        out.errors.append(LineError(path, no, f"bad timestamp {ts_s!r}; line skipped"))
                        continue
                    uuid = _field(data, k.uuid, start, end)
                    st["prompt_id"] = prompt or uuid or st.get("prompt_id")
                    out.events.append(self._user_event(line or data[start:end], path, no, ts, file_agent, st))
                elif prompt:
                    st["prompt_id"] = prompt
                if ts_s is not None:
                    last_user_ts = ts_s
                prev_was_user = True
            elif find(k.system, start, end) >= 0:
                sub = _field(data, k.subtype, start, end)
                if sub in ("compact_boundary", "turn_duration"):
                    out.events.append(self._system_event(sub, data[start:end], path, no, file_agent, st))
            elif find(k.type, start, end) < 0 and _invalid(view[start:end]):
                out.errors.append(LineError(path, no, "not a JSON transcript record; line skipped"))
        st["last_user_ts"] = last_user_ts
        st["prev_was_user"] = prev_was_user
        if acc:
            out.raw.append((path, acc))
        return out

    def finish(self, parsed: Parsed) -> None:
        """Build one requests frame from every file's block lines (see :func:`_requests_frame`)."""
        blocks = [(path, *t) for path, acc in parsed.raw for t in acc]
        parsed.raw.clear()
        parsed.frames.setdefault("requests", []).append(_requests_frame(blocks))

    def _block(
        self,
        rec: dict[str, Any],
        msg: dict[str, Any],
        no: int,
        file_agent: str | None,
        st: dict[str, Any],
        trigger_ts: str | None,
    ) -> tuple[Any, ...]:
        """The fields of one assistant block line, in :data:`_COLUMNS` order."""
        usage = msg["usage"]
        breakdown = usage.get("cache_creation")
        w5: int | None
        w1: int | None
        if isinstance(breakdown, dict):
            w5 = as_int(breakdown.get("ephemeral_5m_input_tokens")) or 0
            w1 = as_int(breakdown.get("ephemeral_1h_input_tokens")) or 0
        else:
            w5 = w1 = None
        details = usage.get("output_tokens_details")
        session, parent = self._ids(rec, file_agent, st)
        ts = rec["timestamp"]
        if not isinstance(ts, str):
            raise ValueError(f"timestamp {ts!r} is not an ISO-8601 string")
        return (
            no,
            rec.get("requestId"),
            msg.get("id"),
            ts,
            trigger_ts,
            session,
            parent,
            st.get("prompt_id"),
            rec.get("version"),
            msg.get("model"),
            as_int(usage.get("input_tokens")) or 0,
            as_int(usage.get("cache_read_input_tokens")) or 0,
            as_int(usage.get("cache_creation_input_tokens")) or 0,
            w5,
            w1,
            as_int(usage.get("output_tokens")) or 0,
            as_int(details.get("thinking_tokens")) if isinstance(details, dict) else None,
            as_float(rec.get("costUSD")),
            rec.get("cwd"),
            rec.get("gitBranch"),
            rec.get("agentId"),
            rec.get("uuid"),
            usage.get("speed"),
            usage.get("service_tier"),
            msg.get("stop_reason"),
        )

    # -- rows -------------------------------------------------------------------------------
    def _ids(
        self, rec: dict[str, Any], file_agent: str | None, st: dict[str, Any]
    ) -> tuple[str | None, str | None]:
        session = rec.get("sessionId") or st.get("session_id")
        if session:
            st["session_id"] = session
        agent_id = rec.get("agentId") or file_agent
        if agent_id and (rec.get("isSidechain") or file_agent):
            return f"agent-{agent_id}", session
        return session, None

    def _event(
        self,
        name: str,
        path: str,
        no: int,
        ts: int | None,
        session: str | None,
        parent: str | None,
        st: dict[str, Any],
        attributes: dict[str, Any],
        *,
        version: str | None = None,
        request_id: str | None = None,
    ) -> Row:
        return {
            "event_id": stable_id("claude-jsonl-event", path, no, name),
            "source": self.source,
            "agent": "claude-code",
            "agent_version": version,
            "user_id": None,
            "session_id": session,
            "parent_session_id": parent,
            "prompt_id": st.get("prompt_id"),
            "request_id": request_id,
            "name": name,
            "timestamp": ts,
            "attributes": attributes,
            "seq": no,
        }

    def _line_session(
        self, line: bytes, file_agent: str | None, st: dict[str, Any]
    ) -> tuple[str | None, str | None]:
        session = _search(_SESSION, line) or st.get("session_id")
        if session:
            st["session_id"] = session
        agent_id = _search(_AGENT_ID, line) or file_agent
        if agent_id and (file_agent or _SIDECHAIN.search(line)):
            return f"agent-{agent_id}", session
        return session, None

    def _user_event(
        self, line: bytes, path: str, no: int, ts: int | None, file_agent: str | None, st: dict[str, Any]
    ) -> Row:
        session, parent = self._line_session(line, file_agent, st)
        attrs = {"uuid": _search(_UUID, line), "file": path}
        row = self._event(
            "user_prompt", path, no, ts, session, parent, st, attrs, version=_search(_VERSION, line)
        )
        prompt_id = _search(_PROMPT_ID, line)
        if prompt_id and parent is None:  # = the OTLP user_prompt event of the turn (its prompt.id)
            row["event_id"] = stable_id("claude-user-prompt", prompt_id)
        return row

    def _system_event(
        self, sub: str, line: bytes, path: str, no: int, file_agent: str | None, st: dict[str, Any]
    ) -> Row:
        session, parent = self._line_session(line, file_agent, st)
        ts_s = _search(_TIMESTAMP, line)
        attrs: dict[str, Any] = {"file": path}
        if sub == "turn_duration":
            d = _search(_DURATION, line)
            attrs["duration_ms"] = float(d) if d else None
            name = "turn_duration"
        else:
            pre = _search(_PRE_TOKENS, line)
            attrs["pre_tokens"] = int(pre) if pre else None
            attrs["trigger"] = _search(_TRIGGER, line)
            name = "compaction"
        return self._event(
            name,
            path,
            no,
            iso_micros(ts_s) if ts_s else None,
            session,
            parent,
            st,
            attrs,
            version=_search(_VERSION, line),
        )

    def _error_event(
        self, rec: dict[str, Any], path: str, no: int, file_agent: str | None, st: dict[str, Any]
    ) -> Row:
        session, parent = self._ids(rec, file_agent, st)
        ts = rec.get("timestamp")
        attrs: dict[str, Any] = {"file": path}
        for key in ("apiErrorStatus", "apiErrorType", "error"):
            if rec.get(key) is not None:
                attrs[key] = rec[key]
        return self._event(
            "api_error",
            path,
            no,
            iso_micros(ts) if ts else None,
            session,
            parent,
            st,
            attrs,
            version=rec.get("version"),
            request_id=rec.get("requestId"),
        )


IMPORTER = ClaudeCodeImporter()


#: Columns of the per-line tuples :meth:`ClaudeCodeImporter._block` returns.
_COLUMNS: dict[str, str] = {
    "file": "str",
    "seq": "i64",
    "request_id": "str",
    "message_id": "str",
    "ts": "str",
    "trigger_ts": "str",
    "session_id": "str",
    "parent_session_id": "str",
    "prompt_id": "str",
    "agent_version": "str",
    "model": "str",
    "cold_input_tokens": "i64",
    "cache_read_tokens": "i64",
    "cache_creation": "i64",
    "cache_write_5m_tokens": "i64",
    "cache_write_1h_tokens": "i64",
    "output_tokens": "i64",
    "reasoning_tokens": "i64",
    "cost_usd": "f64",
    "cwd": "str",
    "git_branch": "str",
    "agent_id": "str",
    "uuid": "str",
    "speed": "str",
    "service_tier": "str",
    "stop_reason": "str",
}


def _requests_frame(acc: list[tuple[Any, ...]]) -> Any:
    """One request row per ``(requestId, message.id)`` from the block lines, as a lake frame.

    The kept copy is the most complete (largest token total), the last written among equals; the
    request starts at the earliest of its lines' trigger times (the user or tool-result line that
    preceded the first block), else at the first block.
    """
    import polars as pl

    from ..schema import REQUESTS

    types = {"str": pl.String, "i64": pl.Int64, "f64": pl.Float64}
    raw = pl.DataFrame(acc, schema={k: types[v] for k, v in _COLUMNS.items()}, orient="row")
    ts = pl.col("ts").str.to_datetime(time_unit="us", time_zone="UTC")
    breakdown = pl.col("cache_write_5m_tokens") + pl.col("cache_write_1h_tokens")
    write = pl.when(breakdown > 0).then(breakdown).otherwise(pl.col("cache_creation"))
    key = pl.coalesce(
        pl.lit("r:") + pl.col("request_id"),
        pl.lit("m:") + pl.col("message_id"),
        pl.lit("l:") + pl.col("file") + pl.lit(":") + pl.col("seq").cast(pl.String),
    )
    lines = raw.with_columns(
        ended_at=ts,
        trigger=pl.col("trigger_ts").str.to_datetime(time_unit="us", time_zone="UTC"),
        cache_write_tokens=write,
        key=key,
    ).with_columns(
        total=pl.col("cold_input_tokens")
        + pl.col("cache_read_tokens")
        + pl.col("cache_write_tokens")
        + pl.col("output_tokens"),
        start=pl.when(pl.col("trigger") <= pl.col("ended_at"))
        .then(pl.col("trigger"))
        .otherwise(pl.col("ended_at")),
    )
    first = lines.group_by("key").agg(
        pl.col("start").sort_by("file", "seq").first().alias("started_at"),
        pl.col("trigger").sort_by("file", "seq").first().is_not_null().alias("estimated"),
    )
    kept = (
        lines.sort(["key", "total", "file", "seq"])
        .group_by("key", maintain_order=True)
        .last()
        .join(first, on="key", how="left")
        .sort("file", "seq")
    )
    ids = [
        stable_id("anthropic-request", r)
        if r
        else stable_id("claude-message", m)
        if m
        else stable_id("claude-line", f, n)
        for r, m, f, n in kept.select("request_id", "message_id", "file", "seq").iter_rows()
    ]
    attrs = pl.struct(
        pl.col("message_id"),
        pl.col("file"),
        pl.col("cwd"),
        pl.col("git_branch"),
        pl.col("agent_id"),
        pl.col("uuid"),
        pl.col("speed"),
        pl.col("service_tier"),
        pl.col("stop_reason"),
        pl.col("estimated").alias("started_at_estimated"),
    ).struct.json_encode()
    frame = kept.with_columns(
        event_id=pl.Series(ids, dtype=pl.String),
        source=pl.lit(ClaudeCodeImporter.source),
        agent=pl.lit("claude-code"),
        user_id=pl.lit(None, dtype=pl.String),
        duration_ms=pl.lit(None, dtype=pl.Float64),
        ttft_ms=pl.lit(None, dtype=pl.Float64),
        attributes=attrs,
        hash_ids=pl.lit(None, dtype=pl.List(pl.Int64)),
        block_size=pl.lit(None, dtype=pl.Int32),
        ingested_at=pl.lit(int(time.time() * 1_000_000)).cast(pl.Datetime("us", "UTC")),
    )
    return frame.select([pl.col(c).cast(t) for c, t in REQUESTS.schema.items()])
