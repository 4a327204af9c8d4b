"""SKR -> KCP mirroring: objects users create in runtimes appear in KCP; their status flows back.

Generic over a configured list of kinds (the VPC peering case: cloud-manager's VpcPeering). For
an object in a runtime the mirror lives in KCP namespace ``mirror-<runtime>``, named
``<namespace>.<name>``, labelled with the Kyma name and annotated with its source (uid,
generation), so a KCP-side manager can work on it and set its status. The reconciler:

- keeps a finalizer on the runtime object, so a user's deletion waits until KCP is cleaned up;
- applies the object's spec to the mirror — never an older one: a mirror recording a newer
  generation of the same source is left alone, so redelivered or reordered events cannot roll
  it back (and every reconcile re-reads the source anyway instead of trusting the event);
- writes the mirror's status back to the runtime object's status subresource;
- on deletion in the runtime deletes the mirror, then releases the runtime object.
"""

import asyncio
import dataclasses
import logging
from typing import Any

from certs import runtimes
from clients import informer, kube
from contract import events
from kit import aio
from reconciler import consumer, manager, objects, runtime_clients, workqueue

log = logging.getLogger(__name__)

FINALIZER = "kyma-project.io/kcp-mirror"
SOURCE_UID = "kyma-project.io/source-uid"
SOURCE_NAMESPACE = "kyma-project.io/source-namespace"
SOURCE_NAME = "kyma-project.io/source-name"
SOURCE_GENERATION = "kyma-project.io/source-generation"
_LIST = "list"


@dataclasses.dataclass(frozen=True)
class MirroredKind:
    group: str
    version: str
    kind: str
    resource: str
    module: str
    """The module watchers route this kind's changes to."""

    @property
    def gvr(self) -> kube.Gvr:
        return kube.Gvr(self.group, self.version, self.resource)

    @property
    def api_version(self) -> str:
        return self.gvr.api_version


@dataclasses.dataclass(frozen=True)
class MirrorSettings:
    kinds: tuple[MirroredKind, ...]
    namespace_prefix: str = "mirror-"
    workers: int = 8
    resync_seconds: float = 300


def mirror_namespace(settings: MirrorSettings, runtime: str) -> str:
    return f"{settings.namespace_prefix}{runtime}"


def object_key(runtime: str, kind: MirroredKind, namespace: str | None, name: str) -> str:
    return "|".join((runtime, kind.resource, namespace or "", name))


