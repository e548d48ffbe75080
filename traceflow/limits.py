"""The limits on what traceflow reads from a file: a line, a whole-file document, a decompression.

Every input is read in bounded memory: a record never ends only in a broken or hostile file, and a
compressed file that grows a thousandfold is a decompression bomb, not a log. Each limit is a
setting (:data:`traceflow.config.SETTINGS`, documented in ``docs/limits.md``) and each refusal is a
:class:`InputTooLarge` (exit 2) that names the file, the limit and the variable that raises it.

- ``TRACEFLOW_MAX_LINE_BYTES`` (128 MiB): the longest line a line-by-line importer reads.
- ``TRACEFLOW_MAX_DOCUMENT_BYTES`` (256 MiB): the largest whole-file document (a ``kvcache-tester``
  trace, a Gemini chat, a ClickHouse export) or price, profile or config file.
- ``TRACEFLOW_MAX_EXPANSION`` (1000): how many times its compressed size a ``.gz`` or ``.zst`` file
  may decompress to, checked once it has given more than :data:`EXPANSION_FLOOR` bytes (gzip itself
  cannot pass about 1032; Zstandard reaches 32,000 on a file of newlines).
"""

from __future__ import annotations

from traceflow import config
from traceflow.errors import UsageError

MAX_LINE_BYTES = 128 << 20
MAX_DOCUMENT_BYTES = 256 << 20
MAX_EXPANSION = 1000
#: Decompressed bytes below which the expansion is not checked (a small file of repeated lines).
EXPANSION_FLOOR = 16 << 20


class InputTooLarge(UsageError):
    """A line, document or decompressed file past its limit."""


def _env(name: str) -> str:
    return next(s.env for s in config.SETTINGS if s.name == name)


def _setting(name: str, default: int) -> int:
    from traceflow.units import parse_size

    value = config.get(name)
    if value is None:
        return default
    n = parse_size(value, f"${_env(name)}")
    if not 1 <= n < 2**62:
        raise UsageError(f"${_env(name)}={value!r}: give a positive number")
    return int(n)


def max_line_bytes() -> int:
    """The longest line an importer reads (``TRACEFLOW_MAX_LINE_BYTES``)."""
    return _setting("max_line_bytes", MAX_LINE_BYTES)


def max_document_bytes() -> int:
    """The largest whole-file document read (``TRACEFLOW_MAX_DOCUMENT_BYTES``)."""
    return _setting("max_document_bytes", MAX_DOCUMENT_BYTES)


def max_expansion() -> int:
    """How many times its compressed size a file may decompress to (``TRACEFLOW_MAX_EXPANSION``)."""
    return _setting("max_expansion", MAX_EXPANSION)


def too_large(path: object, what: str, limit: int, setting: str) -> InputTooLarge:
    """The refusal of ``what`` in ``path`` past ``limit`` bytes, naming the setting that raises it."""
    from traceflow.units import format_size

    return InputTooLarge(
        f"{path}: {what} longer than {format_size(limit)}, the limit; if the file is genuine, raise "
        f"{_env(setting)} (now {limit})"
    )
