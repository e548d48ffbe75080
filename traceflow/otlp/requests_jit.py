"""Numba kernels that write the ``requests`` columns of Claude Code ``api_request`` records from the
columns :mod:`traceflow.otlp.wire_jit` read off the wire, for :mod:`traceflow.otlp.logs_columnar`:
the numbers and texts of :func:`traceflow.otlp.claude_code.api_request` (:func:`request_columns`,
``event_id`` hashed here: blake2b as :mod:`hashlib` computes it) and the ``attributes`` JSON
(:func:`attributes_json`), each column as Arrow buffers, so that no Python object is made per record.

Import this module only through :func:`traceflow.native.jit_enabled` (importing numba takes ~0.3 s).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from traceflow.otlp.claude_code import TOKEN_KEYS
from traceflow.otlp.wire_jit import (
    A_KIND,
    A_VALUE,
    A_VLEN,
    BOOL,
    DOUBLE,
    INT,
    NONE,
    R_A0,
    R_A1,
    R_GROUP,
    R_OBSERVED,
    R_SID_LEN,
    R_SID_OFF,
    R_TID_LEN,
    R_TID_OFF,
    R_TIME,
    STRING,
)

#: the attributes api_request reads, in the order of the columns of :func:`request_columns`'s ``at``
SLOTS = (
    *TOKEN_KEYS,
    "session.id",
    "model",
    "request_id",
    "duration_ms",
    "ttft_ms",
    "cost_usd",
    "cost_usd_micros",
    "event.sequence",
    "agent_id",
    "user.id",
    "prompt.id",
    "app.version",
)
_SESSION, _MODEL, _RID, _DUR, _TTFT, _COST, _MICROS, _SEQ, _AGENT, _USER, _PROMPT, _APP = range(6, 18)
assert SLOTS[_APP] == "app.version" and SLOTS[_SESSION] == "session.id"

#: :func:`request_columns`' int columns: the token counts in TOKEN_KEYS' order, then the times and seq
I_COLD, I_READ, I_WRITE, I_OUTPUT, I_5M, I_1H = range(6)
I_STARTED, I_ENDED, I_SEQ = 6, 7, 8
INT_COLUMNS = 9
#: its float columns
F_DURATION, F_TTFT, F_COST = range(3)
#: its text columns
T_EVENT_ID, T_VERSION, T_USER, T_SESSION, T_PARENT, T_PROMPT, T_REQUEST, T_MODEL = range(8)
TEXT_COLUMNS = 8
_TEXT_SLOT = np.array([-1, _APP, _USER, _SESSION, _SESSION, _PROMPT, _RID, _MODEL], np.int64)
_TEXT_SLOTS = np.array([_SESSION, _MODEL, _RID, _AGENT, _USER, _PROMPT, _APP], np.int64)
_AGENT_PREFIX = np.frombuffer(b"agent-", np.uint8).copy()
#: stable_id's framing of ("anthropic-request", request id): traceflow.otlp.claude_code
_ANTHROPIC_REQUEST = np.frombuffer(b"\x1fanthropic-request\x1f", np.uint8).copy()

_B2_IV = np.array(
    [
        0x6A09E667F3BCC908,
        0xBB67AE8584CAA73B,
        0x3C6EF372FE94F82B,
        0xA54FF53A5F1D36F1,
        0x510E527FADE682D1,
        0x9B05688C2B3E6C1F,
        0x1F83D9ABFB41BD6B,
        0x5BE0CD19137E2179,
    ],
    np.uint64,
)
_B2_SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    ],
    np.int64,
)
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8).copy()
_TRUE = np.frombuffer(b"true", np.uint8).copy()
_FALSE = np.frombuffer(b"false", np.uint8).copy()
_NULL = np.frombuffer(b"null", np.uint8).copy()


@numba.njit(cache=True, nogil=True, inline="always")
def _rotr(x: Any, n: int) -> Any:
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


@numba.njit(cache=True, nogil=True, inline="always")
def _mix(v: Any, a: int, b: int, c: int, d: int, x: Any, y: Any) -> None:
    """BLAKE2b's G function (RFC 7693, 3.1)."""
    v[a] = v[a] + v[b] + x
    v[d] = _rotr(v[d] ^ v[a], 32)
    v[c] = v[c] + v[d]
    v[b] = _rotr(v[b] ^ v[c], 24)
    v[a] = v[a] + v[b] + y
    v[d] = _rotr(v[d] ^ v[a], 16)
    v[c] = v[c] + v[d]
    v[b] = _rotr(v[b] ^ v[c], 63)


