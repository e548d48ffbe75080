"""Cache health (DESIGN §3): a window's prompt-cache reuse against a baseline, for alerts from cron.

Three checks, each comparing the window (default: the last whole UTC day) with the baseline (default:
the 7 days before the window):

* ``reuse_drop``: the token-weighted reuse ratio (cache read / (cold + read + write), as in ``mix``)
  fell by more than ``max_drop`` relative to the baseline's (0.25: from 0.80 to below 0.60);
* ``unexplained_misses``: the share of requests that were misses with cause ``unexplained``
  (:mod:`traceflow.analysis.misses`) rose by more than ``max_unexplained_rise`` (absolute: 0.05 is
  five points) over the baseline's;
* ``silence``: the window holds fewer than ``min_requests`` requests (default 1: none at all) while the
  baseline had traffic -- a dead collector, an expired key, an agent that stopped sending.

The two ratio checks need requests in both periods; without them they do not fire and the result says
so. ``silence`` needs only a baseline with requests.
:data:`ALERT_EXIT` is the exit status of ``traceflow check`` when a check fired.
"""

from __future__ import annotations

import datetime as dt
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from traceflow.analysis import misses
from traceflow.analysis.mix import token_mix_rows
from traceflow.errors import TraceflowError, UsageError
from traceflow.output import to_json
from traceflow.store.selection import Selection

if TYPE_CHECKING:
    import duckdb

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


def default_window(now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime]:
    """The last whole day before ``now`` in the zone in force (``--tz``, default UTC):
    ``[yesterday 00:00, today 00:00)``."""
    from traceflow.store import zones

    local = (now or dt.datetime.now(dt.UTC)).astimezone(zones.tzinfo())
    today = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return today - dt.timedelta(days=1), today


def _period(con: duckdb.DuckDBPyConnection, selection: Selection) -> dict[str, Any]:
    rows = token_mix_rows(con, selection).records()
    mix = rows[0] if rows else {}
    counts = misses.miss_report(con, selection)
    requests = counts["requests"]
    judged = requests - counts["not_applicable"]  # requests without a session or block hashes are not
    unexplained = counts["by_cause"]["unexplained"]["misses"]
    return {
        "since": selection.since,
        "until": selection.until,
        "requests": requests,
        "reuse_ratio": mix.get("reuse_ratio"),
        "misses": counts["misses"],
        "unexplained_misses": unexplained,
        "unexplained_share": unexplained / judged if judged else None,
    }


@dataclass(frozen=True)
class Health:
    """What ``traceflow check`` found."""

    window: dict[str, Any]
    baseline: dict[str, Any]
    max_drop: float
    max_unexplained_rise: float
    min_requests: int
    fired: list[dict[str, Any]]
    notes: list[str]

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
            "thresholds": {
                "max_drop": self.max_drop,
                "max_unexplained_rise": self.max_unexplained_rise,
                "min_requests": self.min_requests,
            },
            "notes": self.notes,
        }


def check(
    con: duckdb.DuckDBPyConnection,
    selection: Selection | None = None,
    *,
    baseline_days: float = BASELINE_DAYS,
    max_drop: float = MAX_DROP,
    max_unexplained_rise: float = MAX_UNEXPLAINED_RISE,
    min_requests: int = MIN_REQUESTS,
    now: dt.datetime | None = None,
) -> Health:
    """Compare the selection's window (default :func:`default_window`) with the ``baseline_days``
    before it; the selection's filters (agent, model, ...) apply to both."""
    if not 0 < max_drop <= 1:
        raise UsageError(f"--max-drop {max_drop} must be a share in (0, 1], e.g. 0.25 for a 25 % drop")
    if max_unexplained_rise < 0:
        raise UsageError("--max-unexplained-rise must be 0 or more")
    if baseline_days <= 0:
        raise UsageError("--baseline-days must be positive")
    if min_requests < 0:
        raise UsageError(f"--min-requests {min_requests} must be 0 or more (0 turns the silence check off)")
    sel = selection or Selection()
    since, until = sel.since, sel.until
    if since is None and until is None:
        since, until = default_window(now)
    elif since is None:
        assert until is not None
        since = until - dt.timedelta(days=1)
    elif until is None:
        until = now or dt.datetime.now(dt.UTC)
    if since >= until:
        raise UsageError("the window is empty: --since must be before --until")
    window = _period(con, replace(sel, since=since, until=until))
    baseline = _period(con, replace(sel, since=since - dt.timedelta(days=baseline_days), until=since))
    fired: list[dict[str, Any]] = []
    notes: list[str] = []
    w, b = window["reuse_ratio"], baseline["reuse_ratio"]
    if window["requests"] < min_requests and baseline["requests"]:
        fired.append(_silence(window["requests"], baseline["requests"], baseline_days, min_requests))
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
        if drop > max_drop:
            fired.append(
                {"check": "reuse_drop", "window": w, "baseline": b, "drop": drop, "threshold": max_drop}
            )
        ws, bs = window["unexplained_share"], baseline["unexplained_share"]
        rise = ws - bs if ws is not None and bs is not None else None
        window["unexplained_rise"] = rise
        if rise is None:
            notes.append("no request could be judged for misses (no sessions or block hashes)")
        elif rise > max_unexplained_rise:
            fired.append(
                {
                    "check": "unexplained_misses",
                    "window": ws,
                    "baseline": bs,
                    "rise": rise,
                    "threshold": max_unexplained_rise,
                    "window_unexplained_misses": window["unexplained_misses"],
                }
            )
    return Health(window, baseline, max_drop, max_unexplained_rise, min_requests, fired, notes)


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


def post_webhook(url: str, body: dict[str, Any], timeout_s: float = 10.0) -> int:
    """POST ``body`` as JSON to ``url``; returns the HTTP status (a failure raises TraceflowError)."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--webhook {url!r} is not an http:// or https:// URL")
    data = to_json(body).encode()
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json", "User-Agent": "traceflow"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        raise TraceflowError(
            f"the webhook {url} answered HTTP {e.code}; the alert was not delivered"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise TraceflowError(
            f"cannot reach the webhook {url} ({reason}); the alert was not delivered"
        ) from None
