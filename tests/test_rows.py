"""The four token kinds of a request and the split of an inclusive input count (traceflow.rows)."""

from __future__ import annotations

import itertools

from traceflow.rows import Tokens, split_inclusive
from traceflow.schema import REQUESTS

COUNTS = [0, 1, 2, 5, 99, 100, 101, 1000]


def test_the_kinds_add_up_to_the_input_over_a_grid() -> None:
    for inp, cached, written in itertools.product(COUNTS, COUNTS, [*COUNTS, None]):
        t = split_inclusive(inp, cached, written)
        read, write = t.cache_read, t.cache_write
        assert t.cold_input is not None and read is not None, (inp, cached, written)
        assert t.cold_input + read + (write or 0) == inp, t
        assert t.cold_input >= 0 and read >= 0 and (write is None or write >= 0), t
        assert read <= cached and read == min(cached, inp), t
        if written is None:
            assert write is None, t
        else:
            assert write is not None and write <= written, t
            assert write == min(written, inp - read), t  # the read is served first


def test_nothing_is_clamped_when_the_parts_fit() -> None:
    assert split_inclusive(1000, 600, 100, 50) == Tokens(300, 600, 100, 50)
    assert split_inclusive(1000, 0) == Tokens(1000, 0, 0, None)


def test_a_read_above_the_input_is_clamped_and_leaves_no_write() -> None:
    assert split_inclusive(10, 25, 5, 1) == Tokens(0, 10, 0, 1)


def test_a_write_is_clamped_to_what_the_read_leaves() -> None:
    assert split_inclusive(1000, 800, 300) == Tokens(0, 800, 200, None)


def test_an_unknown_read_or_write_stays_unknown() -> None:
    assert split_inclusive(1000, None) == Tokens(1000, None, 0, None)
    assert split_inclusive(1000, None, 300) == Tokens(700, None, 300, None)
    assert split_inclusive(1000, 300, None, 4) == Tokens(700, 300, None, 4)
    assert split_inclusive(0, None, None) == Tokens(0, None, None, None)


def test_the_output_is_passed_through() -> None:
    assert split_inclusive(5, 5, 5, 12).output == 12


def test_columns_are_the_requests_columns_in_table_order() -> None:
    cols = Tokens(1, 2, 3, 4).columns()
    assert cols == {
        "cold_input_tokens": 1,
        "cache_read_tokens": 2,
        "cache_write_tokens": 3,
        "output_tokens": 4,
    }
    order = [c for c in REQUESTS.columns if c in cols]
    assert list(cols) == order


def test_unknown_tokens_are_all_none() -> None:
    assert Tokens() == (None, None, None, None)
