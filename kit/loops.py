"""Which event loop a component runs on: uvloop (sockets and TLS in libuv) or the standard library's."""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

import uvloop

EventLoop = Literal["uvloop", "asyncio"]
DEFAULT: EventLoop = "uvloop"

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, loop: EventLoop) -> T:
    """``asyncio.run`` on the chosen loop."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop if loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
