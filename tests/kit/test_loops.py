"""A component's loop: its garbage collector set for batches, on either loop."""

import gc
from collections.abc import Iterator

import pytest

from kit import heap, loops


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


async def _thresholds() -> tuple[int, int, int]:
    return gc.get_threshold()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_component_collects_young_garbage_in_large_batches(thresholds: None, loop: loops.EventLoop) -> None:
    gc.set_threshold(700, 10, 10)  # CPython's default
    assert loops.run(_thresholds(), loop=loop) == (heap.YOUNG_GENERATION_ALLOCATIONS, 20, 10)