@numba.njit(cache=True, nogil=True)
def _compress(h: Any, m: Any, v: Any, t: int, last: bool) -> None:
    """BLAKE2b's compression of the block ``m`` (16 words) into ``h`` (RFC 7693, 3.2); ``t`` the bytes
    hashed so far (messages under 2^64 bytes)."""
    for i in range(8):
        v[i] = h[i]
        v[i + 8] = _B2_IV[i]
    v[12] ^= np.uint64(t)
    if last:
        v[14] = ~v[14]
    for r in range(12):
        s = _B2_SIGMA[r % 10]
        _mix(v, 0, 4, 8, 12, m[s[0]], m[s[1]])
        _mix(v, 1, 5, 9, 13, m[s[2]], m[s[3]])
        _mix(v, 2, 6, 10, 14, m[s[4]], m[s[5]])
        _mix(v, 3, 7, 11, 15, m[s[6]], m[s[7]])
        _mix(v, 0, 5, 10, 15, m[s[8]], m[s[9]])
        _mix(v, 1, 6, 11, 12, m[s[10]], m[s[11]])
        _mix(v, 2, 7, 8, 13, m[s[12]], m[s[13]])
        _mix(v, 3, 4, 9, 14, m[s[14]], m[s[15]])
    for i in range(8):
        h[i] ^= v[i] ^ v[i + 8]


@numba.njit(cache=True, nogil=True)
def _blake2b_hex16(prefix: Any, buf: Any, p: int, n: int, out: Any, o: int) -> None:
    """Write the hex of ``blake2b(prefix + buf[p:p + n], digest_size=16)`` at ``out[o:o + 32]``."""
    total = len(prefix) + n
    h = _B2_IV.copy()
    h[0] ^= np.uint64(0x01010010)  # digest length 16, no key, fanout and depth 1
    block = np.zeros(128, np.uint8)
    m = np.empty(16, np.uint64)
    v = np.empty(16, np.uint64)
    start = 0
    while True:
        stop = min(start + 128, total)
        for k in range(128):
            i = start + k
            if i >= stop:
                block[k] = 0
            elif i < len(prefix):
                block[k] = prefix[i]
            else:
                block[k] = buf[p + i - len(prefix)]
        for w in range(16):
            x = np.uint64(0)
            for b in range(8):
                x |= np.uint64(block[8 * w + b]) << np.uint64(8 * b)
            m[w] = x
        last = stop >= total
        _compress(h, m, v, stop, last)
        if last:
            break
        start = stop
    for i in range(16):
        b = (h[i >> 3] >> np.uint64(8 * (i & 7))) & np.uint64(0xFF)
        out[o + 2 * i] = _HEX[b >> np.uint64(4)]
        out[o + 2 * i + 1] = _HEX[b & np.uint64(15)]


@numba.njit(cache=True, nogil=True)
def _set_bit(bits: Any, c: int, i: int) -> None:
    bits[c, i >> 3] |= np.uint8(1 << (i & 7))


@numba.njit(cache=True, nogil=True)
def _is_sub(attr: Any, at: Any, i: int) -> bool:
    """Whether record ``i`` has a non-empty text ``agent_id`` (a sub-agent's request)."""
    j = at[i, _AGENT]
    return bool(j >= 0 and attr[j, A_KIND] == STRING and attr[j, A_VLEN] > 0)


@numba.njit(cache=True, nogil=True)
def _number(attr: Any, attr_f: Any, j: int) -> tuple[bool, float, bool]:
    """(whether attribute ``j`` is a number or absent, its value as a float, whether that is a finite
    number): :func:`traceflow.otlp.attributes.num`'s rules for ints and doubles (-1: absent)."""
    if j < 0:
        return True, 0.0, False
    kind = attr[j, A_KIND]
    if kind == INT:
        f = float(attr[j, A_VALUE])
    elif kind == DOUBLE:
        f = attr_f[j, A_VALUE]
    else:
        return kind == NONE, 0.0, False
    return True, f, bool(np.isfinite(f))


@numba.njit(cache=True, nogil=True)
def _copy(out: Any, o: int, src: Any, p: int, n: int) -> int:
    for k in range(n):
        out[o + k] = src[p + k]
    return o + n


