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
BAD = 1  # an attribute the columnar path does not write (nested, bytes, escaped text, a repeated key)

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
        n, p = _varint(buf, p, end)
        if p < 0 or n < 0 or p + n > end:
            return -1
        return int(p + n)
    return -1


@numba.njit(cache=True, nogil=True)
def _fixed64(buf: Any, p: int) -> Any:
    v = np.uint64(0)
    for i in range(8):
        v |= np.uint64(buf[p + i]) << np.uint64(8 * i)
    return np.int64(v)


@numba.njit(cache=True, nogil=True)
def _needs_escape(buf: Any, p: int, n: int) -> bool:
    """Whether JSON writes the text differently from its bytes (a quote, a backslash, a control)."""
    for i in range(p, p + n):
        b = buf[i]
        if b < 0x20 or b == 0x22 or b == 0x5C:
            return True
    return False


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
def _key_value(buf: Any, p: int, end: int, j: int, fill: bool, attr: Any) -> int:
    """Read one KeyValue in ``[p, end)`` into row ``j`` of ``attr`` (key_off, key_len, kind, value,
    value length, escape, hash); returns 0, or -1 when the walker must give up."""
    key_off = -1
    key_len = 0
    kind = NONE
    val = 0
    vlen = 0
    seen_value = False
    while p < end:
        tag, p = _varint(buf, p, end)
        if p < 0:
            return -1
        field = tag >> 3
        wire = tag & 7
        if field == 1 and wire == 2 and key_off < 0:
            n, p = _varint(buf, p, end)
            if p < 0 or p + n > end:
                return -1
            key_off, key_len = p, n
            p += n
        elif field == 2 and wire == 2 and not seen_value:
            seen_value = True
            n, p = _varint(buf, p, end)
            if p < 0 or p + n > end:
                return -1
            q, vend = p, p + n
            p = vend
            seen_one = False
            while q < vend:
                t2, q = _varint(buf, q, vend)
                if q < 0:
                    return -1
                f2 = t2 >> 3
                w2 = t2 & 7
                if seen_one or f2 < 1 or f2 > 7:
                    return -1  # two members of the oneof (protobuf keeps the last), or unknown
                seen_one = True
                if f2 == 1 or f2 == 5 or f2 == 6 or f2 == 7:
                    if w2 != 2:
                        return -1
                    m, q = _varint(buf, q, vend)
                    if q < 0 or q + m > vend:
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
    if fill:
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
        esc = _needs_escape(buf, key_off, key_len)
        if kind == STRING:
            esc = esc or _needs_escape(buf, val, vlen)
        attr[j, 5] = 1 if esc else 0
        attr[j, 6] = np.int64(h)
    return 0


# record columns
R_GROUP, R_TIME, R_OBSERVED, R_BODY_KIND, R_BODY_OFF, R_BODY_LEN, R_NAME_OFF, R_NAME_LEN = range(8)
R_TID_OFF, R_TID_LEN, R_SID_OFF, R_SID_LEN, R_A0, R_A1, R_FLAGS = range(8, 15)
R_COLUMNS = 15
# attribute columns
A_KEY_OFF, A_KEY_LEN, A_KIND, A_VALUE, A_VLEN, A_ESCAPE, A_HASH = range(7)
A_COLUMNS = 7


