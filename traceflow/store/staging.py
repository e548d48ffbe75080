"""The staging folder of a lake: where a writer puts a file before it publishes it, and how the files
of crashed writers are told from the ones being written now.

A staging file is named ``<ns>-<pid>-<hex>.parquet`` (:func:`name`): the process that writes it is in
its name, so a file whose writer is gone from this machine (a ``kill -9``) can be removed at once,
and any other once it is older than the age limit. The staging folder is this machine's own (an
object-store lake stages under :func:`traceflow.config.local_root`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path


def name() -> str:
    """A new staging file's name: the time, this process's id and a random part."""
    return f"{time.time_ns()}-{os.getpid()}-{secrets.token_hex(4)}.parquet"


def writer_alive(file_name: str) -> bool:
    """Whether the process that names the staging file ``file_name`` runs; True for a name of another
    form (not ours to judge)."""
    parts = file_name.split("-")
    if len(parts) != 3 or not parts[1].isdigit():
        return True
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or a number no pid is): leave it to the age rule
    return True


def clean(folder: Path, older_than_s: float = 3600) -> int:
    """Remove the files in ``folder`` whose writer is gone or that are older than ``older_than_s``;
    how many were removed."""
    removed = 0
    now = time.time()
    if not folder.exists():
        return 0
    for f in folder.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if not writer_alive(f.name) or now - f.stat().st_mtime > older_than_s:
                f.unlink()
                removed += 1
    return removed
