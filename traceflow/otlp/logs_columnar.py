"""Claude Code ``api_request`` log records -> a ``requests`` frame, column by column.

The sealer's fast path (issue 33): the request's wire bytes are read into columns by the numba
kernels of :mod:`traceflow.otlp.wire_jit` (one row per record, one per attribute: key, value kind,
value), and the columns of :func:`traceflow.otlp.claude_code.api_request` are written from those by
the kernels of :mod:`traceflow.otlp.requests_jit` as Arrow buffers (``event_id`` hashed there, the
``attributes`` JSON byte for byte as orjson writes the mapping's dict). No Python object is made per
record. Every other record (user prompts, tool results, ...) is mapped by the dict path
(:mod:`traceflow.otlp.logs`): their ids hash the attribute dict.

:func:`map_logs_columnar` returns None whenever the columns cannot give exactly the rows the dict
path gives, and the caller then maps the whole request with the dict path: numba off or missing, a
wire shape the walker does not take, or any ``api_request`` with something the rules below leave to
the dict path (a token count that is not a non-negative int, a number sent as text, no request id, a
repeated key, a nested or bytes attribute, a stored text that JSON must escape, no timestamp, a
duration out of range, another agent's request row in the same request).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson

from traceflow.native import jit_enabled
from traceflow.otlp.attributes import CONTENT_KEYS
from traceflow.otlp.limits import MAX_DURATION_MS, MAX_TOKENS
from traceflow.otlp.mapper import Mapped, Mapper, scope_groups


def map_logs_columnar(
    msg: Any, body: bytes, *, keep_content: bool, source: str, records: int = 0
) -> tuple[Any, Iterator[Mapped]] | None:
    """(the ``requests`` frame of the Claude Code ``api_request`` records; the :class:`Mapped` of the
    other records, ``records`` at a time), or None when the dict path must map ``msg`` (see the module
    docstring). ``body`` is the protobuf ``msg`` was parsed from."""
    if not jit_enabled() or not body:
        return None
    from traceflow.otlp import wire_jit as w

    buf = np.frombuffer(body, np.uint8)
    # a first guess of the rows (Claude Code sends ~800 bytes per record, ~35 per attribute); they grow
    rec = np.zeros((len(body) // 256 + 16, w.R_COLUMNS), np.int64)
    attr = np.zeros((len(body) // 32 + 64, w.A_COLUMNS), np.int64)
    nr, na, ng, rec, attr = w.scan(buf, rec, attr)
    if nr <= 0:
        return None
    rec, attr = rec[:nr], attr[:na]
    groups = list(scope_groups(msg.resource_logs, "scope_logs"))
    if len(groups) != ng or sum(len(sl.log_records) for _, _, sl in groups) != nr:
        return None
    if any(fam in ("codex", "gemini", "qwen") for _, fam, _ in groups) or b"qwen-code." in body:
        return None  # their request rows would interleave with these
    code = w.classify(
        buf,
        rec,
        attr,
        _lit("event.name"),
        _lit("claude_code.api_request"),
        _lit("api_request"),
        _lit("codex."),
        _lit("gemini_cli."),
    )
    if (code == 3).any():
        return None
    claude_group = np.array([fam == "claude" for _, fam, _ in groups], np.bool_)
    is_api = (code == 1) | ((code == 2) & claude_group[rec[:, w.R_GROUP]])
    rows = np.flatnonzero(is_api)
    if len(rows) == 0:
        return None  # nothing for the columns to do
    if (rec[rows, w.R_FLAGS] & w.BAD).any():
        return None
    frame = _requests_frame(w, buf, body, rec, attr, rows, groups, keep_content, source)
    if frame is None:
        return None
    return frame, _map_rest(groups, ~is_api, keep_content, source, records)


def warm() -> float:
    """Load the kernels (compiled once, then from numba's cache: ``cache=True``) by mapping one
    record; returns the CPU seconds it took (0 when numba is off). The sealer calls it at start, so
    that its first seal does not pay for it."""
    if not jit_enabled():
        return 0.0
    import time

    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    c0 = time.process_time()
    req = ExportLogsServiceRequest()
    sl = req.resource_logs.add().scope_logs.add()
    r = sl.log_records.add(time_unix_nano=1, body={"string_value": "claude_code.api_request"})
    for key, value in (("request_id", {"string_value": "r"}), ("cost_usd", {"double_value": 0.5})):
        r.attributes.add(key=key, value=value)
    r.attributes.add(key="input_tokens").value.int_value = 1
    r.attributes.add(key="x").value.bool_value = True
    body = req.SerializeToString()
    found = map_logs_columnar(req, body, keep_content=False, source="otlp")
    if found is not None:
        list(found[1])
    return time.process_time() - c0


def _lit(s: str) -> Any:
    return np.frombuffer(s.encode(), np.uint8)


def _map_rest(
    groups: list[Any], other: Any, keep_content: bool, source: str, records: int
) -> Iterator[Mapped]:
    """The dict path's rows of the records that are not ``api_request``, ``records`` at a time (all at
    once when 0). None of them is a request (no Codex, Gemini CLI or Qwen Code record: checked by the
    caller)."""
    from traceflow.otlp import logs
    from traceflow.otlp.decode import fit_mapped

    m = Mapper(keep_content, source)
    i = count = 0
    for res, fam, sl in groups:
        items = sl.log_records
        n = len(items)
        for j in np.flatnonzero(other[i : i + n]).tolist():
            logs.pb_log(m, res, fam, items[j])
            count += 1
            if count == records:
                yield fit_mapped(m.result())
                m, count = Mapper(keep_content, source), 0
        i += n
    yield fit_mapped(m.result())


def _requests_frame(
    w: Any,
    buf: Any,
    body: bytes,
    rec: Any,
    attr: Any,
    rows: Any,
    groups: list[Any],
    keep_content: bool,
    source: str,
) -> Any:
    """The ``requests`` frame of records ``rows`` (None when one of them needs the dict path)."""
    import polars as pl
    import pyarrow as pa

    from traceflow.otlp import requests_jit as q

    kid, rep = w.key_ids(buf, attr)
    keys = [body[o : o + n].decode() for o, n in attr[rep][:, [w.A_KEY_OFF, w.A_KEY_LEN]].tolist()]
    slot = {k: i for i, k in enumerate(q.SLOTS)}
    at = w.slots(rows, rec, kid, np.array([slot.get(k, -1) for k in keys], np.int64), len(q.SLOTS))
    versions = [(res.version or "").encode() for res, _, _ in groups]
    status, ints, floats, num_bits, offsets, data, text_bits, starts = q.request_columns(
        buf,
        rows,
        rec,
        attr,
        attr.view(np.float64),
        at,
        _bytes(versions),
        _offsets(versions),
        MAX_TOKENS,
        float(MAX_DURATION_MS),
    )
    if status:
        return None
    n = len(rows)
    attributes = _attributes(w, q, buf, attr, rec, rows, kid, keys, groups, keep_content)
    if attributes is None:
        return None

    def text(c: int) -> Any:
        a, b = starts[c], starts[c + 1]
        bufs = [pa.py_buffer(text_bits[c]), pa.py_buffer(offsets[c]), pa.py_buffer(data[a:b])]
        return pa.Array.from_buffers(pa.large_string(), n, bufs)

    def number(typ: Any, values: Any, c: int) -> Any:
        return pa.Array.from_buffers(typ, n, [pa.py_buffer(num_bits[c]), pa.py_buffer(values)])

    i64, f64, ts = pa.int64(), pa.float64(), pa.timestamp("us", "UTC")
    fc = q.INT_COLUMNS
    columns = {
        "event_id": text(q.T_EVENT_ID),
        "source": _repeat(source, n),
        "agent": _repeat("claude-code", n),
        "agent_version": text(q.T_VERSION),
        "user_id": text(q.T_USER),
        "session_id": text(q.T_SESSION),
        "parent_session_id": text(q.T_PARENT),
        "prompt_id": text(q.T_PROMPT),
        "request_id": text(q.T_REQUEST),
        "started_at": number(ts, ints[q.I_STARTED], q.I_STARTED),
        "ended_at": number(ts, ints[q.I_ENDED], q.I_ENDED),
        "duration_ms": number(f64, floats[q.F_DURATION], fc + q.F_DURATION),
        "ttft_ms": number(f64, floats[q.F_TTFT], fc + q.F_TTFT),
        "model": text(q.T_MODEL),
        "cold_input_tokens": number(i64, ints[q.I_COLD], q.I_COLD),
        "cache_read_tokens": number(i64, ints[q.I_READ], q.I_READ),
        "cache_write_tokens": number(i64, ints[q.I_WRITE], q.I_WRITE),
        "cache_write_5m_tokens": number(i64, ints[q.I_5M], q.I_5M),
        "cache_write_1h_tokens": number(i64, ints[q.I_1H], q.I_1H),
        "output_tokens": number(i64, ints[q.I_OUTPUT], q.I_OUTPUT),
        "cost_usd": number(f64, floats[q.F_COST], fc + q.F_COST),
        "attributes": attributes,
        "seq": number(i64, ints[q.I_SEQ], q.I_SEQ),
        "ingested_at": pa.Array.from_buffers(
            ts, n, [None, pa.py_buffer(np.full(n, _now_micros(), np.int64))]
        ),
    }
    schema = _arrow_schema()
    batch = pa.RecordBatch.from_arrays(
        [columns.get(f.name) or pa.nulls(n, f.type) for f in schema], schema=schema
    )
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _attributes(
    w: Any,
    q: Any,
    buf: Any,
    attr: Any,
    rec: Any,
    rows: Any,
    kid: Any,
    keys: list[str],
    groups: list[Any],
    keep_content: bool,
) -> Any:
    """The ``attributes`` column of records ``rows``: doubles formatted by orjson, resources once
    per group, the rest by :func:`traceflow.otlp.requests_jit.attributes_json` (None when a text
    needs escaping)."""
    import pyarrow as pa

    key_texts = [orjson.dumps(k) + b":" for k in keys]
    drop = np.array([(not keep_content) and k in CONTENT_KEYS for k in keys], np.bool_)
    where = {k: i for i, k in enumerate(keys)}
    has_kid = np.array([where.get(k, -1) for k in ("resource", "trace_id", "span_id")], np.int64)
    doubles = np.flatnonzero(attr[:, w.A_KIND] == w.DOUBLE)
    double_index = np.full(len(attr), -1, np.int64)
    double_index[doubles] = np.arange(len(doubles))
    # orjson writes a float64 array as it writes the list of those floats
    double_text = np.frombuffer(
        orjson.dumps(attr[doubles, w.A_VALUE].view(np.float64), option=orjson.OPT_SERIALIZE_NUMPY), np.uint8
    )
    res_texts = [
        orjson.dumps(res.attrs, option=orjson.OPT_NON_STR_KEYS, default=str) if res.attrs else b""
        for res, _, _ in groups
    ]
    offsets, data = q.attributes_json(
        buf,
        rows,
        rec,
        attr,
        kid,
        _bytes(key_texts),
        _offsets(key_texts),
        drop,
        double_text,
        q.list_offsets(double_text),
        double_index,
        _bytes(res_texts),
        _offsets(res_texts),
        has_kid,
        _lit('"trace_id":'),
        _lit('"span_id":'),
        _lit('"resource":'),
    )
    if not len(offsets):
        return None
    bufs = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.large_string(), len(rows), bufs)


@functools.cache
def _arrow_schema() -> Any:
    """The Arrow schema polars writes the ``requests`` table as (read back as its schema)."""
    import polars as pl

    from traceflow.schema import REQUESTS

    return pl.DataFrame(schema=REQUESTS.schema).to_arrow().schema


def _repeat(text: str, n: int) -> Any:
    """A large-string column of ``n`` times ``text``."""
    import pyarrow as pa

    b = text.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(b)
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)])


def _bytes(parts: list[bytes]) -> Any:
    """``parts`` joined, as a uint8 array (one zero byte when empty: numba wants a buffer)."""
    return np.frombuffer(b"".join(parts) or b"\0", np.uint8)


def _offsets(parts: list[bytes]) -> Any:
    out = np.zeros(len(parts) + 1, np.int64)
    out[1:] = np.cumsum([len(p) for p in parts])
    return out


def _now_micros() -> int:
    import time

    return int(time.time() * 1_000_000)
