"""OTLP metrics -> ``metric_points`` rows with per-interval deltas
(docs/schemas.md#metrics-from-cumulative-sums-to-per-interval-deltas).

* A stream is (resource attributes, scope name and version, metric name, point attributes); its key
  is a stable hash, so the state survives restarts (``MetricState.to_dict``/``from_dict``).
* DELTA sums and histograms: ``delta`` = the point's value (histograms: its sum). Exact
  re-deliveries have the same ``event_id`` (stream, start, time) and collapse in the lake.
* CUMULATIVE (and unspecified temporality, which behaves correctly for delta streams too, since
  every delta point starts a new sequence): ``delta`` = value - previous value of the same sequence
  (same start time). A drop on a monotonic stream is a reset: ``delta`` = value. The first point of a
  new stream, or of a new sequence (a new start time, e.g. a process restart), is counted in full
  only when its start is known (``0 < start < time``) and later than the state's ``created_at``
  (the receiver started before the series did, so nothing was missed) and later than every stream
  the state has forgotten (``horizon``); otherwise it is a baseline with ``delta`` NULL. Points at or
  before the last time seen, or from an older sequence, are duplicates or out of order: they are not
  stored and are counted in ``Mapped.dropped``.
* Gauges: ``delta`` NULL. Histograms / exponential histograms / summaries: ``value`` = sum, and
  count, sum, min, max (and buckets) in ``attributes``.
* ``type`` comes from the point's ``type`` attribute (Claude Code ``token.usage``: input, output,
  cacheRead, cacheCreation; Gemini CLI), ``token_type`` (Codex) or ``gen_ai.token.type``.
* Points flagged NO_RECORDED_VALUE end their stream (the state forgets it) and are not stored.

**State.** :class:`MetricState` keeps one entry per cumulative stream. Staleness is measured on the
*collector's* clock (``clock_ns``: the sealer sets it to the time each payload was acknowledged,
``WalRecord.received_ns``), never on the points' own times, so a client's point dated 2^64-1 ns ages
nobody else's streams; without a clock (a file import) the newest point time stands in for it.
Streams idle for ``max_staleness_s`` are forgotten, and the latest time of a forgotten stream is
kept per *resource* (``horizon``), so one client's timestamps cannot turn another's new series into
baselines. Each resource may hold ``max_streams_per_resource`` streams (the collector's sealer sets
:data:`COLLECTOR_MAX_STREAMS_PER_RESOURCE`, or ``TRACEFLOW_MAX_STREAMS_PER_RESOURCE``; None, for a file
import, is no cap); a point of a new stream
beyond that is stored with ``delta`` NULL, counted in ``Mapped.overflow`` and reported in its
message. The state records what changed since :meth:`MetricState.take_changes` was last called, so
that its owner (the sealer) can journal changes instead of rewriting every stream.

:class:`MetricState` is not thread-safe: one mapper (the sealer, one import) uses it at a time.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

from traceflow.otlp.attributes import AGENT_NAMES, pb_attrs, text
from traceflow.otlp.mapper import Mapped, Problems, scope_groups
from traceflow.rows import Parsed, stable_id

_TEMPORALITY = {1: "delta", 2: "cumulative"}
_FLAG_NO_RECORDED_VALUE = 1


#: cumulative streams one resource may keep in the collector's state (beyond: stored without a delta)
COLLECTOR_MAX_STREAMS_PER_RESOURCE = 50_000
DEFAULT_MAX_STALENESS_S = 6 * 3600.0

# a stream's entry: [start_ns, time_ns, value, count, seen_ns, resource key]
_START, _TIME, _VALUE, _COUNT, _SEEN, _RES = range(6)


class MetricState:
    """Cumulative -> delta bookkeeping across export requests, keyed by stream identity.

    ``created_at_ns`` is when the receiver started (default: now). Pass 0 when the input is known to
    hold every stream from its start (a file export): then the first point of a stream with a known
    start time counts in full.
    """

    VERSION = 2

    def __init__(
        self,
        created_at_ns: int | None = None,
        *,
        max_staleness_s: float = DEFAULT_MAX_STALENESS_S,
        max_streams_per_resource: int | None = None,
    ) -> None:
        self.created_at_ns = time.time_ns() if created_at_ns is None else int(created_at_ns)
        self.max_staleness_ns = int(max_staleness_s * 1e9)
        self.max_streams_per_resource = max_streams_per_resource
        #: the collector's clock for the payload being mapped (None: use the newest point time)
        self.clock_ns: int | None = None
        self.horizon_ns = 0  # the latest time of any stream forgotten before horizons were per resource
        self.horizons: dict[str, int] = {}  # resource key -> the latest time of its forgotten streams
        self.newest_ns = 0  # the latest point time seen
        self._pruned_at_ns = 0  # when (on the clock in use) streams were last expired
        #: stream key -> [start_ns, time_ns, value, count, seen_ns, resource key]
        self.streams: dict[str, list[Any]] = {}
        self.per_resource: Counter[str] = Counter()
        self.overflow = 0  # points of streams the cap kept out of the state (a running count)
        self._changed: set[str] = set()
        self._removed: set[str] = set()
        self._changed_horizons: set[str] = set()

    @property
    def stream_count(self) -> int:
        return len(self.streams)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetricState) and self.to_dict() == other.to_dict()

    def _meta(self) -> dict[str, Any]:
        return {
            "version": self.VERSION,
            "created_at_ns": self.created_at_ns,
            "max_staleness_ns": self.max_staleness_ns,
            "max_streams_per_resource": self.max_streams_per_resource,
            "horizon_ns": self.horizon_ns,
            "newest_ns": self.newest_ns,
            "pruned_at_ns": self._pruned_at_ns,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot (``from_dict`` restores it)."""
        return {
            **self._meta(),
            "horizons": dict(self.horizons),
            "streams": {k: list(v) for k, v in self.streams.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetricState:
        version = d.get("version")
        if version not in (1, cls.VERSION):
            raise ValueError(f"unsupported MetricState version {version!r}")
        state = cls(
            int(d["created_at_ns"]),
            max_staleness_s=int(d["max_staleness_ns"]) / 1e9,
            max_streams_per_resource=d.get("max_streams_per_resource"),
        )
        state.horizon_ns = int(d.get("horizon_ns", 0))
        state.newest_ns = int(d.get("newest_ns", 0))
        state._pruned_at_ns = int(d.get("pruned_at_ns", state.newest_ns))
        state.horizons = {str(k): int(v) for k, v in d.get("horizons", {}).items()}
        now = time.time_ns()
        for k, v in d.get("streams", {}).items():
            entry = list(v)
            if len(entry) == 4:  # version 1: no clock, no resource; a fresh lease from now
                entry += [now, ""]
            state.streams[str(k)] = entry
            state.per_resource[entry[_RES]] += 1
        return state

    # -- what changed, for a journal ------------------------------------------------------------
    def take_changes(self) -> dict[str, Any] | None:
        """What changed since the last call (None: nothing), as :meth:`apply_changes` takes it."""
        if not (self._changed or self._removed or self._changed_horizons):
            return None
        out = {
            "meta": self._meta(),
            "set": {k: self.streams[k] for k in self._changed if k in self.streams},
            "del": sorted(self._removed),
            "horizons": {r: self.horizons[r] for r in self._changed_horizons if r in self.horizons},
        }
        self._changed.clear()
        self._removed.clear()
        self._changed_horizons.clear()
        return out

    def apply_changes(self, changes: dict[str, Any]) -> None:
        """Apply what :meth:`take_changes` returned (replaying a journal)."""
        meta = changes.get("meta", {})
        self.created_at_ns = int(meta.get("created_at_ns", self.created_at_ns))
        self.horizon_ns = int(meta.get("horizon_ns", self.horizon_ns))
        self.newest_ns = int(meta.get("newest_ns", self.newest_ns))
        self._pruned_at_ns = int(meta.get("pruned_at_ns", self._pruned_at_ns))
        for k in changes.get("del", []):
            self._drop(str(k))
        for k, v in changes.get("set", {}).items():
            self._drop(str(k))
            self.streams[str(k)] = list(v)
            self.per_resource[v[_RES]] += 1
        for r, h in changes.get("horizons", {}).items():
            self.horizons[str(r)] = int(h)

    def _drop(self, key: str) -> list[Any] | None:
        last = self.streams.pop(key, None)
        if last is not None:
            res = last[_RES]
            self.per_resource[res] -= 1
            if self.per_resource[res] <= 0:
                del self.per_resource[res]
        return last

    # -- feeding --------------------------------------------------------------------------------
    def now_ns(self) -> int:
        """The clock staleness is measured on: the collector's, else the newest point time."""
        return self.clock_ns if self.clock_ns is not None else self.newest_ns

    def cumulative(
        self,
        key: str,
        start: int,
        t: int,
        value: float,
        count: int | None,
        monotonic: bool,
        resource: str = "",
    ) -> tuple[bool, float | None]:
        """Feed one cumulative point: (keep it?, its delta or None for a baseline)."""
        if t > self.newest_ns:
            self.newest_ns = t
        seen = self.now_ns()
        last = self.streams.get(key)
        if last is not None:
            if t <= last[_TIME] or start < last[_START]:
                return False, None  # duplicate, out of order, or from an older sequence
            if start == last[_START]:
                delta = value - last[_VALUE]
                reset = monotonic and (
                    delta < 0 or (count is not None and last[_COUNT] is not None and count < last[_COUNT])
                )
                self.streams[key] = [start, t, value, count, seen, resource]
                self._changed.add(key)
                return True, value if reset else delta
        elif self.max_streams_per_resource is not None and (
            self.per_resource[resource] >= self.max_streams_per_resource
        ):
            self.overflow += 1  # not tracked: stored as a baseline, reported
            return True, None
        else:
            self.per_resource[resource] += 1
        self.streams[key] = [start, t, value, count, seen, resource]
        self._changed.add(key)
        self._removed.discard(key)
        horizon = max(self.horizon_ns, self.horizons.get(resource, 0))
        if 0 < start < t and start > self.created_at_ns and start > horizon:
            return True, value  # a new series that started while we were listening
        return True, None  # baseline

    def forget(self, key: str) -> None:
        last = self._drop(key)
        if last is not None:
            res = last[_RES]
            if last[_TIME] > self.horizons.get(res, 0):
                self.horizons[res] = last[_TIME]
                self._changed_horizons.add(res)
            self._changed.discard(key)
            self._removed.add(key)

    def expire(self) -> int:
        """Forget streams not seen for longer than ``max_staleness`` (on :meth:`now_ns`'s clock).
        Returns how many."""
        now = self.now_ns()
        limit = now - self.max_staleness_ns
        old = [k for k, v in self.streams.items() if v[_SEEN] < limit]
        for k in old:
            self.forget(k)
        self._pruned_at_ns = now
        return len(old)

    def maybe_expire(self) -> None:
        now = self.now_ns()
        if now - self._pruned_at_ns > self.max_staleness_ns // 10 or now < self._pruned_at_ns:
            self.expire()


def _stream_key(res_attrs: dict[str, Any], scope: tuple[str, str], name: str, attrs: dict[str, Any]) -> str:
    return stable_id(
        "otlp-stream",
        sorted(res_attrs.items(), key=lambda kv: kv[0]),
        scope,
        name,
        sorted(attrs.items(), key=lambda kv: kv[0]),
    )


def _resource_key(res_attrs: dict[str, Any]) -> str:
    return stable_id("otlp-resource", sorted(res_attrs.items(), key=lambda kv: kv[0]))


def _point_value(p: Any) -> float | None:
    w = p.WhichOneof("value")
    if w == "as_double":
        return float(p.as_double)
    if w == "as_int":
        return float(p.as_int)
    return None


def map_metrics(msg: Any, *, state: MetricState, source: str = "otlp") -> Mapped:
    """An ``ExportMetricsServiceRequest`` -> ``metric_points`` rows (deltas via ``state``)."""
    out = Parsed()
    problems = Problems()
    rows = out.metric_points
    overflow_before = state.overflow
    for res, fam, sm in scope_groups(msg.resource_metrics, "scope_metrics"):
        scope = (sm.scope.name, sm.scope.version)
        res_key = _resource_key(res.attrs)
        agent = AGENT_NAMES.get(fam or "") or res.service
        for metric in sm.metrics:
            kind = metric.WhichOneof("data")
            if kind is None:
                problems.reject("metric without data (no gauge, sum, histogram or summary)", metric.name)
                continue
            data = getattr(metric, kind)
            if kind == "gauge":
                temporality, monotonic = 0, False
            elif kind == "summary":
                temporality, monotonic = 2, True
            else:
                temporality = data.aggregation_temporality
                monotonic = data.is_monotonic if kind == "sum" else True
            for p in data.data_points:
                attrs = pb_attrs(p.attributes)
                start = p.start_time_unix_nano
                t = p.time_unix_nano
                key = _stream_key(res.attrs, scope, metric.name, attrs)
                if p.flags & _FLAG_NO_RECORDED_VALUE:
                    state.forget(key)
                    continue
                count: int | None = None
                extra: dict[str, Any] = {}
                if kind in ("gauge", "sum"):
                    value = _point_value(p)
                    if value is None:
                        problems.reject("number data point without a value", metric.name)
                        continue
                else:
                    count = p.count
                    value = p.sum if kind == "summary" or p.HasField("sum") else None
                    extra["count"] = count
                    if value is not None:
                        extra["sum"] = value
                    if kind == "histogram":
                        extra["bucket_counts"] = list(p.bucket_counts)
                        extra["explicit_bounds"] = list(p.explicit_bounds)
                    elif kind == "exponential_histogram":
                        extra["scale"] = p.scale
                        extra["zero_count"] = p.zero_count
                    else:
                        extra["quantiles"] = [[q.quantile, q.value] for q in p.quantile_values]
                    if kind != "summary":
                        if p.HasField("min"):
                            extra["min"] = p.min
                        if p.HasField("max"):
                            extra["max"] = p.max
                if kind == "gauge":
                    delta: float | None = None
                    temp_name = "gauge"
                elif temporality == 1:
                    delta = value
                    temp_name = "delta"
                elif value is None or not math.isfinite(value):
                    delta = None
                    temp_name = "cumulative"
                else:
                    keep, delta = state.cumulative(key, start, t, value, count, monotonic, res_key)
                    temp_name = "cumulative"
                    if not keep:
                        problems.dropped += 1
                        continue
                row_attrs = dict(attrs)
                row_attrs.update(extra)
                if temporality not in (0, 1, 2) or (temporality == 0 and kind != "gauge"):
                    row_attrs["temporality_unspecified"] = True
                if res.attrs:
                    row_attrs.setdefault("resource", res.attrs)
                rows.append(
                    {
                        "event_id": stable_id("otlp-metric", key, start, t),
                        "source": source,
                        "agent": agent,
                        "session_id": text(attrs.get("session.id") or res.attrs.get("session.id")),
                        "user_id": text(attrs.get("user.id") or res.attrs.get("user.id")),
                        "model": text(
                            attrs.get("model")
                            or attrs.get("gen_ai.response.model")
                            or attrs.get("gen_ai.request.model")
                        ),
                        "name": metric.name,
                        "type": text(
                            attrs.get("type") or attrs.get("token_type") or attrs.get("gen_ai.token.type")
                        ),
                        "unit": metric.unit or None,
                        "temporality": temp_name,
                        "start_time": start // 1000 if start else None,
                        "time": t // 1000 if t else None,
                        "value": value,
                        "delta": delta,
                        "attributes": row_attrs,
                    }
                )
    state.maybe_expire()
    if problems.dropped:
        problems.warn(f"{problems.dropped} cumulative points dropped as duplicates or out of order")
    overflow = state.overflow - overflow_before
    if overflow:
        problems.warn(
            f"{overflow} points of new cumulative streams beyond {state.max_streams_per_resource} "
            "per resource stored without a delta"
        )
    mapped = problems.mapped(out)
    mapped.overflow = overflow
    return mapped


__all__ = ["MetricState", "map_metrics"]