@numba.njit(cache=True, nogil=True)
def request_columns(
    buf: Any,
    rows: Any,
    rec: Any,
    attr: Any,
    attr_f: Any,
    at: Any,
    group_version: Any,
    group_version_offsets: Any,
    max_tokens: int,
    max_duration_ms: float,
) -> tuple[int, Any, Any, Any, Any, Any, Any, Any]:
    """The columns of :func:`traceflow.otlp.claude_code.api_request` of records ``rows``: (status,
    ints, floats, their validity bitmaps, text offsets, text data, text validity bitmaps, where each
    text column's data starts). ``at`` is :func:`traceflow.otlp.wire_jit.slots` over :data:`SLOTS`,
    ``attr_f`` is ``attr`` as float64; ``group_version`` the ``service.version`` of each scope group
    (offsets; empty: none). Status 1 when a record needs the dict path (a token count that is not an
    int in [0, max_tokens], a number or text attribute of another kind, a duration out of range, no
    request id, no time), else 0. Arrays are column-major (one row per column), bitmaps as Arrow's."""
    n = len(rows)
    nb = (n + 7) >> 3
    ints = np.zeros((INT_COLUMNS, n), np.int64)
    floats = np.zeros((3, n), np.float64)
    int_bits = np.zeros((INT_COLUMNS + 3, nb), np.uint8)
    lengths = np.full((TEXT_COLUMNS, n), -1, np.int64)
    offsets = np.zeros((TEXT_COLUMNS, n + 1), np.int64)
    text_bits = np.zeros((TEXT_COLUMNS, nb), np.uint8)
    starts = np.zeros(TEXT_COLUMNS + 1, np.int64)
    fail = (1, ints, floats, int_bits, offsets, np.empty(0, np.uint8), text_bits, starts)
    for i in range(n):
        for s in range(6):  # token counts: ints in [0, max_tokens] (an empty value is no count)
            j = at[i, s]
            if j >= 0 and attr[j, A_KIND] != NONE:
                v = attr[j, A_VALUE]
                if attr[j, A_KIND] != INT or v < 0 or v > max_tokens:
                    return fail  # the dict path coerces or refuses those
                ints[s, i] = v
                _set_bit(int_bits, s, i)
        # anthropic_cache_write: a non-zero total, else the split's sum when positive, else the total
        split = ints[I_5M, i] + ints[I_1H, i]
        has_write = (int_bits[I_WRITE, i >> 3] >> (i & 7)) & 1
        if not (has_write and ints[I_WRITE, i] != 0) and split > 0:
            ints[I_WRITE, i] = split
            _set_bit(int_bits, I_WRITE, i)
        ok_d, dur, dur_ok = _number(attr, attr_f, at[i, _DUR])
        ok_t, ttft, ttft_ok = _number(attr, attr_f, at[i, _TTFT])
        ok_c, cost, cost_ok = _number(attr, attr_f, at[i, _COST])
        ok_m, micros, micros_ok = _number(attr, attr_f, at[i, _MICROS])
        if not (ok_d and ok_t and ok_c and ok_m):
            return fail  # num() of text or a bool: the dict path
        if dur_ok and not 0.0 <= dur <= max_duration_ms:
            return fail  # refused by the dict path
        if not cost_ok and micros_ok:
            cost, cost_ok = micros / 1e6, True
        for c, f, ok in ((F_DURATION, dur, dur_ok), (F_TTFT, ttft, ttft_ok), (F_COST, cost, cost_ok)):
            if ok and (c != F_TTFT or 0.0 <= f <= max_duration_ms):
                floats[c, i] = f
                _set_bit(int_bits, INT_COLUMNS + c, i)
        r = rows[i]
        t = np.uint64(rec[r, R_TIME])
        if t == 0:
            t = np.uint64(rec[r, R_OBSERVED])
        if t == 0:
            return fail  # dated by event.timestamp: the dict path
        ts = np.int64(t // np.uint64(1000))
        ints[I_ENDED, i] = ts
        _set_bit(int_bits, I_ENDED, i)
        if dur_ok:
            ints[I_STARTED, i] = ts - np.int64(np.rint(dur * 1000.0))
            _set_bit(int_bits, I_STARTED, i)
        j = at[i, _SEQ]
        if j >= 0 and attr[j, A_KIND] == INT:
            ints[I_SEQ, i] = attr[j, A_VALUE]
            _set_bit(int_bits, I_SEQ, i)
        for s in _TEXT_SLOTS:
            j = at[i, s]
            if j >= 0 and attr[j, A_KIND] != STRING and attr[j, A_KIND] != NONE:
                return fail  # text() of a number or bool: the dict path
        for c in range(1, TEXT_COLUMNS):
            j = at[i, _TEXT_SLOT[c]]
            if j >= 0 and attr[j, A_KIND] == STRING and attr[j, A_VLEN] > 0:  # "" is None
                lengths[c, i] = attr[j, A_VLEN]
        if lengths[T_REQUEST, i] < 0:
            return fail  # no request id: the id hashes the tokens (dict path)
        lengths[T_EVENT_ID, i] = 32
        g = rec[r, R_GROUP]
        gl = group_version_offsets[g + 1] - group_version_offsets[g]
        if gl > 0:  # the resource's service.version, else app.version
            lengths[T_VERSION, i] = gl
        if _is_sub(attr, at, i):  # a sub-agent: session agent-<agent_id>, parent the session it was sent with
            lengths[T_SESSION, i] = len(_AGENT_PREFIX) + attr[at[i, _AGENT], A_VLEN]
        else:
            lengths[T_PARENT, i] = -1
    for c in range(TEXT_COLUMNS):
        starts[c + 1] = starts[c]
        for i in range(n):
            k = lengths[c, i]
            if k >= 0:
                _set_bit(text_bits, c, i)
                starts[c + 1] += k
            offsets[c, i + 1] = starts[c + 1] - starts[c]
    data = np.empty(starts[TEXT_COLUMNS], np.uint8)
    for c in range(TEXT_COLUMNS):
        for i in range(n):
            if lengths[c, i] < 0:
                continue
            o = starts[c] + offsets[c, i]
            if c == T_EVENT_ID:
                j = at[i, _RID]
                _blake2b_hex16(_ANTHROPIC_REQUEST, buf, attr[j, A_VALUE], attr[j, A_VLEN], data, o)
                continue
            g = rec[rows[i], R_GROUP]
            if c == T_VERSION and group_version_offsets[g + 1] > group_version_offsets[g]:
                o = _copy(data, o, group_version, group_version_offsets[g], lengths[c, i])
                continue
            j = at[i, _TEXT_SLOT[c]]
            if c == T_SESSION and _is_sub(attr, at, i):
                o = _copy(data, o, _AGENT_PREFIX, 0, len(_AGENT_PREFIX))
                j = at[i, _AGENT]
            _copy(data, o, buf, attr[j, A_VALUE], attr[j, A_VLEN])
    return 0, ints, floats, int_bits, offsets, data, text_bits, starts


@numba.njit(cache=True, nogil=True)
def list_offsets(text: Any) -> Any:
    """Where each item of a JSON list of numbers (``[a,b,...]``, as orjson writes it) starts, and
    one past the end: item ``d`` is ``text[off[d]:off[d + 1] - 1]``."""
    count = 0
    for b in text:
        if b == 44:
            count += 1
    out = np.empty(count + 2, np.int64)
    out[0] = 1
    k = 1
    for q in range(len(text)):
        if text[q] == 44:
            out[k] = q + 1
            k += 1
    out[k] = len(text)
    return out


@numba.njit(cache=True, nogil=True)
def _copy_text(out: Any, o: int, src: Any, p: int, n: int) -> int:
    """:func:`_copy` of text that JSON writes as its bytes; -1 when it must escape a byte of it (a
    quote, a backslash, a control character)."""
    for k in range(n):
        b = src[p + k]
        if b < 0x20 or b == 0x22 or b == 0x5C:
            return -1
        out[o + k] = b
    return o + n


@numba.njit(cache=True, nogil=True)
def _room(out: Any, o: int, need: int) -> Any:
    """``out``, or a copy twice as large when ``need`` more bytes after ``o`` do not fit."""
    if o + need <= len(out):
        return out
    grown = np.empty(max(2 * len(out), o + need), np.uint8)
    grown[:o] = out[:o]
    return grown


@numba.njit(cache=True, nogil=True)
def _put_int(out: Any, o: int, v: int) -> int:
    if v == 0:
        out[o] = 48
        return o + 1
    if v < 0:
        out[o] = 45
        o += 1
    u = np.uint64(-(v + 1)) + np.uint64(1) if v < 0 else np.uint64(v)
    nd = 0
    x = u
    while x > 0:
        x //= np.uint64(10)
        nd += 1
    for i in range(nd - 1, -1, -1):
        out[o + i] = 48 + np.uint8(u % np.uint64(10))
        u //= np.uint64(10)
    return o + nd


@numba.njit(cache=True, nogil=True)
def _put_hex_field(out: Any, o: int, name: Any, buf: Any, p: int, n: int, first: bool) -> int:
    """``,"name":"<hex>"`` (no comma when ``first``)."""
    if not first:
        out[o] = 44
        o += 1
    o = _copy(out, o, name, 0, len(name))
    out[o] = 34
    o += 1
    for i in range(n):
        b = buf[p + i]
        out[o] = _HEX[b >> 4]
        out[o + 1] = _HEX[b & 15]
        o += 2
    out[o] = 34
    return o + 1


@numba.njit(cache=True, nogil=True)
def _nonzero(buf: Any, p: int, n: int) -> bool:
    for i in range(p, p + n):  # noqa: SIM110 (a loop numba compiles)
        if buf[i] != 0:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def attributes_json(
    buf: Any,
    rows: Any,
    rec: Any,
    attr: Any,
    kid: Any,
    key_text: Any,
    key_offsets: Any,
    drop_kid: Any,
    double_text: Any,
    double_offsets: Any,
    double_index: Any,
    resource_text: Any,
    resource_offsets: Any,
    has_kid: Any,
    trace_lit: Any,
    span_lit: Any,
    resource_lit: Any,
) -> tuple[Any, Any]:
    """The ``attributes`` JSON of each record of ``rows``, as orjson writes the dict the mapping builds
    (:meth:`traceflow.otlp.mapper.Mapper.attrs`): its attributes in order without the dropped keys,
    then ``resource`` (the group's resource attributes, ``resource_text``; none when empty),
    ``trace_id`` and ``span_id`` (hex, when not all zero), each only when no attribute has that key
    (``has_kid``: ids of ``resource``, ``trace_id``, ``span_id``, -1 when no record has it). Doubles
    are the items of the JSON list ``double_text`` (:func:`list_offsets`: ``double_offsets``), attribute
    ``j`` its item ``double_index[j]``. Returns Arrow large-string buffers (offsets, data); no
    offsets when a text needs escaping (which the dict path then writes)."""
    n = len(rows)
    offsets = np.zeros(n + 1, np.int64)
    out = np.empty(1024 + 64 * n, np.uint8)
    o = 0
    for i in range(n):
        r = rows[i]
        out = _room(out, o, 1)
        out[o] = 123
        o += 1
        first = True
        has_res = False
        has_tid = False
        has_sid = False
        for j in range(rec[r, R_A0], rec[r, R_A1]):
            k = kid[j]
            if k == has_kid[0]:
                has_res = True
            elif k == has_kid[1]:
                has_tid = True
            elif k == has_kid[2]:
                has_sid = True
            if drop_kid[k]:
                continue
            kind = attr[j, A_KIND]
            key_len = key_offsets[k + 1] - key_offsets[k]
            if kind == STRING:
                need = attr[j, A_VLEN] + 2
            elif kind == DOUBLE:
                d = double_index[j]
                need = double_offsets[d + 1] - double_offsets[d] - 1
            else:
                need = 20
            out = _room(out, o, 1 + key_len + need)
            if not first:
                out[o] = 44
                o += 1
            first = False
            o = _copy(out, o, key_text, key_offsets[k], key_len)
            if kind == STRING:
                out[o] = 34
                o = _copy_text(out, o + 1, buf, attr[j, A_VALUE], attr[j, A_VLEN])
                if o < 0:
                    return np.empty(0, np.int64), out[:0]  # text JSON must escape: the dict path
                out[o] = 34
                o += 1
            elif kind == INT:
                o = _put_int(out, o, attr[j, A_VALUE])
            elif kind == DOUBLE:
                o = _copy(out, o, double_text, double_offsets[d], need)
            elif kind == BOOL:
                o = _copy(out, o, _TRUE, 0, 4) if attr[j, A_VALUE] != 0 else _copy(out, o, _FALSE, 0, 5)
            else:
                o = _copy(out, o, _NULL, 0, 4)
        g = rec[r, R_GROUP]
        rl = resource_offsets[g + 1] - resource_offsets[g]
        tl = rec[r, R_TID_LEN]
        sl = rec[r, R_SID_LEN]
        out = _room(out, o, 4 + len(resource_lit) + rl + len(trace_lit) + len(span_lit) + 2 * (tl + sl) + 8)
        if rl > 0 and not has_res:
            if not first:
                out[o] = 44
                o += 1
            first = False
            o = _copy(out, o, resource_lit, 0, len(resource_lit))
            o = _copy(out, o, resource_text, resource_offsets[g], rl)
        if tl > 0 and not has_tid and _nonzero(buf, rec[r, R_TID_OFF], tl):
            o = _put_hex_field(out, o, trace_lit, buf, rec[r, R_TID_OFF], tl, first)
            first = False
        if sl > 0 and not has_sid and _nonzero(buf, rec[r, R_SID_OFF], sl):
            o = _put_hex_field(out, o, span_lit, buf, rec[r, R_SID_OFF], sl, first)
            first = False
        out[o] = 125
        o += 1
        offsets[i + 1] = o
    return offsets, out[:o]
