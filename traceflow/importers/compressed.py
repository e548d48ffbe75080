"""Compressed input: every importer reads ``.gz`` and ``.zst`` files as if they were plain.

A file's compression is told by its first bytes (gzip: ``1f 8b``; Zstandard: ``28 b5 2f fd``), not by
its name, so a gzip file called ``trace.jsonl`` is read as gzip and a plain file called ``x.gz`` as
plain. Names matter only for finding files in a folder: an importer that looks for ``*.jsonl`` also
takes ``*.jsonl.gz`` and ``*.jsonl.zst`` (:func:`with_compressed`), and sees the name without the
compression suffix (:func:`plain_path`) where the name carries meaning (``agent-<id>.jsonl``).

The data is decompressed as it is read (:func:`open_input`), never held whole in memory by this
module: each step gives at most the bytes asked for, and a file that decompresses to more than
``TRACEFLOW_MAX_EXPANSION`` times its size (:mod:`traceflow.paths`) raises
:class:`~traceflow.paths.InputTooLarge`. Offsets kept between imports of such a file count
decompressed bytes. Multi-member gzip and multi-frame Zstandard files read as the concatenation of
their members. A truncated or corrupt file raises :class:`CorruptInput` naming the file.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import Any, BinaryIO, cast

from traceflow.errors import UsageError
from traceflow.paths import EXPANSION_FLOOR, InputTooLarge, max_expansion

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


class _Frames:
    """Where a Zstandard stream stands between frames, from its compressed bytes as they pass.

    Zstandard's stream reader ends silently on a file cut inside a frame; this walks the frame and
    block headers of the bytes the reader consumed, so that the end of the input can be told to be
    a frame's end. Bytes that are no frame leave it undecided: the decoder reports them.
    """

    def __init__(self) -> None:
        self._head = bytearray()  # header bytes gathered so far
        self._state = "magic"  # what the next bytes are: magic, frame header, block header, ...
        self._need = 4  # bytes of it still to come
        self._last = False  # the block being skipped is the frame's last
        self._checksum = 0
        self.lost = False  # bytes that are no frame: the decoder decides

    def at_end(self) -> bool:
        """Whether the bytes seen so far end on a frame boundary."""
        return self.lost or (self._state == "magic" and not self._head)

    def feed(self, data: bytes) -> None:
        pos = 0
        while pos < len(data) and not self.lost:
            take = min(self._need, len(data) - pos)
            if self._state in ("skip", "body", "checksum"):
                pos += take
                self._need -= take
                if self._need == 0:
                    self._next(b"")
                continue
            self._head += data[pos : pos + take]
            pos += take
            self._need -= take
            if self._need == 0:
                head = bytes(self._head)
                self._head.clear()
                self._next(head)

    def _next(self, head: bytes) -> None:
        """Move on once the bytes of the current state are in (``head``: a header's bytes)."""
        state = self._state
        if state == "magic":
            if head == ZSTD_MAGIC:
                self._state, self._need = "descriptor", 1
            elif head[1:] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50:  # a skippable frame
                self._state, self._need = "skip_size", 4
            else:
                self.lost = True
        elif state == "skip_size":
            self._state, self._need = "skip", int.from_bytes(head, "little")
            if self._need == 0:
                self._state, self._need = "magic", 4
        elif state == "descriptor":
            d = head[0]
            fcs = (0, 2, 4, 8)[d >> 6] or (1 if d & 0x20 else 0)
            self._checksum = 4 if d & 0x04 else 0
            rest = (0 if d & 0x20 else 1) + (0, 1, 2, 4)[d & 0x03] + fcs
            self._state, self._need = ("header", rest) if rest else ("block", 3)
        elif state == "header":
            self._state, self._need = "block", 3
        elif state == "block":
            h = int.from_bytes(head, "little")
            self._last = bool(h & 1)
            kind, size = (h >> 1) & 3, h >> 3
            self._state, self._need = "body", 1 if kind == 1 else size
            if self._need == 0:
                self._next(b"")
        elif state == "body":
            if not self._last:
                self._state, self._need = "block", 3
            elif self._checksum:
                self._state, self._need = "checksum", self._checksum
            else:
                self._state, self._need = "magic", 4
        else:  # skip, checksum
            self._state, self._need = "magic", 4


class _Tap(io.RawIOBase):
    """A file whose bytes, as read, also go to a :class:`_Frames`."""

    def __init__(self, raw: BinaryIO, frames: _Frames) -> None:
        self._raw = raw
        self._frames = frames

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._frames.feed(data)
        return data


class _ZstdReader(io.RawIOBase):
    """Zstandard frames one after another, decompressed as read, at most the bytes asked for at a time
    (a frame of newlines gives 32,000 times its size: a whole step's output would be gigabytes); a
    file that ends inside a frame raises ``EOFError`` (the library's own stream reader ends silently).
    """

    _INPUT = 8 << 10  # compressed bytes read at a time (the expansion is measured against them)

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._frames = _Frames()
        self._reader = zstandard.ZstdDecompressor().stream_reader(
            cast(BinaryIO, _Tap(raw, self._frames)),
            read_size=self._INPUT,
            read_across_frames=True,
            closefd=False,
        )

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._reader.read(len(buffer))
        if not data and not self._frames.at_end():
            raise EOFError("the file ended inside a Zstandard frame")
        n = len(data)
        buffer[:n] = data
        return n


#: Decompressed bytes one step gives at most: a read of many megabytes is served in such steps, each
#: checked against the expansion limit before the next.
_STEP = 1 << 20


class _Checked(io.RawIOBase):
    """A decompressing stream whose decoder errors become :class:`CorruptInput` naming the file."""

    def __init__(self, inner: BinaryIO, raw: BinaryIO, path: str, kind: str) -> None:
        self._inner = inner
        self._raw = raw
        self._path = path
        self._kind = kind
        self._out = 0  # decompressed bytes given so far
        self._ratio = max_expansion()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            data = self._inner.read(min(len(buffer), _STEP))
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
        self._out += n
        if self._out > EXPANSION_FLOOR and self._out > self._ratio * self._raw.tell():
            raise InputTooLarge(
                f"{self._path}: decompresses to more than {self._ratio:,} times its compressed size "
                f"({self._out:,} bytes from the first {self._raw.tell():,}), the mark of a "
                f"decompression bomb; if the file is genuine, raise TRACEFLOW_MAX_EXPANSION "
                f"(now {self._ratio})"
            )
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
