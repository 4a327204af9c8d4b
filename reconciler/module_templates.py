"""ModuleTemplates: every template in KCP copied write-only into every runtime.

As lifecycle-manager does, a copy carries the template's labels and annotations, and a template
labelled ``operator.kyma-project.io/beta`` (``/internal``) "true" goes only to runtimes whose Kyma
carries that label "true" (a copy is removed when the runtime's label goes).

Write-only: the runtime copy is applied forced, so edits there are reverted on the next pass
(a watcher event about the copy, or the resync); a template deleted in KCP is deleted from every
runtime. Every write is made over the copy as read (created where missing, applied conditional on
its resourceVersion), so a template someone else creates or puts in its place meanwhile is never
taken over: the write is refused, and the pass reads again at once and finds it not ours. Only
copies carrying our synced-by label are ever deleted, each with the uid and resourceVersion it was
seen with. Its own control loop, disabled by configuration; fan-out is bounded by the worker count.
"""

import functools
from typing import Any

from clients import informer, kube, objects
from contract import ids, wire
from reconciler import crds, diff, per_runtime, runtime_clients, settings, workqueue
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
        if change.old is None or change.new is None or _copied(change.old) != _copied(change.new):
            self.queue.add_all(self.all_keys())

    async def reconcile(self, runtime: ids.RuntimeId) -> workqueue.Result:
        kyma = self.shared.kyma(runtime)
        if kyma is None:
            return workqueue.Result()
        try:
            async with self.shared.clients.use(runtime) as handle:
                await self.prepare(handle, definitions=[crds.module_template_crd()], namespace=RUNTIME_NAMESPACE)
                labels = kyma["metadata"].get("labels") or {}
                await self.on_conflict_again(functools.partial(self._sync, handle.objects, kyma_labels=labels))
        except (runtime_clients.RuntimeUnavailableError, kube.KubeError, objects.UnknownKindError) as exc:
            return self.failed(runtime, exc)
        return workqueue.Result()

    async def _sync(self, cluster: objects.ClusterObjects, *, kyma_labels: dict[str, str]) -> None:
        api_version = crds.MODULE_TEMPLATE.api_version
        present = {
            o["metadata"]["name"]: o
            for o in await cluster.list(
                api_version, self.kind, namespace=RUNTIME_NAMESPACE, label_selector=wire.SYNCED_SELECTOR
            )
        }
        wanted = {
            template["metadata"]["name"]: _copy_of(template, api_version)
            for template in self.templates
            if _meant_for(template, kyma_labels)
        }
        for name, copy in wanted.items():
            live = present.get(name)
            if live is None and await cluster.get(objects.Ref.of(copy)) is not None:
                continue  # a template of that name someone else put there: not ours to overwrite
            labelled = {field: value for field in ("labels", "annotations") if (value := copy["metadata"][field])}
            if (
                live is not None
                and live.get("spec") == copy["spec"]
                and diff.carries(live["metadata"], labelled)
                and not cluster.unwanted(live, copy)  # a label the template lost
            ):
                continue
            await cluster.write_as_read(copy, live)  # refused if another writer got there first: judged again
        for name in set(present) - set(wanted):
            live = present[name]["metadata"]
            await cluster.delete(
                objects.Ref(api_version, self.kind, RUNTIME_NAMESPACE, name),
                preconditions=kube.Preconditions(uid=live["uid"], resource_version=live["resourceVersion"]),
            )


_CHANNEL_LABELS = (wire.BETA_LABEL, wire.INTERNAL_LABEL)
_NOT_COPIED = ("kubectl.kubernetes.io/last-applied-configuration",)


def _copied(template: dict[str, Any]) -> tuple[Any, ...]:
    """What of a template reaches the runtimes (a change elsewhere, e.g. its status, costs no pass)."""
    metadata = template["metadata"]
    return template.get("spec"), metadata.get("labels"), metadata.get("annotations")


def _meant_for(template: dict[str, Any], kyma_labels: dict[str, str]) -> bool:
    """A beta (internal) template goes only to runtimes whose Kyma is labelled beta (internal), as upstream."""
    labels = template["metadata"].get("labels") or {}
    return all(kyma_labels.get(label) == "true" for label in _CHANNEL_LABELS if labels.get(label) == "true")


def _copy_of(template: dict[str, Any], api_version: str) -> dict[str, Any]:
    """The runtime copy: the template's spec, labels and annotations, and our synced-by label."""
    metadata = template["metadata"]
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k not in _NOT_COPIED}
    return {
        "apiVersion": api_version,
        "kind": "ModuleTemplate",
        "metadata": {
            "name": metadata["name"],
            "namespace": RUNTIME_NAMESPACE,
            "labels": {**(metadata.get("labels") or {}), wire.SYNCED_LABEL: wire.SYNCED_VALUE},
            "annotations": annotations,
        },
        "spec": template.get("spec") or {},
    }
