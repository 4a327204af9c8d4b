"""The one shape of every reconciler (controller-runtime's controller, in asyncio).

    triggers ──► WorkQueue[K] ──► reconcile(key) ──► Result (ok / error: retry with backoff /
      │                                                       terminal: wait for a new trigger)
      ├─ changes in the informers it reads (subscribed when the controller is built)
      ├─ a runtime changed — its Kyma CR or its kubeconfig: ``keys_for_runtime``
      ├─ a watcher event from NATS: ``keys_for_event``; the message waits for the outcome
      └─ a periodic resync of ``all_keys``, spread with jitter (the safety net)

A key is a small frozen value of the controller's own type, never a string to split. Nothing
is reconciled before every informer the controller reads has listed once (a cache that has not
listed cannot tell "absent" from "not seen yet"); until then triggers only queue keys.
"""

import abc
import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Set
from typing import Generic, TypeVar

from opentelemetry import trace

from clients import informer, kube
from contract import events
from kit import aio
from reconciler import settings, workqueue
from reconciler.shared import Shared

log = logging.getLogger(__name__)
tracer = trace.get_tracer("kyma.reconciler")

K = TypeVar("K", bound=Hashable)
_Decided = TypeVar("_Decided")


@dataclasses.dataclass(frozen=True)
class RuntimeChange:
    runtime: str
    content_only: bool = False
    """Only the Kyma CR's spec or status changed: not whether it exists, its labels, or the runtime's client."""


