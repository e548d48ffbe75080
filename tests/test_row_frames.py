"""Row dicts become the same frame column by column as row by row (traceflow/store/row_frames.py)."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from collectors_support import api_request_logs
from polars.testing import assert_frame_equal

from traceflow.otlp import decode as otlp
from traceflow.schema import EVENTS, REQUESTS, polars_type
from traceflow.store.lake import frame_from_rows
from traceflow.store.row_frames import frame_by_column, frame_by_row


def _schemas(table):  # type: ignore[no-untyped-def]
    cols = {name: polars_type(t) for name, t in table.columns.items()}
    raw = {n: (pl.Int64() if isinstance(d, pl.Datetime) else d) for n, d in cols.items()}
    return cols, raw


def test_mapped_rows_make_the_same_frame_either_way() -> None:
    msg, _ = api_request_logs(50)
    rows = otlp.map_request("logs", msg, state=otlp.MetricState()).parsed.requests
    assert len(rows) == 50
    cols, raw = _schemas(REQUESTS)
    by_column = frame_by_column(REQUESTS, rows, raw)
    assert by_column is not None  # the mapping's rows share their keys: the fast path applies
    assert_frame_equal(by_column, frame_by_row(REQUESTS, rows, cols, raw))
    assert by_column["attributes"].str.contains('"resource"').all()  # dicts serialised


@pytest.mark.parametrize(
    "rows",
    [
        [{"event_id": "a", "name": "x"}, {"name": "y", "event_id": "b"}],  # keys in another order
        [{"event_id": "a", "timestamp": dt.datetime(2026, 1, 2, tzinfo=dt.UTC)}],  # a datetime
        [{"event_id": "a", "seq": 1}, {"event_id": "b", "seq": 2.5}],  # not strictly an Int64
    ],
)
def test_rows_the_fast_path_cannot_take_are_built_row_by_row(rows: list[dict[str, object]]) -> None:
    cols, raw = _schemas(EVENTS)
    assert frame_by_column(EVENTS, rows, raw) is None
    frame = frame_from_rows(EVENTS, rows)
    assert frame.height == len(rows) and frame.schema == pl.Schema(cols)


def test_a_value_polars_cannot_hold_is_still_an_error() -> None:
    rows = [{"event_id": "a", "cold_input_tokens": 2**70}]
    with pytest.raises(Exception, match="1180591620717411303424"):
        frame_from_rows(REQUESTS, rows)
