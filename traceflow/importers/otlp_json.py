"""Files of OTLP/JSON export requests: ``traceflow import otlp-json PATH``.

The OpenTelemetry Collector's ``file`` exporter writes one ``Export{Logs,Metrics,Trace}ServiceRequest``
per line; a file holding one pretty-printed request (or several, one after the other) is read too.
Each request is recognised by its top-level key (``resourceLogs``, ``resourceMetrics``,
``resourceSpans``) and mapped exactly as the collectors map what they receive
(:mod:`traceflow.otlp.decode`), with ``source = "otlp-json"``. Content attributes are dropped.

* A line that is not JSON, not an export request, or not valid OTLP/JSON becomes a ``LineError``;
  the rest of the file is still imported. Records the mapper refuses are reported the same way.
* Cumulative metric streams are turned into deltas with a :class:`~traceflow.otlp.decode.MetricState`
  carried in ``ctx.state`` from one import of a growing file to the next. A file is taken to hold its
  streams from their start (``created_at`` = 0), so the first point of a series with a known start
  counts in full; a stream that continues across rotated files is therefore counted from its start
  in each file (import one of them, or the concatenation).
* ``discover`` keeps only ``*.json``/``*.jsonl``/``*.ndjson`` files whose first 64 KiB mention one of
  the three top-level keys, so the ``.meta.json`` files of a capture folder are skipped.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.errors import DecodeError
from traceflow.importers.base import FileContext
from traceflow.importers.compressed import CorruptInput, open_input, plain_path
from traceflow.otlp.decode import MetricState, map_request, signal_of_json
from traceflow.rows import LineError, Parsed

_SUFFIXES = (".json", ".jsonl", ".ndjson")
_OTLP_KEY = re.compile(rb'"resource(?:Logs|Metrics|Spans|_logs|_metrics|_spans)"\s*:')
_SNIFF_BYTES = 64 << 10
_STATE_KEY = "metric_state"


def _documents(data: bytes, first_line: int) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, JSON value, None) per document, or (line number, None, error message).

    One document per line is the fast path; a line that does not parse but opens an object or
    array is tried as the start of a multi-line (pretty-printed) document.
    """
    lines = data.split(b"\n")
    text: str | None = None
    starts: list[int] = []
    decoder = json.JSONDecoder()
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            i += 1
            continue
        try:
            yield first_line + i, orjson.loads(line), None
            i += 1
            continue
        except orjson.JSONDecodeError as e:
            error = str(e)
        if stripped[:1] in (b"{", b"["):
            if text is None:
                text = data.decode("utf-8", errors="replace")
                starts = [0, *(m.end() for m in re.finditer("\n", text))]
            pos = starts[i] + (len(line) - len(line.lstrip()))
            try:
                obj, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                pass
            else:
                last = bisect.bisect_right(starts, end - 1) - 1  # the line holding the closing brace
                rest_end = starts[last + 1] if last + 1 < len(starts) else len(text)
                if not text[end:rest_end].strip():
                    yield first_line + i, obj, None
                    i = last + 1
                    continue
        yield first_line + i, None, f"invalid JSON ({error}); line skipped"
        i += 1


class OtlpJsonImporter:
    name: ClassVar[str] = "otlp-json"
    whole_file: ClassVar[bool] = False
    source: ClassVar[str] = "otlp-json"

    def default_paths(self) -> list[Path]:
        return []

    def discover(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        out = []
        for p in sorted(root.rglob("*")):
            if plain_path(p).suffix in _SUFFIXES and p.is_file():
                try:
                    with open_input(p) as fh:
                        head = fh.read(_SNIFF_BYTES)
                except CorruptInput:
                    head = b""
                if _OTLP_KEY.search(head):
                    out.append(p)
        return out

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        path = str(ctx.path)
        saved = ctx.state.get(_STATE_KEY)
        try:
            state = MetricState.from_dict(saved) if saved else MetricState(created_at_ns=0)
        except (ValueError, KeyError, TypeError):
            state = MetricState(created_at_ns=0)
        for line, obj, error in _documents(data, ctx.first_line):
            if error is not None:
                out.errors.append(LineError(path, line, error))
                continue
            signal = signal_of_json(obj)
            if signal is None:
                if obj != {}:
                    out.errors.append(
                        LineError(
                            path,
                            line,
                            "not an OTLP export request (expected a top-level resourceLogs, resourceMetrics "
                            "or resourceSpans key); line skipped",
                        )
                    )
                continue
            try:
                mapped = map_request(signal, obj, state=state, source=self.source)
            except DecodeError as e:
                out.errors.append(LineError(path, line, f"{e}; line skipped"))
                continue
            out.extend(mapped.parsed)
            if mapped.rejected:
                out.errors.append(
                    LineError(path, line, f"{mapped.rejected} {signal} records skipped: {mapped.message}")
                )
        ctx.state[_STATE_KEY] = state.to_dict()
        return out


IMPORTER = OtlpJsonImporter()