class MirrorController:
    def __init__(self, shared: manager.Shared, settings: MirrorSettings) -> None:
        self._shared = shared
        self._settings = settings
        self._kcp = objects.ClusterObjects(shared.kcp)
        self._kinds = {k.resource: k for k in settings.kinds}
        self._by_gvk = {(k.api_version, k.kind): k for k in settings.kinds}
        self.modules = frozenset(k.module for k in settings.kinds)
        self._namespaces: set[str] = set()
        self.queue = workqueue.WorkQueue(
            reconcile=self.reconcile, workers=settings.workers,
            metrics=workqueue.QueueMetrics(shared.registry, controller="mirror"),
        )

    async def run(self, *, stop: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.queue.run(stop=stop))
            for kind in self._settings.kinds:
                group.create_task(informer.follow(
                    self._shared.kcp, kind.gvr, namespace=None, label_selector=runtimes.RUNTIME_LABEL,
                    handler=_Mirrors(self, kind), stop=stop,
                ))
            group.create_task(self._resync(stop=stop))

    def runtime_changed(self, runtime: str) -> None:
        self.queue.add_all([f"{_LIST}|{runtime}"])

    def routes(self, event: events.ChangeEvent) -> bool:
        return (event.target.api_version, event.target.kind) in self._by_gvk

    async def on_event(self, event: events.ChangeEvent) -> consumer.Outcome:
        kind = self._by_gvk[(event.target.api_version, event.target.kind)]
        result = await self.queue.add(object_key(event.runtime, kind, event.target.namespace, event.target.name))
        return consumer.Outcome.ACK if result.ok else consumer.Outcome.NAK

    async def _resync(self, *, stop: asyncio.Event) -> None:
        interval = self._settings.resync_seconds
        while not await aio.sleep_unless(stop, interval):
            self.queue.add_all([f"{_LIST}|{runtime}" for runtime in self._shared.kymas], spread=interval / 10)

    async def reconcile(self, key: str) -> workqueue.Result:
        parts = key.split("|")
        try:
            if parts[0] == _LIST:
                return await self._list_runtime(parts[1])
            runtime, resource, namespace, name = parts
            return await self._reconcile_object(runtime, self._kinds[resource], namespace or None, name)
        except (runtime_clients.RuntimeUnavailableError, kube.KubeAPIError, objects.UnknownKindError) as exc:
            return workqueue.Result(error=str(exc))

    async def _list_runtime(self, runtime: str) -> workqueue.Result:
        """Enqueue every mirrored object of a runtime (after it changed, and on resync)."""
        if runtime not in self._shared.kymas:
            return workqueue.Result()
        handle = await self._shared.clients.get(runtime)
        for kind in self._settings.kinds:
            for obj in await handle.objects.list(kind.api_version, kind.kind, namespace=None, label_selector=None):
                metadata = obj["metadata"]
                self.queue.add_all([object_key(runtime, kind, metadata.get("namespace"), metadata["name"])])
        return workqueue.Result()

    async def _reconcile_object(
        self, runtime: str, kind: MirroredKind, namespace: str | None, name: str
    ) -> workqueue.Result:
        handle = await self._shared.clients.get(runtime)
        source_ref = objects.Ref(kind.api_version, kind.kind, namespace, name)
        mirror_ref = objects.Ref(
            kind.api_version, kind.kind, mirror_namespace(self._settings, runtime), f"{namespace}.{name}" if namespace else name
        )
        source = await handle.objects.get(source_ref)
        if source is None or source["metadata"].get("deletionTimestamp"):
            if await self._kcp.delete(mirror_ref):
                log.info("deleted mirror", extra={"runtime": runtime, "object": mirror_ref.name})
            if source is not None and await self._kcp.get(mirror_ref) is None:
                await self._set_finalizers(handle.objects, source_ref, source, present=False)
            return workqueue.Result()
        await self._set_finalizers(handle.objects, source_ref, source, present=True)
        await self._ensure_namespace(mirror_ref.namespace or "")
        mirror = await self._kcp.get(mirror_ref)
        if not _newer_recorded(mirror, source):
            mirror = await self._kcp.apply(self._mirror_of(runtime, source, mirror_ref))
        status = (mirror or {}).get("status")
        if status and status != source.get("status"):
            await handle.objects.apply(
                {"apiVersion": kind.api_version, "kind": kind.kind,
                 "metadata": {"name": name, **({"namespace": namespace} if namespace else {})}, "status": status},
                subresource="status",
            )
        return workqueue.Result()

    def _mirror_of(self, runtime: str, source: dict[str, Any], ref: objects.Ref) -> dict[str, Any]:
        metadata = source["metadata"]
        return {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "metadata": {
                "name": ref.name,
                "namespace": ref.namespace,
                "labels": {runtimes.RUNTIME_LABEL: runtime},
                "annotations": {
                    SOURCE_UID: metadata["uid"],
                    SOURCE_NAMESPACE: metadata.get("namespace", ""),
                    SOURCE_NAME: metadata["name"],
                    SOURCE_GENERATION: str(metadata.get("generation", 0)),
                },
            },
            "spec": source.get("spec") or {},
        }

    async def _set_finalizers(
        self, cluster: objects.ClusterObjects, ref: objects.Ref, obj: dict[str, Any], *, present: bool
    ) -> None:
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if (FINALIZER in finalizers) == present:
            return
        updated = [*finalizers, FINALIZER] if present else [f for f in finalizers if f != FINALIZER]
        await cluster.merge_patch(
            ref, {"metadata": {"finalizers": updated, "resourceVersion": obj["metadata"]["resourceVersion"]}}
        )

    async def _ensure_namespace(self, namespace: str) -> None:
        if namespace not in self._namespaces:
            await kube.ensure_namespace(self._shared.kcp, namespace)
            self._namespaces.add(namespace)


def _newer_recorded(mirror: dict[str, Any] | None, source: dict[str, Any]) -> bool:
    """Whether the mirror already reflects a later generation of this very source object."""
    if mirror is None:
        return False
    annotations = mirror["metadata"].get("annotations") or {}
    if annotations.get(SOURCE_UID) != source["metadata"]["uid"]:
        return False
    return int(annotations.get(SOURCE_GENERATION, "0")) > int(source["metadata"].get("generation", 0))


class _Mirrors:
    """KCP-side changes of mirrors (a manager set status): reconcile their source."""

    def __init__(self, controller: MirrorController, kind: MirroredKind) -> None:
        self._c = controller
        self._kind = kind

    def _key(self, obj: dict[str, Any]) -> str | None:
        metadata = obj["metadata"]
        runtime = (metadata.get("labels") or {}).get(runtimes.RUNTIME_LABEL)
        annotations = metadata.get("annotations") or {}
        if runtime is None or SOURCE_NAME not in annotations:
            return None
        return object_key(runtime, self._kind, annotations.get(SOURCE_NAMESPACE) or None, annotations[SOURCE_NAME])

    async def listed(self, items: list[dict[str, Any]]) -> None:
        self._c.queue.add_all([k for k in map(self._key, items) if k])

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        key = self._key(obj)
        if key is not None:
            self._c.queue.add_all([key])
