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

Speed, in three layers that give the same rows, errors and carried state:

* The compiled scanner (``traceflow/_cscan.c``, :mod:`traceflow.native`) walks the lines with the
  same byte searches as :meth:`ClaudeCodeImporter._lines` and handles the lines it is sure of:
  ignored record types, tool-result lines, ordinary assistant lines (the tuple :func:`_fast_block`
  would build), prompts and system events (the arguments of
  :meth:`ClaudeCodeImporter._line_event`). It leaves any other line to the Python loop, one line at a
  time (``tests/test_cscan.py``).
* In the Python loop, the usual assistant line (int token counts, text ids) goes through
  :func:`_fast_block`.
* :func:`_requests_frame_fast` picks the kept copy per request in Python and builds a frame of the
  kept rows only; events become a frame column by column (:func:`_events_frame`). Any other line (odd
  types, out-of-range counts) sends its batch through the general :meth:`ClaudeCodeImporter._block` /
  :func:`_requests_frame` / ``frame_from_rows`` path (``tests/test_claude_code_fastpath.py``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow import config
from traceflow.importers.base import FileContext
from traceflow.native import claude_scanner as native_scanner
from traceflow.rows import LineError, Parsed, Row, as_float, as_int, iso_micros, stable_id

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
#: Kinds of the events read off single lines (:meth:`ClaudeCodeImporter._line_event`); the compiled
#: scanner uses the same numbers.
_PROMPT_EVENT, _TURN_EVENT, _COMPACTION_EVENT = 0, 1, 2
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
        #: :func:`_skippable` as one regular expression: a ``"type":`` key, any one byte (the
        #: opening quote in valid JSON), an ignored type and its closing quote.
        self.skip = re.compile(
            re.escape(self.type) + b".(?:" + b"|".join(map(re.escape, _SKIP_TYPES)) + b')"', re.DOTALL
        )
        #: The same markers for the compiled scanner (:func:`traceflow.native.claude_scanner`).
        self.native = (
            self.user,
            self.system,
            self.type,
            self.timestamp,
            self.prompt_id,
            self.is_meta,
            self.uuid,
            self.subtype,
            _SKIP_TYPES,
        )


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


def _settle(st: dict[str, Any]) -> None:
    """Drop an unknown session or prompt id from the carried state (absent and None mean the same;
    the compiled scanner cannot tell them apart)."""
    for key in ("session_id", "prompt_id"):
        if key in st and st[key] is None:
            del st[key]


def _invalid(line: memoryview) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return True
    return False


def _search(pattern: re.Pattern[bytes], line: bytes) -> str | None:
    m = pattern.search(line)
    return m.group(1).decode() if m else None


_IGNORED_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)  # as pathlib ignores them


def _jsonl_files(root: Path) -> list[Path]:
    """``sorted(p for p in root.rglob("*.jsonl") if p.is_file())`` with one ``scandir`` per folder.

    As ``rglob``: folders are entered but not through symbolic links, unreadable ones are skipped;
    as ``Path.is_file``: a link counts when it leads to a regular file.
    """
    found: list[Path] = []
    folders = [str(root)]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except PermissionError:
            continue
        for entry in entries:
            name = entry.name
            if name.endswith(".jsonl"):
                path = Path(folder, name)
                try:
                    regular = path.is_file() if entry.is_symlink() else entry.is_file(follow_symlinks=False)
                except OSError:
                    regular = path.is_file()
                if regular:
                    found.append(path)
            try:
                folder_entry = entry.is_dir(follow_symlinks=False)
            except OSError as e:
                if e.errno not in _IGNORED_ERRNOS:
                    raise
                folder_entry = False
            if folder_entry:
                folders.append(os.path.join(folder, name))
    return sorted(found)


_INT_OR_NONE = frozenset((int, type(None)))
_STR_OR_NONE = frozenset((str, type(None)))


