"""Paths a user names on the command line, checked before any work: files to read, files and folders
to write. Each check raises a :class:`~traceflow.errors.UsageError` naming the option and the fix, so a
directory given for a file (or a file for a folder, or a folder that cannot be made) never ends in a
traceback or a temporary file left beside the path.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from traceflow.errors import UsageError


def read_text(path: Path, option: str, what: str) -> str:
    """The UTF-8 text of ``path``, given as ``option`` for ``what`` (e.g. "a JSON price file")."""
    if path.is_dir():
        raise UsageError(f"{option} {path} is a directory; pass {what}")
    try:
        return path.read_bytes().decode("utf-8")
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
    exists (made if missing) and takes new files."""
    path = path.expanduser()
    if path.is_dir():
        raise UsageError(
            f"{option} {path} is a directory; give the path of a file to write, e.g. {path / 'NAME'}"
        )
    _writable_folder(path.parent, option, path)
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


__all__ = ["output_file", "output_folder", "read_text"]
