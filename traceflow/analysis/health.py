"""Cache health (docs/forensics.md#traceflow-check): a window's prompt-cache reuse against a baseline, for
alerts from cron.

Three checks, each comparing the window (default: the last whole UTC day) with the baseline (default:
the 7 days before the window):

* ``reuse_drop``: the token-weighted reuse ratio (cache read / (cold + read + write), as in ``mix``)
  fell by more than ``max_drop`` relative to the baseline's (0.25: from 0.80 to below 0.60);
* ``unexplained_misses``: the share of requests that were misses with cause ``unexplained``
  (:mod:`traceflow.analysis.misses`) rose by more than ``max_unexplained_rise`` (absolute: 0.05 is
  five points) over the baseline's;
* ``silence``: the window holds fewer than ``min_requests`` requests (default 1: none at all) while the
  baseline had traffic -- a dead collector, an expired key, an agent that stopped sending.

* ``version_regression``: the share of requests that were client misses (``restart``,
  ``prefix_break`` or ``unexplained``) rose by more than ``max_version_rise`` (absolute) with a client
  version seen in the window against the version seen before it (versions in the order they first
  appeared in the lake), both over the baseline and the window, each with at least
  :data:`MIN_VERSION_REQUESTS` requests; the alert names both versions;
* ``write_amplification``: cache write tokens / cache read tokens rose by more than
  ``max_amplification_rise`` relative to the baseline's (1.0: doubled).

The other checks need requests in both periods; without them they do not fire and the result says
so. ``silence`` needs only a baseline with requests.
:data:`ALERT_EXIT` is the exit status of ``traceflow check`` when a check fired.
"""

from __future__ import annotations

import datetime as dt
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from traceflow.analysis import misses
from traceflow.analysis.delivery import delivering, http_url
from traceflow.analysis.mix import token_mix_rows
from traceflow.errors import UsageError
from traceflow.output import to_json
from traceflow.store.selection import Selection

if TYPE_CHECKING:
    import duckdb
    import polars as pl

#: Exit status of ``traceflow check`` on an alert (1, 2 and 3 are errors and skipped records).
ALERT_EXIT = 4
#: Default largest relative drop of the reuse ratio that is still healthy.
MAX_DROP = 0.25
#: Default largest rise (absolute share of requests) of unexplained misses that is still healthy.
MAX_UNEXPLAINED_RISE = 0.05
#: Default least number of requests in the window (with a baseline that had traffic).
MIN_REQUESTS = 1
#: Default baseline length, in days before the window.
BASELINE_DAYS = 7
#: Default largest rise (absolute share of requests) of client misses with a new client version.
MAX_VERSION_RISE = 0.05
#: Requests each of two versions needs before their client-miss shares are compared.
MIN_VERSION_REQUESTS = 10
#: Default largest relative rise of the write amplification (cache writes / cache reads).
MAX_AMPLIFICATION_RISE = 1.0


def default_window(now: dt.datetime | None, zone: str) -> tuple[dt.datetime, dt.datetime]:
    """The last whole day before ``now`` (None: now) in ``zone`` (the selection's, ``--tz``):
    ``[yesterday 00:00, today 00:00)``."""
    from traceflow.store import zones

    local = (now or dt.datetime.now(dt.UTC)).astimezone(zones.tzinfo(zone))
    today = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return today - dt.timedelta(days=1), today


def _period(con: duckdb.DuckDBPyConnection, selection: Selection, counts: dict[str, Any]) -> dict[str, Any]:
    """The period's figures; ``counts``: its :func:`traceflow.analysis.misses.miss_report` object."""
    rows = token_mix_rows(con, selection).records()
    mix = rows[0] if rows else {}
    requests = counts["requests"]
    judged = requests - counts["not_applicable"]  # requests without a session or block hashes are not
    unexplained = counts["by_cause"]["unexplained"]["misses"]
    read, write = mix.get("cache_read_tokens"), mix.get("cache_write_tokens")
    return {
        "since": selection.since,
        "until": selection.until,
        "requests": requests,
        "reuse_ratio": mix.get("reuse_ratio"),
        "write_amplification": write / read if read else None,
        "misses": counts["misses"],
        "unexplained_misses": unexplained,
        "unexplained_share": unexplained / judged if judged else None,
    }


