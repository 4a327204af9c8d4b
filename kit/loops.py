"""How a long-running component runs: on uvloop (sockets and TLS in libuv) or the standard library's loop,
collecting garbage in large batches and handing the memory it freed back to the operating system as it goes."""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

import uvloop

from kit import heap

EventLoop = Literal["uvloop", "asyncio"]
DEFAULT: EventLoop = "uvloop"

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, loop: EventLoop) -> T:
    """``asyncio.run`` on the chosen loop; sets this process' garbage collector for batches (``heap``)."""
    heap.collect_less_often()
    factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop if loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_releasing_freed_memory(main))


async def _releasing_freed_memory(main: Coroutine[Any, Any, T]) -> T:
    finished = asyncio.Event()
    releasing = asyncio.create_task(heap.release_periodically(stop=finished))
    try:
        return await main
    finally:
        finished.set()
        await releasing
