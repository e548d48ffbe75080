"""Numba kernels that read an ``ExportLogsServiceRequest``'s wire bytes into columns (no Python object
per record or attribute), for :mod:`traceflow.otlp.logs_columnar`.

Why our own code: the one library that turns protobuf into Arrow (protarrow 0.16) reads the decoded
Python message objects, 656 CPU µs per Claude Code record here, against the 25 µs a 40,000
records/s sealer has for everything (benchmarks/README.md, "Sealing CPU per record").

The walker is strict: anything it does not expect (a field it does not know, a wire type other than
the schema's, a singular field sent twice, which protobuf would merge) makes it return a negative
status, and the caller maps the request with the dict path (:mod:`traceflow.otlp.logs`) instead.
It runs after ``ParseFromString`` accepted the bytes (upb checked their framing and UTF-8).

Import this module only through :func:`traceflow.native.jit_enabled` (importing numba takes ~0.3 s).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

# attribute value kinds (AnyValue's oneof; NONE: no value)
NONE, STRING, BOOL, INT, DOUBLE, ARRAY, KVLIST, BYTES = 0, 1, 2, 3, 4, 5, 6, 7
# record flags
BAD = 1  # an attribute the columnar path does not write (nested, bytes, a repeated key)

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@numba.njit(cache=True, nogil=True)
def _varint(buf: Any, p: int, end: int) -> tuple[Any, int]:
    """(value as uint64 bits in an int64, position after it); position -1 when malformed."""
    result = np.uint64(0)
    shift = 0
    while p < end and shift < 64:
        b = buf[p]
        p += 1
        result |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            return np.int64(result), p
        shift += 7
    return 0, -1


@numba.njit(cache=True, nogil=True)
def _tag(buf: Any, p: int, end: int) -> tuple[int, int, int]:
    """A field's tag at ``p``: (field number, wire type, position after it); position -1 when
    malformed."""
    t, p = _varint(buf, p, end)
    return t >> 3, t & 7, p


@numba.njit(cache=True, nogil=True)
def _length(buf: Any, p: int, end: int) -> tuple[int, int]:
    """A LEN field's length at ``p``: (position of its bytes, their count); position -1 when
    malformed or when they run past ``end``."""
    n, p = _varint(buf, p, end)
    if p < 0 or n < 0 or p + n > end:
        return -1, 0
    return p, n


@numba.njit(cache=True, nogil=True)
def _skip(buf: Any, p: int, end: int, wire: int) -> int:
    """The position after a field's value of wire type ``wire`` (-1 when malformed)."""
    if wire == 0:
        _, p = _varint(buf, p, end)
        return p
    if wire == 1:
        return p + 8 if p + 8 <= end else -1
    if wire == 5:
        return p + 4 if p + 4 <= end else -1
    if wire == 2:
        p, n = _length(buf, p, end)
        return p + n if p >= 0 else -1
    return -1


@numba.njit(cache=True, nogil=True)
def _fixed64(buf: Any, p: int) -> Any:
    v = np.uint64(0)
    for i in range(8):
        v |= np.uint64(buf[p + i]) << np.uint64(8 * i)
    return np.int64(v)


