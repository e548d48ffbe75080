"""The time zone of days, weeks and months, and of printed times (``--tz``, ``TRACEFLOW_TZ``).

The lake keeps UTC (docs/lake.md#data-model); a zone only changes how times are *grouped* (``--by day``,
``--by week``, ``--by month``, the 5-hour blocks' printed bounds) and *printed*, and how a date or
time without an offset in ``--since``/``--until`` is read.

The default is **UTC**: the same lake gives the same table on every machine (a team's shared lake,
CI, the result cache, golden tests), the lake's ``dt=`` partitions and the daily rollup that
compaction stores are UTC days (so ``mix --by day`` is answered from the rollup only in UTC), and
the telemetry itself is stamped in UTC. Set ``TRACEFLOW_TZ=local`` (the machine's zone, as ccusage
uses) or an IANA name (``Asia/Tokyo``) once to have local days everywhere; ``--tz`` overrides it
per command.

The zone is never process state: it is a field of the
:class:`~traceflow.store.selection.Selection` (default :func:`default_zone`), and every function
here that groups or prints a time takes it as an argument (``docs/zones.md``).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
from typing import Any

from traceflow import config
from traceflow.errors import UsageError
from traceflow.store import measures

UTC = "UTC"
#: The period groupings (their labels: :data:`traceflow.store.measures.PERIODS`).
PERIODS = tuple(measures.PERIODS)


def local_zone() -> str:
    """The machine's zone: ``$TZ`` when it names one, else the target of ``/etc/localtime``, else UTC."""
    tz = (config.tz_variable() or "").lstrip(":")
    if tz and _known(tz):
        return tz
    target = os.path.realpath("/etc/localtime")
    if "zoneinfo/" in target:
        name = target.split("zoneinfo/", 1)[1]
        if _known(name):
            return name
    return UTC


#: Files of the zone folder that zoneinfo opens as zones but are no IANA names.
_NOT_ZONES = frozenset({"posixrules", "localtime"})


@functools.cache
def _known(name: str) -> bool:
    import zoneinfo

    if not name or name.startswith(("/", ".")) or ".." in name:
        return False
    # Only the IANA database's names: the files beside them that zoneinfo also opens (posixrules,
    # localtime, right/UTC, posix/...) are zones DuckDB's ICU does not know, and `--by day` fails.
    # (zoneinfo.available_timezones() leaves exactly these out, but walks the folder: 37 ms a call.)
    if name in _NOT_ZONES or name.startswith(("right/", "posix/")):
        return False
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def resolve(name: str | None, option: str = "--tz") -> str:
    """An IANA zone name for ``name`` (``local``: the machine's; None or empty: UTC), or a usage error."""
    text = (name or "").strip()
    if not text or text.upper() in ("UTC", "Z", "ETC/UTC"):
        return UTC
    if text.lower() == "local":
        return local_zone()
    if not _known(text) or "'" in text:
        raise UsageError(
            f"{option} {name!r} is not a time zone; use an IANA name such as Asia/Tokyo or "
            "Europe/Berlin, UTC, or local (this machine's zone)"
        )
    return text


def default_zone() -> str:
    """The zone of a selection that names none: the ``tz`` setting (``TRACEFLOW_TZ``), else UTC.

    The one place the default is decided: a :class:`~traceflow.store.selection.Selection`, the CLI
    (no ``--tz``) and the printed times of a command without a selection all take it from here."""
    return resolve(config.get("tz"), "TRACEFLOW_TZ")


def personal_zone(tz: str | None = None) -> str:
    """The zone of a personal view (``daily``, ``weekly``, ``monthly``, ``session``, ``blocks``):
    ``tz`` (its ``--timezone``) when given; else the ``tz`` setting when set (a server lake may pin
    UTC there), else this machine's zone, as ccusage and every personal CLI use (``docs/zones.md``)."""
    if tz:
        return resolve(tz, "--timezone")
    setting = config.get("tz")
    return resolve(setting, "TRACEFLOW_TZ") if setting else local_zone()


def tzinfo(zone: str) -> dt.tzinfo:
    """The ``tzinfo`` of the (resolved) zone name ``zone``."""
    if zone == UTC:
        return dt.UTC
    import zoneinfo

    return zoneinfo.ZoneInfo(zone)


def wall_clock_sql(expr: str, zone: str) -> str:
    """``expr`` (a TIMESTAMPTZ) as the wall-clock TIMESTAMP of ``zone``."""
    if "'" in zone:
        raise ValueError(f"not a zone name: {zone!r}")
    return f"({expr} AT TIME ZONE '{zone}')"


def period_sql(period: str, expr: str, zone: str) -> str:
    """The label of the ``period`` (day, week, month) that the time ``expr`` falls in, in ``zone``:
    ``2026-12-02`` for a day, the ISO week's Monday ``2026-11-30`` for a week, ``2026-12`` for a month."""
    return measures.period_label_sql(period, wall_clock_sql(expr, zone))


def period_of(period: str, when: dt.datetime, zone: str) -> str:
    """The label :func:`period_sql` gives the time ``when`` (an aware datetime), computed in Python
    from the same :data:`traceflow.store.measures.PERIODS` (``tests/test_periods.py`` compares the two)."""
    spec = measures.PERIODS.get(period)
    if spec is None:
        raise ValueError(f"not a period: {period}")
    local = when.astimezone(tzinfo(zone))
    if spec.trunc == "week":  # DuckDB's date_trunc('week'): the ISO week's Monday
        local = local - dt.timedelta(days=local.weekday())
    elif spec.trunc is not None:
        raise ValueError(f"no Python twin for date_trunc({spec.trunc!r})")
    return local.strftime(spec.fmt)


def naive_in_zone(value: dt.datetime, zone: str) -> dt.datetime:
    """``value`` with ``zone`` attached when it carries no offset (an aware one unchanged)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=tzinfo(zone))


def localise(value: Any, zone: str) -> Any:
    """``value`` with every aware datetime in it shown in ``zone``: a datetime, a list, tuple or
    dict of them, or a polars frame's zoned columns. UTC changes nothing."""
    if zone == UTC:
        return value
    return _localise(value, tzinfo(zone), zone)


def _localise(value: Any, info: dt.tzinfo, zone: str) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(info) if value.tzinfo is not None else value
    if isinstance(value, dict):
        return {k: _localise(v, info, zone) for k, v in value.items()}
    if isinstance(value, list):
        return [_localise(v, info, zone) for v in value]
    if isinstance(value, tuple):
        return tuple(_localise(v, info, zone) for v in value)
    rows = getattr(value, "rows", None)
    columns = getattr(value, "columns", None)
    if isinstance(rows, list) and isinstance(columns, list):  # traceflow.output.Rows
        from traceflow.output import Rows

        localised = [tuple(_localise(v, info, zone) for v in r) for r in rows]
        return Rows(columns, localised, getattr(value, "essential", ()))
    schema = getattr(value, "schema", None)
    if schema is not None and hasattr(value, "with_columns"):  # a polars frame
        import polars as pl

        zoned = [n for n, t in schema.items() if isinstance(t, pl.Datetime) and t.time_zone is not None]
        if zoned:
            return value.with_columns(pl.col(zoned).dt.convert_time_zone(zone))
    return value
