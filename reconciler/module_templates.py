"""ModuleTemplates: every template in KCP copied write-only into every runtime.

Write-only: the runtime copy is applied forced, so edits there are reverted on the next pass
(a watcher event about the copy, or the resync); a template deleted in KCP is deleted from every
runtime. Only copies carrying our synced-by label are ever deleted, each with the uid and
resourceVersion it was seen with. Its own control loop, disabled by configuration; fan-out is
bounded by the worker count.
"""

from clients import informer, kube, objects
from contract import ids, wire
from reconciler import crds, per_runtime, runtime_clients, settings, workqueue
from reconciler.shared import Shared

RUNTIME_NAMESPACE = "kyma-system"


class ModuleTemplateController(per_runtime.PerRuntimeController):
    gvr = crds.MODULE_TEMPLATE
    kind = "ModuleTemplate"

    def __init__(self, shared: Shared, config: settings.PerRuntimeSettings, *, events_module: str) -> None:
        super().__init__(shared, config, name="module_templates", events_module=events_module)
        self.templates = self.own(
            informer.Informer(shared.kcp, crds.MODULE_TEMPLATE, namespace=shared.config.kyma_namespace)
        )
        self.templates.subscribe(self._template_changed)

    def _template_changed(self, change: informer.Change) -> None:
        if change.old is None or change.new is None or change.old.get("spec") != change.new.get("spec"):
            self.queue.add_all(self.all_keys())

    async def reconcile(self, runtime: ids.RuntimeId) -> workqueue.Result:
        if self.shared.kyma(runtime) is None:
            return workqueue.Result()
        try:
            handle = await self.shared.clients.get(runtime)
            await self.prepare(handle, definitions=[crds.module_template_crd()], namespace=RUNTIME_NAMESPACE)
            await self._sync(handle.objects)
        except (runtime_clients.RuntimeUnavailableError, kube.KubeError, objects.UnknownKindError) as exc:
            return self.failed(runtime, exc)
        return workqueue.Result()

    async def _sync(self, cluster: objects.ClusterObjects) -> None:
        api_version = crds.MODULE_TEMPLATE.api_version
        present = {
            o["metadata"]["name"]: o
            for o in await cluster.list(
                api_version, self.kind, namespace=RUNTIME_NAMESPACE, label_selector=wire.SYNCED_SELECTOR
            )
        }
        wanted = {template["metadata"]["name"]: template for template in self.templates}
        for name, template in wanted.items():
            if (present.get(name) or {}).get("spec") == template.get("spec"):
                continue
            await cluster.apply(
                {
                    "apiVersion": api_version,
                    "kind": self.kind,
                    "metadata": {
                        "name": name,
                        "namespace": RUNTIME_NAMESPACE,
                        "labels": {wire.SYNCED_LABEL: wire.SYNCED_VALUE},
                    },
                    "spec": template.get("spec") or {},
                }
            )
        for name in set(present) - set(wanted):
            live = present[name]["metadata"]
            await cluster.delete(
                objects.Ref(api_version, self.kind, RUNTIME_NAMESPACE, name),
                preconditions=kube.Preconditions(uid=live["uid"], resource_version=live["resourceVersion"]),
            )