@numba.njit(cache=True, nogil=True)
def _equal(buf: Any, p: int, n: int, q: int, m: int) -> bool:
    if n != m:
        return False
    for i in range(n):  # noqa: SIM110 (a loop numba compiles)
        if buf[p + i] != buf[q + i]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _equal_lit(buf: Any, p: int, n: int, lit: Any) -> bool:
    if n != len(lit):
        return False
    for i in range(n):  # noqa: SIM110 (a loop numba compiles)
        if buf[p + i] != lit[i]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _key_value(buf: Any, p: int, end: int, j: int, attr: Any) -> int:
    """Read one KeyValue in ``[p, end)`` into row ``j`` of ``attr`` (key_off, key_len, kind, value,
    value length, key hash); returns 0, or -1 when the walker must give up."""
    key_off = -1
    key_len = 0
    kind = NONE
    val = 0
    vlen = 0
    seen_value = False
    while p < end:
        field, wire, p = _tag(buf, p, end)
        if p < 0:
            return -1
        if field == 1 and wire == 2 and key_off < 0:
            p, n = _length(buf, p, end)
            if p < 0:
                return -1
            key_off, key_len = p, n
            p += n
        elif field == 2 and wire == 2 and not seen_value:
            seen_value = True
            p, n = _length(buf, p, end)
            if p < 0:
                return -1
            q, vend = p, p + n
            p = vend
            seen_one = False
            while q < vend:
                f2, w2, q = _tag(buf, q, vend)
                if q < 0:
                    return -1
                if seen_one or f2 < 1 or f2 > 7:
                    return -1  # two members of the oneof (protobuf keeps the last), or unknown
                seen_one = True
                if f2 == 1 or f2 == 5 or f2 == 6 or f2 == 7:
                    if w2 != 2:
                        return -1
                    q, m = _length(buf, q, vend)
                    if q < 0:
                        return -1
                    kind = STRING if f2 == 1 else (ARRAY if f2 == 5 else (KVLIST if f2 == 6 else BYTES))
                    val, vlen = q, m
                    q += m
                elif f2 == 2 or f2 == 3:
                    if w2 != 0:
                        return -1
                    v, q = _varint(buf, q, vend)
                    if q < 0:
                        return -1
                    kind = BOOL if f2 == 2 else INT
                    val = (1 if v != 0 else 0) if f2 == 2 else v
                else:  # double
                    if w2 != 1 or q + 8 > vend:
                        return -1
                    kind = DOUBLE
                    val = _fixed64(buf, q)
                    q += 8
        else:
            return -1
    if key_off < 0:
        key_off = 0
    h = _FNV_OFFSET
    for i in range(key_off, key_off + key_len):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    attr[j, 0] = key_off
    attr[j, 1] = key_len
    attr[j, 2] = kind
    attr[j, 3] = val
    attr[j, 4] = vlen
    attr[j, 5] = np.int64(h)
    return 0


# record columns
R_GROUP, R_TIME, R_OBSERVED, R_BODY_KIND, R_BODY_OFF, R_BODY_LEN, R_NAME_OFF, R_NAME_LEN = range(8)
R_TID_OFF, R_TID_LEN, R_SID_OFF, R_SID_LEN, R_A0, R_A1, R_FLAGS = range(8, 15)
R_COLUMNS = 15
# attribute columns
A_KEY_OFF, A_KEY_LEN, A_KIND, A_VALUE, A_VLEN, A_HASH = range(6)
A_COLUMNS = 6


@numba.njit(cache=True, nogil=True)
def _log_record(buf: Any, p: int, end: int, r: int, g: int, na: int, rec: Any, attr: Any) -> int:
    """Read one LogRecord into row ``r`` of ``rec``, its attributes from row ``na`` of ``attr`` on;
    returns the attribute count after it, -1 when the walker gives up, -2 when ``attr`` is full."""
    seen = np.zeros(13, np.bool_)
    a0 = na
    rec[r, R_GROUP] = g
    rec[r, R_BODY_KIND] = -1
    rec[r, R_NAME_LEN] = 0
    rec[r, R_TID_LEN] = 0
    rec[r, R_SID_LEN] = 0
    rec[r, R_TIME] = 0
    rec[r, R_OBSERVED] = 0
    rec[r, R_FLAGS] = 0
    while p < end:
        field, wire, p = _tag(buf, p, end)
        if p < 0:
            return -1
        if field < 1 or field > 12 or field == 4:
            return -1
        if field != 6:
            if seen[field]:
                return -1
            seen[field] = True
        if field == 1 or field == 11:
            if wire != 1 or p + 8 > end:
                return -1
            rec[r, R_TIME if field == 1 else R_OBSERVED] = _fixed64(buf, p)
            p += 8
        elif field == 2 or field == 7:
            if wire != 0:
                return -1
            _, p = _varint(buf, p, end)
        elif field == 8:
            if wire != 5:
                return -1
            p += 4
        else:
            if wire != 2:
                return -1
            p, n = _length(buf, p, end)
            if p < 0:
                return -1
            if field == 6:
                if na >= attr.shape[0]:
                    return -2
                if _key_value(buf, p, p + n, na, attr) < 0:
                    return -1
                na += 1
            elif field == 5:  # body: only its kind and a string's bytes are needed here
                if _body(buf, p, p + n, r, rec) < 0:
                    return -1
            elif field == 9:
                rec[r, R_TID_OFF] = p
                rec[r, R_TID_LEN] = n
            elif field == 10:
                rec[r, R_SID_OFF] = p
                rec[r, R_SID_LEN] = n
            elif field == 12:
                rec[r, R_NAME_OFF] = p
                rec[r, R_NAME_LEN] = n
            p += n
        if p < 0 or p > end:
            return -1
    rec[r, R_A0] = a0
    rec[r, R_A1] = na
    return na


