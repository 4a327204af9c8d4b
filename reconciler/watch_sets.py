"""Watch sets derived in KCP: every runtime's watcher watches what KCP syncs there, so any drift is an event.

Per runtime the set is: every kind a SyncResource applied there (from the SyncRecords), the Kyma
CR and the ModuleTemplates when those controllers run, and the mirrored kinds — each with the label
selector that finds our objects (the synced-by label; the mirror's opt-out label). The pause flags
come from the runtime's Kyma CR in KCP (``contract.watch_sets``). The set is written into the runtime
as a ConfigMap the watcher follows (``central`` in its configuration), with a ClusterRole that lets
the watcher's ServiceAccount get/list/watch exactly those resources. Written only when it changed.
"""

import collections
import functools
import logging
from typing import Any

import pydantic

from clients import informer, kube, objects
from contract import ids, watch_sets, wire
from reconciler import crds, model, per_runtime, records, runtime_clients, settings, workqueue
from reconciler.shared import Shared

log = logging.getLogger(__name__)

ROLE = "kyma-watcher-watch-set"
"""The ClusterRole (and its binding) granting the watcher read access to its derived watches."""
_RBAC = "rbac.authorization.k8s.io/v1"
OBJECTS = (
    objects.Ref(_RBAC, "ClusterRole", None, ROLE),
    objects.Ref(_RBAC, "ClusterRoleBinding", None, ROLE),
    objects.Ref("v1", "ConfigMap", watch_sets.NAMESPACE, watch_sets.CONFIG_MAP),
)
"""What the controller writes into a runtime: the grant, its binding, the watch set itself."""


class NotOursError(Exception):
    """An object of a name kyma-sync writes exists without our labels: someone else's, left alone."""


def ours(obj: dict[str, Any]) -> bool:
    """Whether kyma-sync wrote it (its synced-by label): only such an object is ever overwritten or removed."""
    return (obj["metadata"].get("labels") or {}).get(wire.SYNCED_LABEL) == wire.SYNCED_VALUE


class WatchSetController(per_runtime.RuntimeKeyed):
    def __init__(self, shared: Shared, config: settings.WatchSetSettings) -> None:
        super().__init__(shared, config, name="watch_sets")
        self._config = config
        reconciler_config = shared.config
        self._module = reconciler_config.events_module
        self._fixed = _fixed_watches(reconciler_config)
        self.records = self.own(
            informer.Informer(shared.kcp, crds.SYNC_RECORD, namespace=reconciler_config.sync_resources.namespace)
        )
        self._kinds: collections.defaultdict[str, collections.Counter[tuple[str, str]]] = collections.defaultdict(
            collections.Counter
        )
        """runtime -> (apiVersion, kind) -> how many records hold one, from the SyncRecords' changes."""
        self.records.subscribe(self._records_changed)
        self.module_watches = self.own(informer.Informer(shared.kcp, crds.MODULE_WATCH))
        self.module_watches.subscribe(lambda change: self.queue.add_all(self.all_keys()))

    def _records_changed(self, change: informer.Change) -> None:
        """Keep the index of kinds per runtime (a pass must not re-read every record) and wake the runtimes touched."""
        touched = set()
        for obj, sign in ((change.old, -1), (change.new, +1)):
            for ref in _applied(obj) if obj is not None else ():
                self._kinds[ref.runtime][(ref.api_version, ref.kind)] += sign
                touched.add(ref.runtime)
        for runtime in touched:
            self._kinds[runtime] = +self._kinds[runtime]  # drop what no record holds any more
        self.queue.add_all(ids.RuntimeId(runtime) for runtime in touched)

    def kinds_in(self, runtime: str) -> set[tuple[str, str]]:
        """(apiVersion, kind) of everything the SyncResources applied in ``runtime``."""
        return set(self._kinds.get(runtime, ()))

    async def reconcile(self, runtime: ids.RuntimeId) -> workqueue.Result:
        kyma = self.shared.kyma(runtime)
        if kyma is None:
            return workqueue.Result()
        try:
            async with self.shared.clients.use(runtime) as handle:
                watch_set = await self._derive(handle.objects, runtime, kyma)
                await self.on_conflict_again(functools.partial(self._write, handle.objects, watch_set))
        except (runtime_clients.RuntimeUnavailableError, kube.KubeError, NotOursError) as exc:
            return workqueue.Result.failed(f"{runtime}: {exc}")
        return workqueue.Result()

    async def _derive(self, cluster: objects.ClusterObjects, runtime: str, kyma: dict[str, Any]) -> watch_sets.WatchSet:
        watches = list(self._fixed)
        for api_version, kind in sorted(self.kinds_in(runtime)):
            try:
                resource = await cluster.resource(api_version, kind)
            except objects.UnknownKindError:
                continue  # no longer served there: nothing of it to watch
            if not watchable(resource.gvr.group, resource.gvr.resource):
                continue  # synced Secrets (secretRef items) are not watched: their bodies would travel
            watches.append(
                watch_sets.CentralWatch(
                    group=resource.gvr.group,
                    version=resource.gvr.version,
                    resource=resource.gvr.resource,
                    label_selector=wire.SYNCED_SELECTOR,
                    module=self._module,
                )
            )
        watches += self._declared_for(kyma)
        metadata = kyma["metadata"]
        paused_modules = (metadata.get("annotations") or {}).get(watch_sets.PAUSED_MODULES_ANNOTATION, "")
        return watch_sets.WatchSet.of(
            watches,
            paused=(metadata.get("labels") or {}).get(watch_sets.PAUSED_LABEL) == "true",
            paused_modules=tuple(m.strip() for m in paused_modules.split(",") if m.strip()),
        )

    async def _write(self, cluster: objects.ClusterObjects, watch_set: watch_sets.WatchSet) -> None:
        # All three read every pass: a deleted grant is repaired, not only a changed set.
        live = [await cluster.get(ref) for ref in OBJECTS]
        for ref, found in zip(OBJECTS, live, strict=True):
            if found is not None and not ours(found):
                raise NotOursError(f"{ref.kind} {ref.name} exists and is not kyma-sync's: not taken over")
        role, binding, config_map = live
        if all(live) and (config_map or {}).get("data", {}).get(watch_sets.DATA_KEY) == watch_set.encode():
            return
        await kube.ensure_namespace(cluster.api, watch_sets.NAMESPACE)
        # RBAC first: the watcher must be allowed to watch a resource before it is told to. Each written over what
        # was read: one someone else created or replaced meanwhile is refused (409), never taken over.
        rules = sorted({(w.group, w.resource) for w in watch_set.watches})
        await cluster.write_as_read(
            {
                "apiVersion": _RBAC,
                "kind": "ClusterRole",
                "metadata": {"name": ROLE, "labels": {wire.SYNCED_LABEL: wire.SYNCED_VALUE}},
                "rules": [
                    {"apiGroups": [group], "resources": [resource], "verbs": ["get", "list", "watch"]}
                    for group, resource in rules
                ],
            },
            role,
        )
        await cluster.write_as_read(
            {
                "apiVersion": _RBAC,
                "kind": "ClusterRoleBinding",
                "metadata": {"name": ROLE, "labels": {wire.SYNCED_LABEL: wire.SYNCED_VALUE}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": self._config.watcher_service_account,
                        "namespace": watch_sets.NAMESPACE,
                    }
                ],
            },
            binding,
        )
        await cluster.write_as_read(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": watch_sets.CONFIG_MAP,
                    "namespace": watch_sets.NAMESPACE,
                    "labels": {wire.SYNCED_LABEL: wire.SYNCED_VALUE},
                },
                "data": {watch_sets.DATA_KEY: watch_set.encode()},
            },
            config_map,
        )
        log.info("watch set written", extra={"revision": watch_set.revision, "watches": len(watch_set.watches)})

    def _declared_for(self, kyma: dict[str, Any]) -> list[watch_sets.CentralWatch]:
        """The module teams' ModuleWatches that select this runtime; never a watch of Secrets (their bodies
        would travel to the team's subjects)."""
        labels = kyma["metadata"].get("labels") or {}
        declared = []
        for obj in self.module_watches:
            try:
                spec = _ModuleWatchSpec.model_validate(obj.get("spec") or {})
            except pydantic.ValidationError as exc:
                log.warning(
                    "ModuleWatch ignored: invalid", extra={"module_watch": obj["metadata"]["name"], "error": str(exc)}
                )
                continue
            if not watchable(spec.group, spec.resource):
                log.warning(
                    "ModuleWatch ignored: Secrets are never watched", extra={"module_watch": obj["metadata"]["name"]}
                )
                continue
            if spec.runtime_selector is not None and not spec.runtime_selector.matches(labels):
                continue
            declared.append(
                watch_sets.CentralWatch(
                    group=spec.group,
                    version=spec.version,
                    resource=spec.resource,
                    label_selector=spec.label_selector,
                    module=spec.module,
                    ignore_fields=spec.ignore_fields,
                )
            )
        return declared


