"""Garbage collected in large batches, and freed memory handed back to the operating system, so a component's
time goes to its work and its RSS follows it.

CPython's cycle collector, at its default thresholds, ran a young collection every 700 container
allocations; under load nearly every object of a request still in flight survived two of them and was
promoted, so the full collections that promotions trigger came every few seconds. Each walks every
object the process holds: in a reconciler replica of the 3,000-runtime fleet benchmark a full
collection took about 0.4 s, and collections took 30 to 60 % of its CPU during drift; in the
listener the full collections (60 ms each) were its p99 latency. ``collect_less_often`` lets
50,000 allocations pass between young collections: in-flight objects die young, by reference
count, and are never promoted. Cycles are few here (in the 1,000-runtime fleet benchmark the
collection that ``release_periodically`` runs once a minute found 0-20 garbage objects in the
listener, 2,600-20,000 in a reconciler replica), so that collection keeps up with them.

glibc's malloc returns freed memory only from the top of its heap: below one live allocation, the
pages freed after a busy phase stay in the process. A KCP reconciler that had built clients for
1,000 runtimes held 310 MiB of free heap (34 MiB in use) after closing them; malloc_trim(0) gave
107 MiB of RSS back. Elsewhere (musl, macOS) there is no malloc_trim and nothing is done.
"""

import asyncio
import ctypes
import functools
import gc
import logging
import time
from collections.abc import Callable
from typing import cast

from kit import aio

log = logging.getLogger(__name__)

RELEASE_EVERY_SECONDS = 60.0
"""Often enough that memory follows a busy phase within a minute. The full collection holds the event loop for as
long as it walks the heap (about 0.4 s in a loaded reconciler replica of 3,000 runtimes, 60 ms in the listener;
0.08-0.22 s of CPU in a replica of the 1,000-runtime fleet, 0.07-0.11 s in its listener): once a minute instead of
every few seconds."""
YOUNG_GENERATION_ALLOCATIONS = 50_000
"""Container allocations (less deallocations) between two young collections; CPython's default is 700."""
_THRESHOLDS = (YOUNG_GENERATION_ALLOCATIONS, 20, 10)
"""A middle collection every 20 young ones (default 10); a full one after 10 middle ones as by default (and, as
always, only once the objects promoted since the last are a quarter of the long-lived ones)."""


def collect_less_often() -> None:
    """Collect cycles in large batches for the rest of the process' life (the whole process: see the module's
    docstring)."""
    gc.set_threshold(*_THRESHOLDS)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the C library this process already uses
    except OSError:
        return None
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return cast(Callable[[int], int], trim)


def release() -> bool:
    """Collect every generation's cyclic garbage, then hand the heap's free pages back; True if some were (False
    also where malloc_trim does not exist)."""
    gc.collect()
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


async def release_periodically(*, stop: asyncio.Event, every: float = RELEASE_EVERY_SECONDS) -> None:
    """``release`` every ``every`` seconds until ``stop``."""
    if _malloc_trim() is None:
        log.info("no malloc_trim in this C library: freed memory stays with the allocator")
    while not await aio.sleep_unless(stop, every):
        started = time.perf_counter()
        released = release()
        log.debug(
            "garbage collected, free heap released",
            extra={"released": released, "seconds": round(time.perf_counter() - started, 4)},
        )