@numba.njit(cache=True, nogil=True)
def _body(buf: Any, p: int, end: int, r: int, rec: Any) -> int:
    """Read a LogRecord's body (an AnyValue in ``[p, end)``): its kind, and a string's bytes."""
    kind = NONE
    while p < end:
        if kind != NONE:
            return -1  # two members of the oneof: protobuf keeps the last
        kind, wire, p = _tag(buf, p, end)
        if p < 0:
            return -1
        if kind == 1:
            if wire != 2:
                return -1
            p, m = _length(buf, p, end)
            if p < 0:
                return -1
            rec[r, R_BODY_OFF] = p
            rec[r, R_BODY_LEN] = m
            p += m
        else:
            p = _skip(buf, p, end, wire)
            if p < 0:
                return -1
    rec[r, R_BODY_KIND] = kind
    return 0


@numba.njit(cache=True, nogil=True)
def _len_field(buf: Any, p: int, end: int) -> tuple[int, int, int]:
    """A field 1 to 3 of wire type LEN at ``p`` (the fields of ResourceLogs and ScopeLogs): (field,
    position of its value, its length); position -1 for anything else or malformed."""
    f, wire, p = _tag(buf, p, end)
    if p < 0 or wire != 2 or f < 1 or f > 3:
        return 0, -1, 0
    p, m = _length(buf, p, end)
    return f, p, m


@numba.njit(cache=True, nogil=True)
def _grown(a: Any) -> Any:
    """``a`` with twice the rows (the new ones zero)."""
    out = np.zeros((2 * a.shape[0] + 16, a.shape[1]), a.dtype)
    out[: a.shape[0]] = a
    return out


@numba.njit(cache=True, nogil=True)
def scan(buf: Any, rec: Any, attr: Any) -> tuple[int, int, int, Any, Any]:
    """Walk the request into ``rec`` (a row per record) and ``attr`` (a row per attribute), which grow
    when full: (records, attributes, scope groups, rec, attr), the counts -1 when the walker gives up.
    The rows past the counts are unused."""
    end = len(buf)
    p = 0
    nr = 0
    na = 0
    g = 0
    while p < end:
        f, p, n = _len_field(buf, p, end)
        if p < 0 or f != 1:  # only resource_logs
            return -1, -1, -1, rec, attr
        rl_end = p + n
        seen_resource = False
        seen_schema = False
        while p < rl_end:
            f, p, m = _len_field(buf, p, rl_end)
            if p < 0:
                return -1, -1, -1, rec, attr
            if f == 1 or f == 3:
                if (f == 1 and seen_resource) or (f == 3 and seen_schema):
                    return -1, -1, -1, rec, attr
                seen_resource = seen_resource or f == 1
                seen_schema = seen_schema or f == 3
                p += m
                continue
            sl_end = p + m  # one ScopeLogs
            while p < sl_end:
                f, p, k = _len_field(buf, p, sl_end)
                if p < 0:
                    return -1, -1, -1, rec, attr
                if f == 2:
                    if nr >= rec.shape[0]:
                        rec = _grown(rec)
                    got = _log_record(buf, p, p + k, nr, g, na, rec, attr)
                    while got == -2:
                        attr = _grown(attr)
                        got = _log_record(buf, p, p + k, nr, g, na, rec, attr)
                    if got < 0:
                        return -1, -1, -1, rec, attr
                    na = got
                    nr += 1
                p += k  # scope and schema_url: read from the decoded message
            g += 1
    return nr, na, g, rec, attr


