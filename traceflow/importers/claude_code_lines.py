"""The Python loop over a Claude Code transcript's lines, and the byte markers it (and the compiled
scanner) classify lines by.

Only lines that contain ``"usage"`` are fully parsed; user lines are read with byte searches (their
tool results can be large), and record types that never carry tokens or turn boundaries
(:data:`SKIP_TYPES`) are skipped on a look at their first :data:`WINDOW` bytes. The loop carries
the session, the prompt and the time of the last user line from one line to the next, and from one
import of a growing file to the next, in the file's state dict.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from traceflow.importers.claude_code_rows import block, error_event, fast_block, system_event, user_event
from traceflow.rows import LineError, Parsed, iso_micros

#: How far into a line its record type is looked for (every type but assistant's sits there).
WINDOW = 1024
#: Record types that never carry tokens or turn boundaries.
SKIP_TYPES = (
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


class Keys:
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
        #: Whether a line shows a record type we ignore, as one regular expression: a ``"type":``
        #: key, any one byte (the opening quote in valid JSON), an ignored type and its closing quote.
        self.skip = re.compile(
            re.escape(self.type) + b".(?:" + b"|".join(map(re.escape, SKIP_TYPES)) + b')"', re.DOTALL
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
            SKIP_TYPES,
        )


COMPACT = Keys(b":")  # what Claude Code writes (JSON.stringify)
SPACED = Keys(b": ")  # what Python's json.dumps writes (redacted or hand-edited copies)


def keys_for(data: bytes) -> Keys:
    """The markers for the JSON style of ``data`` (compact unless its head is spaced only)."""
    head = data[:4096]
    return SPACED if (b'": "' in head and b'":"' not in head) else COMPACT


def read_lines(
    data: bytes,
    pos: int,
    size: int,
    no: int,
    k: Keys,
    out: Parsed,
    acc: list[tuple[Any, ...]],
    path: str,
    file_agent: str | None,
    st: dict[str, Any],
) -> tuple[int, bool]:
    """Read the lines of ``data[pos:size]`` (the first is line ``no + 1``) into ``out`` and ``acc``.

    Returns the last line's number, and whether every row added to ``acc`` came from
    :func:`~traceflow.importers.claude_code_rows.fast_block`. The carry-over state lives in ``st``
    between calls.
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
        win = start + WINDOW
        if win > end:
            win = end
        if find(key_user, start, win) < 0:
            if find(key_system, start, win) < 0 and skippable(data, start, win) is not None:
                continue
            if find(b'"usage"', start, end) < 0:
                if find(key_system, start, end) >= 0:
                    sub = _field(data, k.subtype, start, end)
                    if sub in ("compact_boundary", "turn_duration"):
                        out.events.append(system_event(sub, data[start:end], path, no, file_agent, st))
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
            usual_row = fast_block(rec, no, file_agent, st, last_user_ts if prev_was_user else None)
            if usual_row is not None:
                acc.append(usual_row)
                prev_was_user = False
                continue
            try:
                msg = rec["message"]
                if msg.get("model") == "<synthetic>" or rec.get("isApiErrorMessage"):
                    out.events.append(error_event(rec, path, no, file_agent, st))
                else:
                    acc.append(block(rec, msg, no, file_agent, st, last_user_ts if prev_was_user else None))
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
            find(b'"tool_result"', start, min(end, start + 2 * WINDOW)) < 0
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
            out.events.append(user_event(line or data[start:end], path, no, ts, file_agent, st))
        elif prompt:
            st["prompt_id"] = prompt
        if ts_s is not None:
            last_user_ts = ts_s
        prev_was_user = True
    st["last_user_ts"] = last_user_ts
    st["prev_was_user"] = prev_was_user
    return no, usual


def settle(st: dict[str, Any]) -> None:
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
