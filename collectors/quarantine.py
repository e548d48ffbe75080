"""Payloads the sealer could not store, kept for inspection and re-sealing (``traceflow quarantine``).

The sealer isolates a failure to one payload, then to one record (``collectors/sealer.py``), and
puts only that here; a segment lands here whole only when it crashed the sealer process itself
three times. Each entry is two files in ``<data>/v1/_state/collector/quarantine/``::

    <id>.wal     the payload(s), in the WAL's record format (``spool.scan_segment`` reads it)
    <id>.json    why, when, which signal, how many payloads, whether content was kept

**Content.** Unless the payload was received with ``--keep-content``, prompt, response and tool text
is removed before anything is written (:func:`traceflow.otlp.attributes.strip_request_content`, the
attributes the lake would drop too); a body that cannot be decoded to strip it is not kept at all.

**Attribute policy.** The payloads are kept as received, before ``serve --drop-attr`` /
``--hash-attr`` (:mod:`traceflow.collectors.attribute_policy`) applies to their rows; the entry
records the names of the policy in force (``drop_attrs``, ``hash_attrs``; never the hash key), so
``traceflow quarantine reseal`` applies the same policy as live ingest (:meth:`Quarantine.policy_of`).

**Limits.** Entries older than ``TRACEFLOW_QUARANTINE_MAX_AGE_DAYS`` (default 30) are deleted, and
the oldest go first when the folder holds more than ``TRACEFLOW_QUARANTINE_MAX_BYTES`` (default
256 MiB); each removal is logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from traceflow import config
from traceflow.collectors import spool
from traceflow.collectors.attribute_policy import AttributePolicy
from traceflow.collectors.settings import DEFAULT_QUARANTINE_MAX_AGE_DAYS, DEFAULT_QUARANTINE_MAX_BYTES
from traceflow.otlp import decode as otlp
from traceflow.otlp.attributes import strip_request_content
from traceflow.store.lake import fsync_path

_logger = logging.getLogger(__name__)

WAL_SUFFIX = spool.CLOSED_SUFFIX
META_SUFFIX = ".json"


@dataclass(frozen=True)
class Entry:
    """One quarantined payload (or segment)."""

    id: str
    reason: str
    signal: str
    payloads: int
    bytes: int
    quarantined_at: float  # seconds since the epoch
    content: str  # "kept", "stripped" or "not kept"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "reason": self.reason,
            "signal": self.signal,
            "payloads": self.payloads,
            "bytes": self.bytes,
            "quarantined_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.quarantined_at)),
            "content": self.content,
        }


def limits_from_settings() -> tuple[int, float]:
    """(max bytes, max age in seconds) from the environment, else the defaults."""
    max_bytes = config.get("quarantine_max_bytes")
    max_days = config.get("quarantine_max_age_days")
    return (
        int(max_bytes) if max_bytes else DEFAULT_QUARANTINE_MAX_BYTES,
        float(max_days if max_days else DEFAULT_QUARANTINE_MAX_AGE_DAYS) * 86_400,
    )


def stripped(rec: spool.WalRecord) -> tuple[spool.WalRecord | None, str]:
    """``rec`` under the content policy: (the record to keep or None, "kept"/"stripped"/"not kept")."""
    if rec.keep_content:
        return rec, "kept"
    try:
        msg = otlp.parse_body(rec.signal, rec.body, rec.content_type)
        strip_request_content(rec.signal, msg)
        body = msg.SerializeToString()
    except Exception:  # undecodable, or too deep to re-encode: keep nothing of it
        return None, "not kept"
    return spool.WalRecord(rec.signal, "application/x-protobuf", body, False, rec.received_ns), "stripped"


class Quarantine:
    """The quarantine folder of one collector data directory."""

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
        policy: AttributePolicy | None = None,
    ):
        default_bytes, default_age = limits_from_settings()
        self.dir = directory
        #: the attribute policy of the records put here (its names go into each entry's metadata)
        self.policy = policy or AttributePolicy()
        self.max_bytes = default_bytes if max_bytes is None else max_bytes
        self.max_age_s = default_age if max_age_s is None else max_age_s

    @classmethod
    def of(cls, data: Path) -> Quarantine:
        return cls(spool.collector_dir(data) / "quarantine")

    # -- writing --------------------------------------------------------------------------------
    def put(self, records: list[spool.WalRecord], reason: str, *, name: str | None = None) -> Entry:
        """Quarantine ``records`` (content stripped unless kept) with ``reason``; returns the entry."""
        self.dir.mkdir(parents=True, exist_ok=True)
        kept: list[spool.WalRecord] = []
        policies = set()
        for rec in records:
            out, policy = stripped(rec)
            policies.add(policy)
            if out is not None:
                kept.append(out)
        now = time.time()
        ident = name or f"{time.time_ns():020d}-{os.getpid()}"
        data = b"".join(spool.encode_header(r) + r.body for r in kept)
        content = "kept" if policies == {"kept"} else ("stripped" if kept else "not kept")
        signal = ",".join(sorted({r.signal for r in records}))
        entry = Entry(ident, reason, signal, len(records), len(data), now, content)
        _write_atomic(self.dir / (ident + WAL_SUFFIX), data)
        attrs = {"drop_attrs": sorted(self.policy.drop), "hash_attrs": sorted(self.policy.hash)}
        _write_atomic(self.dir / (ident + META_SUFFIX), orjson.dumps({**entry.to_dict(), **attrs, "at": now}))
        fsync_path(self.dir)
        _logger.error(
            "quarantined %d %s payload(s) as %s (content %s): %s",
            len(records),
            entry.signal,
            ident,
            content,
            reason,
        )
        self.prune()
        return entry

    def prune(self, now: float | None = None) -> list[str]:
        """Apply the age and size limits; returns the ids removed."""
        now = time.time() if now is None else now
        entries = sorted(self.entries(), key=lambda e: e.quarantined_at)
        removed = []
        total = sum(e.bytes for e in entries)
        for e in entries:
            too_old = now - e.quarantined_at > self.max_age_s
            if too_old or total > self.max_bytes:
                self.remove(e.id)
                total -= e.bytes
                removed.append(e.id)
                _logger.warning(
                    "quarantine: removed %s (%s)",
                    e.id,
                    "older than the age limit" if too_old else "over the size limit",
                )
        return removed

    # -- reading --------------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """Every entry, oldest first (a segment quarantined by an older version has no metadata)."""
        if not self.dir.exists():
            return []
        out = []
        for path in self.dir.glob("*" + WAL_SUFFIX):
            ident = path.name[: -len(WAL_SUFFIX)]
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            try:
                meta = orjson.loads((self.dir / (ident + META_SUFFIX)).read_bytes())
                out.append(
                    Entry(
                        ident,
                        str(meta.get("reason", "")),
                        str(meta.get("signal", "")),
                        int(meta.get("payloads", 0)),
                        size,
                        float(meta.get("at", path.stat().st_mtime)),
                        str(meta.get("content", "")),
                    )
                )
            except (FileNotFoundError, orjson.JSONDecodeError, ValueError, TypeError):
                scan = spool.scan_segment(path)
                signals = sorted({r.signal for r in scan.records})
                out.append(
                    Entry(
                        ident,
                        "a WAL segment the sealer could not seal",
                        ",".join(signals),
                        len(scan.records),
                        size,
                        path.stat().st_mtime,
                        "as received",
                    )
                )
        return sorted(out, key=lambda e: (e.quarantined_at, e.id))

    def get(self, ident: str) -> Entry:
        for e in self.entries():
            if e.id == ident:
                return e
        raise KeyError(ident)

    def policy_of(self, ident: str) -> tuple[frozenset[str], frozenset[str]]:
        """The attributes (dropped, hashed) by the policy in force when ``ident`` was quarantined;
        none for an entry written before entries recorded it."""
        try:
            meta = orjson.loads((self.dir / (ident + META_SUFFIX)).read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return frozenset(), frozenset()
        if not isinstance(meta, dict):
            return frozenset(), frozenset()
        names = [meta.get(k) for k in ("drop_attrs", "hash_attrs")]
        drop, hashed = (frozenset(str(n) for n in v) if isinstance(v, list) else frozenset() for v in names)
        return drop, hashed

    def records(self, ident: str) -> list[spool.WalRecord]:
        return spool.scan_segment(self.dir / (ident + WAL_SUFFIX)).records

    def remove(self, ident: str) -> None:
        for suffix in (WAL_SUFFIX, META_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / (ident + suffix)).unlink()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