@numba.njit(cache=True, nogil=True)
def classify(
    buf: Any, rec: Any, attr: Any, event_name_lit: Any, full_lit: Any, short_lit: Any, codex: Any, gemini: Any
) -> Any:
    """Per record: 1 when it is ``claude_code.api_request`` whatever its scope, 2 when it is
    ``api_request`` (an api_request only in a Claude Code scope), 3 when its name starts with another
    agent's prefix (``codex``, ``gemini``: ``codex.``, ``gemini_cli.``), 0 otherwise (the rules of
    :func:`traceflow.otlp.logs._names`); and BAD in ``rec[:, R_FLAGS]`` for a record with a repeated
    key or an attribute the columnar path does not write."""
    nr = rec.shape[0]
    out = np.zeros(nr, np.int8)
    prefix_len = 12  # "claude_code."
    for r in range(nr):
        a0 = rec[r, R_A0]
        a1 = rec[r, R_A1]
        bad = False
        event_attr = -1
        for j in range(a0, a1):
            kind = attr[j, A_KIND]
            if kind >= ARRAY:
                bad = True
            for i in range(a0, j):
                if attr[i, A_HASH] == attr[j, A_HASH] and _equal(
                    buf, attr[i, A_KEY_OFF], attr[i, A_KEY_LEN], attr[j, A_KEY_OFF], attr[j, A_KEY_LEN]
                ):
                    bad = True
            if _equal_lit(buf, attr[j, A_KEY_OFF], attr[j, A_KEY_LEN], event_name_lit):
                event_attr = j
        if bad:
            rec[r, R_FLAGS] |= BAD
        if rec[r, R_BODY_KIND] == 1:
            bo = rec[r, R_BODY_OFF]
            bl = rec[r, R_BODY_LEN]
            if bl >= prefix_len:
                starts = True
                for i in range(prefix_len):
                    if buf[bo + i] != full_lit[i]:
                        starts = False
                        break
                if starts:
                    out[r] = 1 if _equal_lit(buf, bo, bl, full_lit) else 0
                    continue
        no, nl = rec[r, R_NAME_OFF], rec[r, R_NAME_LEN]
        if nl == 0:
            if event_attr < 0 or attr[event_attr, A_KIND] != STRING or attr[event_attr, A_VLEN] == 0:
                continue
            no, nl = attr[event_attr, A_VALUE], attr[event_attr, A_VLEN]
        if _equal_lit(buf, no, nl, full_lit):
            out[r] = 1
        elif _equal_lit(buf, no, nl, short_lit):
            out[r] = 2
        else:
            if (nl >= len(codex) and _equal_lit(buf, no, len(codex), codex)) or (
                nl >= len(gemini) and _equal_lit(buf, no, len(gemini), gemini)
            ):
                out[r] = 3
    return out


@numba.njit(cache=True, nogil=True)
def key_ids(buf: Any, attr: Any) -> tuple[Any, Any]:
    """(each attribute's key id, the first attribute of each id): equal keys, equal ids (an open
    addressing table on the keys' hashes, keys compared byte for byte)."""
    n = attr.shape[0]
    size = 16
    while size < 2 * n + 2:
        size *= 2
    table = np.full(size, -1, np.int64)
    kid = np.empty(n, np.int64)
    rep = np.empty(n, np.int64)
    count = 0
    for j in range(n):
        h = np.uint64(attr[j, A_HASH])
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            k = table[slot]
            if k < 0:
                table[slot] = count
                rep[count] = j
                kid[j] = count
                count += 1
                break
            q = rep[k]
            if attr[q, A_HASH] == attr[j, A_HASH] and _equal(
                buf, attr[q, A_KEY_OFF], attr[q, A_KEY_LEN], attr[j, A_KEY_OFF], attr[j, A_KEY_LEN]
            ):
                kid[j] = k
                break
            slot = (slot + 1) & (size - 1)
    return kid, rep[:count].copy()


@numba.njit(cache=True, nogil=True)
def slots(rows: Any, rec: Any, kid: Any, slot_of_kid: Any, n_slots: int) -> Any:
    """For each record of ``rows``: the attribute index of each special key (-1 when absent)."""
    out = np.full((len(rows), n_slots), -1, np.int64)
    for i in range(len(rows)):
        r = rows[i]
        for j in range(rec[r, R_A0], rec[r, R_A1]):
            s = slot_of_kid[kid[j]]
            if s >= 0:
                out[i, s] = j
    return out
