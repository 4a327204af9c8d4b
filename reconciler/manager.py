"""What every controller shares, and the one place watcher events are routed.

The manager follows Kyma CRs (the runtimes KCP knows) and the reconcilers' kubeconfig Secrets
(rebuilding a runtime's client when its Secret changes), tells each controller when a runtime
changed, and consumes every module subject a controller asks for with one durable consumer per
module, handing each event to the controllers that route it. A message is acked only when all
of them succeeded.
"""

import asyncio
import dataclasses
import logging
from typing import Any, Protocol

from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry

from certs import runtimes
from clients import informer, kube
from contract import events, ids, subjects
from kit import aio
from reconciler import consumer, crds, runtime_clients

log = logging.getLogger(__name__)

SECRETS = kube.Gvr("", "v1", "secrets")


class Controller(Protocol):
    modules: frozenset[str]
    """Event modules whose events this controller wants."""

    async def run(self, *, stop: asyncio.Event) -> None: ...

    def runtime_changed(self, runtime: str) -> None:
        """Its Kyma CR appeared, changed or went, or its client was rebuilt."""

    def routes(self, event: events.ChangeEvent) -> bool: ...

    async def on_event(self, event: events.ChangeEvent) -> consumer.Outcome: ...


@dataclasses.dataclass
class Shared:
    kcp: client.ApiClient
    clients: runtime_clients.RuntimeClients
    registry: CollectorRegistry
    kyma_namespace: str = runtimes.KCP_NAMESPACE
    kymas: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """Kyma name -> the Kyma CR in KCP."""

    def labels_of(self, runtime: str) -> dict[str, str]:
        return dict((self.kymas.get(runtime, {}).get("metadata") or {}).get("labels") or {})


@dataclasses.dataclass(frozen=True)
class ManagerSettings:
    kubeconfig_module: str = "kyma-sync"
    nats_servers: tuple[str, ...] = ()
    durable_prefix: str = "kyma-reconciler"


class Manager:
    def __init__(self, shared: Shared, controllers: list[Controller], settings: ManagerSettings) -> None:
        self.shared = shared
        self._controllers = controllers
        self._settings = settings

    async def run(self, *, stop: asyncio.Event) -> None:
        await crds.install(self.shared.kcp, [crds.sync_resource_crd(), crds.kyma_crd(), crds.module_template_crd()])
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(informer.follow(
                    self.shared.kcp, crds.KYMA, namespace=self.shared.kyma_namespace, label_selector=None,
                    handler=_Kymas(self), stop=stop,
                ))
                group.create_task(informer.follow(
                    self.shared.kcp, SECRETS, namespace=self.shared.clients.namespace,
                    label_selector=f"{runtimes.MODULE_LABEL}={self._settings.kubeconfig_module}",
                    handler=_KubeconfigSecrets(self), stop=stop,
                ))
                for controller in self._controllers:
                    group.create_task(controller.run(stop=stop))
                if self._settings.nats_servers:
                    for module in sorted({m for c in self._controllers for m in c.modules}):
                        group.create_task(aio.run_until(stop, consumer.consume(
                            consumer.ConsumerSettings(
                                servers=self._settings.nats_servers,
                                subject=subjects.module_wildcard(ids.module_name(module)),
                                durable=f"{self._settings.durable_prefix}-{module}",
                            ),
                            self.dispatch,
                            stop=stop,
                        )))
        finally:
            await self.shared.clients.close()

    def runtime_changed(self, runtime: str) -> None:
        for controller in self._controllers:
            controller.runtime_changed(runtime)

    async def dispatch(self, event: events.ChangeEvent) -> consumer.Outcome:
        handlers = [c for c in self._controllers if event.module in c.modules and c.routes(event)]
        outcomes = await asyncio.gather(*(c.on_event(event) for c in handlers))
        return consumer.Outcome.ACK if all(o == consumer.Outcome.ACK for o in outcomes) else consumer.Outcome.NAK


class _Kymas:
    def __init__(self, manager: Manager) -> None:
        self._m = manager

    async def listed(self, items: list[dict[str, Any]]) -> None:
        known = set(self._m.shared.kymas)
        self._m.shared.kymas.clear()
        self._m.shared.kymas.update({o["metadata"]["name"]: o for o in items})
        for runtime in known | set(self._m.shared.kymas):
            self._m.runtime_changed(runtime)

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self._m.shared.kymas.pop(name, None)
        else:
            self._m.shared.kymas[name] = obj
        self._m.runtime_changed(name)


class _KubeconfigSecrets:
    def __init__(self, manager: Manager) -> None:
        self._m = manager

    async def listed(self, items: list[dict[str, Any]]) -> None:
        for obj in items:
            await self.changed("MODIFIED", obj)

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        runtime = (obj["metadata"].get("labels") or {}).get(runtimes.RUNTIME_LABEL)
        if runtime is None:
            return
        version = None if kind == "DELETED" else obj["metadata"]["resourceVersion"]
        if await self._m.shared.clients.invalidate(runtime, secret_version=version) or kind == "ADDED":
            log.info("kubeconfig of runtime changed", extra={"runtime": runtime})
            self._m.runtime_changed(runtime)
