"""Waiting for a condition instead of sleeping for a guessed time.

``eventually`` polls a check until it holds (failing with what was awaited); ``more_reconciles``
waits until a controller has finished N more reconciles, which is how a test proves that the
engine had its chances to do something wrong, without guessing how long that takes.
"""

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry

Check = Callable[[], Awaitable[bool] | bool]


async def eventually(check: Check, *, timeout: float = 30, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        outcome = check()
        if await outcome if inspect.isawaitable(outcome) else outcome:
            return
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def reconciles(registry: CollectorRegistry, controller: str) -> float:
    """Finished reconciles of ``controller``, whatever their outcome."""
    return sum(
        registry.get_sample_value("kyma_reconciler_reconciles_total", {"controller": controller, "outcome": outcome})
        or 0
        for outcome in ("ok", "error", "terminal")
    )


async def more_reconciles(registry: CollectorRegistry, controller: str, count: int, *, timeout: float = 60) -> None:
    """Return once ``controller`` has finished ``count`` more reconciles than now."""
    target = reconciles(registry, controller) + count
    await eventually(
        lambda: reconciles(registry, controller) >= target,
        timeout=timeout,
        what=f"{count} more reconciles of {controller}",
    )


def failed_reconciles(registry: CollectorRegistry, controller: str) -> float:
    """Reconciles of ``controller`` that failed (retried with backoff)."""
    return (
        registry.get_sample_value("kyma_reconciler_reconciles_total", {"controller": controller, "outcome": "error"})
        or 0
    )


def write_conflicts(registry: CollectorRegistry, controller: str) -> float:
    """Writes of ``controller`` that lost a race and were read and decided again at once."""
    return registry.get_sample_value("kyma_reconciler_write_conflicts_total", {"controller": controller}) or 0
