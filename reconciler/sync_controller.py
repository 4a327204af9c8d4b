"""The SyncResource controller: what triggers a reconcile, and the loop that runs them.

Triggers, each only naming SyncResource keys:
- SyncResource changes in KCP (spec generation, deletion) — not its own status writes;
- Kyma CR changes (labels decide group membership; a Kyma appearing or going);
- kubeconfig Secret changes (the runtime's client is rebuilt first);
- watcher events from NATS about synced objects in runtimes (drift): the owning SyncResource is
  named in the object's annotation; the message is acked once that reconcile succeeded;
- a periodic resync of everything, spread with jitter, as a safety net.
"""

import asyncio
import dataclasses
import logging
from typing import Any

from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry

from certs import runtimes
from clients import informer, kube
from contract import events, ids, subjects
from kit import aio
from reconciler import consumer, crds, runtime_clients, sync_resources, workqueue

log = logging.getLogger(__name__)

SECRETS = kube.Gvr("", "v1", "secrets")


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    kyma_namespace: str = runtimes.KCP_NAMESPACE
    namespace: str | None = None
    """Reconcile SyncResources of this namespace only (None: all namespaces)."""
    kubeconfig_module: str = "kyma-sync"
    """Whose kubeconfig Secret (``<module>-kubeconfig-<runtime>``) the controller uses."""
    events_module: str = "kyma-sync"
    """The module watchers route synced objects' changes to."""
    workers: int = 8
    per_runtime_concurrency: int = 8
    resync_seconds: float = 300
    sync: sync_resources.SyncSettings = sync_resources.SyncSettings()
    nats_servers: tuple[str, ...] = ()
    durable: str = "sync-resources"


class SyncResourceController:
    def __init__(self, *, kcp: client.ApiClient, settings: ControllerSettings, registry: CollectorRegistry) -> None:
        self._kcp = kcp
        self._settings = settings
        self.kymas: dict[str, dict[str, str]] = {}
        self._specs: dict[str, dict[str, Any]] = {}
        self._generations: dict[str, int] = {}
        self.clients = runtime_clients.RuntimeClients(
            kcp, module=settings.kubeconfig_module, namespace=settings.kyma_namespace,
            per_runtime=settings.per_runtime_concurrency,
        )
        self.reconciler = sync_resources.SyncResourceReconciler(
            kcp=kcp, clients=self.clients, settings=settings.sync, kymas=self.kymas
        )
        self.queue = workqueue.WorkQueue(
            reconcile=self.reconciler.reconcile,
            workers=settings.workers,
            metrics=workqueue.QueueMetrics(registry, controller="sync_resources"),
        )

    async def run(self, *, stop: asyncio.Event) -> None:
        await crds.install(self._kcp, [crds.sync_resource_crd(), crds.kyma_crd()])
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.queue.run(stop=stop))
                group.create_task(informer.follow(
                    self._kcp, crds.SYNC_RESOURCE, namespace=self._settings.namespace, label_selector=None,
                    handler=_SyncResources(self), stop=stop,
                ))
                group.create_task(informer.follow(
                    self._kcp, crds.KYMA, namespace=self._settings.kyma_namespace, label_selector=None,
                    handler=_Kymas(self), stop=stop,
                ))
                group.create_task(informer.follow(
                    self._kcp, SECRETS, namespace=self._settings.kyma_namespace, label_selector=runtimes.MODULE_LABEL,
                    handler=_KubeconfigSecrets(self), stop=stop,
                ))
                group.create_task(self._resync(stop=stop))
                if self._settings.nats_servers:
                    group.create_task(consumer.consume(
                        consumer.ConsumerSettings(
                            servers=self._settings.nats_servers,
                            subject=subjects.module_wildcard(ids.module_name(self._settings.events_module)),
                            durable=self._settings.durable,
                        ),
                        self.on_event,
                        stop=stop,
                    ))
        finally:
            await self.clients.close()

    def keys_for_runtime(self, runtime: str) -> list[str]:
        return [
            key for key, spec in self._specs.items()
            if spec.get("kyma") == runtime or "target" in spec or runtime in self.reconciler.runtimes_of.get(key, set())
        ]

    async def on_event(self, event: events.ChangeEvent) -> consumer.Outcome:
        """A synced object changed in a runtime: reconcile its owner and settle the message by the result."""
        annotations = ((event.body or {}).get("metadata") or {}).get("annotations") or {}
        owner = annotations.get(sync_resources.OWNER_ANNOTATION)
        keys = [owner] if owner else self.keys_for_runtime(event.runtime)
        results = await asyncio.gather(*(self.queue.add(key) for key in keys if key in self._specs))
        return consumer.Outcome.ACK if all(r.ok for r in results) else consumer.Outcome.NAK

    async def _resync(self, *, stop: asyncio.Event) -> None:
        interval = self._settings.resync_seconds
        while not await aio.sleep_unless(stop, interval):
            self.queue.add_all(list(self._specs), spread=interval / 10)


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


class _Kymas:
    def __init__(self, controller: SyncResourceController) -> None:
        self._c = controller

    async def listed(self, items: list[dict[str, Any]]) -> None:
        self._c.kymas.clear()
        self._c.kymas.update({o["metadata"]["name"]: o["metadata"].get("labels") or {} for o in items})
        self._c.queue.add_all(list(self._c._specs))

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        labels = obj["metadata"].get("labels") or {}
        if kind == "DELETED":
            self._c.kymas.pop(name, None)
        elif self._c.kymas.get(name) == labels:
            return
        else:
            self._c.kymas[name] = labels
        self._c.queue.add_all(self._c.keys_for_runtime(name))


class _KubeconfigSecrets:
    def __init__(self, controller: SyncResourceController) -> None:
        self._c = controller

    def _runtime(self, obj: dict[str, Any]) -> str | None:
        labels = obj["metadata"].get("labels") or {}
        if labels.get(runtimes.MODULE_LABEL) != self._c._settings.kubeconfig_module:
            return None
        return labels.get(runtimes.RUNTIME_LABEL)

    async def listed(self, items: list[dict[str, Any]]) -> None:
        for obj in items:
            await self.changed("MODIFIED", obj)

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        runtime = self._runtime(obj)
        if runtime is None:
            return
        version = None if kind == "DELETED" else obj["metadata"]["resourceVersion"]
        if await self._c.clients.invalidate(runtime, secret_version=version) or kind == "ADDED":
            log.info("kubeconfig of runtime changed", extra={"runtime": runtime})
            self._c.queue.add_all(self._c.keys_for_runtime(runtime))
