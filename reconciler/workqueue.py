"""A keyed work queue in the manner of client-go's: one worker per key, pending keys collapse.

``add(key)`` returns a future for the outcome of the next reconcile of that key, so a caller that
must know — a NATS message to ack or nak — can wait for it, while every other trigger just fires and
forgets. An outcome may be ``pending`` (put off, the key comes back by itself) or ``elsewhere``
(another replica's key): ok, but nothing ``applied`` here. A key added while it is being reconciled
runs once more afterwards. A failed reconcile comes back after a per-key exponential backoff with
jitter (the queue is the one owner of retries; a message about a failing key is nak'ed with the same
delay); a terminal failure is not retried until something triggers the key again; a success resets
the backoff. A key that asks to come back (``requeue_after``, e.g. an object still being deleted)
comes back after that long, doubling each time it asks again, up to a minute.
Each reconcile runs under a timeout and a catch-all guard.

Keys queued in bulk by a resync, the start or a shard just acquired wait in a background lane:
a key an event or a change asks for is taken first. ``add_later`` queues keys after a delay,
collapsing a run of triggers into one reconcile; ``retry`` brings back keys that failed within
another key's run (a group's failing runtimes) on their own backoff.

A queue may admit only some keys (``admits``: a sharded replica's runtimes): others are dropped
when added or when their turn comes, their waiters answered "elsewhere" (the owner reconciles them);
``relinquish`` drops what is no longer admitted and waits for, then cancels, its running reconciles.
Keys an event or a change asked for while another replica had them (``turn_away``) are remembered
for a short while once the queue runs: when their shard comes here (``add_turned_away``) they are
taken first, ahead of the shard's pass over all its keys — a change made while a killed owner's
shards had no owner yet waits seconds, not the minutes that pass takes.

Stopping is bounded: no new key is started, running reconciles get ``grace`` seconds to
finish, then they are cancelled; every waiter is answered (with a failure when its key did not
run to the end, so a message about it is redelivered, to the next reconciler).
"""

import asyncio
import collections
import dataclasses
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


@dataclasses.dataclass(frozen=True)
class Result:
    error: str | None = None
    requeue_after: float | None = None
    """Come back after this long even without a trigger (e.g. waiting for an object to go)."""
    terminal: bool = False
    """The error is one retrying cannot fix (invalid input): wait for the next trigger."""
    elsewhere: bool = False
    """Nothing ran here: the key is another replica's (its owner reconciles it from its own triggers)."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def pending(self) -> bool:
        """Not failed, not done either: the key comes back by itself (``requeue_after``, doubling if it asks again)."""
        return self.ok and self.requeue_after is not None

    @property
    def applied(self) -> bool:
        """A reconcile here finished the key."""
        return self.ok and not self.pending and not self.elsewhere

    @classmethod
    def failed(cls, error: str) -> "Result":
        return cls(error=error)

    @classmethod
    def refused(cls, error: str) -> "Result":
        return cls(error=error, terminal=True)


Reconcile = Callable[[K], Awaitable[Result]]

_LONGEST_WAIT = 60.0
TURNED_AWAY_MEMORY_KEYS = 100_000
"""At most this many keys turned away are remembered (oldest forgotten first): a change that asks for every key
(a ModuleTemplate edited) turns away all of the other replicas' runtimes, 10,000 at the target fleet size."""
_STOPPED = Result.failed("the reconciler stopped before this key was reconciled")
_NOT_OURS = Result(elsewhere=True)


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _answer(futures: list["asyncio.Future[Result]"], result: Result) -> None:
    for future in futures:
        if not future.done():
            future.set_result(result)


