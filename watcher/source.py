"""One watched resource in one namespace scope, turned into queued events.

A (re)list is compared with the checkpoint: changed objects are reported as RESYNC, vanished
ones as DELETED; watch events are reported as they come (``clients.informer`` does the
list+watch loop).
"""

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from clients import informer, kube
from contract import errors as contract_errors
from contract import events, ids
from observability import tracing
from watcher import checkpoint, config, metrics, noise
from watcher import queue as queue_mod

log = logging.getLogger(__name__)
tracer = trace.get_tracer("kyma.watcher")

_BODY_STRIPPED = ("metadata.managedFields",)


class Source:
    def __init__(
        self,
        *,
        api: kube.ApiClient,
        spec: config.WatchSpec,
        namespace: str | None,
        runtime: ids.RuntimeId,
        noise_filter: noise.NoiseFilter,
        queue: queue_mod.CoalescingQueue,
        state: checkpoint.Checkpoint,
        watcher_metrics: metrics.WatcherMetrics,
        paused: Callable[[str], bool],
        watch_timeout_seconds: int,
        on_listed: Callable[[str], None] = lambda scope: None,
        watch_set_revision: str | None = None,
    ) -> None:
        self._api = api
        self._spec = spec
        self._namespace = namespace
        self._runtime = runtime
        self._noise = noise_filter
        self._queue = queue
        self._checkpoint = state
        self._metrics = watcher_metrics
        self._paused = paused
        self._watch_timeout = watch_timeout_seconds
        self._seen: dict[str, noise.Seen] = {}
        self._on_listed = on_listed
        self._revision = watch_set_revision

    @property
    def _watch_key(self) -> str:
        return self._spec.key

    async def run(self, *, stop: asyncio.Event) -> None:
        await informer.follow(
            self._api,
            self._spec.gvr,
            namespace=self._namespace,
            label_selector=self._spec.label_selector,
            handler=self,
            stop=stop,
            watch_timeout_seconds=self._watch_timeout,
        )

    async def listed(self, items: list[dict[str, Any]]) -> None:
        """Report what differs from the checkpoint: changed objects as RESYNC, vanished ones as DELETED."""
        present = set()
        for obj in items:
            uid = obj["metadata"]["uid"]
            present.add(uid)
            if self._checkpoint.resource_version(self._watch_key, uid) == obj["metadata"]["resourceVersion"]:
                self._seen.setdefault(uid, self._noise.seen(obj))
                continue
            await self._observe(events.ChangeType.RESYNC, obj)
        for uid, entry in self._checkpoint.of_watch(self._watch_key).items():
            if uid not in present and self._in_scope(entry.namespace):
                await self._observe(events.ChangeType.DELETED, _tombstone(uid, entry, self._spec), tombstone=True)
        self._metrics.relists.inc()
        self._on_listed(f"{self._watch_key}|{self._namespace or '*'}")

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        await self._observe(events.ChangeType(kind), obj)

    def _in_scope(self, namespace: str | None) -> bool:
        return self._namespace is None or namespace == self._namespace

    async def _observe(self, change_type: events.ChangeType, obj: dict[str, Any], *, tombstone: bool = False) -> None:
        uid = obj["metadata"]["uid"]
        self._metrics.seen.labels(self._spec.module).inc()
        verdict, seen = self._noise.classify(change_type, obj, self._seen.get(uid))
        if change_type == events.ChangeType.DELETED:
            self._seen.pop(uid, None)
        else:
            self._seen[uid] = seen
        item = self._item(change_type, obj, body=None if tombstone else noise.without_fields(obj, _BODY_STRIPPED))
        if verdict != noise.Verdict.REPORT:
            self._metrics.noise.labels(verdict.value).inc()
            # Moving the checkpoint past noise is safe only if no real change is still undelivered.
            if not self._queue.holds(item.key):
                self._checkpoint.record_noise(self._watch_key, item.event)
            return
        if self._paused(self._spec.module):
            return
        await self._queue.put(item)

    def _item(
        self, change_type: events.ChangeType, obj: dict[str, Any], *, body: dict[str, Any] | None
    ) -> queue_mod.Item:
        metadata = obj["metadata"]
        with tracer.start_as_current_span("watcher.observe") as span:
            span.set_attributes({"kyma.object": metadata["name"], "kyma.change": change_type.value})
            carrier: dict[str, str] = {}
            tracing.inject(carrier)
        event = events.ChangeEvent.create(
            runtime=self._runtime,
            module=ids.ModuleName(self._spec.module),
            target=events.WatchedObject(
                group=self._spec.group,
                version=self._spec.version,
                resource=self._spec.resource,
                kind=obj["kind"],
                namespace=metadata.get("namespace"),
                name=metadata["name"],
                uid=metadata["uid"],
            ),
            resource_version=metadata["resourceVersion"],
            change_type=change_type,
            body=body,
            observed_at=datetime.now(UTC),
            trace=events.TraceContext(traceparent=carrier["traceparent"]) if "traceparent" in carrier else None,
            watch_set_revision=self._revision,
        )
        try:
            return queue_mod.Item(self._watch_key, event, events.encode(event))
        except contract_errors.EventTooLargeError:
            self._metrics.oversize.inc()
            log.warning("object too large for an event, sending a reference", extra={"object": metadata["name"]})
            reference = event.as_reference()
            return queue_mod.Item(self._watch_key, reference, events.encode(reference))


TOMBSTONE_VERSION_PREFIX = "deleted-after-"


def _tombstone(uid: str, entry: checkpoint.Entry, spec: config.WatchSpec) -> dict[str, Any]:
    """What is known of an object that vanished while nobody watched: its checkpoint entry.

    Its deletion's resourceVersion is unknown. The last delivered one would give the deletion the id of
    the event already delivered for it (ids derive from it), and JetStream would drop it as a duplicate;
    ``deleted-after-<rv>`` is an id of its own, yet the same for every watcher relisting it (a leader
    hand-over still collapses to one event).
    """
    metadata: dict[str, Any] = {
        "uid": uid,
        "name": entry.name,
        "resourceVersion": f"{TOMBSTONE_VERSION_PREFIX}{entry.resource_version}",
    }
    if entry.namespace:
        metadata["namespace"] = entry.namespace
    return {"apiVersion": spec.gvr.api_version, "kind": entry.kind, "metadata": metadata}
