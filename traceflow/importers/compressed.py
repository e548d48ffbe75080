"""Compressed input: every importer reads ``.gz`` and ``.zst`` files as if they were plain.

A file's compression is told by its first bytes (gzip: ``1f 8b``; Zstandard: ``28 b5 2f fd``), not by
its name, so a gzip file called ``trace.jsonl`` is read as gzip and a plain file called ``x.gz`` as
plain. Names matter only for finding files in a folder: an importer that looks for ``*.jsonl`` also
takes ``*.jsonl.gz`` and ``*.jsonl.zst`` (:func:`with_compressed`), and sees the name without the
compression suffix (:func:`plain_path`) where the name carries meaning (``agent-<id>.jsonl``).

The data is decompressed as it is read (:func:`open_input`), never held whole in memory by this
module; offsets kept between imports of such a file count decompressed bytes. Multi-member gzip and
multi-frame Zstandard files read as the concatenation of their members. A truncated or corrupt file
raises :class:`CorruptInput` naming the file.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import Any, BinaryIO

from traceflow.errors import UsageError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: The name suffixes of compressed files, by format.
SUFFIXES: dict[str, str] = {".gz": "gzip", ".zst": "zstd"}


class CorruptInput(UsageError):
    """A compressed file ended early or is not what its first bytes say."""


def compression_of(head: bytes) -> str | None:
    """``"gzip"``, ``"zstd"`` or None (plain) from a file's first bytes."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def compression(path: Path | str) -> str | None:
    """The compression of the file at ``path``, told from its first four bytes."""
    with open(path, "rb") as fh:
        return compression_of(fh.read(4))


def with_compressed(suffixes: tuple[str, ...]) -> tuple[str, ...]:
    """``suffixes`` and each of them followed by a compression suffix (``.jsonl`` -> ``.jsonl.gz``...)."""
    return suffixes + tuple(s + c for s in suffixes for c in SUFFIXES)


def plain_name(name: str) -> str:
    """``name`` without a trailing ``.gz`` or ``.zst``."""
    for suffix in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def plain_path(path: Path) -> Path:
    """``path`` without a trailing ``.gz`` or ``.zst`` (its stem and suffix are the plain file's)."""
    return path.with_name(plain_name(path.name))


class _ZstdReader(io.RawIOBase):
    """Zstandard frames one after another, decompressed as read; a file that ends inside a frame
    raises ``EOFError`` (the library's own stream reader would end silently)."""

    _INPUT = 64 << 10  # compressed bytes fed at a time: bounds the output of one step

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._fed = False  # the current frame has had input
        self._out = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while self._pos >= len(self._out):
            chunk = self._obj.unused_data if self._obj.eof else b""
            if self._obj.eof:
                self._obj = self._dctx.decompressobj()
                self._fed = False
            if not chunk:
                chunk = self._raw.read(self._INPUT)
            if not chunk:
                if self._fed:
                    raise EOFError("the file ended inside a Zstandard frame")
                return 0
            self._fed = True
            self._out, self._pos = self._obj.decompress(chunk), 0
        n = min(len(buffer), len(self._out) - self._pos)
        buffer[:n] = self._out[self._pos : self._pos + n]
        self._pos += n
        return n


class _Checked(io.RawIOBase):
    """A decompressing stream whose decoder errors become :class:`CorruptInput` naming the file."""

    def __init__(self, inner: BinaryIO, raw: BinaryIO, path: str, kind: str) -> None:
        self._inner = inner
        self._raw = raw
        self._path = path
        self._kind = kind

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            data = self._inner.read(len(buffer))
        except Exception as e:
            if isinstance(e, OSError) and e.errno is not None:
                raise  # a real I/O error, not a decoding one
            if not isinstance(e, (EOFError, OSError, zlib.error)) and type(e).__name__ != "ZstdError":
                raise
            raise CorruptInput(
                f"{self._path}: the {self._kind} data is truncated or corrupt ({e}); "
                f"re-download or re-compress the file, or pass the uncompressed one"
            ) from None
        n = len(data)
        buffer[:n] = data
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


def is_packed(fh: BinaryIO) -> bool:
    """Whether a stream from :func:`open_input` decompresses (it cannot seek; offsets are decompressed)."""
    return isinstance(getattr(fh, "raw", None), _Checked)


def open_input(path: Path | str) -> BinaryIO:
    """The decompressed bytes of ``path`` as a buffered binary stream (the file itself when plain)."""
    raw = open(path, "rb")  # noqa: SIM115 - returned, closed by the caller
    try:
        kind = compression_of(raw.read(4))
        raw.seek(0)
        if kind is None:
            return raw
        inner: Any = gzip.GzipFile(fileobj=raw, mode="rb") if kind == "gzip" else _ZstdReader(raw)
        checked = _Checked(inner, raw, str(path), kind)
        return io.BufferedReader(checked, buffer_size=1 << 20)
    except BaseException:
        raw.close()
        raise
