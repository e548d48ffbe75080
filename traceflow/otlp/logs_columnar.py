"""Claude Code ``api_request`` log records -> a ``requests`` frame, column by column.

The sealer's fast path (issue 33): the request's wire bytes are read into columns by the numba
kernels of :mod:`traceflow.otlp.wire_jit` (one row per record, one per attribute: key, value kind,
value), and the rows of :func:`traceflow.otlp.claude_code.api_request` are computed from those
columns with numpy and polars, the ``attributes`` JSON written by a kernel byte for byte as orjson
writes the mapping's dict. No Python object is made per record except its ``event_id``. Every other
record (user prompts, tool results, ...) is mapped by the dict path (:mod:`traceflow.otlp.logs`):
their ids hash the attribute dict.

:func:`map_logs_columnar` returns None whenever the columns cannot give exactly the rows the dict
path gives, and the caller then maps the whole request with the dict path: numba off or missing, a
wire shape the walker does not take, or any ``api_request`` with something the rules below leave to
the dict path (a token count that is not a non-negative int, a number sent as text, no request id, a
repeated key, a nested or bytes attribute, text JSON must escape, no timestamp, a duration out of
range, another agent's request row in the same request).
"""

from __future__ import annotations

from collections.abc import Iterator
from hashlib import blake2b
from typing import Any

import numpy as np
import orjson

from traceflow.native import jit_enabled
from traceflow.otlp.attributes import CONTENT_KEYS
from traceflow.otlp.claude_code import TOKEN_KEYS
from traceflow.otlp.limits import MAX_DURATION_MS, MAX_TOKENS
from traceflow.otlp.mapper import Mapped, Mapper, scope_groups

