"""What the replay writers share: request batches, the time warp and files replaced atomically."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import polars as pl

    from traceflow.replay.arrays import I64

#: Requests written per batch (bounds memory: ids are materialised per batch).
CHUNK_REQUESTS = 200_000


def times_ms(frame: pl.DataFrame, speedup: float) -> I64:
    """Arrival times in integer milliseconds from the first request, divided by ``speedup``."""
    t = np.asarray(frame["t_us"].to_numpy(), dtype=np.int64)
    rel = (t - int(t.min())) / 1000.0 / speedup
    out: I64 = np.rint(rel).astype(np.int64)
    return out


@contextmanager
def atomic_file(path: Path) -> Iterator[IO[bytes]]:
    """A binary file written beside ``path`` (``.NAME.PID.tmp``, so two processes writing one path
    never share it) that replaces ``path`` once complete; on an error the temporary file is removed
    and ``path`` is left as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a failed write leaves no partial file behind


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_file`."""
    with atomic_file(path) as fh:
        fh.write(data)
