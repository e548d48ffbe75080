"""The lake's maintenance lock: ``compact``, ``retain`` and ``forget`` rewrite or remove published
files, one at a time (docs/lake.md#personal-data).

Each of them lists a table's files, reads them, publishes what replaces them and removes what it
read. Two at once undo each other: a compaction that read a file before ``forget`` rewrote it
publishes the forgotten rows again (and marks its output the deduplicated base beside the rewritten
copy), and one that read a partition ``retain`` then dropped brings the partition back. So each
holds one lake-level lock from its listing to its last removal: an exclusive ``flock`` on
``_state/maintenance.lock``, released by the kernel when its process ends (a crash leaves no stale
lock). Writers that only add files (imports, the collector's sealer) never take it: compaction and
forgetting already leave what was published meanwhile alone.

An ``s3://`` lake has no file every machine can lock: it takes a lease object on the store instead,
``v1/_state/maintenance.lease`` (:mod:`traceflow.store.lease`), with conditional PUTs, which keeps
apart the runs of every machine. A store without conditional writes gets this machine's lock file,
as before: it keeps apart the runs of one machine only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from traceflow.errors import LakeError
from traceflow.store import lease as leases
from traceflow.store.objects import NoConditionalWrites

#: The lock file, under the lake's ``_state`` folder.
LOCK_NAME = "maintenance.lock"


class Lake(Protocol):
    """What the lock needs of a :class:`traceflow.store.lake.Lake` (which imports this module)."""

    @property
    def root(self) -> Path: ...

    @property
    def state_dir(self) -> Path: ...

    @property
    def url(self) -> str | None: ...

    @property
    def published_base(self) -> str: ...

    @property
    def store(self) -> leases.Store: ...

    def ensure(self) -> None: ...


class LakeBusy(LakeError):
    """Another maintenance run holds the lock (raised only when not waiting)."""


@contextlib.contextmanager
def maintenance(lake: Lake, what: str, *, wait: bool = True) -> Iterator[None]:
    """Hold the lake's maintenance lock while the block runs ``what`` (``compact``, ``retain``,
    ``forget``); waits for the holder unless ``wait`` is false, then raises :class:`LakeBusy`."""
    if lake.url is not None:
        lease = leases.Lease(lake.store, f"{lake.published_base}/_state/{leases.LEASE_NAME}", what)
        try:
            leases.take(lease, wait=wait, busy=lambda holder: _busy(lake, what, holder))
        except NoConditionalWrites as e:  # the lock file below, for this machine's runs only
            warnings.warn(f"{e}; {what} keeps apart this machine's runs only", stacklevel=3)
        else:
            with leases.renewed(lease):
                yield
            return
    lake.ensure()
    path = lake.state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise _busy(lake, what, "another run holds its lock file") from None
        yield  # the file stays empty: a dry run writes nothing into the lake
    finally:
        os.close(fd)  # releases the lock


def _busy(lake: Lake, what: str, holder: str) -> LakeBusy:
    return LakeBusy(
        f"{what}: the lake {lake.url or lake.root} is busy with another compact, retain or forget "
        f"({holder}); try again"
    )
