"""The loop over a Claude Code transcript's lines.

Every line is decoded and validated by
:data:`~traceflow.importers.claude_code_records.DECODER`; a line that is not a valid JSON object of
the expected shape (truncated, an invalid escape or UTF-8, a field of the wrong type, not an
object) becomes a :class:`~traceflow.rows.LineError` ``path:line: what is wrong`` and is skipped.
The loop carries the session, the prompt and the time of the last user line from one line to the
next, and from one import of a growing file to the next, in the file's state dict.
"""

from __future__ import annotations

from typing import Any

import msgspec

from traceflow.importers.claude_code_records import (
    ANY_RECORD,
    DECODER,
    Assistant,
    CostState,
    System,
    User,
    invalid_utf8_lines,
    micros,
)
from traceflow.importers.claude_code_rows import (
    block,
    error_event,
    prompt_event,
    restart_event,
    system_event,
)
from traceflow.rows import LineError, Parsed, iso_micros

#: The record types decoded into typed structs (a line of another type is only validated).
_TYPED = frozenset(("assistant", "user", "system"))
#: The system lines that become events.
_SYSTEM_EVENTS = frozenset(("turn_duration", "compact_boundary"))


def read_lines(
    data: bytes,
    no: int,
    out: Parsed,
    acc: list[tuple[Any, ...]],
    path: str,
    file_agent: str | None,
    st: dict[str, Any],
) -> int:
    """Read the lines of ``data`` (the first is line ``no + 1``) into ``out`` and ``acc``.

    ``acc`` gets one :data:`~traceflow.importers.claude_code_rows.COLUMNS` tuple (without ``file``)
    per assistant block line; ``out`` the events and the errors. Returns the last line's number.
    """
    errors = out.errors
    events = out.events
    last = st.get("last_user_ts")
    last_user_ts: int | None = iso_micros(last) if isinstance(last, str) else last  # an older state
    prev_was_user = bool(st.get("prev_was_user"))
    decode = DECODER.decode
    view = memoryview(data)
    find = data.find
    bad_utf8 = invalid_utf8_lines(data)
    pos, size = 0, len(data)
    while pos < size:
        end = find(b"\n", pos)
        if end < 0:
            end = size
        no += 1
        start, pos = pos, end + 1
        try:
            rec = decode(view[start:end])
        except msgspec.ValidationError as e:
            problem = _untyped_problem(view[start:end], e)
            if problem is not None:
                errors.append(LineError(path, no, problem))
            elif start in bad_utf8:
                errors.append(LineError(path, no, "invalid UTF-8; line skipped"))
            continue
        except msgspec.DecodeError as e:
            if data[start:end].strip():
                errors.append(LineError(path, no, f"invalid JSON ({e}); line skipped"))
            continue
        if bad_utf8 and start in bad_utf8:
            errors.append(LineError(path, no, "invalid UTF-8; line skipped"))
            continue
        if isinstance(rec, Assistant):
            msg = rec.message
            usage = msg.usage if msg is not None else None
            if msg is None or usage is None:
                continue
            if msg.model == "<synthetic>" or rec.isApiErrorMessage:
                events.append(error_event(rec, path, no, file_agent, st))
            elif rec.timestamp is None:
                errors.append(LineError(path, no, "assistant record without a timestamp; line skipped"))
                continue
            else:
                trigger = last_user_ts if prev_was_user else None
                acc.append(block(rec, msg, usage, micros(rec.timestamp), no, file_agent, st, trigger))
            prev_was_user = False
        elif isinstance(rec, User):
            msg = rec.message
            content = msg.content if msg is not None else None
            tool_result = type(content) is list and "tool_result" in [b.type for b in content]
            if not tool_result and not rec.isMeta:
                st["prompt_id"] = rec.promptId or rec.uuid or st.get("prompt_id")
                if st.pop("exited", False) and rec.timestamp is not None and not file_agent:
                    events.append(restart_event(rec, path, no, st))
                events.append(prompt_event(rec, path, no, file_agent, st))
            elif rec.promptId:
                st["prompt_id"] = rec.promptId
            if rec.timestamp is not None:
                last_user_ts = micros(rec.timestamp)
            prev_was_user = True
        elif isinstance(rec, System) and rec.subtype in _SYSTEM_EVENTS:
            events.append(system_event(rec, path, no, file_agent, st))
        elif isinstance(rec, CostState):
            st["exited"] = True  # the process wrote its totals as it exited
    st["last_user_ts"] = last_user_ts
    st["prev_was_user"] = prev_was_user
    for key in ("session_id", "prompt_id"):  # absent and None mean the same
        if key in st and st[key] is None:
            del st[key]
    return no


def _untyped_problem(line: memoryview, error: msgspec.ValidationError) -> str | None:
    """Why a line that fits none of the typed records is malformed, or None for a valid record of a
    type the importer does not read (or without a type).

    msgspec stops at the first value of the wrong type, so the line is decoded again, as any object,
    to tell invalid JSON from a valid record of the wrong shape.
    """
    try:
        rec = ANY_RECORD.decode(line)
    except msgspec.ValidationError:
        return "not a JSON object; line skipped"
    except msgspec.DecodeError as e:
        return f"invalid JSON ({e}); line skipped"
    kind = rec.type
    if kind is None or (isinstance(kind, str) and kind not in _TYPED):
        return None
    return f"unexpected value: {error}; line skipped"
