"""Print results for people (table, markdown) and for programs (json, csv).

Works on plain columns and rows so the quick commands need neither polars nor pyarrow at start-up;
:func:`render` also takes a polars frame.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import shutil
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from traceflow.units import format_bandwidth, format_elapsed, format_size

if TYPE_CHECKING:
    import polars as pl

FORMATS: tuple[str, ...] = ("table", "json", "csv", "markdown")


class Rows:
    """A result: column names and row tuples; ``essential`` names the columns a table keeps when it
    must leave some out to fit (the view's own choice: see :func:`_fit`)."""

    def __init__(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], essential: Sequence[str] = ()
    ) -> None:
        self.columns = list(columns)
        self.rows = [tuple(r) for r in rows]
        self.essential = tuple(essential)

    @classmethod
    def of(cls, result: Rows | pl.DataFrame) -> Rows:
        if isinstance(result, Rows):
            return result
        return cls(result.columns, result.rows())

    def records(self) -> list[dict[str, Any]]:
        """JSON-ready rows: NaN becomes null."""
        return [
            {
                k: (None if isinstance(v, float) and math.isnan(v) else exact(v))
                for k, v in zip(self.columns, r, strict=True)
            }
            for r in self.rows
        ]

    def numeric(self) -> list[bool]:
        return [
            all(v is None or _is_number(v) for v in col) and any(v is not None for v in col)
            for col in zip(*self.rows, strict=True)
        ] or [False] * len(self.columns)


@dataclass(frozen=True)
class Display:
    """How a command shows its results, passed to what prints them (this module keeps none of it).

    ``wide`` (``--wide``): tables keep every column, whatever the terminal's width. ``freshness``:
    on a lake fed by ``traceflow serve`` (``traceflow.cli.options.open_lake``), ``(footer line, JSON
    member)`` saying how fresh it is (``docs/freshness.md``): tables and markdown end with the line,
    a JSON object gets the member as ``freshness``.
    """

    wide: bool = False
    freshness: tuple[str, dict[str, Any]] | None = None


#: Tables fitted to the terminal, no freshness: what a caller that passes nothing gets.
PLAIN = Display()
#: Columns kept when a table is cut to fit (besides its leading label columns), by name fragment,
#: where the view declares no essential columns (:attr:`Rows.essential`).
_KEEP = ("requests", "total", "cost", "usd", "reuse_ratio", "hit_ratio")
_GAP = 2
#: The narrowest a text column is cut to, to fit a table (its header's longest word if that is wider).
_MIN_TEXT = 16


def _kind(name: str) -> str:
    """The unit of a column, from its name: money, percent, size, bandwidth, duration, rate or plain."""
    n = name.lower()
    if "_vs_" in n:  # a ratio of two costs or counts
        return "plain"
    if "usd" in n or n.startswith("cost") or n.endswith("_cost"):
        return "money"
    if n.endswith("_bytes_per_s") or "_bytes_per_s_per_" in n:  # a bandwidth (per GPU, per drive, ...)
        return "bandwidth"
    if n.endswith("_bytes") or n == "bytes" or "_bytes_per_" in n:  # a size, or a size per token
        return "size"
    if "share" in n or n.endswith(("_ratio", "_fraction")) or n == "ratio":
        return "percent"
    if n.endswith(("_tok_s", "_per_s")):
        return "per_s"
    if n.endswith("_ms"):
        return "ms"
    if n.endswith(("_s", "_seconds")) or n in ("seconds", "duration"):
        return "seconds"
    return "plain"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _decimals(values: list[float], least: int = 0) -> int:
    """Decimals that show the column's smallest non-zero magnitude with three significant digits
    (at most 4, at least ``least``), so a column's numbers all carry the same decimals."""
    small = [abs(v) for v in values if v and math.isfinite(v)]
    if not small:
        return least
    digits = 2 - math.floor(math.log10(min(small)))
    return max(least, min(4, digits))


def _column_cells(name: str, values: Sequence[Any]) -> list[str]:
    """A column's values as text with their unit, thousands separators and one number of decimals."""
    nums = [float(v) for v in values if _is_number(v)]
    kind = _kind(name) if nums else "plain"
    if kind == "plain" and nums and all(isinstance(v, int) or v is None for v in values):
        kind = "int"
    places = 0
    if kind == "money":
        places = 2 if all(abs(v) >= 0.01 or not v for v in nums) else 4
    elif kind in ("plain", "per_s"):
        places = _decimals(nums) if any(v != int(v) for v in nums if math.isfinite(v)) else 0
    times = _time_text(values)
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append("")
        elif not _is_number(v):
            out.append(times(v) if isinstance(v, dt.datetime) else str(v))
        elif not math.isfinite(float(v)):
            out.append("inf" if float(v) > 0 else "-inf")
        else:
            out.append(_unit_text(kind, float(v), v, places))
    return out