_NEVER_WATCHED = {("", "secrets")}


def watchable(group: str, resource: str) -> bool:
    """Whether a watcher may be told to watch (and be granted read on) this resource: never Secrets — an event
    carries the object, so their data would reach NATS and the module's subscribers."""
    return (group, resource) not in _NEVER_WATCHED


class _ModuleWatchSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    module: ids.ModuleNameField
    group: str = pydantic.Field(default="", pattern=watch_sets.API_GROUP)
    version: str = pydantic.Field(pattern=watch_sets.DNS_LABEL)
    resource: str = pydantic.Field(pattern=watch_sets.RESOURCE)
    label_selector: str = pydantic.Field(alias="labelSelector", min_length=1)
    ignore_fields: tuple[str, ...] = pydantic.Field(default=(), alias="ignoreFields")
    runtime_selector: model.LabelSelector | None = pydantic.Field(default=None, alias="runtimeSelector")


def _applied(record: dict[str, Any]) -> list[Any]:
    try:
        return records.applied_of(record)
    except ValueError:  # a malformed record routes nothing (the sync controller reports it)
        return []


def _fixed_watches(config: settings.ReconcilerSettings) -> list[watch_sets.CentralWatch]:
    """What every runtime's watcher watches whatever is synced there."""
    module = config.events_module
    fixed = []
    if config.kyma.enabled:
        fixed.append(_central(crds.KYMA, wire.SYNCED_SELECTOR, module))
    if config.module_templates.enabled:
        fixed.append(_central(crds.MODULE_TEMPLATE, wire.SYNCED_SELECTOR, module))
    if config.mirror.enabled:
        fixed += [
            watch_sets.CentralWatch(
                group=kind.group,
                version=kind.version,
                resource=kind.resource,
                label_selector=f"!{wire.MIRROR_OPT_OUT_LABEL}",
                module=kind.module,
            )
            for kind in config.mirror.kinds
        ]
    return fixed


def _central(gvr: kube.Gvr, selector: str, module: str) -> watch_sets.CentralWatch:
    return watch_sets.CentralWatch(
        group=gvr.group, version=gvr.version, resource=gvr.resource, label_selector=selector, module=module
    )
