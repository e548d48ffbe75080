"""Durations, sizes and bandwidths: the one parser and printer every option and setting uses.

Sizes are bytes. A plain number is bytes; the decimal (SI) suffixes ``kB MB GB TB PB`` are
10^3, 10^6, 10^9, 10^12, 10^15 bytes, as storage vendors, drive makers and DWPD ratings count;
the binary suffixes ``KiB MiB GiB TiB PiB`` are 2^10 … 2^50. Suffixes ignore case and the ``B``
may be left out (``1g`` = ``1GB`` = 10^9, ``1gi`` = ``1GiB`` = 2^30); bits are not accepted.

Durations are seconds. A plain number is seconds; ``ms s m min h d`` are the units (any case:
``5M`` is five minutes, never months).

A bandwidth is a size per second, ``14GB/s`` (the ``/s`` may be left out).

Numbers may have decimals, an exponent and ``_`` between digits (``1.5TB``, ``1e9``,
``1_000_000``), and a space before the unit (``64 MiB``), so every printed value parses back.
A bad value raises :class:`~traceflow.errors.UsageError` naming the option and the forms it takes.

>>> parse_size("1GB", "--drive-size"), parse_size("1GiB", "--drive-size")
(1000000000.0, 1073741824.0)
>>> parse_duration("5m", "--ttl"), format_duration(3600)
(300.0, '1h')
>>> parse_bandwidth("14GB/s", "read"), format_bandwidth(14e9)
(14000000000.0, '14.00 GB/s')
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from traceflow.errors import UsageError

#: Bytes per size suffix (lower case; the trailing ``b`` is optional).
SIZE_UNITS: dict[str, int] = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "p": 10**15,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
    "pi": 2**50,
}

#: Seconds per duration unit (lower case).
DURATION_UNITS: dict[str, Decimal] = {
    "": Decimal(1),
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "min": Decimal(60),
    "h": Decimal(3_600),
    "d": Decimal(86_400),
}

#: Words that mean an unlimited size where one is allowed (a tier of unbounded capacity).
UNLIMITED = ("inf", "infinite", "unlimited")

SIZE_FORMS = "bytes or 80GB, 512GiB, 1.5TB (kB MB GB TB PB = 10^3.., KiB MiB GiB TiB PiB = 2^10..)"
DURATION_FORMS = "seconds or 250ms, 30s, 5m, 1.5h, 1d"
BANDWIDTH_FORMS = "a size per second such as 14GB/s, 5.08GB/s or 800MiB/s"

_NUMBER_UNIT = re.compile(r"([0-9_.]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)")


def _number_unit(text: str) -> tuple[Decimal, str] | None:
    m = _NUMBER_UNIT.fullmatch(text.strip().lower())
    if m is None:
        return None
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        return None
    return number, m.group(2)


def _scaled(number: Decimal, unit: Decimal | int) -> float | None:
    """``number × unit`` as a float, exact where a float can hold it; None when it overflows."""
    try:
        value = float(number * unit)
    except ArithmeticError:
        return None
    return value if math.isfinite(value) else None


def parse_size(text: str, option: str, *, unlimited: bool = False) -> float:
    """Bytes in ``text``; ``option`` names the option or setting in the error message.

    With ``unlimited``, ``inf`` (or ``infinite``, ``unlimited``) gives infinity.

    >>> parse_size("80GB", "--tier"), parse_size("1TiB", "--tier"), parse_size("12.8TB", "--tier")
    (80000000000.0, 1099511627776.0, 12800000000000.0)
    >>> parse_size("64 MiB", "--max-body-bytes"), parse_size("4096", "--max-body-bytes")
    (67108864.0, 4096.0)
    >>> parse_size("inf", "--tier dram", unlimited=True)
    inf
    >>> parse_size("lots", "--drive-size")
    Traceback (most recent call last):
    ...
    traceflow.errors.UsageError: --drive-size 'lots' is not a size; write bytes or 80GB, 512GiB, 1.5TB \