def _times(values: Sequence[Any]) -> list[dt.datetime]:
    return [v for v in values if isinstance(v, dt.datetime)]


def _zone(values: Sequence[dt.datetime]) -> str | None:
    """The name of the one zone every value of a column of times is in (``UTC``, ``Asia/Tokyo``), or
    None when they are naive or differ."""
    names = {str(getattr(v.tzinfo, "key", v.tzinfo)) if v.tzinfo is not None else None for v in values}
    offsets = {v.utcoffset() for v in values}
    return names.pop() if len(names) == 1 and len(offsets) == 1 and None not in names else None


def _time_text(values: Sequence[Any]) -> Callable[[dt.datetime], str]:
    """How a column's times print in a table: as short as the column allows. A date when every time
    is a midnight, minutes when no time has seconds, else seconds (never fractions); no offset when
    they share one zone (the table's note names it, see :func:`render_table`)."""
    times = _times(values)
    if times and all(v.time() == dt.time(0) for v in times):
        return lambda v: v.date().isoformat()
    spec = "minutes" if all(v.second == 0 and v.microsecond == 0 for v in times) else "seconds"
    if _zone(times) is not None:
        return lambda v: v.replace(tzinfo=None).isoformat(sep=" ", timespec=spec)
    return lambda v: v.isoformat(sep=" ", timespec=spec)


def _table_zone(result: Rows) -> str | None:
    """The zone a table's times print in, when one is and :func:`_time_text` left its offset out."""
    zones = set()
    for col in zip(*result.rows, strict=True):
        times = _times(col)
        if times and not all(v.time() == dt.time(0) for v in times):
            zones.add(_zone(times))
    return zones.pop() if len(zones) == 1 else None


def _unit_text(kind: str, x: float, raw: Any, places: int) -> str:
    if kind == "int":
        return f"{raw:,}"
    if kind == "money":
        return f"-${-x:,.{places}f}" if x < 0 else f"${x:,.{places}f}"
    if kind == "percent":
        return f"{x * 100:,.1f} %"
    if kind == "size":
        return ("-" if x < 0 else "") + format_size(abs(x))
    if kind == "bandwidth":
        return ("-" if x < 0 else "") + format_bandwidth(abs(x))
    if kind == "seconds":
        return format_elapsed(x)
    if kind == "ms":
        return format_elapsed(x / 1000)
    text = f"{x:,.{places}f}" if not x or abs(x) >= 10**-places else f"{x:.3g}"  # tiny: not 0.0000
    return f"{text}/s" if kind == "per_s" else text


def _cell(value: Any) -> str:
    """One value as text, without a column to take its unit from."""
    return _column_cells("", [value])[0]


#: A missing value in a leading label column (a group with no model, say), as the charts show it.
UNKNOWN = "(unknown)"


def cells(result: Rows) -> list[list[str]]:
    """The table's rows as text, each column with its unit (see :func:`_kind`); a missing label in
    the leading label columns reads :data:`UNKNOWN`."""
    if not result.rows:
        return []
    columns = [
        _column_cells(name, col)
        for name, col in zip(result.columns, zip(*result.rows, strict=True), strict=True)
    ]
    numeric = result.numeric()
    if _by_row(result, numeric):  # one metric per row (``metric  all  human``): units from the row's name
        for r, row in enumerate(result.rows):
            at = [i for i in range(1, len(row)) if _is_number(row[i])]
            for i, text in zip(at, _column_cells(str(row[0]), [row[i] for i in at]), strict=True):
                columns[i][r] = text
    labels = numeric.index(True) if True in numeric else 0  # the leading columns that name a row
    for i, col in enumerate(columns[:labels]):
        columns[i] = [
            UNKNOWN if v is None else c for v, c in zip((r[i] for r in result.rows), col, strict=True)
        ]
    return [list(row) for row in zip(*columns, strict=True)] if columns else [[] for _ in result.rows]


def _by_row(result: Rows, numeric: list[bool]) -> bool:
    """Whether ``result`` holds one metric per row: a first column of names, some of which carry a
    unit (``p50_s``), and other columns whose own names carry none."""
    if not result.rows or not result.columns or numeric[0]:
        return False
    if any(_kind(name) != "plain" for name in result.columns[1:]):
        return False
    return any(isinstance(row[0], str) and _kind(row[0]) != "plain" for row in result.rows)


