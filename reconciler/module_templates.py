"""ModuleTemplates: every template in KCP copied write-only into every runtime.

Write-only: the runtime copy is applied forced, so edits there are reverted on the next pass
(a watcher event about the copy, or the resync); a template deleted in KCP is deleted from every
runtime (copies carry the synced-by label, so leftovers are found by listing). Its own control
loop, disabled by configuration; fan-out is bounded by the worker count.
"""

import asyncio
from typing import Any

from clients import informer, kube
from reconciler import crds, manager, objects, per_runtime, runtime_clients, sync_resources, workqueue

RUNTIME_NAMESPACE = "kyma-system"
_SYNCED = f"{sync_resources.SYNCED_LABEL}={sync_resources.SYNCED_VALUE}"


class ModuleTemplateController(per_runtime.PerRuntimeController):
    kind = "ModuleTemplate"

    def __init__(self, shared: manager.Shared, settings: per_runtime.PerRuntimeSettings) -> None:
        super().__init__(shared, settings, name="module_templates")
        self.templates: dict[str, dict[str, Any]] | None = None
        """Name -> template in KCP; None until first listed."""

    async def follow_kcp(self, *, stop: asyncio.Event) -> None:
        await informer.follow(
            self._shared.kcp, crds.MODULE_TEMPLATE, namespace=self._shared.kyma_namespace,
            label_selector=None, handler=self, stop=stop,
        )

    async def listed(self, items: list[dict[str, Any]]) -> None:
        self.templates = {o["metadata"]["name"]: o for o in items}
        self.enqueue_all()

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        assert self.templates is not None
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.templates.pop(name, None)
        elif (self.templates.get(name) or {}).get("spec") == obj.get("spec"):
            return
        else:
            self.templates[name] = obj
        self.enqueue_all()

    async def reconcile(self, runtime: str) -> workqueue.Result:
        if self.templates is None:
            return workqueue.Result(requeue_after=1)
        if runtime not in self._shared.kymas:
            return workqueue.Result()
        try:
            handle = await self._shared.clients.get(runtime)
            await self.prepare(handle, definitions=[crds.module_template_crd()], namespace=RUNTIME_NAMESPACE)
            return await self._sync(handle.objects, runtime)
        except (runtime_clients.RuntimeUnavailableError, kube.KubeAPIError, objects.UnknownKindError) as exc:
            return workqueue.Result(error=f"{runtime}: {exc}")

    async def _sync(self, cluster: objects.ClusterObjects, runtime: str) -> workqueue.Result:
        assert self.templates is not None
        api_version = crds.MODULE_TEMPLATE.api_version
        present = {
            o["metadata"]["name"]: o
            for o in await cluster.list(api_version, "ModuleTemplate", namespace=RUNTIME_NAMESPACE, label_selector=_SYNCED)
        }
        for name, template in self.templates.items():
            if (present.get(name) or {}).get("spec") == template.get("spec"):
                continue
            await cluster.apply({
                "apiVersion": api_version, "kind": "ModuleTemplate",
                "metadata": {"name": name, "namespace": RUNTIME_NAMESPACE,
                             "labels": {sync_resources.SYNCED_LABEL: sync_resources.SYNCED_VALUE}},
                "spec": template.get("spec") or {},
            })
        for name in set(present) - set(self.templates):
            await cluster.delete(objects.Ref(api_version, "ModuleTemplate", RUNTIME_NAMESPACE, name))
        return workqueue.Result()
