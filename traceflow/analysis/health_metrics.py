"""``traceflow check --metrics-file PATH`` and ``--pushgateway URL``: the cache-health figures as
Prometheus gauges (docs/forensics.md#prometheus-gauges).

The gauges are those of ``check --format json`` (:meth:`~traceflow.analysis.health.Health.as_dict`),
one series per figure, each with the label ``where`` (the selection's filters as typed, as in the
Alertmanager alerts of :mod:`traceflow.analysis.webhooks`; empty without any), so that one run per
team writes series that do not collide:

* per period (``period="window"`` or ``"baseline"``): ``traceflow_cache_requests``,
  ``traceflow_cache_reuse_ratio``, ``traceflow_cache_write_amplification``,
  ``traceflow_cache_misses``, ``traceflow_cache_unexplained_misses``,
  ``traceflow_cache_unexplained_share`` and the period's bounds
  ``traceflow_cache_period_start_timestamp_seconds`` / ``..._end_timestamp_seconds``;
* the window's comparison with the baseline: ``traceflow_cache_reuse_drop`` and
  ``traceflow_cache_unexplained_rise``;
* per check (``check`` = one of :data:`CHECKS`): ``traceflow_cache_alert`` (1 when it fired, else 0:
  every check has a series, so an alert rule need not tell "absent" from "healthy") and
  ``traceflow_cache_threshold``;
* per client version (``version``): ``traceflow_cache_version_requests`` and
  ``traceflow_cache_version_client_miss_share``;
* ``traceflow_cache_check_timestamp_seconds``: when the check ran (an alert on its age finds a
  check that stopped running).

A figure that is ``null`` in the JSON (no prompt tokens, nothing judged) has no series: Prometheus
has no null, and NaN would compare false in every alert rule without saying why.

The file is written in the text format that node_exporter's textfile collector reads, atomically
(prometheus_client's ``write_to_textfile``: a temporary file in the same folder, then a rename), so
a scrape never reads half a file.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import push_to_gateway, write_to_textfile

from traceflow.analysis.delivery import delivering, http_url
from traceflow.analysis.webhooks import filters_text
from traceflow.errors import TraceflowError, UsageError

if TYPE_CHECKING:
    from traceflow.analysis.health import Health
    from traceflow.store.selection import Selection

#: Every check ``traceflow check`` runs, in the order of docs/forensics.md#traceflow-check.
CHECKS = ("reuse_drop", "unexplained_misses", "version_regression", "write_amplification", "silence")
#: The threshold of each check, by the key of :class:`~traceflow.analysis.health.Thresholds`.
THRESHOLDS = {
    "reuse_drop": "max_drop",
    "unexplained_misses": "max_unexplained_rise",
    "version_regression": "max_version_rise",
    "write_amplification": "max_amplification_rise",
    "silence": "min_requests",
}
#: The per-period figures: (gauge name, key of the period's object, help).
PERIOD_FIGURES = (
    ("traceflow_cache_requests", "requests", "Requests in the period."),
    (
        "traceflow_cache_reuse_ratio",
        "reuse_ratio",
        "Token-weighted prompt-cache reuse ratio: cache read / (cold + read + write), as in mix.",
    ),
    ("traceflow_cache_write_amplification", "write_amplification", "Cache write tokens / cache read tokens."),
    ("traceflow_cache_misses", "misses", "Cache misses (all causes)."),
    ("traceflow_cache_unexplained_misses", "unexplained_misses", "Misses with cause unexplained."),
    (
        "traceflow_cache_unexplained_share",
        "unexplained_share",
        "Unexplained misses / requests judged for misses.",
    ),
)
#: The job name under which ``--pushgateway`` pushes.
PUSH_JOB = "traceflow_check"


def _seconds(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, dt.datetime) else None


def registry(
    health: Health, selection: Selection | None = None, now: dt.datetime | None = None
) -> CollectorRegistry:
    """A registry of its own holding ``health``'s gauges (see the module docstring)."""
    where = filters_text(selection)
    reg = CollectorRegistry()

    def gauge(name: str, doc: str, *labels: str) -> Gauge:
        return Gauge(name, doc, ("where", *labels), registry=reg)

    for name, key, doc in PERIOD_FIGURES:
        g = gauge(name, doc, "period")
        for period in ("window", "baseline"):
            value = getattr(health, period).get(key)
            if value is not None:
                g.labels(where, period).set(value)
    start = gauge(
        "traceflow_cache_period_start_timestamp_seconds", "Start of the period (Unix time).", "period"
    )
    end = gauge(
        "traceflow_cache_period_end_timestamp_seconds", "End of the period, excluded (Unix time).", "period"
    )
    for period in ("window", "baseline"):
        for g, key in ((start, "since"), (end, "until")):
            seconds = _seconds(getattr(health, period).get(key))
            if seconds is not None:
                g.labels(where, period).set(seconds)
    for name, key, doc in (
        (
            "traceflow_cache_reuse_drop",
            "reuse_drop",
            "Relative drop of the reuse ratio, window against baseline.",
        ),
        (
            "traceflow_cache_unexplained_rise",
            "unexplained_rise",
            "Rise of the unexplained share (absolute), window against baseline.",
        ),
    ):
        g = gauge(name, doc)
        if health.window.get(key) is not None:
            g.labels(where).set(health.window[key])
    fired = {f["check"] for f in health.fired}
    alert = gauge("traceflow_cache_alert", "1 when the check fired, 0 when it did not.", "check")
    threshold = gauge("traceflow_cache_threshold", "The check's threshold (--max-drop, ...).", "check")
    for check in CHECKS:
        alert.labels(where, check).set(1 if check in fired else 0)
        threshold.labels(where, check).set(getattr(health.thresholds, THRESHOLDS[check]))
    requests = gauge(
        "traceflow_cache_version_requests", "Requests of the client version, baseline and window.", "version"
    )
    share = gauge(
        "traceflow_cache_version_client_miss_share",
        "Share of the version's requests that are restart, prefix_break or unexplained misses.",
        "version",
    )
    for v in health.versions:
        requests.labels(where, str(v["version"])).set(v["requests"])
        if v["client_share"] is not None:
            share.labels(where, str(v["version"])).set(v["client_share"])
    gauge("traceflow_cache_check_timestamp_seconds", "When the check ran (Unix time).").labels(where).set(
        (now or dt.datetime.now(dt.UTC)).timestamp()
    )
    return reg


