"""KCP installs, upgrades and repairs the watcher in every runtime, and removes it when the Kyma goes.

Per runtime (its key): each object of ``watcher_objects.render`` is read and written only where it
is missing or drifted (``diff.carries``: what the apiserver defaults or others add is no drift), so
a steady pass costs reads, not writes; a deleted or edited watcher object is back within the resync
(60 s) or at once on a runtime change. When KCP's Kyma is gone, the objects we installed (our
labels) are deleted. Whether the runtime could be reached is reported on KCP's Kyma (the annotation
``kyma-project.io/watcher-state``: lifecycle-manager's structural status schema would prune a status
field of ours) and as ``kyma_reconciler_runtime_reachable{runtime}``.
"""

import functools
import json
import logging
from typing import Any

from prometheus_client import Gauge

from clients import kube, objects
from contract import ids, wire
from reconciler import crds, diff, per_runtime, runtime_clients, settings, watch_sets, watcher_objects, workqueue
from reconciler.shared import Shared

log = logging.getLogger(__name__)

STATUS_FIELD_MANAGER = "kyma-sync-watcher-installer"


class WatcherInstallController(per_runtime.RuntimeKeyed):
    def __init__(self, shared: Shared, config: settings.WatcherInstallSettings) -> None:
        super().__init__(shared, config, name="watcher_install")
        self._config = config
        self._module = shared.config.events_module
        self._kcp = objects.ClusterObjects(shared.kcp, field_manager=STATUS_FIELD_MANAGER)
        self._reachable = Gauge(
            "kyma_reconciler_runtime_reachable",
            "1 when the last attempt to install or check the runtime's watcher reached its apiserver, else 0",
            ["runtime"],
            registry=shared.registry,
        )

    async def reconcile(self, runtime: ids.RuntimeId) -> workqueue.Result:
        kyma = self.shared.kyma(runtime)
        try:
            async with self.shared.clients.use(runtime) as handle:
                if kyma is None:
                    await self._remove(handle.objects, runtime)
                    return workqueue.Result()
                written = await self._install(handle.objects, runtime)
        except (runtime_clients.RuntimeUnavailableError, kube.UnreachableError) as exc:
            if kyma is None:
                return workqueue.Result()  # gone, and unreachable: nothing left to clean
            return await self._report(kyma, runtime, reachable=False, state="Unreachable", message=str(exc))
        except (kube.KubeError, objects.UnknownKindError, watch_sets.NotOursError) as exc:
            if kyma is None:
                return workqueue.Result.failed(f"{runtime}: {exc}")
            return await self._report(kyma, runtime, reachable=True, state="Error", message=str(exc))
        if written:
            log.info("watcher installed or repaired", extra={"runtime": runtime, "objects": written})
        return await self._report(kyma, runtime, reachable=True, state="Ready", message="")

    async def _install(self, cluster: objects.ClusterObjects, runtime: str) -> list[str]:
        """Write what is missing or drifted; the names of what was written."""
        await kube.ensure_namespace(cluster.api, watcher_objects.NAMESPACE)
        written = []
        for wanted in watcher_objects.render(runtime, self._config, module=self._module):
            if await self.on_conflict_again(functools.partial(self._install_one, cluster, wanted)):
                written.append(f"{wanted['kind']}/{wanted['metadata']['name']}")
        other = "DaemonSet" if self._config.kind == "Deployment" else "Deployment"
        replaced = objects.Ref("apps/v1", other, watcher_objects.NAMESPACE, watcher_objects.NAME)
        if (previous := await cluster.get(replaced)) is not None and watch_sets.ours(previous):
            await cluster.delete(replaced, preconditions=kube.Preconditions(previous["metadata"]["uid"]))
            written.append(f"-{other}/{watcher_objects.NAME}")
        return written

    async def _install_one(self, cluster: objects.ClusterObjects, wanted: dict[str, Any]) -> bool:
        """Whether ``wanted`` had to be written (missing or drifted), written over what was read."""
        live = await cluster.get(objects.Ref.of(wanted))
        if live is not None and not watch_sets.ours(live):
            # e.g. a watcher installed with the kyma-watcher chart: never taken over (nor removed later)
            raise watch_sets.NotOursError(
                f"{wanted['kind']}/{wanted['metadata']['name']} exists and is not kyma-sync's"
            )
        if live is not None and diff.carries(live, wanted) and not cluster.unwanted(live, wanted):
            return False  # nothing drifted, and nothing we set before is left out now (an upgrade dropping a field)
        await cluster.write_as_read(wanted, live)  # refused if another writer got there first: judged again
        return True

    async def _remove(self, cluster: objects.ClusterObjects, runtime: str) -> None:
        """KCP's Kyma is gone: the watcher objects we installed go too (never one without our labels)."""
        # What the watch-set controller wrote for this watcher goes with it, once the pods are gone.
        refs = [
            *watch_sets.OBJECTS,
            *(objects.Ref.of(o) for o in watcher_objects.render(runtime, self._config, module=self._module)),
        ]
        for ref in reversed(refs):  # pods first, RBAC last
            try:
                live = await cluster.get(ref)
            except objects.UnknownKindError:
                continue
            if live is None or not watch_sets.ours(live):
                continue
            await cluster.delete(ref, preconditions=kube.Preconditions(live["metadata"]["uid"]))
            log.info("watcher object removed with its Kyma", extra={"runtime": runtime, "object": str(ref)})

    async def _report(
        self, kyma: dict[str, Any], runtime: str, *, reachable: bool, state: str, message: str
    ) -> workqueue.Result:
        self._reachable.labels(runtime).set(1 if reachable else 0)
        reported = json.dumps({"state": state, "message": message[:512]}, separators=(",", ":"))
        if (kyma["metadata"].get("annotations") or {}).get(wire.WATCHER_STATE_ANNOTATION) != reported:
            try:
                await self._kcp.merge_patch(
                    crds.kyma_ref(kyma), {"metadata": {"annotations": {wire.WATCHER_STATE_ANNOTATION: reported}}}
                )
            except kube.KubeError as exc:
                return workqueue.Result.failed(f"{runtime}: cannot report the watcher's state in KCP: {exc}")
        return workqueue.Result() if state == "Ready" else workqueue.Result.failed(f"{runtime}: {message}")
