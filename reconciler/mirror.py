"""SKR -> KCP mirroring: objects users create in runtimes appear in KCP; their status flows back.

Generic over a configured list of kinds (the VPC peering case: cloud-manager's VpcPeering). For
an object in a runtime the mirror lives in KCP namespace ``mirror-<runtime>``, named
``<namespace>.<name>``, labelled with the Kyma name and annotated with its source (uid,
generation), so a KCP-side manager can work on it and set its status. The reconciler:

- keeps a finalizer on the runtime object, so a user's deletion waits until KCP is cleaned up;
- applies the object's spec to the mirror — never an older one: a mirror recording a newer
  generation of the same source is left alone, so redelivered or reordered events cannot roll
  it back (and every reconcile re-reads the source anyway instead of trusting the event); each
  write is made over the mirror as read (created where missing, else conditional on its
  resourceVersion), so two passes (replicas handing over) cannot interleave into a rollback;
- replaces a mirror of an earlier object of the same name (another uid: it went while our
  finalizer was stripped) instead of applying over it, so the new object never gets the earlier
  one's status; while its manager's finalizers hold that mirror, the new object waits unmirrored,
  and past ``held_warning_seconds`` a Warning Event on the held mirror and a warning log say so
  once, and ``kyma_reconciler_mirrors_held`` counts it while it lasts;
- writes the mirror's status back to the runtime object's status subresource, conditional on the
  object as read;
- on deletion in the runtime deletes the mirror (as it was read), then releases the runtime object.
"""

import dataclasses
import datetime
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from clients import informer, kube, objects
from contract import events, wire
from reconciler import controller, runtime_clients, settings, workqueue
from reconciler.shared import Shared

log = logging.getLogger(__name__)

FINALIZER = "kyma-project.io/kcp-mirror"
SOURCE_UID = "kyma-project.io/source-uid"
SOURCE_NAMESPACE = "kyma-project.io/source-namespace"
SOURCE_NAME = "kyma-project.io/source-name"
SOURCE_GENERATION = "kyma-project.io/source-generation"
EARLIER_MIRROR_WAIT_SECONDS = 5.0
"""How soon a pass comes back to a mirror of an earlier object still being deleted (its manager's finalizers)."""
HELD_MIRROR_WAIT_SECONDS = 60.0
"""The same, once it is warned about: its deletion wakes the source's key anyway (the mirrors' informer)."""
HELD_SEEN_WITHIN_SECONDS = 5 * HELD_MIRROR_WAIT_SECONDS
"""A held mirror counts while a pass found it held this recently (its key may have moved to another replica)."""
HELD_WARNED_AGAIN_SECONDS = 50 * 60.0
"""How often a mirror held for long is warned about again: its Event outlives it (Events are kept an hour)."""


@dataclasses.dataclass(frozen=True)
class ObjectKey:
    """One mirrored object in one runtime."""

    runtime: str
    resource: str
    namespace: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.runtime}/{self.resource}/{self.namespace or ''}/{self.name}"


@dataclasses.dataclass(frozen=True)
class RuntimeKey:
    """Every mirrored object of one runtime (after the runtime changed, and on resync)."""

    runtime: str

    def __str__(self) -> str:
        return self.runtime


Key = ObjectKey | RuntimeKey


