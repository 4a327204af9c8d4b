"""The Kyma CR: KCP's Kyma of a runtime is kept in the runtime as kyma-system/default.

Created when missing. ``spec.modules`` is a list-map keyed by module name, and the reconciler
applies only KCP's modules under its own field manager: modules a user added in the runtime are
owned by the user's manager and stay, and KCP's stay however the user edits the list — the
runtime holds the union, and neither side overwrites the other. KCP's status is written to the
runtime's status subresource.
"""

from typing import Any

from clients import kube, objects
from contract import ids, wire
from reconciler import crds, per_runtime, runtime_clients, settings, workqueue
from reconciler.shared import Shared

RUNTIME_NAMESPACE = "kyma-system"
RUNTIME_NAME = "default"


class KymaController(per_runtime.PerRuntimeController):
    gvr = crds.KYMA
    kind = "Kyma"

    def __init__(self, shared: Shared, config: settings.PerRuntimeSettings, *, events_module: str) -> None:
        super().__init__(shared, config, name="kyma", events_module=events_module)

    async def reconcile(self, runtime: ids.RuntimeId) -> workqueue.Result:
        kyma = self.shared.kyma(runtime)
        if kyma is None:
            return workqueue.Result()
        try:
            handle = await self.shared.clients.get(runtime)
            await self.prepare(handle, definitions=[crds.kyma_crd()], namespace=RUNTIME_NAMESPACE)
            await self._sync(handle.objects, kyma)
        except (runtime_clients.RuntimeUnavailableError, kube.KubeError, objects.UnknownKindError) as exc:
            return self.failed(runtime, exc)
        return workqueue.Result()

    async def _sync(self, cluster: objects.ClusterObjects, kyma: dict[str, Any]) -> None:
        spec = kyma.get("spec") or {}
        desired_spec = {key: value for key, value in spec.items() if key in ("channel", "modules")}
        metadata = {
            "name": RUNTIME_NAME,
            "namespace": RUNTIME_NAMESPACE,
            "labels": {wire.SYNCED_LABEL: wire.SYNCED_VALUE},
        }
        api_version = crds.KYMA.api_version
        await cluster.apply({"apiVersion": api_version, "kind": self.kind, "metadata": metadata, "spec": desired_spec})
        status = kyma.get("status")
        if status:
            current = await cluster.get(objects.Ref(api_version, self.kind, RUNTIME_NAMESPACE, RUNTIME_NAME))
            if (current or {}).get("status") != status:
                await cluster.apply(
                    {
                        "apiVersion": api_version,
                        "kind": self.kind,
                        "metadata": {"name": RUNTIME_NAME, "namespace": RUNTIME_NAMESPACE},
                        "status": status,
                    },
                    subresource="status",
                )
