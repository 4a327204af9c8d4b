"""Controllers whose key is a runtime: one reconcile brings one runtime in line with KCP.

A KCP-wide change (a ModuleTemplate edited) enqueues every runtime; the worker count bounds how
many runtimes are written to at once, so a change across thousands of runtimes is a steady
stream, not a storm. Keys collapse: ten template edits during one pass cost one more pass.
"""

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from clients import kube
from contract import events
from kit import aio
from reconciler import consumer, crds, manager, runtime_clients, workqueue

EVENTS_MODULE = "kyma-sync"


@dataclasses.dataclass(frozen=True)
class PerRuntimeSettings:
    workers: int = 16
    """Runtimes reconciled at once: the fan-out bound."""
    resync_seconds: float = 300


class PerRuntimeController:
    """Queue, triggers and event routing; subclasses give the reconcile and the kind they own."""

    kind: str
    modules = frozenset({EVENTS_MODULE})

    def __init__(self, shared: manager.Shared, settings: PerRuntimeSettings, *, name: str) -> None:
        self._shared = shared
        self._settings = settings
        self.in_flight = 0
        self.max_in_flight = 0
        self.queue = workqueue.WorkQueue(
            reconcile=self._measured(self.reconcile), workers=settings.workers,
            metrics=workqueue.QueueMetrics(shared.registry, controller=name),
        )

    def _measured(self, reconcile: Callable[[str], Awaitable[workqueue.Result]]) -> workqueue.Reconcile:
        async def measured(runtime: str) -> workqueue.Result:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                return await reconcile(runtime)
            finally:
                self.in_flight -= 1

        return measured

    async def reconcile(self, runtime: str) -> workqueue.Result:
        raise NotImplementedError

    async def run(self, *, stop: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.queue.run(stop=stop))
            group.create_task(self._resync(stop=stop))
            await self.follow_kcp(stop=stop)

    async def follow_kcp(self, *, stop: asyncio.Event) -> None:
        """Watch what this controller copies from KCP (default: nothing beyond the manager's Kyma watch)."""

    def enqueue_all(self) -> None:
        self.queue.add_all(list(self._shared.kymas))

    def runtime_changed(self, runtime: str) -> None:
        self.queue.add_all([runtime])

    def routes(self, event: events.ChangeEvent) -> bool:
        return event.target.kind == self.kind

    async def on_event(self, event: events.ChangeEvent) -> consumer.Outcome:
        result = await self.queue.add(event.runtime)
        return consumer.Outcome.ACK if result.ok else consumer.Outcome.NAK

    async def _resync(self, *, stop: asyncio.Event) -> None:
        interval = self._settings.resync_seconds
        while not await aio.sleep_unless(stop, interval):
            self.queue.add_all(list(self._shared.kymas), spread=interval / 10)

    async def prepare(
        self, handle: runtime_clients.RuntimeHandle, *, definitions: list[dict[str, Any]], namespace: str
    ) -> None:
        """CRDs and namespace in a runtime, ensured once per client (KCP owns their lifecycle there)."""
        missing = [d for d in definitions if f"crd/{d['metadata']['name']}" not in handle.prepared]
        if missing:
            await crds.install(handle.objects.api, missing)
            handle.prepared.update(f"crd/{d['metadata']['name']}" for d in missing)
        if f"namespace/{namespace}" not in handle.prepared:
            await kube.ensure_namespace(handle.objects.api, namespace)
            handle.prepared.add(f"namespace/{namespace}")