#: the attributes api_request reads (slot order)
_SLOTS = (
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
_S = {k: i for i, k in enumerate(_SLOTS)}
_TEXT_SLOTS = ("session.id", "model", "request_id", "agent_id", "user.id", "prompt.id", "app.version")
_ANTHROPIC_REQUEST = b"\x1fanthropic-request\x1f"


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
    empty = np.zeros((0, 0), np.int64)
    nr, na, ng = w.scan(buf, False, empty, empty)
    if nr <= 0:
        return None
    rec = np.zeros((nr, w.R_COLUMNS), np.int64)
    attr = np.zeros((na, w.A_COLUMNS), np.int64)
    if w.scan(buf, True, rec, attr) != (nr, na, ng):
        return None
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
    import pyarrow.compute as pc

    from traceflow.schema import REQUESTS, polars_type

    kid, rep = w.key_ids(buf, attr)
    keys = [body[o : o + n].decode() for o, n in attr[rep][:, [w.A_KEY_OFF, w.A_KEY_LEN]].tolist()]
    key_texts = [orjson.dumps(k) + b":" for k in keys]
    key_offsets = np.zeros(len(keys) + 1, np.int64)
    key_offsets[1:] = np.cumsum([len(t) for t in key_texts])
    drop = np.array([(not keep_content) and k in CONTENT_KEYS for k in keys], np.bool_)
    slot_of_kid = np.array([_S.get(k, -1) for k in keys], np.int64)
    where = {k: i for i, k in enumerate(keys)}
    has_kid = np.array([where.get(k, -1) for k in ("resource", "trace_id", "span_id")], np.int64)
    at = w.slots(rows, rec, kid, slot_of_kid, len(_SLOTS))  # (records, slots) attribute index or -1

    kind_all = attr[:, w.A_KIND]
    value_all = attr[:, w.A_VALUE]

    def col(name: str) -> tuple[Any, Any, Any]:
        """(present, kind, value) of slot ``name`` per record."""
        j = at[:, _S[name]]
        present = j >= 0
        jj = np.where(present, j, 0)
        kind = np.where(present, kind_all[jj] if len(kind_all) else 0, w.NONE)
        return present, kind, np.where(present, value_all[jj] if len(value_all) else 0, 0)

    n = len(rows)
    tokens = []
    for name in _SLOTS[:6]:
        present, kind, value = col(name)
        given = present & (kind != w.NONE)  # an empty value is no count
        if (given & (kind != w.INT)).any() or ((value < 0) | (value > MAX_TOKENS))[given].any():
            return None  # the dict path coerces or refuses those
        tokens.append((value, given))
    (cold, cold_ok), (read, read_ok), (write, write_ok), (out, out_ok), (w5, w5_ok), (w1, w1_ok) = tokens
    # anthropic_cache_write: a non-zero total, else the split's sum when positive, else the total
    split = np.where(w5_ok, w5, 0) + np.where(w1_ok, w1, 0)
    use_split = ~(write_ok & (write != 0)) & (split > 0)
    write = np.where(use_split, split, write)
    write_ok = write_ok | use_split

    def number(name: str) -> tuple[Any, Any] | None:
        """(value as float64, valid) of an int or double attribute: num()'s rules; None for text."""
        present, kind, value = col(name)
        if (present & (kind != w.INT) & (kind != w.DOUBLE) & (kind != w.NONE)).any():
            return None
        f = np.where(kind == w.INT, value.astype(np.float64), value.view(np.float64))
        valid = present & (kind != w.NONE) & np.isfinite(f)
        return np.where(valid, f, 0.0), valid

    got = [number(k) for k in ("duration_ms", "ttft_ms", "cost_usd", "cost_usd_micros")]
    if any(g is None for g in got):
        return None
    (dur, dur_ok), (ttft, ttft_ok), (cost, cost_ok), (micros, micros_ok) = got  # type: ignore[misc]
    if (dur_ok & ~((dur >= 0.0) & (dur <= MAX_DURATION_MS))).any():
        return None  # refused by the dict path
    ttft_ok &= (ttft >= 0.0) & (ttft <= MAX_DURATION_MS)
    cost = np.where(cost_ok, cost, micros / 1e6)
    cost_ok = cost_ok | micros_ok

    t = rec[rows, w.R_TIME].view(np.uint64)
    t = np.where(t != 0, t, rec[rows, w.R_OBSERVED].view(np.uint64))
    if (t == 0).any():
        return None  # dated by event.timestamp: the dict path
    ts = (t // np.uint64(1000)).astype(np.int64)
    started = ts - np.rint(dur * 1000.0).astype(np.int64)

    texts: dict[str, Any] = {}
    for name in _TEXT_SLOTS:
        present, kind, value = col(name)
        if (present & (kind != w.STRING) & (kind != w.NONE)).any():
            return None  # text() of a number or bool: the dict path
        length = np.where(present & (kind == w.STRING), attr[at[:, _S[name]], w.A_VLEN], -1)
        texts[name] = (value, np.where(length == 0, -1, length))  # "" is None
    rid_off, rid_len = texts["request_id"]
    if (rid_len < 0).any():
        return None  # no request id: the id hashes the tokens (dict path)
    no_prefix = np.zeros(n, np.bool_)

    def text_array(off: Any, length: Any, prefixed: Any = no_prefix, prefix: bytes = b"") -> Any:
        offsets, data = w.gather_text(
            buf, off, length, prefixed, np.frombuffer(prefix or b"\0", np.uint8)[: len(prefix)]
        )
        valid = length >= 0
        return pa.LargeStringArray.from_buffers(
            n, pa.py_buffer(offsets), pa.py_buffer(data), _bitmap(valid), int(n - valid.sum())
        )

    # sub-agents: session agent-<agent_id>, parent the session it was sent with
    (s_off, s_len), (g_off, g_len) = texts["session.id"], texts["agent_id"]
    sub = g_len >= 0
    group_version = pa.array([res.version for res, _, _ in groups], pa.large_string())
    version = pc.coalesce(
        group_version.take(pa.array(rec[rows, w.R_GROUP])), text_array(*texts["app.version"])
    )

    # attributes: doubles formatted by orjson, resources once per group
    doubles = np.flatnonzero(kind_all == w.DOUBLE)
    double_index = np.full(len(kind_all), -1, np.int64)
    double_index[doubles] = np.arange(len(doubles))
    parts = (
        orjson.dumps(value_all[doubles].view(np.float64).tolist())[1:-1].split(b",") if len(doubles) else []
    )
    res_texts = [
        orjson.dumps(res.attrs, option=orjson.OPT_NON_STR_KEYS, default=str) if res.attrs else b""
        for res, _, _ in groups
    ]
    offsets, data = w.attributes_json(
        buf,
        rows,
        rec,
        attr,
        kid,
        np.frombuffer(b"".join(key_texts), np.uint8),
        key_offsets,
        drop,
        np.frombuffer(b"".join(parts) or b"\0", np.uint8),
        _offsets(parts),
        double_index,
        np.frombuffer(b"".join(res_texts) or b"\0", np.uint8),
        _offsets(res_texts),
        has_kid,
        _lit('"trace_id":'),
        _lit('"span_id":'),
        _lit('"resource":'),
    )
    attributes = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    event_id = pa.array(
        [
            blake2b(_ANTHROPIC_REQUEST + body[o : o + k], digest_size=16).hexdigest()
            for o, k in zip(rid_off.tolist(), rid_len.tolist(), strict=True)
        ],
        pa.large_string(),
    )
    seq_present, seq_kind, seq_value = col("event.sequence")
    i64, f64 = pa.int64(), pa.float64()
    columns = {
        "event_id": event_id,
        "source": pa.repeat(source, n).cast(pa.large_string()) if n else pa.array([], pa.large_string()),
        "agent": pa.repeat("claude-code", n).cast(pa.large_string()),
        "agent_version": version,
        "user_id": text_array(*texts["user.id"]),
        "session_id": text_array(np.where(sub, g_off, s_off), np.where(sub, g_len, s_len), sub, b"agent-"),
        "parent_session_id": text_array(s_off, np.where(sub, s_len, -1)),
        "prompt_id": text_array(*texts["prompt.id"]),
        "request_id": text_array(rid_off, rid_len),
        "started_at": pa.array(started, i64, mask=~dur_ok),
        "ended_at": pa.array(ts, i64),
        "duration_ms": pa.array(dur, f64, mask=~dur_ok),
        "ttft_ms": pa.array(ttft, f64, mask=~ttft_ok),
        "model": text_array(*texts["model"]),
        "cold_input_tokens": pa.array(cold, i64, mask=~cold_ok),
        "cache_read_tokens": pa.array(read, i64, mask=~read_ok),
        "cache_write_tokens": pa.array(write, i64, mask=~write_ok),
        "cache_write_5m_tokens": pa.array(w5, i64, mask=~w5_ok),
        "cache_write_1h_tokens": pa.array(w1, i64, mask=~w1_ok),
        "output_tokens": pa.array(out, i64, mask=~out_ok),
        "cost_usd": pa.array(cost, f64, mask=~cost_ok),
        "attributes": attributes,
        "seq": pa.array(seq_value, i64, mask=~(seq_present & (seq_kind == w.INT))),
    }
    frame = pl.from_arrow(pa.table(columns))
    assert isinstance(frame, pl.DataFrame)
    now = _now_micros()
    exprs = []
    for name, typ in REQUESTS.columns.items():
        dtype = polars_type(typ)
        e = pl.col(name) if name in columns else pl.lit(now if name == "ingested_at" else None)
        exprs.append(e.cast(dtype).alias(name))
    return frame.select(exprs)


def _bitmap(valid: Any) -> Any:
    import pyarrow as pa

    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _offsets(parts: list[bytes]) -> Any:
    out = np.zeros(len(parts) + 1, np.int64)
    out[1:] = np.cumsum([len(p) for p in parts])
    return out


def _now_micros() -> int:
    import time

    return int(time.time() * 1_000_000)