class QueueMetrics:
    """The queues' metrics, one set per registry, labelled by controller."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reconciles = Counter(
            "kyma_reconciler_reconciles",
            "Reconciles by controller and outcome (ok, error, terminal)",
            ["controller", "outcome"],
            registry=registry,
        )
        self.seconds = Histogram(
            "kyma_reconciler_reconcile_seconds", "Reconcile duration", ["controller"], registry=registry
        )
        self.depth = Gauge(
            "kyma_reconciler_queue_depth", "Keys ready and waiting for a worker", ["controller"], registry=registry
        )
        self.retries = Counter(
            "kyma_reconciler_retries", "Keys scheduled again after a failure", ["controller"], registry=registry
        )
        self.write_conflicts = Counter(
            "kyma_reconciler_write_conflicts",
            "Writes refused because another writer changed the object since it was read (409), read and decided again",
            ["controller"],
            registry=registry,
        )
        self.runtime_errors = Counter(
            "kyma_reconciler_runtime_errors",
            "Failed reconciles (or failed runtimes of a fan-out), by controller and runtime",
            ["controller", "runtime"],
            registry=registry,
        )
        self.change_applied = Histogram(
            "kyma_reconciler_change_applied_seconds",
            "From the watcher observing a change to the reconcile it triggered succeeding (includes clock skew)",
            ["controller", "module"],
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
            registry=registry,
        )


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        name: str,
        reconcile: Reconcile[K],
        workers: int,
        metrics: QueueMetrics,
        runtime_of: Callable[[K], str | None] = lambda key: None,
        admits: Callable[[K], bool] = lambda key: True,
        timeout: float = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 300,
        turned_away_memory: float = 30,
    ) -> None:
        self._name = name
        self._reconcile = reconcile
        self._workers = workers
        self._reconciles = {
            outcome: metrics.reconciles.labels(name, outcome) for outcome in ("ok", "error", "terminal")
        }
        self._seconds = metrics.seconds.labels(name)
        self._depth = metrics.depth.labels(name)
        self._retries = metrics.retries.labels(name)
        self._runtime_errors = metrics.runtime_errors
        self._runtime_of = runtime_of
        self._admits = admits
        self._timeout = timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._ready: collections.OrderedDict[K, None] = collections.OrderedDict()
        self._background: collections.OrderedDict[K, None] = collections.OrderedDict()
        """Keys a resync or an acquired shard queued: taken only when no key is waiting in ``_ready``."""
        self._running: set[K] = set()
        self._reconciling: dict[K, asyncio.Task[Result]] = {}
        self._again: set[K] = set()
        self._waiters: dict[K, list[asyncio.Future[Result]]] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._failures: dict[K, int] = {}
        self._waits: dict[K, int] = {}
        self._turned_away: collections.OrderedDict[K, float] = collections.OrderedDict()
        """Keys asked for while not admitted, oldest first, with when (the loop's clock)."""
        self._turned_away_memory = turned_away_memory
        self._remembering = False
        """Set once the queue runs: before, the caches' first listing asks for every key, and remembering those
        would put a whole shard's keys ahead of live events at the first acquisition."""
        self._wake = asyncio.Event()
        self._stopping = False
        self.peak_running = 0
        """The most reconciles that ran at once (the fan-out bound, observed)."""

    def add(self, key: K) -> "asyncio.Future[Result]":
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        if self._stopping:
            future.set_result(_STOPPED)  # no worker will ever run it
            return future
        if not self._admits(key):
            future.set_result(_NOT_OURS)
            return future
        self._waiters.setdefault(key, []).append(future)
        self._schedule(key, 0.0)
        return future

    def add_all(self, keys: Iterable[K], *, spread: float = 0.0, background: bool = False) -> None:
        """Enqueue many keys, spread over ``spread`` seconds (a resync must not storm); ``background``: behind every
        key triggered by a change or an event (thousands of them must not delay those)."""
        if self._stopping:
            return
        for key in keys:
            if self._admits(key):
                self._schedule(key, random.uniform(0, spread) if spread else 0.0, background=background)
            elif not background:
                self.turn_away([key])

    def add_later(self, keys: Iterable[K], *, delay: float) -> None:
        """Enqueue in ``delay`` seconds; a key already due sooner stays so (a run of triggers makes one reconcile)."""
        if self._stopping:
            return
        for key in keys:
            if self._admits(key):
                self._schedule(key, delay)
            else:
                self.turn_away([key])

    def turn_away(self, keys: Iterable[K]) -> None:
        """Another replica's keys an event or a change asked for: remembered for ``turned_away_memory`` seconds."""
        if not self._remembering:
            return
        now = asyncio.get_running_loop().time()
        for key in keys:
            self._turned_away.pop(key, None)
            self._turned_away[key] = now
        self._forget_turned_away_before(now - self._turned_away_memory)
        while len(self._turned_away) > TURNED_AWAY_MEMORY_KEYS:
            self._turned_away.popitem(last=False)

    def add_turned_away(self, which: Callable[[K], bool]) -> None:
        """Queue, ahead of any background key, the keys turned away lately that ``which`` picks (those of shards
        just acquired: what changed while they had no live owner goes first)."""
        self._forget_turned_away_before(asyncio.get_running_loop().time() - self._turned_away_memory)
        if self._stopping:
            return
        for key in [k for k in self._turned_away if which(k)]:
            del self._turned_away[key]
            if self._admits(key):
                self._schedule(key, 0.0)

    def _forget_turned_away_before(self, horizon: float) -> None:
        while self._turned_away and next(iter(self._turned_away.values())) < horizon:
            self._turned_away.popitem(last=False)

    def retry(self, keys: Iterable[K]) -> None:
        """Keys that failed within another key's run (a group's failing runtimes): each comes back on its own
        backoff, which grows while it keeps failing (a key already waiting for a worker or running just runs)."""
        if self._stopping:
            return
        for key in keys:
            if self._admits(key) and key not in self._ready and key not in self._running:
                self._retries.inc()
                self._schedule(key, self._backoff(key))

    def retry_delay(self, key: K) -> float:
        """How long until the queue retries ``key`` after its last failure (0 if it did not fail)."""
        timer = self._timers.get(key)
        if timer is None or key not in self._failures:
            return 0.0
        return max(0.0, timer.when() - asyncio.get_running_loop().time())

    def _schedule(self, key: K, delay: float, *, background: bool = False) -> None:
        if delay <= 0:
            self._make_ready(key, background=background)
            return
        loop = asyncio.get_running_loop()
        timer = self._timers.get(key)
        if timer is not None and timer.when() <= loop.time() + delay:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_later(delay, functools.partial(self._make_ready, key, background=background))

    def _make_ready(self, key: K, *, background: bool = False) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if not self._admits(key):
            self._forget(key)
            return
        self._turned_away.pop(key, None)  # ours now, and on its way: not to be queued again at an acquisition
        if key in self._running:
            self._again.add(key)
        elif not background:
            self._background.pop(key, None)
            self._ready[key] = None
        elif key not in self._ready:
            self._background[key] = None
        self._depth.set(len(self._ready) + len(self._background))
        self._wake.set()

    def _forget(self, key: K) -> None:
        """``key`` is not ours (any more): no retry, no backoff; whoever waits for it is answered."""
        self._ready.pop(key, None)
        self._background.pop(key, None)
        self._again.discard(key)
        self._failures.pop(key, None)
        self._waits.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        _answer(self._waiters.pop(key, []), _NOT_OURS)
        self._depth.set(len(self._ready) + len(self._background))

    async def relinquish(self, *, grace: float | None) -> None:
        """Drop every key no longer admitted; wait up to ``grace`` seconds (None: until they end, each within the
        reconcile timeout) for their running reconciles, then cancel them (another replica is about to own them:
        two must never write at once)."""
        for key in [k for k in (*self._ready, *self._background, *self._timers, *self._waiters) if not self._admits(k)]:
            self._forget(key)
        running = [task for key, task in self._reconciling.items() if not self._admits(key)]
        if not running:
            return
        _, late = await asyncio.wait(running, timeout=grace) if grace != 0 else (set(), set(running))
        for task in late:
            task.cancel()
        if late:
            log.warning(
                "reconciles of keys handed over cancelled", extra={"controller": self._name, "cancelled": len(late)}
            )
            await asyncio.wait(late)

    async def run(self, *, stop: asyncio.Event, grace: float = 30) -> None:
        """Work until ``stop``; then let running reconciles finish for up to ``grace`` seconds."""
        self._remembering = True
        workers = [asyncio.create_task(self._work(), name=f"{self._name}-worker-{n}") for n in range(self._workers)]
        try:
            await stop.wait()
            self._stopping = True
            self._wake.set()
            _, late = await asyncio.wait(workers, timeout=grace)
            if late:
                log.warning(
                    "reconciles still running after the grace period, cancelling them",
                    extra={"controller": self._name, "running": len(self._running), "grace": grace},
                )
        finally:
            self._stopping = True
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            for timer in self._timers.values():
                timer.cancel()
            for futures in self._waiters.values():
                _answer(futures, _STOPPED)
            self._waiters.clear()

    async def _next(self) -> K | None:
        while True:
            while not (self._ready or self._background):
                if self._stopping:
                    return None
                self._wake.clear()
                await self._wake.wait()
            if self._stopping:
                return None
            key, _ = (self._ready or self._background).popitem(last=False)
            self._depth.set(len(self._ready) + len(self._background))
            if self._admits(key):
                return key
            self._forget(key)  # handed over while it waited

    async def _work(self) -> None:
        while (key := await self._next()) is not None:
            self._running.add(key)
            self.peak_running = max(self.peak_running, len(self._running))
            waiters = self._waiters.pop(key, [])
            try:
                result = await self._guarded(key)
            except BaseException:
                # Cancelled mid-reconcile: whoever waits for this run must not wait forever.
                _answer(waiters, _STOPPED)
                raise
            finally:
                self._running.discard(key)
            self._settled(key, result)
            _answer(waiters, result)

    def _settled(self, key: K, result: Result) -> None:
        if result.ok or result.terminal:
            self._failures.pop(key, None)
        if result.requeue_after is None or not result.ok:
            self._waits.pop(key, None)
        if not result.ok and not result.terminal:
            # A trigger that came during a failing run is served by the retry: a key that keeps failing
            # while events about it keep coming must not spin.
            self._again.discard(key)
            self._retries.inc()
            self._schedule(key, self._backoff(key))
        elif key in self._again:
            self._again.discard(key)
            self._make_ready(key)
        elif result.requeue_after is not None:
            self._schedule(key, self._patience(key, result.requeue_after))

    def _patience(self, key: K, wait: float) -> float:
        """A key that keeps asking to come back (an object stuck in deletion) is looked at less and less often."""
        waits = self._waits[key] = self._waits.get(key, 0) + 1
        return float(min(wait * 2.0 ** min(waits - 1, 16), max(wait, _LONGEST_WAIT)))

    def _backoff(self, key: K) -> float:
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        ceiling = min(self._backoff_max, self._backoff_initial * 2 ** min(failures - 1, 32))
        return random.uniform(ceiling / 2, ceiling)

    async def _guarded(self, key: K) -> Result:
        started = time.perf_counter()
        # Its own task, so that a hand-over can cancel this reconcile without ending the worker.
        reconciling = self._reconciling[key] = asyncio.ensure_future(self._reconcile(key))
        try:
            result = await asyncio.wait_for(reconciling, timeout=self._timeout)
        except TimeoutError:
            result = Result.failed(f"reconcile of {key} timed out after {self._timeout:g}s")
        except asyncio.CancelledError:
            if _being_cancelled():  # the worker itself is stopping
                raise
            result = Result.failed(f"reconcile of {key} cancelled: handed over to another replica")
        except Exception as exc:  # the guard: one broken key must not kill a worker
            log.exception("reconcile crashed", extra={"controller": self._name, "key": str(key)})
            result = Result.failed(f"reconcile of {key} crashed: {exc!r}")
        finally:
            self._reconciling.pop(key, None)
        self._seconds.observe(time.perf_counter() - started)
        self._reconciles["ok" if result.ok else "terminal" if result.terminal else "error"].inc()
        if not result.ok:
            log.warning("reconcile failed", extra={"controller": self._name, "key": str(key), "error": result.error})
            if (runtime := self._runtime_of(key)) is not None:
                self._runtime_errors.labels(self._name, runtime).inc()
        return result
