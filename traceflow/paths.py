"""Paths a user names on the command line, checked before any work: files to read, files and folders
to write, the lake a writing command fills. Each check raises a
:class:`~traceflow.errors.UsageError` naming the option and the fix, so a directory given for a file
(or a file for a folder, a folder that does not exist or cannot be made, a lake that cannot be
written) never ends in a traceback or a temporary file left beside the path.

The limits on what is read from a file (a line, a whole-file document, a decompression) live here
too. Every input is read in bounded memory: a record never ends only in a broken or hostile file, and a
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

import errno
import os
import stat
import tempfile
from pathlib import Path

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


def read_text(path: Path, option: str, what: str) -> str:
    """The UTF-8 text of ``path``, given as ``option`` for ``what`` (e.g. "a JSON price file").

    Only a regular file is read (a FIFO would wait for a writer for ever, ``/dev/zero`` never ends),
    and only up to ``TRACEFLOW_MAX_DOCUMENT_BYTES`` (:mod:`traceflow.paths`).
    """
    if path.is_dir():
        raise UsageError(f"{option} {path} is a directory; pass {what}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, to be refused below
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"{option} {path} is not a regular file (a pipe or a device); pass {what}")
            most = max_document_bytes()
            data = fh.read(most + 1)
        if len(data) > most:
            raise too_large(f"{option} {path}", "a file", most, "max_document_bytes")
        return data.decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: no such file; pass {what}") from None
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot read it ({e.strerror}); pass {what}") from None
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{option} {path} is not UTF-8 text (byte {e.start}); pass {what}, saved as UTF-8"
        ) from None


def output_file(path: Path, option: str) -> Path:
    """``path`` (``~`` expanded) once it can be written as a file: not a directory, in a folder that
    exists and takes new files. A missing folder is refused, not made: a mistyped path must not
    leave a new directory tree behind (a folder given as a folder, :func:`output_folder`, is made)."""
    path = path.expanduser()
    if path.is_dir():
        raise UsageError(
            f"{option} {path} is a directory; give the path of a file to write, e.g. {path / 'NAME'}"
        )
    folder = path.parent
    missing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if missing is not None and missing != folder:
        if not missing.is_dir():
            raise UsageError(
                f"{option} {path}: cannot create the folder {folder} ({missing} is a file); choose a path "
                "in a writable folder"
            )
        raise UsageError(
            f"{option} {path}: the folder {folder} does not exist; create it first (mkdir -p {folder}) "
            "or choose a path in an existing folder"
        )
    _writable_folder(folder, option, path)
    return path


def output_folder(path: Path, option: str) -> Path:
    """``path`` (``~`` expanded) once it is a folder that takes new files (made if missing)."""
    path = path.expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file; give a folder to write into (made if missing)")
    _writable_folder(path, option, path)
    return path


def _writable_folder(folder: Path, option: str, path: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"{option} {path}: cannot create the folder {folder} ({e.strerror}); choose a path in a "
            "writable folder"
        ) from None
    try:  # what the writer will do: create a file there (permissions alone miss read-only mounts)
        with tempfile.TemporaryFile(dir=folder, prefix=".traceflow-probe-"):
            pass
    except OSError as e:
        raise UsageError(
            f"{option} {path}: cannot write into the folder {folder} ({e.strerror}); choose a path in "
            "a writable folder"
        ) from None


def writable_lake(root: Path, folders: list[Path], command: str) -> None:
    """Refuse, before any work, a local lake at ``root`` that ``command`` (``import``, ``compact``)
    could not write: each of ``folders`` (the lake's own: ``v1``, ``v1/_staging``, ``v1/_state``) must
    exist or be made, and take a new file. A read-only mount, a folder of another user's, or a file in
    the way ends here in one line naming the path and the fix, not in a traceback half-way through."""
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder, prefix=".traceflow-probe-"):
                pass
        except OSError as e:
            raise lake_not_writable(root, command, folder, e) from None


def lake_not_writable(root: Path, command: str, where: Path | str, error: OSError | str) -> UsageError:
    """The one-line error for a lake ``command`` cannot write (``where``: the path that refused)."""
    reason = error.strerror if isinstance(error, OSError) else error
    return UsageError(
        f"cannot write the lake at {root} ({where}: {reason}); `traceflow {command}` writes into its "
        f"data directory: run it as a user who can write {root} (e.g. its owner, or after "
        f"`chmod -R u+w {root}`), remount it read-write, or pass --data DIR of a writable lake"
    )


#: ``errno`` values that mean "this path cannot be written", not a defect of traceflow's.
NOT_WRITABLE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR})


__all__ = [
    "NOT_WRITABLE_ERRNOS",
    "lake_not_writable",
    "output_file",
    "output_folder",
    "read_text",
    "writable_lake",
]