class HeldMirrors:
    """Mirrors of earlier objects holding back a new object's mirror past ``held_warning_seconds``: each is warned
    about when first found and every HELD_WARNED_AGAIN_SECONDS after (a manager's cleanup may take hours, and passes
    come every minute or on each change of the held mirror), and counted in ``kyma_reconciler_mirrors_held`` while
    passes keep finding it held."""

    def __init__(self, registry: CollectorRegistry, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._seen: dict[ObjectKey, _Held] = {}
        self._clock = clock
        Gauge(
            "kyma_reconciler_mirrors_held",
            "mirrors of earlier objects holding back a new object's mirror past mirror.held_warning_seconds (their "
            "manager's finalizers), as passes found them in the last five minutes",
            registry=registry,
        ).set_function(self._count)

    def due(self, key: ObjectKey, uid: str) -> bool:
        """``key``'s mirror found held by the earlier mirror ``uid``; whether it is to be warned about now."""
        now, held = self._clock(), self._seen.get(key)
        if held is None or held.uid != uid:
            held = self._seen[key] = _Held(uid)
        held.seen = now
        return held.warned is None or now - held.warned >= HELD_WARNED_AGAIN_SECONDS

    def warned(self, key: ObjectKey) -> None:
        if (held := self._seen.get(key)) is not None:
            held.warned = self._clock()

    def released(self, key: ObjectKey) -> None:
        self._seen.pop(key, None)

    def _count(self) -> float:
        """Served on the event loop, as every write here: no lock."""
        now = self._clock()
        for key in [k for k, held in self._seen.items() if now - held.seen > HELD_SEEN_WITHIN_SECONDS]:
            del self._seen[key]  # its key moved to another replica, or its runtime went
        return len(self._seen)


@dataclasses.dataclass
class _Held:
    uid: str
    seen: float = 0.0
    warned: float | None = None


def mirror_namespace(config: settings.MirrorSettings, runtime: str) -> str:
    return f"{config.namespace_prefix}{runtime}"


class MirrorController(controller.Controller[Key]):
    def __init__(self, shared: Shared, config: settings.MirrorSettings) -> None:
        super().__init__(shared, config, name="mirror")
        self._config = config
        self._kcp = objects.ClusterObjects(shared.kcp, field_manager=wire.RECONCILER_FIELD_MANAGER)
        self._kinds = {k.resource: k for k in config.kinds}
        self._by_gvk = {(k.group, k.kind): k for k in config.kinds}
        self.modules = frozenset(k.module for k in config.kinds)
        self._namespaces: set[str] = set()
        self._held = HeldMirrors(shared.registry)
        for kind in config.kinds:
            mirrors = self.own(informer.Informer(shared.kcp, kind.gvr, label_selector=wire.RUNTIME_LABEL))
            mirrors.subscribe(self._mirror_changed(kind))

    def all_keys(self) -> Iterable[Key]:
        return [RuntimeKey(runtime) for runtime in self.shared.runtimes()]

    def runtime_of(self, key: Key) -> str:
        return key.runtime

    def keys_for_runtime(self, change: controller.RuntimeChange) -> Iterable[Key]:
        return [RuntimeKey(change.runtime)]

    def keys_for_event(self, event: events.ChangeEvent) -> Iterable[Key]:
        kind = self._by_gvk.get((event.target.group, event.target.kind))
        if kind is None:
            return []
        return [ObjectKey(event.runtime, kind.resource, event.target.namespace, event.target.name)]

    def _mirror_changed(self, kind: settings.MirroredKindSettings) -> informer.Listener:
        """KCP-side changes of mirrors (a manager set status): reconcile their source."""

        def changed(change: informer.Change) -> None:
            metadata = change.current["metadata"]
            runtime = (metadata.get("labels") or {}).get(wire.RUNTIME_LABEL)
            annotations = metadata.get("annotations") or {}
            if runtime is not None and SOURCE_NAME in annotations:
                self.queue.add_all(
                    [
                        ObjectKey(
                            runtime, kind.resource, annotations.get(SOURCE_NAMESPACE) or None, annotations[SOURCE_NAME]
                        )
                    ]
                )

        return changed

    async def reconcile(self, key: Key) -> workqueue.Result:
        if isinstance(key, RuntimeKey) and self.shared.kyma(key.runtime) is None:
            return workqueue.Result()
        try:
            async with self.shared.clients.use(key.runtime) as handle:
                if isinstance(key, RuntimeKey):
                    return await self._list_runtime(handle.objects, key.runtime)
                # Read, decided and written again at once if another writer got there between our read and write.
                return await self.on_conflict_again(functools.partial(self._reconcile_object, handle.objects, key))
        except (runtime_clients.RuntimeUnavailableError, kube.KubeError, objects.UnknownKindError) as exc:
            return workqueue.Result.failed(str(exc))

    async def _list_runtime(self, runtime_objects: objects.ClusterObjects, runtime: str) -> workqueue.Result:
        """Enqueue every mirrored object of a runtime."""
        for kind in self._config.kinds:
            for obj in await runtime_objects.list(kind.gvr.api_version, kind.kind, namespace=None, label_selector=None):
                metadata = obj["metadata"]
                self.queue.add_all([ObjectKey(runtime, kind.resource, metadata.get("namespace"), metadata["name"])])
        return workqueue.Result()

    async def _reconcile_object(self, runtime_objects: objects.ClusterObjects, key: ObjectKey) -> workqueue.Result:
        kind = self._kinds[key.resource]
        api_version = kind.gvr.api_version
        source_ref = objects.Ref(api_version, kind.kind, key.namespace, key.name)
        mirror_ref = objects.Ref(
            api_version,
            kind.kind,
            mirror_namespace(self._config, key.runtime),
            f"{key.namespace}.{key.name}" if key.namespace else key.name,
        )
        source = await runtime_objects.get(source_ref)
        if source is None or source["metadata"].get("deletionTimestamp"):
            self._held.released(key)
            mirror = await self._kcp.get(mirror_ref)
            if (
                mirror is not None
                and not mirror["metadata"].get("deletionTimestamp")
                and await self._kcp.delete(mirror_ref, preconditions=kube.Preconditions(mirror["metadata"]["uid"]))
            ):
                log.info("deleted mirror", extra={"runtime": key.runtime, "object": mirror_ref.name})
            if source is not None and await self._kcp.get(mirror_ref) is None:
                await runtime_objects.set_finalizer(source, FINALIZER, present=False)
            return workqueue.Result()
        source = await runtime_objects.set_finalizer(source, FINALIZER, present=True)
        await self._ensure_namespace(mirror_ref.namespace or "")
        mirror = await self._kcp.get(mirror_ref)
        if mirror is not None and _mirrors_another(mirror, source):
            # An earlier object of this name went without us (our finalizer stripped): its mirror's status is that
            # object's. The mirror goes (its manager cleans up after it) and this object's starts without one.
            if not mirror["metadata"].get("deletionTimestamp"):
                await self._kcp.delete(mirror_ref, preconditions=kube.Preconditions(mirror["metadata"]["uid"]))
                log.info("mirror of an earlier object of the name deleted", extra={"object": str(key)})
            earlier = await self._kcp.get(mirror_ref)
            if earlier is not None:
                return await self._wait_for_earlier(key, earlier)
            mirror = None
        self._held.released(key)
        if not _newer_recorded(mirror, source):
            mirror = await self._kcp.write_as_read(self._mirror_of(key.runtime, source, mirror_ref), mirror)
        status = (mirror or {}).get("status")
        if status and status != source.get("status"):
            identity = {
                "name": key.name,
                **({"namespace": key.namespace} if key.namespace else {}),
                "resourceVersion": source["metadata"]["resourceVersion"],  # the object mirrored, no other
            }
            await runtime_objects.apply(
                {"apiVersion": api_version, "kind": kind.kind, "metadata": identity, "status": status},
                subresource="status",
            )
        return workqueue.Result()

    async def _wait_for_earlier(self, key: ObjectKey, earlier: dict[str, Any]) -> workqueue.Result:
        """The object's mirror waits for the earlier object's to go; one held too long is said where its manager's
        team looks (KCP), since the runtime's user only sees their object never mirrored."""
        metadata = earlier["metadata"]
        if _deleting_for(earlier, datetime.datetime.now(datetime.UTC)) < self._config.held_warning_seconds:
            log.info("waiting for the mirror of an earlier object of the name to go", extra={"object": str(key)})
            return workqueue.Result(requeue_after=EARLIER_MIRROR_WAIT_SECONDS)
        if not self._held.due(key, metadata["uid"]):
            log.info("the mirror of an earlier object of the name is still held", extra={"object": str(key)})
            return workqueue.Result(requeue_after=HELD_MIRROR_WAIT_SECONDS)
        message = (
            f"being deleted since {metadata['deletionTimestamp']}, held by finalizers "
            f"{', '.join(metadata.get('finalizers') or []) or '(none left)'}: the new "
            f"{key.namespace + '/' if key.namespace else ''}{key.name} in runtime {key.runtime} (another uid) is "
            "mirrored once this mirror of the earlier object is gone"
        )
        log.warning("mirror of an earlier object held", extra={"object": str(key), "detail": message})
        if await self.shared.events.record(earlier, type_="Warning", reason="EarlierMirrorHeld", message=message):
            self._held.warned(key)  # an Event dropped (its budget spent) is tried again on the next pass
        return workqueue.Result(requeue_after=HELD_MIRROR_WAIT_SECONDS)

    def _mirror_of(self, runtime: str, source: dict[str, Any], ref: objects.Ref) -> dict[str, Any]:
        metadata = source["metadata"]
        return {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "metadata": {
                "name": ref.name,
                "namespace": ref.namespace,
                "labels": {wire.RUNTIME_LABEL: runtime},
                "annotations": {
                    SOURCE_UID: metadata["uid"],
                    SOURCE_NAMESPACE: metadata.get("namespace", ""),
                    SOURCE_NAME: metadata["name"],
                    SOURCE_GENERATION: str(metadata.get("generation", 0)),
                },
            },
            "spec": source.get("spec") or {},
        }

    async def _ensure_namespace(self, namespace: str) -> None:
        if namespace not in self._namespaces:
            await kube.ensure_namespace(self.shared.kcp, namespace)
            self._namespaces.add(namespace)


def _mirrors_another(mirror: dict[str, Any], source: dict[str, Any]) -> bool:
    """Whether the mirror is of an earlier object of the source's name (another uid)."""
    recorded = (mirror["metadata"].get("annotations") or {}).get(SOURCE_UID)
    return recorded is not None and recorded != source["metadata"]["uid"]


def _deleting_for(obj: dict[str, Any], now: datetime.datetime) -> float:
    """Seconds since the object's deletion was asked for (0 for one not being deleted)."""
    since = obj["metadata"].get("deletionTimestamp")
    if not since:
        return 0.0
    return max(0.0, (now - datetime.datetime.fromisoformat(since)).total_seconds())


def _newer_recorded(mirror: dict[str, Any] | None, source: dict[str, Any]) -> bool:
    """Whether the mirror already reflects a later generation of this very source object."""
    if mirror is None:
        return False
    annotations = mirror["metadata"].get("annotations") or {}
    if annotations.get(SOURCE_UID) != source["metadata"]["uid"]:
        return False
    return int(annotations.get(SOURCE_GENERATION, "0")) > int(source["metadata"].get("generation", 0))
