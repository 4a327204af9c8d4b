"""The Kyma CR: KCP's Kyma of a runtime is kept in the runtime as kyma-system/default.

As lifecycle-manager does (seed 004):
- **Created when missing, protected by a finalizer.** A user deleting it gets it back at once: the
  reconciler (woken by the watcher's event of the deletion) lets the old one go and creates a new.
- **Removed when KCP's Kyma goes** (only one the reconciler created, carrying the synced-by label).
- **Modules are the union.** ``spec.modules`` is a list-map keyed by module name and the reconciler
  applies only KCP's modules under its own field manager: modules a user added in the runtime are
  owned by the user's manager and stay, and KCP's stay however the user edits the list — neither side
  overwrites the other. The union is reported on KCP's Kyma as the annotation
  ``kyma-project.io/runtime-modules`` (name and which side asked for it).
- **The channel is KCP's when the runtime Kyma is created; afterwards the runtime's choice stands**
  (upstream: the runtime spec is the source of truth after creation). The reconciler keeps applying
  the channel the runtime Kyma has, conditionally on its resourceVersion, so a user's change is never
  overwritten by a stale read; a missing one is created, so one someone else created meanwhile is
  never taken over as ours.
- KCP's status is written to the runtime's status subresource, conditional on the Kyma just written.
"""

import json
import logging
from typing import Any

from clients import kube, objects
from contract import ids, wire
from reconciler import crds, per_runtime, runtime_clients, settings, workqueue
from reconciler.shared import Shared

log = logging.getLogger(__name__)

RUNTIME_NAMESPACE = "kyma-system"
RUNTIME_NAME = "default"
RUNTIME_REF = objects.Ref(crds.KYMA.api_version, "Kyma", RUNTIME_NAMESPACE, RUNTIME_NAME)


CREATED_BY_ANNOTATION = "kyma-project.io/created-by"
"""On a runtime Kyma the reconciler created: only such a one is protected by our finalizer and removed with KCP's."""


def _created_by_us(kyma: dict[str, Any]) -> bool:
    return (kyma["metadata"].get("annotations") or {}).get(CREATED_BY_ANNOTATION) == wire.SYNCED_VALUE


class StillTerminatingError(Exception):
    """The deleted runtime Kyma waits for other finalizers than ours: it is recreated once gone."""


