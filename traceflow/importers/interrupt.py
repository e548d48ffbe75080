"""Ctrl-C during an import: what the import had staged but not published is removed, its bookkeeping
is not saved, and the error says how to complete it (run the same command again)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
from collections.abc import Iterator

from traceflow.store.lake import Lake


class ImportInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped an import. The files it had staged but not published were removed and
    its bookkeeping was not saved, so running the same import again reads the files again and
    completes it (the lake's ``event_id`` dedup absorbs the rows published before the stop)."""

    def __init__(self, source: str, removed: int) -> None:
        self.source, self.removed = source, removed
        super().__init__(
            f"the {source} import stopped before it finished; {removed} half-written staging file(s) "
            "removed, nothing recorded as imported: run the same command again to complete it"
        )

    def __str__(self) -> str:
        return str(self.args[0])


def staging_names(lake: Lake) -> list[str]:
    try:
        return [p.name for p in lake.staging.iterdir()]
    except OSError:
        return []


def remove_staged(lake: Lake, before: set[str], writers: set[int]) -> int:
    """Remove the staging files (``<ns>-<pid>-<hex>.parquet``) that ``writers`` made after ``before``
    was listed; another writer's (the collector's, a concurrent import's) stay."""
    removed = 0
    for name in staging_names(lake):
        parts = name.split("-")
        if name in before or len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) not in writers:
            continue
        with contextlib.suppress(FileNotFoundError):
            (lake.staging / name).unlink()
            removed += 1
    return removed


def worker_pids(pool: cf.ProcessPoolExecutor) -> set[int]:
    """The pool's worker processes (they name the staging files they write)."""
    return set(getattr(pool, "_processes", None) or {})


@contextlib.contextmanager
def interruptible(pool: cf.ProcessPoolExecutor) -> Iterator[cf.ProcessPoolExecutor]:
    """The pool, shut down on leaving; on Ctrl-C its queued batches are dropped rather than run."""
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