(kB MB GB TB PB = 10^3.., KiB MiB GiB TiB PiB = 2^10..)
    """
    if unlimited and text.strip().lower() in UNLIMITED:
        return math.inf
    parsed = _number_unit(text)
    unit = parsed[1].removesuffix("b") if parsed else ""
    n_bytes = _scaled(parsed[0], SIZE_UNITS[unit]) if parsed and unit in SIZE_UNITS else None
    if n_bytes is None:
        raise UsageError(f"{option} {text!r} is not a size; write {SIZE_FORMS}")
    return n_bytes


def parse_bandwidth(text: str, option: str) -> float:
    """Bytes per second in ``text``: a size with an optional ``/s``.

    >>> parse_bandwidth("5.08GB/s", "read"), parse_bandwidth("20.3GB", "read")
    (5080000000.0, 20300000000.0)
    """
    size = text.strip()
    if size.lower().endswith("/s"):
        size = size[:-2]
    try:
        return parse_size(size, option)
    except UsageError:
        raise UsageError(f"{option} {text!r} is not a bandwidth; write {BANDWIDTH_FORMS}") from None


def parse_duration(text: str, option: str, *, zero: bool = False) -> float:
    """Seconds in ``text``; it must be positive, or may be 0 with ``zero`` (a latency, say).

    >>> [parse_duration(t, "--ttl") for t in ("300", "300s", "5m", "1.5h", "1d", "250ms")]
    [300.0, 300.0, 300.0, 5400.0, 86400.0, 0.25]
    >>> parse_duration("0", "--resolution")
    Traceback (most recent call last):
    ...
    traceflow.errors.UsageError: --resolution '0' is not a positive duration; write seconds or 250ms, 30s, \
5m, 1.5h, 1d
    """
    parsed = _number_unit(text)
    seconds = (
        _scaled(parsed[0], DURATION_UNITS[parsed[1]]) if parsed and parsed[1] in DURATION_UNITS else None
    )
    if seconds is None:
        raise UsageError(f"{option} {text!r} is not a duration; write {DURATION_FORMS}")
    if seconds == 0 and not zero:
        raise UsageError(f"{option} {text!r} is not a positive duration; write {DURATION_FORMS}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest label of a duration in whole days, hours or minutes, else in seconds.

    >>> [format_duration(t) for t in (30, 300, 5400, 3600, 86400, 0.25)]
    ['30s', '5m', '90m', '1h', '1d', '0.25s']
    """
    value = float(seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    return f"{value:g}s"


def format_size(n_bytes: float) -> str:
    """Bytes in decimal units with two decimals (``inf`` when unlimited).

    >>> [format_size(b) for b in (512, 1.5e3, 80e9, 1.92e12, 2**30)]
    ['512 B', '1.50 kB', '80.00 GB', '1.92 TB', '1.07 GB']
    >>> parse_size(format_size(80e9), "size")
    80000000000.0
    """
    if math.isinf(n_bytes):
        return "inf"
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= size:
            return f"{n_bytes / size:.2f} {unit}"
    return f"{n_bytes:.0f} B"


def format_bandwidth(bytes_per_s: float) -> str:
    """Bytes per second as a size per second.

    >>> format_bandwidth(5.08e9)
    '5.08 GB/s'
    """
    return f"{format_size(bytes_per_s)}/s"


def format_elapsed(seconds: float) -> str:
    """A duration for people: ``250 ms``, ``42.3 s``, ``5m 30s``, ``6h 6m``, ``2d 3h``.

    >>> [format_elapsed(t) for t in (0.25, 42.34, 330, 21_997.2, 183_600, -90)]
    ['250 ms', '42.3 s', '5m 30s', '6h 6m', '2d 3h', '-1m 30s']
    """
    value = float(seconds)
    if not math.isfinite(value):
        return str(value)
    if value < 0:
        return "-" + format_elapsed(-value)
    if value < 1:
        return f"{value * 1000:.3g} ms" if value else "0 s"
    if value < 60:
        return f"{value:.3g} s" if value < 10 else f"{value:.1f} s"
    whole = round(value)
    for big, big_name, small, small_name in (
        (86_400, "d", 3_600, "h"),
        (3_600, "h", 60, "m"),
        (60, "m", 1, "s"),
    ):
        if whole >= big:
            return f"{whole // big}{big_name} {(whole % big) // small}{small_name}"
    return f"{whole} s"  # pragma: no cover - value >= 60 above
