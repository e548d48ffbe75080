"""The sealer's metric state on disk: a snapshot plus a journal of what each seal changed.

``metric_state.json`` is a snapshot of :class:`~traceflow.otlp.metrics.MetricState` (with the
journal ``seq`` it includes); each seal appends what changed (``MetricState.take_changes``) to
``metric_state.journal`` as one fsynced JSON line, so a seal writes the streams it touched, not all
of them (100k streams: an 8.6 MB file rewritten and fsynced at every seal before). When the journal
outgrows the snapshot (and ``JOURNAL_MIN_BYTES``), a new snapshot replaces it and the journal starts
over. Loading replays the lines after the snapshot's ``seq``; a torn last line (a crash mid-append)
is ignored and cut off: that seal's segments are still in the WAL and are sealed again against the
state as it was.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import orjson

from traceflow import config
from traceflow.otlp.metrics import COLLECTOR_MAX_STREAMS_PER_RESOURCE, MetricState
from traceflow.store.lake import fsync_path

_logger = logging.getLogger(__name__)


def max_streams_from_settings() -> int:
    """The cumulative streams one resource may keep in the collector's metric state:
    ``TRACEFLOW_MAX_STREAMS_PER_RESOURCE``, else
    :data:`~traceflow.otlp.metrics.COLLECTOR_MAX_STREAMS_PER_RESOURCE`. A value that is not a whole
    number of 1 or more raises ValueError naming the variable."""
    return config.at_least_one("max_streams_per_resource", int, COLLECTOR_MAX_STREAMS_PER_RESOURCE, "streams")


#: the journal is folded into a new snapshot once it is larger than this and than the snapshot
JOURNAL_MIN_BYTES = 1 << 20


class MetricStateFile:
    """The metric state of one collector directory (``load`` once, then ``save`` after each seal)."""

    def __init__(self, directory: Path, started_ns: int | None = None) -> None:
        self.dir = directory
        #: when the collector began receiving: a fresh state's start (``MetricState.created_at_ns``),
        #: so that a series that started after it keeps its first delta however late the sealer came up
        self.started_ns = started_ns
        self.snapshot_path = directory / "metric_state.json"
        self.journal_path = directory / "metric_state.journal"
        self._seq = 0  # the last journal line applied or written
        self._journal_bytes = 0

    def load(self) -> MetricState:
        """The state as stored (a fresh one when there is none, or it cannot be read)."""
        try:
            snapshot = orjson.loads(self.snapshot_path.read_bytes())
            state = MetricState.from_dict(snapshot)
            self._seq = int(snapshot.get("seq", 0))
        except FileNotFoundError:
            state, self._seq = MetricState(self.started_ns), 0
        except Exception:
            _logger.exception("unreadable metric state %s: starting afresh", self.snapshot_path)
            state, self._seq = MetricState(self.started_ns), 0
        snapshot_seq = self._seq
        self._journal_bytes = 0
        torn = False
        try:
            with open(self.journal_path, "rb") as fh:
                for line in fh:
                    try:
                        entry = orjson.loads(line) if line.endswith(b"\n") else None
                    except orjson.JSONDecodeError:
                        entry = None
                    if not isinstance(entry, dict):
                        torn = True  # a torn last line: what follows it would never be read
                        break
                    self._journal_bytes += len(line)
                    if int(entry.get("seq", 0)) > snapshot_seq:
                        state.apply_changes(entry)
                        self._seq = int(entry["seq"])
            if torn:
                with contextlib.suppress(OSError):
                    os.truncate(self.journal_path, self._journal_bytes)
        except FileNotFoundError:
            pass
        state.take_changes()  # what was loaded is stored
        return state

    def save(self, state: MetricState) -> None:
        """Store what changed in ``state`` since it was loaded or last saved (durably)."""
        changes = state.take_changes()
        if changes is None:
            return
        self._seq += 1
        line = orjson.dumps({"seq": self._seq, **changes}, option=orjson.OPT_NON_STR_KEYS) + b"\n"
        try:
            snapshot_bytes = self.snapshot_path.stat().st_size
        except FileNotFoundError:  # the first save: a snapshot (it holds when the state began)
            snapshot_bytes = -1
        if snapshot_bytes < 0 or self._journal_bytes + len(line) > max(JOURNAL_MIN_BYTES, snapshot_bytes):
            self._write_snapshot(state)
            return
        with open(self.journal_path, "ab") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        if self._journal_bytes == 0:
            fsync_path(self.dir)  # a new journal's name
        self._journal_bytes += len(line)

    def _write_snapshot(self, state: MetricState) -> None:
        tmp = self.snapshot_path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps({"seq": self._seq, **state.to_dict()}, option=orjson.OPT_NON_STR_KEYS))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.snapshot_path)
        fsync_path(self.dir)
        # every line up to seq is in the snapshot: one left by a crash before this unlink is skipped
        self.journal_path.unlink(missing_ok=True)
        self._journal_bytes = 0