def terminal_width() -> int | None:
    """The width tables fit: ``COLUMNS`` when set, else the terminal's when stdout is one; None (no
    limit) otherwise, so that a table written to a file or a pipe keeps every column."""
    columns = shutil.get_terminal_size(fallback=(0, 0)).columns  # COLUMNS first, then the terminal
    return columns if columns > 0 else None


def table_width(width: int | None = None, *, wide: bool = False) -> int | None:
    """The width a table fits: ``width``, else :func:`terminal_width`; None (no limit) when ``wide``."""
    return None if wide else (width if width is not None else terminal_width())


def fit_text(text: str, width: int | None = None, *, wide: bool = False) -> str:
    """``text`` (a sentence or a few lines beside a table) wrapped at spaces to the width a table fits
    (:func:`table_width`; not at all when ``wide`` or with no limit), indents kept."""
    limit = table_width(width, wide=wide)
    if limit is None:
        return text
    out = []
    for line in text.split("\n"):
        indent = line[: len(line) - len(line.lstrip(" "))]
        out += textwrap.wrap(
            line, width=limit, subsequent_indent=indent + "  ", break_on_hyphens=False, break_long_words=False
        ) or [line]
    return "\n".join(out)


def _header_lines(name: str, width: int) -> list[str]:
    """``name`` wrapped at its underscores into lines of at most ``width`` (a longer word stays whole)."""
    lines: list[str] = []
    for word in name.split("_"):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += "_" + word
        else:
            lines.append(word)
    return lines


def _fit(result: Rows, text: list[list[str]], limit: int) -> tuple[list[int], list[int], list[list[str]]]:
    """Which columns to show within ``limit`` characters, their widths and header lines.

    Headers first wrap at their underscores; then long text is cut (the widest text column first,
    down to :data:`_MIN_TEXT` characters; :func:`render_table` marks a cut with ``…``); if the table
    is still too wide, columns are left out in :func:`_drop_order` until it fits, and then those
    left out that fit again are put back; the first column always stays.
    """
    numeric = result.numeric()
    n = len(result.columns)
    cell_w = [max([0] + [len(r[i]) for r in text]) for i in range(n)]
    word_w = [max(len(w) for w in name.split("_")) for name in result.columns]
    narrow = [max(cell_w[i], word_w[i], 1) for i in range(n)]
    labels = 0
    while labels < n and not numeric[labels]:
        labels += 1
    shown = list(range(n))

    def total(cols: list[int]) -> int:
        return sum(narrow[i] for i in cols) + _GAP * (len(cols) - 1)

    # Text that may be cut: not the labels that name a row (all of them before the first number,
    # or the first column of a table of text), not numbers.
    whole = range(labels) if labels < n else range(1)
    floor = [narrow[i] if numeric[i] or i in whole else max(word_w[i], _MIN_TEXT) for i in range(n)]
    while total(shown) > limit:  # one character at a time from the widest: the cuts stay even
        widest = max(range(n), key=lambda i: narrow[i] if narrow[i] > floor[i] else -1)
        if narrow[widest] <= floor[widest]:
            break
        narrow[widest] -= 1

    dropped: list[int] = []
    for i in _drop_order(result, labels):
        if total(shown) <= limit:
            break
        shown.remove(i)
        dropped.append(i)
    for i in reversed(dropped):  # put back what fits again, the most wanted first
        if total(sorted([*shown, i])) <= limit:
            shown = sorted([*shown, i])
    headers = [_header_lines(result.columns[i], narrow[i]) for i in range(n)]
    return shown, narrow, headers


def _drop_order(result: Rows, labels: int) -> list[int]:
    """The columns a table leaves out to fit, first to last; never the first column.

    With the view's :attr:`Rows.essential` columns: every other column from the right, then the
    essential ones, the last named first. Without: from the right, the columns that are neither a
    leading label column nor in :data:`_KEEP`, then the kept ones, then the label columns.
    """
    n = len(result.columns)
    if result.essential:
        essential = [result.columns.index(c) for c in result.essential if c in result.columns]
        rest = [i for i in reversed(range(1, n)) if i not in essential]
        return rest + [i for i in reversed(essential) if i > 0]
    kept = [any(k in c.lower() for k in _KEEP) for c in result.columns]
    order = [i for keep in (False, True) for i in reversed(range(max(labels, 1), n)) if kept[i] == keep]
    return order + list(reversed(range(1, max(labels, 1))))


