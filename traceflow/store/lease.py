"""The maintenance lease of an object-store lake: one object, ``v1/_state/maintenance.lease``, that
keeps ``compact``, ``retain`` and ``forget`` one at a time across machines (docs/lake.md#personal-data).

The lease is a small JSON object naming its owner (host, process, a random id), what it runs and
until when. It is taken with a conditional PUT, ``If-None-Match: *`` when there is no lease object
yet, else ``If-Match: <ETag>`` over a released or expired one: of two machines trying at once, the
store lets one PUT through and refuses the other (412), so one holds it. The holder renews it (a new
version, again with ``If-Match``) every third of its length while it works, and marks it released
when done; the object stays, free for the next run.

A lease is expired when the same version has stood unrenewed for its whole length, as timed by the
waiting machine's own monotonic clock from when it first saw that version: machines' clocks need
not agree (the ``expires`` it records is for people reading it). A run that stalls longer than that
(a paused process, a lost network) may find its lease taken over; it is told so at the end
(:class:`LeaseLost`), and it is the one lock a crash does not release at once: the next run takes it
over one lease length after the crashed run's last renewal.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from traceflow import config
from traceflow.errors import LakeError, UsageError

#: The lease object, under the lake's ``v1/_state/`` prefix on the store.
LEASE_NAME = "maintenance.lease"

#: Length of a lease when ``TRACEFLOW_LEASE_SECONDS`` is not set.
DEFAULT_SECONDS = 60.0


class Store(Protocol):
    """What the lease needs of :class:`traceflow.store.objects.ObjectStore`."""

    def create(self, url: str, data: bytes) -> str | None: ...

    def swap(self, url: str, data: bytes, etag: str) -> str | None: ...

    def version(self, url: str) -> tuple[str, bytes] | None: ...


class LeaseLost(LakeError):
    """Another machine took the lease over while this run held it (it stalled past its length)."""


def lease_seconds() -> float:
    """The lease length: ``TRACEFLOW_LEASE_SECONDS``, else :data:`DEFAULT_SECONDS`."""
    try:
        return config.at_least_one("lease_seconds", float, DEFAULT_SECONDS, "seconds")
    except ValueError as e:
        raise UsageError(str(e)) from None


def new_owner() -> str:
    """An owner id no other run uses: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Holder:
    """What a lease object says: its owner, what it runs, its length, whether it was released."""

    owner: str
    what: str
    seconds: float
    expires: str
    released: bool

    @staticmethod
    def parse(data: bytes) -> Holder | None:
        """The lease's fields, or None for an object that is not a lease (written by hand, cut off)."""
        try:
            d = json.loads(data)
            return Holder(
                str(d["owner"]), str(d["what"]), float(d["seconds"]), str(d["expires"]), bool(d["released"])
            )
        except (ValueError, KeyError, TypeError):
            return None


def _body(owner: str, what: str, seconds: float, released: bool) -> bytes:
    now = dt.datetime.now(dt.UTC)
    return json.dumps(
        {
            "owner": owner,
            "what": what,
            "seconds": seconds,
            "renewed": now.isoformat(timespec="microseconds"),  # each version differs: a new ETag
            "expires": (now + dt.timedelta(seconds=seconds)).isoformat(timespec="seconds"),
            "released": released,
        },
        sort_keys=True,
    ).encode()


class Lease:
    """One run's hold on a lake's lease object ``url`` (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        url: str,
        what: str,
        *,
        owner: str | None = None,
        seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.url, self.what = store, url, what
        self.owner = owner or new_owner()
        self.seconds = lease_seconds() if seconds is None else seconds
        self.clock = clock
        self.etag: str | None = None  # the version this run wrote last, while it holds the lease
        self.holder: Holder | None = None  # the other run's lease, when taking it failed
        self._seen: tuple[str, float] | None = None  # a version of another's and when it was first seen
        self._lock = threading.Lock()
        self.lost = False

    def try_take(self) -> bool:
        """Take the lease if it is free, released or expired; False while another run holds it."""
        etag = self.store.create(self.url, self._body())
        if etag is None:
            current = self.store.version(self.url)
            if current is None:  # released and removed by hand in between: try again next time
                return False
            version, data = current
            holder = Holder.parse(data)
            self.holder = holder
            if not self._free(version, holder):
                return False
            etag = self.store.swap(self.url, self._body(), version)
            if etag is None:  # another run took or renewed it first
                return False
        self.etag, self.holder, self.lost = etag, None, False
        return True

    def _free(self, version: str, holder: Holder | None) -> bool:
        if holder is not None and holder.released:
            return True
        now = self.clock()
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, now)  # renewed (or new) since the last look: its length starts now
        length = holder.seconds if holder is not None and 0 < holder.seconds < math.inf else self.seconds
        return now - self._seen[1] >= length

    def _body(self, released: bool = False) -> bytes:
        return _body(self.owner, self.what, self.seconds, released)

    def renew(self) -> bool:
        """Write a new version of the held lease; False (and :attr:`lost`) when it was taken over."""
        with self._lock:
            if self.etag is None or self.lost:
                return False
            etag = self.store.swap(self.url, self._body(), self.etag)
            if etag is None:
                self.lost = True
                return False
            self.etag = etag
            return True

    def release(self) -> bool:
        """Mark the lease released; False when it had been taken over (nothing is written then)."""
        with self._lock:
            if self.etag is None or self.lost:
                return False
            released = self.store.swap(self.url, self._body(released=True), self.etag) is not None
            self.lost = not released
            self.etag = None
            return released

    def busy_message(self) -> str:
        h = self.holder
        if h is None:
            return "another run holds its maintenance lease"
        return (
            f"{h.owner} holds its maintenance lease for {h.what} (until {h.expires}, renewed while it runs)"
        )


def take(lease: Lease, *, wait: bool, busy: Callable[[str], BaseException]) -> None:
    """Take ``lease``, waiting for it unless ``wait`` is false; then raises ``busy(message)``."""
    poll = min(5.0, max(0.2, lease.seconds / 6))
    while not lease.try_take():
        if not wait:
            raise busy(lease.busy_message())
        time.sleep(poll)


@contextlib.contextmanager
def renewed(lease: Lease) -> Iterator[None]:
    """Renew the taken ``lease`` every third of its length from a thread while the block runs, then
    release it. Raises :class:`LeaseLost` after the block when it was taken over meanwhile."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease.seconds / 3):
            with contextlib.suppress(LakeError, OSError):  # a failed renewal: the next one tries again
                if not lease.renew():
                    return

    renewer = threading.Thread(target=renew, name=f"lease-{lease.what}", daemon=True)
    renewer.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        stop.set()
        renewer.join()
        with contextlib.suppress(LakeError, OSError):  # not released: it expires after its length
            lease.release()
    if ok and lease.lost:
        raise LeaseLost(
            f"{lease.what}: another run took over the lake's maintenance lease while this one worked "
            f"(it went unrenewed for {lease.seconds:g} s, e.g. a paused process); run it again"
        )