@dataclass(frozen=True)
class Thresholds:
    """When the checks fire (see the module docstring): ``traceflow check``'s ``--max-drop``,
    ``--max-unexplained-rise``, ``--min-requests``, ``--max-version-rise`` and
    ``--max-amplification-rise``."""

    max_drop: float = MAX_DROP
    max_unexplained_rise: float = MAX_UNEXPLAINED_RISE
    min_requests: int = MIN_REQUESTS
    max_version_rise: float = MAX_VERSION_RISE
    max_amplification_rise: float = MAX_AMPLIFICATION_RISE

    def __post_init__(self) -> None:
        if not 0 < self.max_drop <= 1:
            raise UsageError(
                f"--max-drop {self.max_drop} must be a share in (0, 1], e.g. 0.25 for a 25 % drop"
            )
        if self.max_unexplained_rise < 0:
            raise UsageError("--max-unexplained-rise must be 0 or more")
        if self.min_requests < 0:
            raise UsageError(
                f"--min-requests {self.min_requests} must be 0 or more (0 turns the silence check off)"
            )
        if self.max_version_rise < 0 or self.max_amplification_rise < 0:
            raise UsageError("--max-version-rise and --max-amplification-rise must be 0 or more")


@dataclass(frozen=True)
class Health:
    """What ``traceflow check`` found."""

    window: dict[str, Any]
    baseline: dict[str, Any]
    thresholds: Thresholds
    fired: list[dict[str, Any]]
    notes: list[str]
    #: Per client version over the baseline and the window: requests, client misses, their share.
    versions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def alert(self) -> bool:
        return bool(self.fired)

    def as_dict(self) -> dict[str, Any]:
        """The ``traceflow check --format json`` object (and the webhook's body)."""
        return {
            "status": "alert" if self.alert else "ok",
            "fired": self.fired,
            "window": self.window,
            "baseline": self.baseline,
            "thresholds": asdict(self.thresholds),
            "versions": self.versions,
            "notes": self.notes,
        }


def check(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    *,
    baseline_days: float = BASELINE_DAYS,
    thresholds: Thresholds | None = None,
    now: dt.datetime | None = None,
) -> Health:
    """Compare the selection's window (default :func:`default_window`) with the ``baseline_days``
    before it under ``thresholds`` (None: the defaults); the selection's filters (agent, model, ...)
    apply to both."""
    t = thresholds or Thresholds()
    if not baseline_days > 0:  # NaN too
        raise UsageError("--baseline-days must be positive")
    sel = selection or Selection()
    since, until = sel.since, sel.until
    if since is None and until is None:
        since, until = default_window(now, sel.zone)
    elif since is None:
        assert until is not None
        since = until - dt.timedelta(days=1)
    elif until is None:
        until = now or dt.datetime.now(dt.UTC)
    if since >= until:
        raise UsageError("the window is empty: --since must be before --until")
    try:
        start = since - dt.timedelta(days=baseline_days)
    except OverflowError:  # before year 1, or too many days for a timedelta
        raise UsageError(
            f"--baseline-days {baseline_days:g} reaches before the year 1; give fewer days, e.g. 7"
        ) from None
    whole = replace(sel, since=start, until=until)
    # one pass of misses.sql over the baseline and the window together, split at the window's start
    counts = misses.miss_counts(con, whole, ["version"], split=since)
    window = _period(con, replace(sel, since=since, until=until), _misses_in(counts, after=True))
    baseline = _period(con, replace(sel, since=start, until=since), _misses_in(counts, after=False))
    fired: list[dict[str, Any]] = []
    notes: list[str] = []
    w, b = window["reuse_ratio"], baseline["reuse_ratio"]
    if window["requests"] < t.min_requests and baseline["requests"]:
        fired.append(_silence(window["requests"], baseline["requests"], baseline_days, t.min_requests))
    empty = [name for name, p in (("window", window), ("baseline", baseline)) if not p["requests"]]
    if empty:
        notes.append(
            f"no requests in the {' or '.join(empty)}: nothing to compare, the ratio checks did not fire"
        )
    elif w is None or b is None:
        notes.append("no prompt tokens in the window or the baseline: nothing to compare")
    else:
        drop = (b - w) / b if b else 0.0
        window["reuse_drop"] = drop
        if drop > t.max_drop:
            fired.append(
                {"check": "reuse_drop", "window": w, "baseline": b, "drop": drop, "threshold": t.max_drop}
            )
        ws, bs = window["unexplained_share"], baseline["unexplained_share"]
        rise = ws - bs if ws is not None and bs is not None else None
        window["unexplained_rise"] = rise
        if rise is None:
            notes.append("no request could be judged for misses (no sessions or block hashes)")
        elif rise > t.max_unexplained_rise:
            fired.append(
                {
                    "check": "unexplained_misses",
                    "window": ws,
                    "baseline": bs,
                    "rise": rise,
                    "threshold": t.max_unexplained_rise,
                    "window_unexplained_misses": window["unexplained_misses"],
                }
            )
        wa, ba = window["write_amplification"], baseline["write_amplification"]
        if wa is not None and ba and (wa - ba) / ba > t.max_amplification_rise:
            fired.append(
                {
                    "check": "write_amplification",
                    "window": wa,
                    "baseline": ba,
                    "rise": (wa - ba) / ba,
                    "threshold": t.max_amplification_rise,
                }
            )
    versions = version_shares(con, whole, replace(sel, since=since, until=until), counts)
    if not empty:
        fired += version_regressions(versions, t.max_version_rise)
    return Health(window, baseline, t, fired, notes, versions)