def _fast_block(
    rec: dict[str, Any], no: int, file_agent: str | None, st: dict[str, Any], trigger_ts: str | None
) -> tuple[Any, ...] | None:
    """:meth:`ClaudeCodeImporter._block` for the usual record, or None for any other.

    Usual: a dict ``message`` with a dict ``usage`` whose token counts are ints (or absent), a
    string timestamp, no ``costUSD`` but a float, text (or nothing) in the text columns, not
    ``<synthetic>`` nor an API error. Anything else (and so every record that makes ``_block``
    raise) is left to the general code, which this function must match exactly; it changes ``st``
    only when it returns a row.
    """
    get = rec.get
    msg = get("message")
    if type(msg) is not dict:
        return None
    mget = msg.get
    usage = mget("usage")
    ts = get("timestamp")
    model = mget("model")
    if type(usage) is not dict or type(ts) is not str or model == "<synthetic>" or get("isApiErrorMessage"):
        return None
    uget = usage.get
    cold = uget("input_tokens")
    read = uget("cache_read_input_tokens")
    write = uget("cache_creation_input_tokens")
    output = uget("output_tokens")
    breakdown = uget("cache_creation")
    details = uget("output_tokens_details")
    cost = get("costUSD")
    thinking = details.get("thinking_tokens") if type(details) is dict else None
    if type(breakdown) is dict:
        w5 = breakdown.get("ephemeral_5m_input_tokens")
        w1 = breakdown.get("ephemeral_1h_input_tokens")
        if (
            not {type(cold), type(read), type(write), type(output), type(thinking), type(w5), type(w1)}
            <= _INT_OR_NONE
        ):
            return None
        w5 = w5 or 0
        w1 = w1 or 0
    else:
        if not {type(cold), type(read), type(write), type(output), type(thinking)} <= _INT_OR_NONE:
            return None
        w5 = w1 = None
    if cost is not None and type(cost) is not float:
        return None
    # ClaudeCodeImporter._ids, without its side effect until the row is known to be usual.
    own_session = get("sessionId") or st.get("session_id")
    agent = get("agentId")
    agent_id = agent or file_agent
    session: Any
    parent: Any
    if agent_id and (get("isSidechain") or file_agent):
        session, parent = f"agent-{agent_id}", own_session
    else:
        session, parent = own_session, None
    row = (
        no,
        get("requestId"),
        mget("id"),
        ts,
        trigger_ts,
        session,
        parent,
        st.get("prompt_id"),
        get("version"),
        model,
        cold or 0,
        read or 0,
        write or 0,
        w5,
        w1,
        output or 0,
        thinking,
        cost,
        get("cwd"),
        get("gitBranch"),
        agent,
        get("uuid"),
        uget("speed"),
        uget("service_tier"),
        mget("stop_reason"),
    )
    # The text columns hold text (or nothing): what _requests_frame_fast relies on.
    if (
        not {
            type(row[1]),
            type(row[2]),
            type(trigger_ts),
            type(session),
            type(parent),
            type(row[7]),
            type(row[8]),
            type(model),
            type(row[18]),
            type(row[19]),
            type(agent),
            type(row[21]),
            type(row[22]),
            type(row[23]),
            type(row[24]),
        }
        <= _STR_OR_NONE
    ):
        return None
    if own_session:
        st["session_id"] = own_session
    return row


