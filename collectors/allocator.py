"""glibc's allocator, told to give memory back: the collector's processes hold large buffers briefly.

By default glibc keeps one heap per thread that allocates (up to eight per core) and raises its mmap
threshold to the largest block freed, so after a 60 MiB message the next large buffers come from heaps
that keep their pages once freed: the server (grpc's threads, the decoding worker threads, the WAL
writer) grew well past what it held at once. :func:`return_freed_memory` caps the heaps at
``ARENAS`` and fixes the mmap threshold at ``MMAP_THRESHOLD_BYTES`` (larger blocks are mapped and
unmapped on their own); :func:`trim` hands freed heap pages back after a large seal. Elsewhere than
glibc both do nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys

ARENAS = 2
#: polars' own allocator (jemalloc) in the sealer: freed pages go back at once, not after 10 s
POLARS_ALLOCATOR_ENV = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}
MMAP_THRESHOLD_BYTES = 1 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt  # noqa: B018 (glibc only: musl has no mallopt)
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def return_freed_memory() -> None:
    """Cap the allocator's heaps and fix its mmap threshold (call before threads start)."""
    libc = _libc()
    if libc is None:
        return
    with contextlib.suppress(Exception):
        libc.mallopt(_M_ARENA_MAX, ARENAS)
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, MMAP_THRESHOLD_BYTES)


def trim() -> None:
    """Give freed heap memory back to the system."""
    libc = _libc()
    if libc is not None:
        with contextlib.suppress(Exception):
            libc.malloc_trim(0)
