"""Freed heap handed back: the RSS of this very process, before and after; cyclic garbage collected."""

import gc
import re
import weakref
from pathlib import Path

import pytest

from kit import heap

ALLOCATIONS = 100_000
SIZE = 2_000
"""Above pymalloc's 512 bytes and below glibc's mmap threshold: on the brk heap, as a busy phase's objects are."""


def _rss_bytes() -> int:
    found = re.search(r"^VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert found is not None
    return int(found.group(1)) * 1024


@pytest.mark.skipif(heap._malloc_trim() is None, reason="no malloc_trim in this C library")
def test_memory_freed_below_a_live_allocation_goes_back_to_the_system() -> None:
    busy = [b"\x01" * SIZE for _ in range(ALLOCATIONS)]  # written, so every page is resident
    kept = b"\x01" * SIZE  # allocated after them: the heap's top stays in use, so free() alone returns nothing
    peak = _rss_bytes()
    del busy
    assert heap.release()
    released = peak - _rss_bytes()
    assert released > ALLOCATIONS * SIZE // 2, f"{released >> 20} MiB of {ALLOCATIONS * SIZE >> 20} MiB given back"
    assert len(kept) == SIZE


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_a_release_collects_cyclic_garbage_that_reference_counting_leaves() -> None:
    enabled = gc.isenabled()
    gc.disable()  # only the release may collect: an automatic collection in between would pass this test for it
    try:
        first, second = _Node(), _Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        del first, second
        assert gone() is not None, "a cycle outlives its last reference"
        heap.release()
        assert gone() is None
    finally:
        if enabled:
            gc.enable()
