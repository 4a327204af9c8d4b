"""A keyed work queue in the manner of client-go's: one worker per key, pending keys collapse.

``add(key)`` returns a future for the outcome of the next reconcile of that key, so a caller
that must know — a NATS message to ack or nak — can wait for it, while every other trigger just
fires and forgets. A key added while it is being reconciled runs once more afterwards. A failed
or requeue-asking reconcile comes back after a per-key exponential backoff with jitter; a
success resets it. Each reconcile runs under a timeout and a catch-all guard.
"""

import asyncio
import collections
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kit import aio

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Result:
    error: str | None = None
    requeue_after: float | None = None
    """Come back after this long even without a trigger (e.g. waiting for a runtime)."""

    @property
    def ok(self) -> bool:
        return self.error is None


Reconcile = Callable[[str], Awaitable[Result]]


class QueueMetrics:
    def __init__(self, registry: CollectorRegistry, *, controller: str) -> None:
        self.reconciles = Counter(
            f"kyma_reconciler_{controller}_reconciles", "Reconciles by outcome", ["outcome"], registry=registry
        )
        self.seconds = Histogram(f"kyma_reconciler_{controller}_reconcile_seconds", "Reconcile duration", registry=registry)
        self.depth = Gauge(f"kyma_reconciler_{controller}_queue_depth", "Keys waiting", registry=registry)


class WorkQueue:
    def __init__(
        self,
        *,
        reconcile: Reconcile,
        workers: int,
        metrics: QueueMetrics,
        timeout: float = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 60,
    ) -> None:
        self._reconcile = reconcile
        self._workers = workers
        self._metrics = metrics
        self._timeout = timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._ready: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._running: set[str] = set()
        self._again: set[str] = set()
        self._waiters: dict[str, list[asyncio.Future[Result]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._failures: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._stopped = False

    def add(self, key: str, *, delay: float = 0.0) -> "asyncio.Future[Result]":
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        if self._stopped:
            future.cancel()  # no worker will ever answer it
            return future
        self._waiters.setdefault(key, []).append(future)
        self._schedule(key, delay)
        return future

    def add_all(self, keys: list[str], *, spread: float = 0.0) -> None:
        """Enqueue many keys, spread over ``spread`` seconds (a resync must not storm)."""
        for key in keys:
            self._schedule(key, random.uniform(0, spread) if spread else 0.0)

    def _schedule(self, key: str, delay: float) -> None:
        if delay <= 0:
            self._make_ready(key)
            return
        loop = asyncio.get_running_loop()
        timer = self._timers.get(key)
        if timer is not None and timer.when() <= loop.time() + delay:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_later(delay, self._make_ready, key)

    def _make_ready(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._running:
            self._again.add(key)
        else:
            self._ready[key] = None
        self._metrics.depth.set(len(self._ready))
        self._wake.set()

    async def run(self, *, stop: asyncio.Event) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self._workers):
                    group.create_task(aio.run_until(stop, self._work()))
        finally:
            self._stopped = True
            for timer in self._timers.values():
                timer.cancel()
            for futures in self._waiters.values():
                for future in futures:
                    if not future.done():
                        future.cancel()

    async def _next(self) -> str:
        while not self._ready:
            self._wake.clear()
            await self._wake.wait()
        key, _ = self._ready.popitem(last=False)
        self._metrics.depth.set(len(self._ready))
        return key

    async def _work(self) -> None:
        while True:
            key = await self._next()
            self._running.add(key)
            waiters = self._waiters.pop(key, [])
            try:
                result = await self._guarded(key)
            except BaseException:
                # Stopped mid-reconcile: whoever waits for this run must not wait forever.
                for future in waiters:
                    future.cancel()
                raise
            for future in waiters:
                if not future.done():
                    future.set_result(result)
            self._running.discard(key)
            if key in self._again:
                self._again.discard(key)
                self._make_ready(key)
            elif not result.ok:
                self._schedule(key, self._backoff(key))
            elif result.requeue_after is not None:
                self._schedule(key, result.requeue_after)
            if result.ok:
                self._failures.pop(key, None)

    def _backoff(self, key: str) -> float:
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        ceiling = min(self._backoff_max, self._backoff_initial * 2 ** (failures - 1))
        return random.uniform(ceiling / 2, ceiling)

    async def _guarded(self, key: str) -> Result:
        started = time.perf_counter()
        try:
            result = await asyncio.wait_for(self._reconcile(key), timeout=self._timeout)
        except TimeoutError:
            result = Result(error=f"reconcile of {key} timed out after {self._timeout:g}s")
        except Exception as exc:  # the guard: one broken key must not kill a worker
            log.exception("reconcile crashed", extra={"key": key})
            result = Result(error=f"reconcile of {key} crashed: {exc!r}")
        self._metrics.seconds.observe(time.perf_counter() - started)
        self._metrics.reconciles.labels("ok" if result.ok else "error").inc()
        if not result.ok:
            log.warning("reconcile failed", extra={"key": key, "error": result.error})
        return result
