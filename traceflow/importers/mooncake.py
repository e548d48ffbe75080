"""Mooncake traces (kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl`` and the same format elsewhere).

One JSON object per line (REPLAY_FORMATS_AND_TRACES §1)::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

Mapping to ``requests``:

* ``started_at`` = :data:`RELATIVE_EPOCH_US` + ``timestamp`` ms. The released traces count
  milliseconds from the trace start, so their requests fall on 1970-01-01 from 00:00 on; analyses use
  only differences. A file with absolute epoch-ms timestamps (traceflow's own ``mooncake-flat``
  export) lands on its true dates. There is no latency: ``ended_at`` and ``duration_ms`` are NULL.
* ``cold_input_tokens`` = ``input_length`` (the whole prompt); ``cache_read_tokens`` =
  ``cache_write_tokens`` = 0. The trace reports no cache outcome: its reuse structure is in
  ``hash_ids`` (512-token prefix blocks, ``block_size`` = 512, ``len == ceil(input_length/512)``),
  from which the replay and simulation code computes hits for a given cache.
* Hash ids are only comparable within one file: ``attributes.hash_scope`` names that scope.
* No session or user fields exist (prefix sharing is the only linkage, and it branches), so
  ``session_id`` is NULL unless a row carries AIPerf's optional ``session_id``.
* ``event_id`` = ``stable_id("mooncake", file key, line)``, where the file key is the file name plus
  a hash of its first record, so re-importing (or importing a copy under the same name) adds nothing;
  ``seq`` = line number, so the many equal timestamps keep file order.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext, iter_lines
from traceflow.rows import LineError, Parsed, Row, as_int, stable_id

#: The absolute time that relative trace timestamps (Mooncake, kv-cache-tester, Bailian, BurstGPT)
#: are counted from: the Unix epoch, 1970-01-01T00:00:00Z. ``started_at - epoch`` is the offset.
RELATIVE_EPOCH_US = 0

BLOCK_SIZE = 512


def seconds_to_micros(seconds: float) -> int:
    """Whole microseconds of a (possibly fractional) number of seconds, rounded to nearest."""
    return round(seconds * 1_000_000)


def file_key(ctx: FileContext, first_record: bytes) -> str:
    """The identity of a line-oriented trace file: its name and a hash of its first data record.

    Computed once, at the first record, and kept in ``ctx.state`` so later imports of a grown file
    (which see only the new lines) use the same key.
    """
    key = ctx.state.get("file_key")
    if not isinstance(key, str):
        digest = hashlib.blake2b(first_record.strip(), digest_size=8).hexdigest()
        key = f"{ctx.path.name}#{digest}"
        ctx.state["file_key"] = key
    return key


def discover_files(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """``[root]`` for a file, else the files under ``root`` with one of ``suffixes``, sorted."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(suffixes))


def int_list(value: Any) -> list[int]:
    """A list of integer ids; ValueError for anything else."""
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError("hash_ids is not a list of integers")
    return value


def required_int(rec: dict[str, Any], key: str) -> int:
    value = as_int(rec.get(key))
    if value is None:
        raise ValueError(f"missing {key}")
    if value < 0:
        raise ValueError(f"negative {key}")
    return value


class MooncakeImporter:
    name: ClassVar[str] = "mooncake"
    whole_file: ClassVar[bool] = False
    source: ClassVar[str] = "mooncake"

    def default_paths(self) -> list[Path]:
        return []

    def discover(self, root: Path) -> list[Path]:
        return discover_files(root, (".jsonl",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        path = str(ctx.path)
        for no, line in iter_lines(data, ctx.first_line):
            key = file_key(ctx, line)
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                out.errors.append(LineError(path, no, f"invalid JSON ({e}); line skipped"))
                continue
            try:
                out.requests.append(self._row(rec, key, no))
            except (TypeError, ValueError, AttributeError) as e:
                out.errors.append(LineError(path, no, f"not a Mooncake record: {e}; line skipped"))
        return out

    def _row(self, rec: Any, key: str, no: int) -> Row:
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        ts = rec.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int | float):
            raise ValueError("missing or non-numeric timestamp (delay-only rows are not supported)")
        inp = required_int(rec, "input_length")
        outp = required_int(rec, "output_length")
        hashes = int_list(rec["hash_ids"]) if rec.get("hash_ids") is not None else None
        attributes: dict[str, Any] = {"file": key.split("#", 1)[0], "hash_scope": f"mooncake:{key}"}
        for extra in ("priority", "delay", "extra"):
            if extra in rec:
                attributes[extra] = rec[extra]
        session = rec.get("session_id")
        return {
            "event_id": stable_id(self.source, key, no),
            "source": self.source,
            "session_id": str(session) if session is not None else None,
            "started_at": RELATIVE_EPOCH_US + round(ts * 1000),
            "cold_input_tokens": inp,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "output_tokens": outp,
            "attributes": attributes,
            "seq": no,
            "hash_ids": hashes,
            "block_size": BLOCK_SIZE if hashes is not None else None,
        }


IMPORTER = MooncakeImporter()