def check_file(path: Path) -> Path:
    """``path`` when its folder exists (the file itself is replaced), else a usage error."""
    if path.is_dir():
        raise UsageError(
            f"--metrics-file {path} is a folder; give a file in it, e.g. {path / 'traceflow.prom'}"
        )
    if not path.parent.is_dir():
        raise UsageError(
            f"--metrics-file {path}: the folder {path.parent} does not exist; create it or give "
            "node_exporter's --collector.textfile.directory"
        )
    return path


def write_file(path: Path, reg: CollectorRegistry) -> None:
    """Write ``reg`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    try:
        write_to_textfile(str(check_file(path)), reg)
    except OSError as e:
        raise TraceflowError(f"cannot write --metrics-file {path}: {e.strerror or e}") from None


def check_url(url: str) -> str:
    """``url`` when it is an http(s) URL, else a usage error."""
    return http_url(url, "--pushgateway", ", e.g. http://pushgateway:9091")


def push(url: str, reg: CollectorRegistry, selection: Selection | None = None) -> None:
    """Replace the gauges of job :data:`PUSH_JOB` (grouped by ``where``) on the Pushgateway at ``url``."""
    with delivering("Pushgateway", url, "the gauges were not pushed"):
        push_to_gateway(
            check_url(url), job=PUSH_JOB, registry=reg, grouping_key={"where": filters_text(selection)}
        )
