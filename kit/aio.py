"""Waiting that can be interrupted by a stop signal, and bounded exponential backoff."""

import asyncio
import dataclasses
import random
import signal
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``; return True if ``stop`` was set meanwhile.

    asyncio.timeout, not asyncio.wait_for: on Python 3.11, wait_for swallows a cancellation that arrives
    together with ``stop`` (a pipeline's senders are cancelled exactly when its stop is set), and the
    cancelled task then runs on — it hung a watcher's restart while a change waited for the listener.
    """
    if stop.is_set():
        return True
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        return False
    return True


@dataclasses.dataclass
class Backoff:
    """Exponential backoff with jitter (half to full step), capped; reset after a success."""

    initial: float = 0.2
    maximum: float = 10.0
    factor: float = 2.0
    _next: float = dataclasses.field(default=0.0, init=False)

    def delay(self) -> float:
        """The next delay: uniform in [cap/2, cap], doubling the cap each time."""
        cap = self._next or self.initial
        self._next = min(cap * self.factor, self.maximum)
        return random.uniform(cap / 2, cap)

    def reset(self) -> None:
        self._next = 0.0


async def all_of(work: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run ``work`` concurrently, results in order; one unexpected failure cancels the rest (no orphans)."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(each) for each in work]
    return [task.result() for task in tasks]


async def wait_any(*events: asyncio.Event) -> None:
    """Return as soon as one of ``events`` is set."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM: how every long-running command learns to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def run_until(stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` until it returns or ``stop`` is set, cancelling it in the latter case.

    For loops that block in I/O (a watch, a queue) and cannot look at ``stop`` themselves.
    """
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()
        stopper.cancel()
        await asyncio.gather(task, stopper, return_exceptions=True)
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
