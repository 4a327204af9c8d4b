"""What every controller reads: KCP, the runtimes KCP knows (Kyma CRs), and clients to reach them."""

import dataclasses
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from clients import informer, kube, recorder
from contract import wire
from reconciler import crds, runtime_clients, settings, sharding, workqueue


@dataclasses.dataclass
class Shared:
    kcp: kube.ApiClient
    config: settings.ReconcilerSettings
    registry: CollectorRegistry
    kymas: informer.Informer
    """The Kyma CRs: the runtimes KCP knows, by name."""
    kubeconfigs: informer.Informer
    """The reconcilers' kubeconfig Secrets, one per runtime."""
    clients: runtime_clients.RuntimeClients
    queue_metrics: workqueue.QueueMetrics
    ownership: sharding.Ownership
    """Which runtimes this replica reconciles (all, unless sharded)."""
    events: recorder.EventRecorder
    """Kubernetes Events into KCP, within their budgets."""

    @classmethod
    def build(cls, kcp: kube.ApiClient, config: settings.ReconcilerSettings, registry: CollectorRegistry) -> "Shared":
        kubeconfigs = informer.Informer(
            kcp,
            kube.SECRETS,
            namespace=config.kubeconfig_namespace,
            label_selector=f"{wire.MODULE_LABEL}={config.kubeconfig_module}",
        )
        return cls(
            kcp=kcp,
            config=config,
            registry=registry,
            kymas=informer.Informer(kcp, crds.KYMA, namespace=config.kyma_namespace),
            kubeconfigs=kubeconfigs,
            clients=runtime_clients.RuntimeClients(
                kubeconfigs,
                module=config.kubeconfig_module,
                namespace=config.kubeconfig_namespace,
                per_runtime=config.sync_resources.per_runtime_concurrency,
                idle_seconds=config.runtime_client_idle_seconds,
            ),
            queue_metrics=workqueue.QueueMetrics(registry),
            ownership=sharding.Ownership(config.sharding.shards if config.sharding.enabled else None),
            events=recorder.EventRecorder(
                kcp,
                component=wire.RECONCILER_EVENT_SOURCE,
                per_second=config.kubernetes_events_per_second,
                burst=config.kubernetes_events_burst,
                dropped=_dropped_events(registry),
            ),
        )

    def __post_init__(self) -> None:
        Gauge(
            "kyma_reconciler_runtime_clients",
            "Runtime API clients held (idle ones are closed: this follows activity, not the fleet)",
            registry=self.registry,
        ).set_function(lambda: self.clients.cached)
        Gauge(
            "kyma_reconciler_runtime_clients_retired",
            "Runtime API clients retired (idle, or their kubeconfig Secret changed) but still open: a reconcile is "
            "still using them",
            registry=self.registry,
        ).set_function(lambda: self.clients.retired)

    def informers(self) -> tuple[informer.Informer, ...]:
        return self.kymas, self.kubeconfigs

    def kyma(self, runtime: str) -> dict[str, Any] | None:
        return self.kymas.get(runtime, self.config.kyma_namespace)

    def runtimes(self) -> list[str]:
        return [kyma["metadata"]["name"] for kyma in self.kymas]

    def labels_of(self, runtime: str) -> dict[str, str]:
        return dict(((self.kyma(runtime) or {}).get("metadata") or {}).get("labels") or {})


def _dropped_events(registry: CollectorRegistry) -> Callable[[str], None]:
    counter = Counter(
        "kyma_reconciler_kubernetes_events_dropped_total",
        "Kubernetes Events not written because their object's or the replica's budget was spent, by reason",
        ["reason"],
        registry=registry,
    )
    return lambda reason: counter.labels(reason).inc()
