"""Runs the controllers and is the one place watcher events are routed.

The manager owns the informers every controller reads (Kyma CRs: the runtimes KCP knows; the
reconcilers' kubeconfig Secrets, rebuilding a runtime's client when its Secret changes), tells
each controller when a runtime changed, and consumes every module subject a controller asks for
with one durable consumer per module, handing each event to the controllers that want it. The
message's outcome combines theirs: it is acked only when all of them succeeded.

With sharding on, ``reconciler.sharding`` decides which runtimes this replica reconciles: each
replica consumes every event through durables of its own (``<prefix>-<module>-<identity>``) and
acks those about runtimes it does not own; a shard it acquires is reconciled from the start.

Readiness is the caches: until every informer has listed once the manager is not ready, and no
controller reconciles.
"""

import asyncio
import contextlib
import logging
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from clients import informer
from contract import events, ids, subjects, wire
from reconciler import consumer, controller, crds, sharding, workqueue
from reconciler.shared import Shared

log = logging.getLogger(__name__)

AnyController = controller.Controller[Any]

_REPLICA_DURABLE_INACTIVE_SECONDS = 3600.0
"""A sharded replica's durable unused this long is deleted by NATS: one of a replica scaled away would hold its
events (interest retention) until the stream is full and refuses the fleet's."""


class RuntimeInfo:
    """``kyma_reconciler_runtime_info{runtime}``: 1 for every runtime KCP has a Kyma CR of, so alerts can tell
    a silent watcher of a live runtime from the leftover series of a deprovisioned one."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._gauge = Gauge(
            "kyma_reconciler_runtime_info",
            "1 for every runtime KCP has a Kyma CR of (what the watcher-silent alerts join heartbeats with)",
            ["runtime"],
            registry=registry,
        )

    def changed(self, change: informer.Change) -> None:
        runtime = change.current["metadata"]["name"]
        if change.new is not None:
            self._gauge.labels(runtime).set(1)
            return
        with contextlib.suppress(KeyError):  # never counted (a relist's deletion of an unseen object)
            self._gauge.remove(runtime)


class Manager:
    def __init__(self, shared: Shared, controllers: list[AnyController]) -> None:
        self.shared = shared
        self.controllers = controllers
        self._consumer_metrics = consumer.ConsumerMetrics(shared.registry)
        shared.kymas.subscribe(RuntimeInfo(shared.registry).changed)
        shared.kymas.subscribe(self._kyma_changed)
        shared.kubeconfigs.subscribe(self._kubeconfig_changed)
        self._shards: sharding.Shards | None = None

    def readiness(self) -> str | None:
        """None when this replica can do its part and, sharded, nothing keeps it from holding shards; else why not."""
        return self._able() or (self._shards.problem() if self._shards is not None else None)

    def _able(self) -> str | None:
        """None when every controller's caches have synced and NATS lets us use every durable; else why not (what
        makes a replica a member)."""
        waiting = sorted({name for c in self.controllers for name in c.unsynced()})
        if waiting:
            return f"caches not synced yet: {', '.join(waiting)}"
        refused = self._consumer_metrics.refusals
        return (
            f"NATS refuses durable(s) {', '.join(sorted(refused))}: {next(iter(refused.values()))}" if refused else None
        )

    def _acquired(self, shards: set[int]) -> None:
        for each in self.controllers:
            each.shards_acquired(shards)

    async def _releasing(self, grace: float | None) -> None:
        await asyncio.gather(*(each.queue.relinquish(grace=grace) for each in self.controllers))

    def _durable(self, module: str) -> str:
        config = self.shared.config
        durable = f"{config.nats.durable_prefix}-{module}"
        return f"{durable}-{config.sharding.identity}" if config.sharding.enabled else durable

    async def run(self, *, stop: asyncio.Event) -> None:
        config = self.shared.config
        await crds.install(self.shared.kcp, crds.kcp_crds())
        if config.kcp_lifecycle_manager_crds == "create-if-absent":
            await crds.install_if_absent(self.shared.kcp, crds.lifecycle_manager_crds())
        try:
            async with asyncio.TaskGroup() as group:
                for source in self.shared.informers():
                    group.create_task(source.run(stop=stop))
                group.create_task(self.shared.clients.run(stop=stop))
                for each in self.controllers:
                    group.create_task(each.run(stop=stop, grace=config.shutdown_grace_seconds))
                if config.sharding.enabled:
                    assert config.sharding.identity is not None
                    self._shards = sharding.Shards(
                        self.shared.kcp,
                        config.sharding,
                        identity=config.sharding.identity,
                        ownership=self.shared.ownership,
                        registry=self.shared.registry,
                        acquired=self._acquired,
                        releasing=self._releasing,
                        ready=self._able,
                    )
                    group.create_task(self._shards.run(stop=stop))
                if config.nats.servers:
                    for module in sorted({m for c in self.controllers for m in c.modules}):
                        group.create_task(
                            consumer.consume(
                                consumer.ConsumerSettings(
                                    servers=config.nats.servers,
                                    subject=subjects.module_wildcard(ids.module_name(module)),
                                    durable=self._durable(module),
                                    stream=wire.STREAM_NAME,
                                    credentials=config.nats.credentials,
                                    max_deliveries=config.nats.max_deliveries,
                                    ack_wait_seconds=config.nats.ack_wait_seconds,
                                    max_in_flight=config.nats.max_in_flight,
                                    inactive_threshold_seconds=_REPLICA_DURABLE_INACTIVE_SECONDS
                                    if config.sharding.enabled
                                    else None,
                                ),
                                self.dispatch,
                                metrics=self._consumer_metrics,
                                stop=stop,
                            )
                        )
        finally:
            await self.shared.clients.close()

    def _runtime_changed(self, change: controller.RuntimeChange) -> None:
        for each in self.controllers:
            each.runtime_changed(change)

    def _kyma_changed(self, change: informer.Change) -> None:
        runtime = change.current["metadata"]["name"]
        content_only = (
            change.old is not None
            and change.new is not None
            and change.old["metadata"].get("uid") == change.new["metadata"].get("uid")  # not recreated meanwhile
            and _labels(change.old) == _labels(change.new)
        )
        self._runtime_changed(controller.RuntimeChange(runtime, content_only=content_only))

    def _kubeconfig_changed(self, change: informer.Change) -> None:
        runtime = (change.current["metadata"].get("labels") or {}).get(wire.RUNTIME_LABEL)
        if runtime is None:
            return
        version = None if change.new is None else change.new["metadata"]["resourceVersion"]
        before = None if change.old is None else change.old["metadata"]["resourceVersion"]
        self.shared.clients.invalidate(runtime, secret_version=version)
        # Compared with the Secret as last seen, not with a cached client: an idle runtime has none.
        if change.kind == "ADDED" or version != before:
            log.info("kubeconfig of runtime changed", extra={"runtime": runtime})
            self._runtime_changed(controller.RuntimeChange(runtime))

    async def dispatch(self, event: events.ChangeEvent) -> workqueue.Result | None:
        """Every interested controller's outcome, combined: the worst decides."""
        wanting = [c for c in self.controllers if event.module in c.modules]
        results = [r for r in await asyncio.gather(*(c.on_event(event) for c in wanting)) if r is not None]
        if not results:
            return None
        failed = [r for r in results if not r.ok and not r.terminal]
        if failed:
            return max(failed, key=lambda r: r.requeue_after or 0.0)
        return next((r for r in results if r.terminal), workqueue.Result())


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})
