"""The SyncResource controller: what triggers a reconcile, and the loop that runs them.

Triggers, each only naming SyncResource keys:
- SyncResource changes in KCP (spec generation, deletion) — not its own status writes;
- a runtime changing (its Kyma CR's labels decide group membership; its client was rebuilt);
- watcher events about synced objects in runtimes (drift): the owning SyncResource is named in
  the object's annotation; the message is acked once that reconcile succeeded;
- a periodic resync of everything, spread with jitter, as a safety net.
"""

import asyncio
import dataclasses
from typing import Any

from clients import informer
from contract import events
from kit import aio
from reconciler import consumer, crds, manager, sync_resources, workqueue

EVENTS_MODULE = "kyma-sync"


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    namespace: str | None = None
    """Reconcile SyncResources of this namespace only (None: all namespaces)."""
    events_module: str = EVENTS_MODULE
    """The module watchers route synced objects' changes to."""
    workers: int = 8
    resync_seconds: float = 300
    sync: sync_resources.SyncSettings = sync_resources.SyncSettings()


class SyncResourceController:
    def __init__(self, shared: manager.Shared, settings: ControllerSettings) -> None:
        self._shared = shared
        self._settings = settings
        self.modules = frozenset({settings.events_module})
        self._specs: dict[str, dict[str, Any]] = {}
        self._generations: dict[str, int] = {}
        self.reconciler = sync_resources.SyncResourceReconciler(
            kcp=shared.kcp, clients=shared.clients, settings=settings.sync, kymas=shared.kymas
        )
        self.queue = workqueue.WorkQueue(
            reconcile=self.reconciler.reconcile,
            workers=settings.workers,
            metrics=workqueue.QueueMetrics(shared.registry, controller="sync_resources"),
        )

    async def run(self, *, stop: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.queue.run(stop=stop))
            group.create_task(informer.follow(
                self._shared.kcp, crds.SYNC_RESOURCE, namespace=self._settings.namespace, label_selector=None,
                handler=_SyncResources(self), stop=stop,
            ))
            group.create_task(self._resync(stop=stop))

    def keys_for_runtime(self, runtime: str) -> list[str]:
        return [
            key for key, spec in self._specs.items()
            if spec.get("kyma") == runtime or "target" in spec or runtime in self.reconciler.runtimes_of.get(key, set())
        ]

    def runtime_changed(self, runtime: str) -> None:
        self.queue.add_all(self.keys_for_runtime(runtime))

    def routes(self, event: events.ChangeEvent) -> bool:
        return _owner(event) is not None

    async def on_event(self, event: events.ChangeEvent) -> consumer.Outcome:
        """A synced object changed in a runtime: reconcile its owner and settle the message by the result."""
        owner = _owner(event)
        if owner not in self._specs:
            return consumer.Outcome.ACK
        result = await self.queue.add(owner)
        return consumer.Outcome.ACK if result.ok else consumer.Outcome.NAK

    async def _resync(self, *, stop: asyncio.Event) -> None:
        interval = self._settings.resync_seconds
        while not await aio.sleep_unless(stop, interval):
            self.queue.add_all(list(self._specs), spread=interval / 10)


def _owner(event: events.ChangeEvent) -> str | None:
    annotations = ((event.body or {}).get("metadata") or {}).get("annotations") or {}
    owner = annotations.get(sync_resources.OWNER_ANNOTATION)
    return str(owner) if owner else None


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


class _SyncResources:
    def __init__(self, controller: SyncResourceController) -> None:
        self._c = controller

    async def listed(self, items: list[dict[str, Any]]) -> None:
        self._c._specs.clear()
        for obj in items:
            self._remember(obj)
        self._c.queue.add_all([_key(o) for o in items])

    def _remember(self, obj: dict[str, Any]) -> bool:
        """Keep the spec; True when this is news for the reconciler (not only a status write)."""
        key = _key(obj)
        self._c._specs[key] = obj.get("spec") or {}
        generation = int(obj["metadata"].get("generation") or 0)
        news = self._c._generations.get(key) != generation or bool(obj["metadata"].get("deletionTimestamp"))
        self._c._generations[key] = generation
        return news

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        key = _key(obj)
        if kind == "DELETED":
            self._c._specs.pop(key, None)
            self._c._generations.pop(key, None)
            return
        if self._remember(obj):
            self._c.queue.add_all([key])
