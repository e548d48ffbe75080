"""``traceflow check --webhook URL --webhook-format json|slack|alertmanager``: the alert's body in the
format of what receives it (docs/forensics.md#traceflow-check, where each format's shape and its
source are given).

* ``json``: traceflow's own object, as ``check --format json`` prints it (:meth:`Health.as_dict`);
* ``slack``: a Slack incoming-webhook message: ``text`` (one line, what a notification shows) and
  ``blocks`` (a header, one ``mrkdwn`` section listing the checks that fired, a context line with
  the window, the baseline and the filters);
* ``alertmanager``: Alertmanager's API v2 body for ``POST /api/v2/alerts``: a list with one alert
  per check that fired, each with ``labels`` (``alertname``, ``check``, ``service``, ``severity``,
  and ``version``/``where`` where they apply), ``annotations`` (``summary``, ``description``,
  ``window``, ``baseline``), and ``startsAt`` (when the check ran, RFC 3339). ``endsAt`` and
  ``generatorURL`` are left out: a check run from cron does not know when the condition ends, so
  Alertmanager resolves the alert after its ``resolve_timeout`` unless the next run sends it again.

:func:`summary` is the one sentence per fired check that every format shows.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError

if TYPE_CHECKING:
    from traceflow.analysis.health import Health
    from traceflow.store.selection import Selection

#: The formats ``--webhook-format`` takes.
FORMATS = ("json", "slack", "alertmanager")

#: Slack's limits on a header's and a section's text (characters).
SLACK_HEADER_MAX = 150
SLACK_SECTION_MAX = 3000

_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_format(name: str) -> str:
    """``name`` when it is one of :data:`FORMATS`, else a usage error naming them."""
    if name not in FORMATS:
        raise UsageError(f"--webhook-format {name!r} is not one of: {', '.join(FORMATS)}")
    return name


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{100 * float(x):.1f} %"


def summary(fired: dict[str, Any]) -> str:
    """One sentence for a fired check (an object of ``Health.fired``)."""
    kind = fired.get("check")
    if kind == "reuse_drop":
        return (
            f"reuse ratio fell {_pct(fired['drop'])}: {_pct(fired['baseline'])} in the baseline, "
            f"{_pct(fired['window'])} in the window (threshold {_pct(fired['threshold'])})"
        )
    if kind == "unexplained_misses":
        return (
            f"unexplained misses rose from {_pct(fired['baseline'])} to {_pct(fired['window'])} of the "
            f"requests (threshold +{_pct(fired['threshold'])})"
        )
    if kind == "write_amplification":
        return (
            f"write amplification (cache writes / reads) rose {_pct(fired['rise'])}: "
            f"{fired['baseline']:.3g} to {fired['window']:.3g} (threshold {_pct(fired['threshold'])})"
        )
    if kind == "version_regression":
        return (
            f"client version {fired['version']} has {_pct(fired['window'])} client misses against "
            f"{_pct(fired['baseline'])} for {fired['previous_version']} "
            f"(threshold +{_pct(fired['threshold'])})"
        )
    if kind == "silence":
        return str(fired["reason"])
    return f"{kind} fired"


def _time(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return "" if value is None else str(value)


def _period(period: dict[str, Any]) -> str:
    since, until = _time(period.get("since")), _time(period.get("until"))
    return f"{since} to {until} ({period.get('requests', 0)} requests)"


def filters_text(selection: Selection | None) -> str:
    """The selection's filters as typed (``--where``, ``--agent``, ...), empty without any: the
    ``where`` label of the alerts here and of ``check --metrics-file``'s gauges."""
    if selection is None:
        return ""
    parts = [str(c) for c in selection.conditions]
    for name, values in selection.named_lists():
        if values:
            parts.append(f"{name}={','.join(values)}")
    return " ".join(parts)


def _slack_escape(text: str) -> str:
    """Slack reads ``&``, ``<`` and ``>`` as markup (``<!channel>`` notifies everyone)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack(health: Health, selection: Selection | None = None) -> dict[str, Any]:
    """The Slack incoming-webhook message of ``health``."""
    where = filters_text(selection)
    scope = f" ({where})" if where else ""
    lines = [summary(f) for f in health.fired]
    status = "alert" if health.alert else "ok"
    text = f"traceflow cache health{scope}: {status}" + (f": {'; '.join(lines)}" if lines else "")
    header = f"traceflow cache health: {status}"  # plain text: the filters go to the context line
    section = "\n".join(f"• {_slack_escape(line)}" for line in lines) or "No check fired."
    context = f"*window* {_period(health.window)} · *baseline* {_period(health.baseline)}"
    if where:
        context += f" · *filters* `{_slack_escape(where)}`"
    return {
        "text": _cut(_slack_escape(text), SLACK_SECTION_MAX),
        "blocks": [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": _cut(header, SLACK_HEADER_MAX)},
            },
            {"type": "section", "text": {"type": "mrkdwn", "text": _cut(section, SLACK_SECTION_MAX)}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(context, SLACK_SECTION_MAX)}]},
        ],
    }


def alertname(check: str) -> str:
    """``reuse_drop`` -> ``TraceflowReuseDrop``."""
    return "Traceflow" + "".join(part.capitalize() for part in check.split("_"))


def alertmanager(
    health: Health, selection: Selection | None = None, now: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """Alertmanager's API v2 list of alerts of ``health``: one per fired check (none when healthy)."""
    starts = _time(now or dt.datetime.now(dt.UTC))
    where = filters_text(selection)
    out = []
    for fired in health.fired:
        check = str(fired.get("check"))
        labels = {"alertname": alertname(check), "check": check, "service": "traceflow"}
        labels["severity"] = "warning"
        if "version" in fired:
            labels["version"] = str(fired["version"])
        if where:
            labels["where"] = where
        assert all(_LABEL_NAME.match(k) for k in labels)
        details = ", ".join(f"{k}={v}" for k, v in fired.items() if k not in ("check", "reason"))
        out.append(
            {
                "labels": labels,
                "annotations": {
                    "summary": summary(fired),
                    "description": details,
                    "window": _period(health.window),
                    "baseline": _period(health.baseline),
                },
                "startsAt": starts,
            }
        )
    return out


def payload(
    fmt: str, health: Health, selection: Selection | None = None, now: dt.datetime | None = None
) -> Any:
    """The body ``check --webhook`` POSTs in ``fmt`` (:data:`FORMATS`)."""
    if check_format(fmt) == "slack":
        return slack(health, selection)
    if fmt == "alertmanager":
        return alertmanager(health, selection, now)
    return health.as_dict()