class Controller(abc.ABC, Generic[K]):
    modules: frozenset[str] = frozenset()
    """Event modules whose events this controller wants."""

    def __init__(self, shared: Shared, config: settings.ControllerSettings, *, name: str) -> None:
        self.shared = shared
        self.name = name
        self._resync_seconds = config.resync_seconds
        self._informers: list[informer.Informer] = []
        self._change_applied = shared.queue_metrics.change_applied
        self._write_conflicts = shared.queue_metrics.write_conflicts.labels(name)
        self.queue: workqueue.WorkQueue[K] = workqueue.WorkQueue(
            name=name,
            reconcile=self.reconcile,
            workers=config.workers,
            metrics=shared.queue_metrics,
            runtime_of=self.runtime_of,
            admits=self.admits,
            timeout=config.reconcile_timeout_seconds,
            backoff_max=config.backoff_max_seconds,
            # A dead owner's shards are taken over a lease and a renewal after its last renewal; what it had not
            # worked off by then is as old again at most: a key asked for longer ago was the owner's to finish.
            turned_away_memory=3 * shared.config.sharding.lease_duration_seconds,
        )

    async def on_conflict_again(self, attempt: Callable[[], Awaitable[_Decided]]) -> _Decided:
        """``kube.on_conflict_again``: a read, a decision and a write made again at once when another writer got in
        between, each time counted in ``kyma_reconciler_write_conflicts_total{controller}``."""
        return await kube.on_conflict_again(attempt, retried=lambda _: self._write_conflicts.inc())

    def own(self, source: informer.Informer) -> informer.Informer:
        """Run ``source`` with this controller and wait for it before reconciling."""
        self._informers.append(source)
        return source

    @abc.abstractmethod
    async def reconcile(self, key: K) -> workqueue.Result: ...

    @abc.abstractmethod
    def all_keys(self) -> Iterable[K]:
        """Every key, for the start and the periodic resync."""

    def runtime_of(self, key: K) -> str | None:
        """The runtime whose owner reconciles ``key`` when reconcilers are sharded (None: the singleton shard's
        holder), and whose error count a failure raises."""
        return None

    def admits(self, key: K) -> bool:
        """Whether this replica reconciles ``key``: it owns the key's runtime (a key about no single runtime: the
        singleton shard)."""
        return self.shared.ownership.owns(self.runtime_of(key))

    def keys_for_runtime(self, change: RuntimeChange) -> Iterable[K]:
        """Keys to reconcile when a runtime's Kyma CR or kubeconfig changed."""
        return ()

    def keys_for_event(self, event: events.ChangeEvent) -> Iterable[K]:
        """Keys a watcher event is about (decided from KCP's own records, never from the event body's claims)."""
        return ()

    def unsynced(self) -> list[str]:
        return [i.describe() for i in (*self.shared.informers(), *self._informers) if not i.synced.is_set()]

    async def run(self, *, stop: asyncio.Event, grace: float) -> None:
        async with asyncio.TaskGroup() as group:
            for source in self._informers:
                group.create_task(source.run(stop=stop))
            if not await self._synced(stop):
                await self.queue.run(stop=stop, grace=0)  # stopped before starting: answer whoever waits
                return
            log.info("caches synced, reconciling", extra={"controller": self.name})
            self.queue.add_all(self.all_keys(), background=True)
            group.create_task(self.queue.run(stop=stop, grace=grace))
            group.create_task(self._resync(stop=stop))

    async def _synced(self, stop: asyncio.Event) -> bool:
        for source in (*self.shared.informers(), *self._informers):
            await aio.wait_any(source.synced, stop)
            if stop.is_set():
                return False
        return True

    async def _resync(self, *, stop: asyncio.Event) -> None:
        while not await aio.sleep_unless(stop, self._resync_seconds):
            self.queue.add_all(self.all_keys(), spread=self._resync_seconds / 10, background=True)

    def shards_acquired(self, shards: Set[int]) -> None:
        """Shards were acquired: what was asked for while they were another's (or nobody's) first, then all their
        keys from the start (the others' are not touched), behind whatever changes and events ask for meanwhile."""
        ownership = self.shared.ownership

        def gained(key: K) -> bool:
            return ownership.among(self.runtime_of(key), shards)

        self.queue.add_turned_away(gained)
        self.queue.add_all((k for k in self.all_keys() if gained(k)), background=True)

    def runtime_changed(self, change: RuntimeChange) -> None:
        self.queue.add_all(self.keys_for_runtime(change))

    async def on_event(self, event: events.ChangeEvent) -> workqueue.Result | None:
        """Reconcile the keys an event is about; None when it is about nothing of ours.

        A failure carries, as ``requeue_after``, when the queue retries the key: the message is
        redelivered then, so queue and bus retry on one schedule. A key backing off after a failure
        is not run early for an event (a runtime sending events about it must not make it spin): the
        message simply waits for the queue's retry. A run that put the key off (pending: another pass of
        its SyncResource runs, an object is still going) or a key handed over to another replica acks
        the message without timing it as applied: the queue (or the new owner) brings the key back by
        itself, and a message held until then would hold one of the durable's in-flight slots (a pass
        over 10,000 runtimes turns away the drift events of its group for minutes).
        """
        keys: list[K] = []
        elsewhere: list[K] = []
        for key in dict.fromkeys(self.keys_for_event(event)):
            (keys if self.admits(key) else elsewhere).append(key)
        self.queue.turn_away(elsewhere)
        if not keys:
            return None
        backing_off = {key: delay for key in keys if (delay := self.queue.retry_delay(key)) > 0}
        ready = [key for key in keys if key not in backing_off]
        with tracer.start_as_current_span(f"reconcile {self.name}", attributes={"kyma.keys": len(ready)}) as span:
            results = await asyncio.gather(*(self.queue.add(key) for key in ready))
            span.set_attribute("kyma.ok", all(r.ok for r in results))
        if ready and all(r.applied for r in results):
            seen_to_applied = datetime.datetime.now(datetime.UTC) - event.observed_at
            self._change_applied.labels(self.name, event.module).observe(max(0.0, seen_to_applied.total_seconds()))
        failed = [(key, r) for key, r in zip(ready, results, strict=True) if not r.ok and not r.terminal]
        if failed or backing_off:
            delay = max([self.queue.retry_delay(k) for k, _ in failed] + list(backing_off.values()))
            error = failed[0][1].error if failed else f"backing off after a failure: {sorted(map(str, backing_off))}"
            return workqueue.Result(error=error, requeue_after=delay)
        return next((r for r in results if r.terminal), workqueue.Result())
