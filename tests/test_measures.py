"""The table of derived measures (traceflow/store/measures.py): written once, and its Python twins
give what the SQL gives."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

import traceflow
from traceflow.store import measures
from traceflow.store.lake import Lake

PACKAGE = Path(traceflow.__file__).parent


@pytest.mark.parametrize("expression", list(measures.REQUEST_COLUMNS.values()))
def test_each_derived_column_is_written_once(expression: str) -> None:
    """No module, query or dashboard spells a derived column again: they read the view's column."""
    found = [
        str(p.relative_to(PACKAGE))
        for p in sorted(PACKAGE.rglob("*"))  # follows the queries/ and dashboards/ links
        if p.suffix in (".py", ".sql") and expression in p.read_text()
    ]
    assert set(found) <= {"store/measures.py"}, found


def test_python_twins_match_the_view_and_the_macros(lake: Lake) -> None:
    counts = [(3, 5000, 1200, 20), (None, 7, None, 1), (0, 0, 0, None), (None, None, None, None)]
    t = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
    lake.append(
        "requests",
        [
            {
                "event_id": f"e{i}",
                "started_at": t if i % 2 else None,
                "ended_at": t + dt.timedelta(seconds=i),
                "cold_input_tokens": c,
                "cache_read_tokens": r,
                "cache_write_tokens": w,
                "output_tokens": o,
            }
            for i, (c, r, w, o) in enumerate(counts)
        ],
    )
    con = lake.connect(["requests"])
    rows = con.execute(
        "SELECT request_time, started_at, ended_at, context_tokens, total_tokens, "
        "cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, "
        "reuse_ratio(cache_read_tokens, context_tokens) FROM requests ORDER BY event_id"
    ).fetchall()
    assert len(rows) == len(counts)
    for when, start, end, context, total, c, r, w, o, reuse in rows:
        assert when == (start if start is not None else end)
        assert context == measures.context(c, r, w)
        assert total == measures.completeness(c, r, w, o)
        # the macro is NULL where a count is NULL (SQL), the twin takes the sums it is given
        assert reuse == (None if r is None else measures.ratio(r, context))
