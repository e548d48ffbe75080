"""The collector's counters in Prometheus's text format: ``GET /metrics`` (docs/collector.md, "Prometheus").

Each collector owns one :class:`CollectorMetrics` with its own ``CollectorRegistry`` (nothing goes to
prometheus_client's global registry, so two collectors in one process, as in the tests, count apart).
The transports and :class:`~.ingest.Ingest` count into it through :meth:`CollectorMetrics.note`; the
server's sealer supervisor feeds the seal histogram and the lake-write error counter from the
sealer's statistics lines.

The ``team`` label is the resource attribute ``team.id`` that the client sends, so its values are the
client's to choose: past :data:`MAX_TEAMS` distinct values, new ones are counted as ``_other`` to
keep the series bounded. ``agent`` is the agent family (``claude``, ``codex``, ``gemini``) or
``other``.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

#: distinct ``team`` label values kept before new ones are counted as ``_other``
MAX_TEAMS = 1000
OTHER = "_other"
#: the media type of :meth:`CollectorMetrics.exposition`: Prometheus's text format 0.0.4, which every
#: Prometheus 2.x reads (our names need none of format 1.0.0's escaping)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: seal durations (seconds) the histogram tells apart
SEAL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: the ``reason`` of records refused one by one (see :meth:`CollectorMetrics.note`)
RECORD_REFUSALS = ("invalid", "unstorable", "unavailable")
#: the ``reason`` of a whole request refused, by its HTTP status
REQUEST_REFUSALS = {
    400: "bad_request",
    401: "unauthenticated",
    408: "timeout",
    413: "too_large",
    415: "unsupported",
    500: "internal",
    503: "overloaded",
}
#: google.rpc.Code names, the ``code`` label of a gRPC request
GRPC_CODES = {
    0: "OK",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    8: "RESOURCE_EXHAUSTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    16: "UNAUTHENTICATED",
}

#: (agent family or None, team.id or None) -> accepted records
Origins = Tally[tuple[str | None, str | None]]


class CollectorMetrics:
    """One collector's Prometheus metrics, in a registry of its own."""

    def __init__(self, wal_bytes: Callable[[], float] | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.accepted = Counter(
            "traceflow_records_accepted",
            "Records (log records, spans, metric data points) acknowledged into the write-ahead log.",
            ("signal", "agent", "team"),
            registry=r,
        )
        self.refused = Counter(
            "traceflow_records_refused",
            "Records refused in an accepted request (OTLP partial_success), or decoded but not logged: "
            "invalid (structurally), unstorable (the lake cannot hold them), unavailable (503).",
            ("reason",),
            registry=r,
        )
        for reason in RECORD_REFUSALS:  # each reason is a series from the start, at 0
            self.refused.labels(reason)
        self.requests = Counter(
            "traceflow_requests",
            "OTLP export requests answered, by transport and status (HTTP status or gRPC code name).",
            ("protocol", "code"),
            registry=r,
        )
        self.requests_refused = Counter(
            "traceflow_requests_refused",
            "OTLP export requests refused whole, by reason.",
            ("reason",),
            registry=r,
        )
        self.wal_bytes = Gauge(
            "traceflow_wal_bytes", "Bytes of write-ahead log not yet sealed into the lake.", registry=r
        )
        if wal_bytes is not None:
            self.wal_bytes.set_function(wal_bytes)
        self.seal_seconds = Histogram(
            "traceflow_seal_duration_seconds",
            "Time each seal took to turn write-ahead-log segments into lake rows.",
            buckets=SEAL_BUCKETS,
            registry=r,
        )
        self.lake_write_errors = Counter(
            "traceflow_lake_write_errors",
            "Seals the lake's storage refused (each is retried; nothing is lost).",
            registry=r,
        )
        self._teams: set[str] = set()

    def note(
        self,
        signal: str | None,
        protocol: str,
        http_status: int,
        code: int,
        *,
        origins: Origins | None = None,
        rejected: int = 0,
        unstorable: int = 0,
        unlogged: int = 0,
    ) -> None:
        """Count one answered export request (see :meth:`.ingest.Counters.note`)."""
        label = str(http_status) if protocol == "http" else GRPC_CODES.get(code, str(code))
        self.requests.labels(protocol, label).inc()
        if code != 0:
            self.requests_refused.labels(REQUEST_REFUSALS.get(http_status, str(http_status))).inc()
        if unlogged:
            self.refused.labels("unavailable").inc(unlogged)
        if rejected - unstorable > 0:
            self.refused.labels("invalid").inc(rejected - unstorable)
        if unstorable:
            self.refused.labels("unstorable").inc(unstorable)
        for (agent, team), n in (origins or {}).items():
            self.accepted.labels(signal or "", agent or "other", self._team(team)).inc(n)

    def _team(self, team: str | None) -> str:
        if not team:
            return ""
        if team in self._teams:
            return team
        if len(self._teams) >= MAX_TEAMS:
            return OTHER
        self._teams.add(team)
        return team

    def sealed(self, seconds: float) -> None:
        self.seal_seconds.observe(seconds)

    def lake_write_failed(self) -> None:
        self.lake_write_errors.inc()

    def exposition(self) -> bytes:
        """The registry in Prometheus's text format (:data:`CONTENT_TYPE`)."""
        return bytes(generate_latest(self.registry))
