"""Print results for people (table, markdown) and for programs (json, csv).

Works on plain columns and rows so the quick commands need neither polars nor pyarrow at start-up;
:func:`render` also takes a polars frame.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import polars as pl

FORMATS: tuple[str, ...] = ("table", "json", "csv", "markdown")


class Rows:
    """A result: column names and row tuples."""

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.columns = list(columns)
        self.rows = [tuple(r) for r in rows]

    @classmethod
    def of(cls, result: Rows | pl.DataFrame) -> Rows:
        if isinstance(result, Rows):
            return result
        return cls(result.columns, result.rows())

    def records(self) -> list[dict[str, Any]]:
        """JSON-ready rows: NaN becomes null."""
        return [
            {
                k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in zip(self.columns, r, strict=True)
            }
            for r in self.rows
        ]

    def numeric(self) -> list[bool]:
        return [
            all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in col)
            and any(v is not None for v in col)
            for col in zip(*self.rows, strict=True)
        ] or [False] * len(self.columns)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.4f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return str(value)


def render_table(result: Rows) -> str:
    cells = [[_cell(v) for v in row] for row in result.rows]
    numeric = result.numeric()
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(result.columns)]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric, strict=True)
        ).rstrip()

    out = [line(result.columns), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    if not cells:
        out.append("(no rows)")
    return "\n".join(out)


def render_markdown(result: Rows) -> str:
    aligns = ["---:" if n else "---" for n in result.numeric()]
    out = ["| " + " | ".join(result.columns) + " |", "| " + " | ".join(aligns) + " |"]
    out += ["| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |" for row in result.rows]
    return "\n".join(out)


def render_csv(result: Rows) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(result.columns)
    for row in result.rows:
        writer.writerow(
            ["" if v is None else (v.isoformat() if isinstance(v, dt.datetime) else v) for v in row]
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


def render(result: Rows | pl.DataFrame, fmt: str, *, single: bool = False) -> str:
    """``result`` in ``fmt``; with ``single`` a one-row result is one JSON object, not a list."""
    rows = Rows.of(result)
    if fmt == "json":
        recs = rows.records()
        return to_json(recs[0] if single and len(recs) == 1 else recs)
    if fmt == "csv":
        return render_csv(rows)
    if fmt == "markdown":
        return render_markdown(rows)
    return render_table(rows)
