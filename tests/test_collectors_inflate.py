"""Bounded, incremental decompression of request bodies."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceflow.collectors.inflate import BadBody, BodyTooLarge, Inflater

COMPRESS = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "identity": lambda b: b,
}


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(max_size=20_000),
    encoding=st.sampled_from(["gzip", "deflate", "identity"]),
    chunk=st.integers(1, 5000),
)
def test_any_chunking_inflates_to_the_original(data: bytes, encoding: str, chunk: int) -> None:
    wire = COMPRESS[encoding](data)
    inflater = Inflater(encoding, limit=len(data))
    out = b"".join(inflater.feed(wire[i : i + chunk]) for i in range(0, len(wire), chunk))
    assert out + inflater.finish() == data


def test_raw_deflate_and_concatenated_gzip_members() -> None:
    raw = zlib.compressobj(wbits=-15)
    body = raw.compress(b"hello ") + raw.flush()
    assert Inflater("deflate", 100).feed(body) == b"hello "
    two = gzip.compress(b"ab") + gzip.compress(b"cd")
    inflater = Inflater("gzip", 100)
    assert inflater.feed(two) + inflater.finish() == b"abcd"


def test_a_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (32 << 20))
    inflater = Inflater("gzip", limit=1 << 20)
    with pytest.raises(BodyTooLarge):
        for i in range(0, len(bomb), 4096):
            inflater.feed(bomb[i : i + 4096])
    assert inflater.size <= (1 << 20) + 1


@pytest.mark.parametrize(("encoding", "body"), [("gzip", b"not gzip"), ("deflate", b"\x78\x9c garbage")])
def test_broken_streams(encoding: str, body: bytes) -> None:
    with pytest.raises(BadBody):
        inflater = Inflater(encoding, 1000)
        inflater.feed(body)
        inflater.finish()


def test_a_truncated_stream_is_reported_at_the_end() -> None:
    inflater = Inflater("gzip", 1000)
    inflater.feed(gzip.compress(b"x" * 500)[:-8])
    with pytest.raises(BadBody):
        inflater.finish()