def render_table(result: Rows, width: int | None = None, *, wide: bool = False) -> str:
    """``result`` as an aligned text table with units; fitted to ``width`` (default: the terminal's,
    see :func:`terminal_width`) unless ``wide``, with a note naming the columns left out."""
    text = cells(result)
    numeric = result.numeric()
    n = len(result.columns)
    limit = table_width(width, wide=wide)
    full = [max([len(h)] + [len(r[i]) for r in text]) for i, h in enumerate(result.columns)]
    shown = list(range(n))
    widths = full
    headers = [[h] for h in result.columns]
    if limit is not None and sum(full) + _GAP * (n - 1) > limit:
        shown, widths, headers = _fit(result, text, limit)

    cut = False

    def fitted(cell: str, i: int) -> str:
        nonlocal cut
        if len(cell) <= widths[i]:
            return cell.rjust(widths[i]) if numeric[i] else cell.ljust(widths[i])
        cut = True
        return cell[: widths[i] - 1] + "…"

    def line(row: Sequence[str]) -> str:
        return (" " * _GAP).join(fitted(row[i], i) for i in shown).rstrip()

    depth = max(len(headers[i]) for i in shown) if shown else 1
    head = []
    for k in range(depth):
        head.append(line([(h[k - (depth - len(h))] if k >= depth - len(h) else "") for h in headers]))
    out = [*head, (" " * _GAP).join("-" * widths[i] for i in shown)]
    out += [line(r) for r in text]
    if not text:
        out.append("(no rows)")
    hidden = [result.columns[i] for i in range(n) if i not in shown]
    notes = []
    if hidden:
        notes.append(f"{len(hidden)} of {n} columns left out to fit {limit} characters: {', '.join(hidden)}")
    if cut:
        notes.append(f"long text cut (…) to fit {limit} characters")
    zone = _table_zone(result) if text else None
    if zone is not None:
        out.append(f"times in {zone}")
    if notes:
        note = f"note: {'; '.join(notes)}; --wide, a wider terminal or --format csv shows all"
        out += textwrap.wrap(note, width=max(limit or 0, 40), break_on_hyphens=False)
    return "\n".join(out)


def render_markdown(result: Rows) -> str:
    aligns = ["---:" if n else "---" for n in result.numeric()]
    out = ["| " + " | ".join(result.columns) + " |", "| " + " | ".join(aligns) + " |"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells(result)]
    return "\n".join(out)


def exact(value: Any) -> Any:
    """A float without the noise of binary arithmetic: rounded to 15 significant digits (the most a
    double holds for every decimal), so ``0.1 + 0.2`` is written ``0.3``; other values unchanged."""
    if isinstance(value, float) and math.isfinite(value) and value:
        return float(f"{value:.15g}")
    return value


def render_csv(result: Rows) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(result.columns)
    for row in result.rows:
        writer.writerow(
            ["" if v is None else (v.isoformat() if isinstance(v, dt.datetime) else exact(v)) for v in row]
        )
    return buf.getvalue().rstrip("\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)


def to_json(value: Any) -> str:
    return orjson.dumps(value, default=_json_default, option=orjson.OPT_INDENT_2).decode()


def document(value: Any, display: Display = PLAIN) -> Any:
    """A JSON document as printed: an object gains a ``freshness`` member on a lake fed by serve
    (:attr:`Display.freshness`); a list keeps its shape (scripts index it), so it gains nothing."""
    fresh = display.freshness
    if fresh is not None and isinstance(value, dict) and "freshness" not in value:
        return {**value, "freshness": fresh[1]}
    return value


def footer(text: str, display: Display = PLAIN) -> str:
    """A table's or a report's text with the freshness line under it (on a lake fed by serve)."""
    if display.freshness is None:
        return text
    return text.rstrip("\n") + "\n" + display.freshness[0]


def render(
    result: Rows | pl.DataFrame,
    fmt: str,
    *,
    single: bool = False,
    essential: Sequence[str] = (),
    display: Display = PLAIN,
) -> str:
    """``result`` in ``fmt``, shown as ``display`` says; with ``single`` a one-row result is one JSON
    object, not a list; ``essential``: the columns a table keeps to fit (besides those ``result``
    declares)."""
    rows = Rows.of(result)
    if essential:
        rows = Rows(rows.columns, rows.rows, (*rows.essential, *essential))
    if fmt == "json":
        recs = rows.records()
        return to_json(document(recs[0] if single and len(recs) == 1 else recs, display))
    if fmt == "csv":
        return render_csv(rows)
    if fmt == "markdown":
        return footer(render_markdown(rows), display)
    return footer(render_table(rows, wide=display.wide), display)