@numba.njit(cache=True, nogil=True)
def _log_record(buf: Any, p: int, end: int, r: int, g: int, na: int, fill: bool, rec: Any, attr: Any) -> int:
    """Read one LogRecord; returns the attribute count after it, or -1."""
    seen = np.zeros(13, np.bool_)
    a0 = na
    if fill:
        rec[r, R_GROUP] = g
        rec[r, R_BODY_KIND] = -1
        rec[r, R_NAME_LEN] = 0
        rec[r, R_TID_LEN] = 0
        rec[r, R_SID_LEN] = 0
        rec[r, R_TIME] = 0
        rec[r, R_OBSERVED] = 0
        rec[r, R_FLAGS] = 0
    while p < end:
        tag, p = _varint(buf, p, end)
        if p < 0:
            return -1
        field = tag >> 3
        wire = tag & 7
        if field < 1 or field > 12 or field == 4:
            return -1
        if field != 6:
            if seen[field]:
                return -1
            seen[field] = True
        if field == 1 or field == 11:
            if wire != 1 or p + 8 > end:
                return -1
            if fill:
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
            n, p = _varint(buf, p, end)
            if p < 0 or n < 0 or p + n > end:
                return -1
            if field == 6:
                if _key_value(buf, p, p + n, na, fill, attr) < 0:
                    return -1
                na += 1
            elif fill:
                if field == 5:  # body: only its kind and a string's bytes are needed here
                    kind = NONE
                    q = p
                    while q < p + n:
                        if kind != NONE:
                            return -1  # two members of the oneof: protobuf keeps the last
                        t2, q = _varint(buf, q, p + n)
                        if q < 0:
                            return -1
                        kind = t2 >> 3
                        if kind == 1:
                            if (t2 & 7) != 2:
                                return -1
                            m, q = _varint(buf, q, p + n)
                            if q < 0 or q + m > p + n:
                                return -1
                            rec[r, R_BODY_OFF] = q
                            rec[r, R_BODY_LEN] = m
                            q += m
                        else:
                            q = _skip(buf, q, p + n, t2 & 7)
                            if q < 0:
                                return -1
                    rec[r, R_BODY_KIND] = kind
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
    if fill:
        rec[r, R_A0] = a0
        rec[r, R_A1] = na
    return na


@numba.njit(cache=True, nogil=True)
def scan(buf: Any, fill: bool, rec: Any, attr: Any) -> tuple[int, int, int]:
    """Walk the request: (records, attributes, scope groups), or (-1, -1, -1) when the walker gives up.
    With ``fill`` false only counts (``rec`` and ``attr`` unused); with it, fills them."""
    end = len(buf)
    p = 0
    nr = 0
    na = 0
    g = 0
    while p < end:
        tag, p = _varint(buf, p, end)
        if p < 0 or tag != 10:  # only resource_logs (1, LEN)
            return -1, -1, -1
        n, p = _varint(buf, p, end)
        if p < 0 or p + n > end:
            return -1, -1, -1
        rl_end = p + n
        seen_resource = False
        seen_schema = False
        while p < rl_end:
            t, p = _varint(buf, p, rl_end)
            if p < 0:
                return -1, -1, -1
            f = t >> 3
            if (t & 7) != 2 or f < 1 or f > 3:
                return -1, -1, -1
            m, p = _varint(buf, p, rl_end)
            if p < 0 or p + m > rl_end:
                return -1, -1, -1
            if f == 1 or f == 3:
                if (f == 1 and seen_resource) or (f == 3 and seen_schema):
                    return -1, -1, -1
                seen_resource = seen_resource or f == 1
                seen_schema = seen_schema or f == 3
                p += m
                continue
            sl_end = p + m  # one ScopeLogs
            while p < sl_end:
                t, p = _varint(buf, p, sl_end)
                if p < 0:
                    return -1, -1, -1
                f = t >> 3
                if (t & 7) != 2 or f < 1 or f > 3:
                    return -1, -1, -1
                k, p = _varint(buf, p, sl_end)
                if p < 0 or p + k > sl_end:
                    return -1, -1, -1
                if f == 2:
                    na = _log_record(buf, p, p + k, nr, g, na, fill, rec, attr)
                    if na < 0:
                        return -1, -1, -1
                    nr += 1
                p += k  # scope and schema_url: read from the decoded message
            g += 1
    return nr, na, g


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
            if kind >= ARRAY or attr[j, A_ESCAPE] != 0:
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


@numba.njit(cache=True, nogil=True)
def gather_text(buf: Any, off: Any, length: Any, prefixed: Any, prefix: Any) -> tuple[Any, Any]:
    """The texts at ``(off, length)`` as Arrow large-string buffers (offsets, data), ``prefix`` before
    those where ``prefixed``; a length < 0 is a null (empty here)."""
    n = len(off)
    offsets = np.zeros(n + 1, np.int64)
    for i in range(n):
        k = length[i]
        offsets[i + 1] = offsets[i] + (k + (len(prefix) if prefixed[i] else 0) if k >= 0 else 0)
    data = np.empty(offsets[n], np.uint8)
    for i in range(n):
        if length[i] < 0:
            continue
        o = offsets[i]
        if prefixed[i]:
            for k in range(len(prefix)):
                data[o + k] = prefix[k]
            o += len(prefix)
        for k in range(length[i]):
            data[o + k] = buf[off[i] + k]
    return offsets, data


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8).copy()
_TRUE = np.frombuffer(b"true", np.uint8).copy()
_FALSE = np.frombuffer(b"false", np.uint8).copy()
_NULL = np.frombuffer(b"null", np.uint8).copy()


