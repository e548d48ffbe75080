"""Size-bounded decompression of request bodies (``Content-Encoding``): gzip, deflate, zstd.

Inflating in steps of at most ``limit`` bytes means a gzip bomb costs the receiver ``limit`` bytes of
memory, never its expanded size: :class:`BodyTooLarge` is raised as soon as the output passes it.
"""

from __future__ import annotations

import io
import zlib
from typing import Any

import zstandard as _zstd  # a dependency: zstd bodies are always accepted

ENCODINGS = ("gzip", "x-gzip", "deflate", "identity", "zstd")


class BodyTooLarge(Exception):
    """The (decompressed) body exceeds ``max_body_bytes``."""


class BadBody(Exception):
    """The body's compression or framing is broken."""


class Inflater:
    """Incremental, size-bounded decompression of a request body."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding = encoding
        self.limit = limit
        self.size = 0
        self._d: Any = None
        self._zbuf: io.BytesIO | None = None
        self._head = b""  # deflate: bytes held back until the stream type is known
        if encoding in ("gzip", "x-gzip"):
            self._d = zlib.decompressobj(31)
        elif encoding == "zstd":
            self._zbuf = io.BytesIO()

    def _take(self, out: bytes) -> bytes:
        self.size += len(out)
        if self.size > self.limit:
            raise BodyTooLarge
        return out

    def feed(self, data: bytes) -> bytes:
        if self.encoding == "identity":
            return self._take(data)
        if self._zbuf is not None:
            self._zbuf.write(data)  # the wire size is bounded by the caller; inflated in finish()
            return b""
        if self._d is None:  # deflate: zlib-wrapped per RFC 9110, raw deflate from some clients
            data = self._head + data
            if len(data) < 2:  # the zlib header check needs two bytes
                self._head = data
                return b""
            self._head = b""
            zlib_header = data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._d = zlib.decompressobj(15 if zlib_header else -15)
        out = []
        try:
            while data:
                out.append(self._take(self._d.decompress(data, self.limit - self.size + 1)))
                data = self._d.unconsumed_tail
                if self._d.eof:
                    rest = self._d.unused_data + data
                    if self.encoding == "deflate" or not rest:
                        break
                    self._d = zlib.decompressobj(31)  # concatenated gzip members
                    data = rest
        except zlib.error as e:
            raise BadBody(f"broken {self.encoding} body: {e}") from None
        return b"".join(out)

    def finish(self) -> bytes:
        if self._zbuf is not None:
            return self._finish_zstd(self._zbuf.getvalue())
        if self.encoding == "deflate" and self._d is None:
            if not self._head:
                return b""  # an empty body
            head, self._head = self._head, b""
            self._d = zlib.decompressobj(-15)  # one byte cannot start a zlib stream
            out = self.feed(head)
            return out + self.finish()
        if self._d is not None and not self._d.eof:
            raise BadBody(f"truncated {self.encoding} body")
        return b""

    def _finish_zstd(self, compressed: bytes) -> bytes:
        out = []
        try:
            reader = _zstd.ZstdDecompressor().stream_reader(io.BytesIO(compressed), read_across_frames=True)
            while chunk := reader.read(1 << 16):
                out.append(self._take(chunk))
        except _zstd.ZstdError as e:
            raise BadBody(f"broken zstd body: {e}") from None
        return b"".join(out)