class ClaudeCodeImporter:
    name: ClassVar[str] = "claude-code"
    whole_file: ClassVar[bool] = False
    source: ClassVar[str] = "claude-code-jsonl"

    def default_paths(self) -> list[Path]:
        env = config.get("claude_config_dir")
        if env:
            roots = [Path(p).expanduser() for p in env.split(",") if p.strip()]
        else:
            roots = [Path.home() / ".config" / "claude", Path.home() / ".claude"]
        return [r / "projects" for r in roots if (r / "projects").is_dir()]

    def discover(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return _jsonl_files(root)

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        st = ctx.state
        path = str(ctx.path)
        # A sub-agent transcript lives in <session>/subagents/agent-<id>.jsonl.
        file_agent = ctx.path.stem[len("agent-") :] if ctx.path.stem.startswith("agent-") else None
        acc: list[tuple[Any, ...]] = []  # one tuple per assistant block line, see _COLUMNS
        head = data[:4096]
        k = _SPACED if (b'": "' in head and b'":"' not in head) else _COMPACT
        size, no = len(data), ctx.first_line - 1
        scan = native_scanner()
        if scan is None:
            no, usual = self._lines(data, 0, size, no, k, out, acc, path, file_agent, st)
        else:
            # The compiled scanner takes the lines it is sure of; each line it leaves goes through
            # the Python loop alone, and the scanner resumes after it with the same state.
            usual = True
            pos = 0
            keys = k.native
            found: list[tuple[Any, ...]] = []
            while pos < size:
                pos, no, session, prompt, last_ts, prev, stopped = scan(
                    data, pos, no, keys, file_agent, st.get("session_id"), st.get("prompt_id"),
                    st.get("last_user_ts"), bool(st.get("prev_was_user")), acc, found,
                )  # fmt: skip
                st.update(session_id=session, prompt_id=prompt, last_user_ts=last_ts, prev_was_user=prev)
                if found:
                    self._native_events(found, path, out)
                    found.clear()
                if not stopped:
                    break
                nl = data.find(b"\n", pos)
                limit = size if nl < 0 else nl + 1
                no, one_usual = self._lines(data, pos, limit, no, k, out, acc, path, file_agent, st)
                usual = usual and one_usual
                pos = limit
        _settle(st)
        # ``no`` counted a last line without its newline too.
        ctx.next_line = no + 1 if not data or data[-1] == 10 else no
        if acc or out.events:
            out.raw.append((path, acc, usual))
        return out

    def _lines(
        self,
        data: bytes,
        pos: int,
        size: int,
        no: int,
        k: _Keys,
        out: Parsed,
        acc: list[tuple[Any, ...]],
        path: str,
        file_agent: str | None,
        st: dict[str, Any],
    ) -> tuple[int, bool]:
        """Read the lines of ``data[pos:size]`` (the first is line ``no + 1``) into ``out`` and ``acc``.

        Returns the last line's number, and whether every row added to ``acc`` came from
        :func:`_fast_block`. The carry-over state lives in ``st`` between calls.
        """
        usual = True
        errors = out.errors
        last_user_ts: str | None = st.get("last_user_ts")
        prev_was_user = bool(st.get("prev_was_user"))
        loads = orjson.loads
        view = memoryview(data)
        find = data.find
        key_user, key_system, key_ts, key_prompt = k.user, k.system, k.timestamp, k.prompt_id
        len_ts, len_prompt = len(key_ts), len(key_prompt)
        skippable = k.skip.search
        # Lines are visited in place (bytes.find over ranges, memoryview slices for the JSON parser):
        # no copy of the tool results and file contents that make up most of a transcript.
        while pos < size:
            end = find(b"\n", pos, size)
            if end < 0:
                end = size
            no += 1
            start, pos = pos, end + 1
            if end - start < 2:
                continue
            # The record's own "type" sits in its first few hundred bytes for every line type but
            # assistant (whose message, usage included, may come first): classify on that window
            # and scan a whole line only for the usage of an assistant record.
            win = start + _WINDOW
            if win > end:
                win = end
            if find(key_user, start, win) < 0:
                if find(key_system, start, win) < 0 and skippable(data, start, win) is not None:
                    continue
                if find(b'"usage"', start, end) < 0:
                    if find(key_system, start, end) >= 0:
                        sub = _field(data, k.subtype, start, end)
                        if sub in ("compact_boundary", "turn_duration"):
                            out.events.append(
                                self._system_event(sub, data[start:end], path, no, file_agent, st)
                            )
                    elif find(k.type, start, end) < 0 and _invalid(view[start:end]):
                        errors.append(LineError(path, no, "not a JSON transcript record; line skipped"))
                    continue
                try:
                    rec = loads(view[start:end])
                except orjson.JSONDecodeError as e:
                    errors.append(LineError(path, no, f"invalid JSON ({e}); line skipped"))
                    continue
                if type(rec) is not dict or rec.get("type") != "assistant":
                    prev_was_user = False
                    continue
                block = _fast_block(rec, no, file_agent, st, last_user_ts if prev_was_user else None)
                if block is not None:
                    acc.append(block)
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
                        usual = False
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    errors.append(LineError(path, no, f"unreadable assistant usage record: {e!r}"))
                    continue
                prev_was_user = False
                continue
            # A user line: a prompt, or a tool result (the bulk of a transcript's bytes).
            if data[end - 1] != 125 and _invalid(view[start:end]):  # 125: "}"
                errors.append(LineError(path, no, "truncated JSON line; line skipped"))
                continue
            # _field(data, key, start, end), inlined for the two keys every user line is searched for.
            i = find(key_ts, start, end)
            if i < 0:
                ts_s = None
            else:
                i += len_ts
                j = find(b'"', i, end)
                ts_s = data[i:j].decode() if j > 0 else None
            i = find(key_prompt, start, end)
            if i < 0:
                prompt = None
            else:
                i += len_prompt
                j = find(b'"', i, end)
                prompt = data[i:j].decode() if j > 0 else None
            if (
                find(b'"tool_result"', start, min(end, start + 2 * _WINDOW)) < 0
                and find(k.is_meta, start, end) < 0
            ):
                line = data[start:end] if end - start < 4096 else None
                try:
                    ts = iso_micros(ts_s) if ts_s else None
                except ValueError:
                    errors.append(LineError(path, no, f"bad timestamp {ts_s!r}; line skipped"))
                    continue
                uuid = _field(data, k.uuid, start, end)
                st["prompt_id"] = prompt or uuid or st.get("prompt_id")
                out.events.append(self._user_event(line or data[start:end], path, no, ts, file_agent, st))
            elif prompt:
                st["prompt_id"] = prompt
            if ts_s is not None:
                last_user_ts = ts_s
            prev_was_user = True
        st["last_user_ts"] = last_user_ts
        st["prev_was_user"] = prev_was_user
        return no, usual

    def finish(self, parsed: Parsed) -> None:
        """Build one requests frame from every file's block lines, and one events frame.

        Block lines that all came from :func:`_fast_block` go through :func:`_requests_frame_fast`;
        a batch with any other goes through :func:`_requests_frame`, the general (slower) path.
        """
        raw: list[tuple[str, list[tuple[Any, ...]], bool]] = parsed.raw
        frame = _requests_frame_fast(raw) if all(usual for _, _, usual in raw) else None
        if frame is None:
            frame = _requests_frame([(path, *t) for path, acc, _ in raw for t in acc])
        raw.clear()
        parsed.frames.setdefault("requests", []).append(frame)
        if parsed.events:
            parsed.frames.setdefault("events", []).append(_events_frame(parsed.events))
            parsed.events.clear()

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

    def _native_events(self, found: list[tuple[Any, ...]], path: str, out: Parsed) -> None:
        """The event rows of the compiled scanner's event tuples (``_cscan.c``: add_event)."""
        line_event, append = self._line_event, out.events.append
        for event in found:
            append(line_event(path, *event))

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
        prompt_id: str | None,
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
            "prompt_id": prompt_id,
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
        version, uuid = _search(_VERSION, line), _search(_UUID, line)
        prompt_key = _search(_PROMPT_ID, line)
        return self._line_event(
            path, _PROMPT_EVENT, no, ts, session, parent, st.get("prompt_id"), version, uuid, None, prompt_key
        )

    def _system_event(
        self, sub: str, line: bytes, path: str, no: int, file_agent: str | None, st: dict[str, Any]
    ) -> Row:
        session, parent = self._line_session(line, file_agent, st)
        ts_s = _search(_TIMESTAMP, line)
        if sub == "turn_duration":
            kind, a, b = _TURN_EVENT, _search(_DURATION, line), None
        else:
            kind, a, b = _COMPACTION_EVENT, _search(_PRE_TOKENS, line), _search(_TRIGGER, line)
        ts = iso_micros(ts_s) if ts_s else None
        return self._line_event(
            path, kind, no, ts, session, parent, st.get("prompt_id"), _search(_VERSION, line), a, b, None
        )

    def _line_event(
        self,
        path: str,
        kind: int,
        no: int,
        ts: int | None,
        session: str | None,
        parent: str | None,
        prompt_id: str | None,
        version: str | None,
        a: str | None,
        b: str | None,
        prompt_key: str | None,
    ) -> Row:
        """The row of a prompt or system event from the fields read off its line (by the Python
        loop or the compiled scanner, whose event tuples are these arguments after ``path``).

        ``a`` / ``b``: the prompt's uuid; the turn's ``durationMs``; the compaction's ``preTokens``
        and ``trigger``. ``prompt_key``: the prompt's ``promptId``, the OTLP ``user_prompt`` event's
        ``prompt.id``, which becomes the event id of a main-session prompt.
        """
        attrs: dict[str, Any]
        if kind == _PROMPT_EVENT:
            name, attrs = "user_prompt", {"uuid": a, "file": path}
        elif kind == _TURN_EVENT:
            name, attrs = "turn_duration", {"file": path, "duration_ms": float(a) if a else None}
        else:
            name = "compaction"
            attrs = {"file": path, "pre_tokens": int(a) if a else None, "trigger": b}
        row = self._event(name, path, no, ts, session, parent, prompt_id, attrs, version=version)
        if prompt_key and parent is None:
            row["event_id"] = stable_id("claude-user-prompt", prompt_key)
        return row

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
            st.get("prompt_id"),
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
    return _request_rows(kept)


def _request_rows(kept: Any) -> Any:
    """The lake rows of the kept block lines (with ``ended_at``, ``started_at``, ``estimated``)."""
    import polars as pl

    from traceflow.schema import REQUESTS

    ids = _request_ids(*(kept[c].to_list() for c in ("request_id", "message_id", "file", "seq")))
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


def _request_ids(requests: list[Any], messages: list[Any], files: list[str], seqs: list[int]) -> list[str]:
    """``stable_id("anthropic-request", r) if r else stable_id("claude-message", m) if m else
    stable_id("claude-line", f, n)`` for each row, reusing the hash state of the constant prefixes."""
    prefixes = {}
    for kind in ("anthropic-request", "claude-message", "claude-line"):
        h = hashlib.blake2b(digest_size=16)
        h.update(b"\x1f")
        h.update(kind.encode())
        prefixes[kind] = h
    by_request, by_message, by_line = (
        prefixes["anthropic-request"],
        prefixes["claude-message"],
        prefixes["claude-line"],
    )
    out = []
    for r, m, f, n in zip(requests, messages, files, seqs, strict=True):
        if r:
            h = by_request.copy()
            h.update(b"\x1f" + str(r).encode())
        elif m:
            h = by_message.copy()
            h.update(b"\x1f" + str(m).encode())
        else:
            h = by_line.copy()
            h.update(b"\x1f" + str(f).encode() + b"\x1f" + str(n).encode())
        out.append(h.hexdigest())
    return out


_TYPES_BY_KIND = {"str": "String", "i64": "Int64", "f64": "Float64"}

#: Token counts below this add up (four of them) without overflowing an Int64.
_SMALL = 1 << 60


def _requests_frame_fast(raw: list[tuple[str, list[tuple[Any, ...]], bool]]) -> Any:
    """:func:`_requests_frame` for block lines from :func:`_fast_block`, or None where it cannot say.

    The kept copy and the first line of each request are chosen here, in one pass in Python (the
    token counts are small ints, the text columns text), so that only the kept rows become a frame.
    The timestamps of all lines are still parsed together, as :func:`_requests_frame` parses them
    (the same format inference and the same errors). None (use the general path): a token count
    outside ``[0, 2**60)``, where Int64 arithmetic or range might differ from Python's.
    """
    import polars as pl

    rank = {p: r for r, p in enumerate(sorted({p for p, _, _ in raw}))}
    # key -> [kept row, its total, file rank, seq, line index, path; first line's index, file rank, seq]
    slots: dict[str, list[Any]] = {}
    stamps: list[str] = []
    triggers: list[str | None] = []
    i = 0
    for path, acc, _ in raw:
        f = rank[path]
        for row in acc:
            (seq, request_id, message_id, ts, trigger, _, _, _, _, _, cold, read, creation, w5, w1, output,
             thinking, _, _, _, _, _, _, _, _) = row  # fmt: skip
            if request_id is not None:
                key = "r:" + request_id
            elif message_id is not None:
                key = "m:" + message_id
            else:
                key = f"l:{path}:{seq}"
            if w5 is None:
                write = creation
                if (cold | read | creation | output | (thinking or 0)) >> 60:
                    return None
            else:
                write = w5 + w1
                if write <= 0:
                    write = creation
                if (cold | read | creation | output | w5 | w1 | (thinking or 0)) >> 60:
                    return None
            total = cold + read + write + output
            slot = slots.get(key)
            if slot is None:
                slots[key] = [row, total, f, seq, i, path, i, f, seq]
            else:
                if (total, f, seq) >= (slot[1], slot[2], slot[3]):
                    slot[0:6] = row, total, f, seq, i, path
                if (f, seq) < (slot[7], slot[8]):
                    slot[6:9] = i, f, seq
            stamps.append(ts)
            triggers.append(trigger)
            i += 1
    kept = sorted(slots.values(), key=lambda s: (s[2], s[3]))
    ts = pl.DataFrame(
        [pl.Series("ts", stamps, dtype=pl.String), pl.Series("trigger_ts", triggers, dtype=pl.String)]
    ).select(
        ended_at=pl.col("ts").str.to_datetime(time_unit="us", time_zone="UTC"),
        trigger=pl.col("trigger_ts").str.to_datetime(time_unit="us", time_zone="UTC"),
    )
    first = ts[[s[6] for s in kept]]
    names = list(_COLUMNS)
    values = list(zip(*(s[0] for s in kept), strict=True)) if kept else [() for _ in names[1:]]
    columns = [pl.Series("file", [s[5] for s in kept], dtype=pl.String)] + [
        pl.Series(name, col, dtype=getattr(pl, _TYPES_BY_KIND[_COLUMNS[name]]), strict=True)
        for name, col in zip(names[1:], values, strict=True)
    ]
    frame = pl.DataFrame(columns).with_columns(
        ended_at=ts["ended_at"][[s[4] for s in kept]],
        started_at=first.select(
            pl.when(pl.col("trigger") <= pl.col("ended_at"))
            .then(pl.col("trigger"))
            .otherwise(pl.col("ended_at"))
        ).to_series(),
        estimated=first["trigger"].is_not_null(),
    )
    breakdown = pl.col("cache_write_5m_tokens") + pl.col("cache_write_1h_tokens")
    return _request_rows(
        frame.with_columns(
            cache_write_tokens=pl.when(breakdown > 0).then(breakdown).otherwise(pl.col("cache_creation"))
        )
    )


def _events_frame(rows: list[Row]) -> Any:
    """``frame_from_rows(EVENTS, rows)`` for this importer's event rows, built column by column.

    The rows have the same keys (see :meth:`ClaudeCodeImporter._event`), ``timestamp`` an int or
    None and ``attributes`` a dict, serialised as :func:`traceflow.store.lake.frame_from_rows` does.
    """
    import polars as pl

    from traceflow.schema import EVENTS, polars_type
    from traceflow.store.lake import frame_from_rows

    now = int(time.time() * 1_000_000)
    dumps, option = orjson.dumps, orjson.OPT_NON_STR_KEYS
    columns = []
    try:
        for name, duck in EVENTS.columns.items():
            dtype = polars_type(duck)
            if name == "attributes":
                values: list[Any] = [
                    dumps(r["attributes"], option=option, default=str).decode() for r in rows
                ]
            elif name == "ingested_at":
                values = [now] * len(rows)
            else:
                values = [r.get(name) for r in rows]
            if isinstance(dtype, pl.Datetime):
                columns.append(pl.Series(name, values, dtype=pl.Int64, strict=True).cast(dtype))
            else:
                columns.append(pl.Series(name, values, dtype=dtype, strict=True))
    except Exception:  # a value of another type (an id that is a number): the general path decides
        return frame_from_rows(EVENTS, rows)
    return pl.DataFrame(columns)
