"""Freed memory goes back to the operating system: glibc's ``malloc_trim`` on a timer (``--malloc-trim-interval``).

Why: the O(size) steps of large requests run in worker threads (``off_loop.py``), and glibc gives each thread its
own malloc arena; what a request allocated there (its body, its ids, the tokenizer's buffers) is freed when it ends,
but the arena keeps the pages. Measured (200 sessions of ~20k tokens through a fresh proxy, docs/benchmarks.md):
the RSS grew by ~39 bytes a stored token where the sessions hold ~10 (tracemalloc), and one ``malloc_trim(0)``
(9 ms) gave back 38 of them. A proxy that runs for days beside a trainer would otherwise keep, and be charged by its
container for, the peaks of its large requests. Capping the arenas instead (``MALLOC_ARENA_MAX=1``) kept the RSS
down too but cost +45% CPU on large requests (the tokenizer's threads contend for one arena): not done.

``malloc_trim`` runs in a worker thread (ctypes lets the GIL go), so the event loop serves meanwhile. Where the C
library has no ``malloc_trim`` (not glibc: musl, macOS), the timer does not start and one debug line says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Callable

import trio

log = logging.getLogger("dressage_proxy.malloc_trim")


def find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def _rss_bytes() -> int | None:
    """The process's resident set (Linux ``/proc``), for the log line; None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


async def trim_once(trim: Callable[[int], int]) -> int | None:
    """One ``malloc_trim(0)`` off the event loop; the bytes of RSS it gave back (None when unknown)."""
    before = _rss_bytes()
    await trio.to_thread.run_sync(trim, 0)
    after = _rss_bytes()
    released = before - after if before is not None and after is not None else None
    log.debug("malloc_trim: %s bytes of freed memory back to the OS", released,
              extra={"released_bytes": released, "rss_bytes": after})
    return released


async def run_malloc_trim(interval: float) -> None:
    """Trim every ``interval`` seconds until cancelled (nothing where there is no ``malloc_trim``)."""
    trim = find_malloc_trim()
    if trim is None:
        log.debug("no malloc_trim in this C library: freed memory stays with the allocator")
        return
    while True:
        await trio.sleep(interval)
        await trim_once(trim)


__all__ = ["find_malloc_trim", "run_malloc_trim", "trim_once"]
