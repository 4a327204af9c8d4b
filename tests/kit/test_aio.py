"""kit.aio: a stop and a cancellation arriving together still cancel."""

import asyncio

from kit import aio


async def test_a_cancellation_together_with_stop_is_not_swallowed() -> None:
    """The pipeline sets its stop and cancels its senders in one go: a sender sleeping in sleep_unless must end
    cancelled, not carry on (asyncio.wait_for swallowed exactly this on Python 3.11)."""
    stop = asyncio.Event()
    ran_on = asyncio.Event()

    async def sender() -> None:
        await aio.sleep_unless(stop, 60)
        ran_on.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(sender())
    await asyncio.sleep(0)
    stop.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and not ran_on.is_set()


async def test_sleep_unless_says_whether_stop_came() -> None:
    stop = asyncio.Event()
    assert await aio.sleep_unless(stop, 0.01) is False
    stop.set()
    assert await aio.sleep_unless(stop, 60) is True