@numba.njit(cache=True, nogil=True)
def _put_int(out: Any, o: int, v: int, fill: bool) -> int:
    if v == 0:
        if fill:
            out[o] = 48
        return o + 1
    neg = v < 0
    u = np.uint64(-(v + 1)) + np.uint64(1) if neg else np.uint64(v)
    digits = np.empty(20, np.uint8)
    nd = 0
    while u > 0:
        digits[nd] = 48 + np.uint8(u % np.uint64(10))
        u //= np.uint64(10)
        nd += 1
    if neg:
        if fill:
            out[o] = 45
        o += 1
    for i in range(nd):
        if fill:
            out[o] = digits[nd - 1 - i]
        o += 1
    return o


@numba.njit(cache=True, nogil=True)
def _put(out: Any, o: int, src: Any, p: int, n: int, fill: bool) -> int:
    if fill:
        for i in range(n):
            out[o + i] = src[p + i]
    return o + n


@numba.njit(cache=True, nogil=True)
def _put_hex_field(out: Any, o: int, name: Any, buf: Any, p: int, n: int, first: bool, fill: bool) -> int:
    """``,"name":"<hex>"`` (no comma when ``first``)."""
    if not first:
        if fill:
            out[o] = 44
        o += 1
    o = _put(out, o, name, 0, len(name), fill)
    if fill:
        out[o] = 34
    o += 1
    for i in range(n):
        b = buf[p + i]
        if fill:
            out[o] = _HEX[b >> 4]
            out[o + 1] = _HEX[b & 15]
        o += 2
    if fill:
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
    (``has_kid``: ids of ``resource``, ``trace_id``, ``span_id``, -1 when no record has it). Returns
    Arrow large-string buffers (offsets, data)."""
    n = len(rows)
    offsets = np.zeros(n + 1, np.int64)
    out = np.empty(0, np.uint8)
    for step in range(2):
        fill = step == 1
        if fill:
            out = np.empty(offsets[n], np.uint8)
        o = 0
        for i in range(n):
            r = rows[i]
            if fill:
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
                if not first:
                    if fill:
                        out[o] = 44
                    o += 1
                first = False
                o = _put(out, o, key_text, key_offsets[k], key_offsets[k + 1] - key_offsets[k], fill)
                kind = attr[j, A_KIND]
                if kind == STRING:
                    if fill:
                        out[o] = 34
                    o = _put(out, o + 1, buf, attr[j, A_VALUE], attr[j, A_VLEN], fill)
                    if fill:
                        out[o] = 34
                    o += 1
                elif kind == INT:
                    o = _put_int(out, o, attr[j, A_VALUE], fill)
                elif kind == DOUBLE:
                    d = double_index[j]
                    o = _put(
                        out,
                        o,
                        double_text,
                        double_offsets[d],
                        double_offsets[d + 1] - double_offsets[d],
                        fill,
                    )
                elif kind == BOOL:
                    if attr[j, A_VALUE] != 0:
                        o = _put(out, o, _TRUE, 0, 4, fill)
                    else:
                        o = _put(out, o, _FALSE, 0, 5, fill)
                else:
                    o = _put(out, o, _NULL, 0, 4, fill)
            g = rec[r, R_GROUP]
            rl = resource_offsets[g + 1] - resource_offsets[g]
            if rl > 0 and not has_res:
                if not first:
                    if fill:
                        out[o] = 44
                    o += 1
                first = False
                o = _put(out, o, resource_lit, 0, len(resource_lit), fill)
                o = _put(out, o, resource_text, resource_offsets[g], rl, fill)
            tl = rec[r, R_TID_LEN]
            if tl > 0 and not has_tid and _nonzero(buf, rec[r, R_TID_OFF], tl):
                o = _put_hex_field(out, o, trace_lit, buf, rec[r, R_TID_OFF], tl, first, fill)
                first = False
            sl = rec[r, R_SID_LEN]
            if sl > 0 and not has_sid and _nonzero(buf, rec[r, R_SID_OFF], sl):
                o = _put_hex_field(out, o, span_lit, buf, rec[r, R_SID_OFF], sl, first, fill)
                first = False
            if fill:
                out[o] = 125
            o += 1
            if not fill:
                offsets[i + 1] = o
    return offsets, out