class KymaController(per_runtime.PerRuntimeController):
    gvr = crds.KYMA
    kind = "Kyma"

    def __init__(self, shared: Shared, config: settings.PerRuntimeSettings, *, events_module: str) -> None:
        super().__init__(shared, config, name="kyma", events_module=events_module)
        self._kcp_objects = objects.ClusterObjects(shared.kcp, field_manager=wire.RECONCILER_FIELD_MANAGER)

    async def reconcile(self, runtime: ids.RuntimeId) -> workqueue.Result:
        kyma = self.shared.kyma(runtime)
        try:
            async with self.shared.clients.use(runtime) as handle:
                if kyma is None:
                    await self._remove(handle.objects, runtime)
                    return workqueue.Result()
                await self.prepare(handle, definitions=[crds.kyma_crd()], namespace=RUNTIME_NAMESPACE)

                async def converge() -> dict[str, Any]:  # read, decided and written again if another writer got there
                    current = await self._let_a_deleted_one_go(handle.objects)
                    return await self._sync(handle.objects, kyma, current)

                applied = await self.on_conflict_again(converge)
                await self._report_union(kyma, applied)
        except runtime_clients.RuntimeUnavailableError as exc:
            return workqueue.Result() if kyma is None else self.failed(runtime, exc)  # gone and unreachable: done
        except (
            kube.KubeError,
            objects.UnknownKindError,
            StillTerminatingError,
        ) as exc:
            return self.failed(runtime, exc)
        return workqueue.Result()

    async def _let_a_deleted_one_go(self, cluster: objects.ClusterObjects) -> dict[str, Any] | None:
        """The runtime Kyma, or None when there is none — or there was one a user deleted, now let go."""
        current = await cluster.get(RUNTIME_REF)
        if current is None or not current["metadata"].get("deletionTimestamp"):
            return current
        log.info("runtime Kyma deleted by a user: recreating it")
        await cluster.set_finalizer(current, wire.RUNTIME_KYMA_FINALIZER, present=False)
        still = await cluster.get(RUNTIME_REF)
        if still is not None:
            raise StillTerminatingError(
                "the deleted runtime Kyma waits for other finalizers; recreated once it is gone"
            )
        return None

    async def _sync(
        self, cluster: objects.ClusterObjects, kyma: dict[str, Any], current: dict[str, Any] | None
    ) -> dict[str, Any]:
        spec = kyma.get("spec") or {}
        current_channel = ((current or {}).get("spec") or {}).get("channel")
        desired_spec: dict[str, Any] = {"modules": spec.get("modules") or []}
        channel = current_channel or spec.get("channel")
        if channel:
            desired_spec["channel"] = channel
        metadata: dict[str, Any] = {"name": RUNTIME_NAME, "namespace": RUNTIME_NAMESPACE}
        if current is None or _created_by_us(current):
            # Ours to protect and, when KCP's Kyma goes, to remove; a Kyma someone else created (lifecycle-manager)
            # gets KCP's modules and status, never our finalizer or our deletion.
            metadata["labels"] = {wire.SYNCED_LABEL: wire.SYNCED_VALUE}
            metadata["annotations"] = {CREATED_BY_ANNOTATION: wire.SYNCED_VALUE}
            metadata["finalizers"] = [wire.RUNTIME_KYMA_FINALIZER]
        # Over the Kyma as read: a channel a user set meanwhile is not overwritten with what we read, and a Kyma
        # someone else created meanwhile (lifecycle-manager) is refused, not marked ours to finalize and remove.
        applied = await cluster.write_as_read(
            {"apiVersion": RUNTIME_REF.api_version, "kind": self.kind, "metadata": metadata, "spec": desired_spec},
            current,
        )
        status = kyma.get("status")
        if status and applied.get("status") != status:
            applied = await cluster.apply(
                {
                    "apiVersion": RUNTIME_REF.api_version,
                    "kind": self.kind,
                    "metadata": {
                        "name": RUNTIME_NAME,
                        "namespace": RUNTIME_NAMESPACE,
                        "resourceVersion": applied["metadata"]["resourceVersion"],  # the Kyma just written, no other
                    },
                    "status": status,
                },
                subresource="status",
            )
        return applied

    async def _report_union(self, kyma: dict[str, Any], runtime_kyma: dict[str, Any]) -> None:
        """KCP's Kyma shows every module the runtime has, and which side asked for it."""
        from_kcp = {m["name"] for m in (kyma.get("spec") or {}).get("modules") or []}
        union = [
            {"name": m["name"], "source": "kcp" if m["name"] in from_kcp else "runtime"}
            for m in (runtime_kyma.get("spec") or {}).get("modules") or []
        ]
        reported = json.dumps(union, separators=(",", ":"))
        if (kyma["metadata"].get("annotations") or {}).get(wire.RUNTIME_MODULES_ANNOTATION) == reported:
            return
        await self._kcp_objects.merge_patch(
            crds.kyma_ref(kyma), {"metadata": {"annotations": {wire.RUNTIME_MODULES_ANNOTATION: reported}}}
        )

    async def _remove(self, cluster: objects.ClusterObjects, runtime: str) -> None:
        """KCP's Kyma is gone: the runtime Kyma we created goes too (never one we did not create)."""
        current = await cluster.get(RUNTIME_REF)
        if current is None or not _created_by_us(current):
            return
        log.info("KCP's Kyma is gone: removing the runtime Kyma", extra={"runtime": runtime})
        released = await cluster.set_finalizer(current, wire.RUNTIME_KYMA_FINALIZER, present=False)
        await cluster.delete(RUNTIME_REF, preconditions=kube.Preconditions(released["metadata"]["uid"]))
