"""The sealer's storage errors: the lake (or the collector's state folder) cannot be written, and why
(:func:`storage_error` finds the system's reason that polars leaves out)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from traceflow.errors import LakeError


class StorageError(LakeError):
    """The lake (or the collector's state folder) cannot be written right now: the storage, not the
    data. The message names the cause (the underlying error's text); ``traceflow quarantine reseal``
    shows it as one line (exit 1)."""


#: bytes the probe of a failed local write tries to write (see :func:`storage_error`)
PROBE_BYTES = 1 << 20


def storage_error(e: BaseException, folder: Path | None = None) -> StorageError:
    """``e`` as a :class:`StorageError` whose message says what failed.

    polars reports a failed write as ``ComputeError: ... Invalid thrift: transport error``, without
    the system's reason; for a local ``folder`` the reason is found by writing ``PROBE_BYTES`` there
    (removed at once): ``No space left on device``, ``Disk quota exceeded``, ``Permission denied``...
    """
    if isinstance(e, StorageError):
        return e
    if isinstance(e, OSError) and e.strerror:
        return StorageError(
            f"cannot write the lake: {e.strerror}" + (f" ({e.filename})" if e.filename else "")
        )
    cause = f"{type(e).__name__}: {e}"
    if folder is not None:
        probe = folder / f".probe-{os.getpid()}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(probe, "wb", buffering=0) as fh:
                fh.write(b"\0" * PROBE_BYTES)
                os.fsync(fh.fileno())
        except OSError as err:
            return StorageError(f"cannot write the lake: {err.strerror} ({folder}); {cause}")
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()
    return StorageError(f"cannot write the lake: {cause}")