def _silence(window: int, baseline: int, baseline_days: float, min_requests: int) -> dict[str, Any]:
    """The ``silence`` check's object: the window fell short of ``min_requests`` after a baseline
    with traffic."""
    short = "no requests" if window == 0 else f"{window} request(s), fewer than {min_requests}"
    return {
        "check": "silence",
        "window_requests": window,
        "baseline_requests": baseline,
        "threshold": min_requests,
        "reason": (
            f"{short} in the window after {baseline} in the {baseline_days:g} baseline day(s): "
            "is the collector (or the agent's telemetry) still running?"
        ),
    }


def _misses_in(counts: pl.DataFrame, *, after: bool) -> dict[str, Any]:
    """The :func:`traceflow.analysis.misses.miss_report` object of one part of ``counts``
    (:func:`~traceflow.analysis.misses.miss_counts` by version, split): ``after`` the split or before."""
    import polars as pl

    part = counts.filter(pl.col("after_split") == after)
    return misses.miss_summary(misses.sum_counts(part, ["cause"]))


def version_shares(
    con: duckdb.DuckDBPyConnection,
    period: Selection,
    window: Selection,
    counts: pl.DataFrame | None = None,
) -> list[dict[str, Any]]:
    """Per client version with requests in ``period``, in the order the versions first appeared in
    the lake: ``version, first_seen, requests, client_misses, client_share`` (over ``period``) and
    ``in_window`` (it has requests in ``window``). Requests without a version are left out.
    ``counts``: ``period``'s :func:`traceflow.analysis.misses.miss_counts` by version (split or not),
    when the caller has it."""
    import polars as pl

    if counts is None:
        counts = misses.miss_counts(con, period, ["version"])
    counts = counts.filter(pl.col("version").is_not_null())
    if counts.is_empty():
        return []
    seen = dict(
        con.execute(
            "SELECT agent_version, min(request_time) FROM requests WHERE agent_version IS NOT NULL GROUP BY 1"
        ).fetchall()
    )
    active = {r["version"] for r in token_mix_rows(con, window, ["version"]).records()}
    out = []
    for (version,), part in counts.group_by(["version"], maintain_order=True):
        requests = int(part["requests"].sum())
        client = int(part.filter(pl.col("cause").is_in(misses.CLIENT_CAUSES))["misses"].sum())
        out.append(
            {
                "version": version,
                "first_seen": seen.get(version),
                "requests": requests,
                "client_misses": client,
                "client_share": client / requests if requests else None,
                "in_window": version in active,
            }
        )
    return sorted(out, key=lambda v: (v["first_seen"] is None, v["first_seen"], v["version"]))


def version_regressions(versions: list[dict[str, Any]], max_rise: float) -> list[dict[str, Any]]:
    """The ``version_regression`` alerts: each version in the window whose client-miss share rose by
    more than ``max_rise`` over the version before it (both with enough requests)."""
    fired = []
    for prev, new in pairwise(versions):
        if not new["in_window"]:
            continue
        if min(prev["requests"], new["requests"]) < MIN_VERSION_REQUESTS:
            continue
        rise = new["client_share"] - prev["client_share"]
        if rise > max_rise:
            fired.append(
                {
                    "check": "version_regression",
                    "version": new["version"],
                    "previous_version": prev["version"],
                    "window": new["client_share"],
                    "baseline": prev["client_share"],
                    "rise": rise,
                    "threshold": max_rise,
                }
            )
    return fired


def post_webhook(url: str, body: Any, timeout_s: float = 10.0) -> int:
    """POST ``body`` (a JSON value: :func:`traceflow.analysis.webhooks.payload`) to ``url``; returns
    the HTTP status (a failure raises TraceflowError)."""
    http_url(url, "--webhook")
    data = to_json(body).encode()
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json", "User-Agent": "traceflow"}
    )
    with (
        delivering("webhook", url, "the alert was not delivered"),
        urllib.request.urlopen(req, timeout=timeout_s) as resp,
    ):
        return int(resp.status)
