"""Reconciling one SyncResource: KCP-declared objects kept in one runtime or a group of runtimes.

For each target runtime, each item is applied according to its strategy; objects applied before
but no longer wanted (an item removed or renamed, a runtime that left the group) are deleted,
using ``status.applied`` as the record of what this SyncResource put where. Deleting the
SyncResource deletes everything it applied before its finalizer is removed. Runtimes are
independent: one that is unreachable is Error for itself while the others proceed.
"""

import asyncio
import copy
import dataclasses
import datetime
import logging
from collections.abc import Iterable
from typing import Any

import pydantic
from kubernetes_asyncio import client

from clients import kube
from reconciler import crds, model, objects, runtime_clients
from reconciler.workqueue import Result

log = logging.getLogger(__name__)

FINALIZER = "operator.kyma-project.io/sync-resource"
SYNCED_LABEL = "kyma-project.io/synced-by"
SYNCED_VALUE = "kyma-sync"
OWNER_ANNOTATION = "kyma-project.io/sync-resource"
ITEM_ANNOTATION = "kyma-project.io/sync-item"
_MERGE = "application/merge-patch+json"
_ERROR_RETRY = 5.0


@dataclasses.dataclass(frozen=True)
class SyncSettings:
    restricted_kinds: frozenset[str] = frozenset({"v1/Secret"})
    max_concurrent_runtimes: int = 16


@dataclasses.dataclass
class RuntimeOutcome:
    runtime: str
    items: list[model.ItemStatus]
    applied: list[model.AppliedRef]
    error: str | None = None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _key_parts(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _ref(applied: model.AppliedRef) -> objects.Ref:
    return objects.Ref(applied.api_version, applied.kind, applied.namespace, applied.name)


def _labelled(item: model.Item, key: str) -> dict[str, Any]:
    body = copy.deepcopy(item.resource)
    metadata = body.setdefault("metadata", {})
    metadata.setdefault("labels", {})[SYNCED_LABEL] = SYNCED_VALUE
    metadata.setdefault("annotations", {}).update({OWNER_ANNOTATION: key, ITEM_ANNOTATION: item.name})
    return body


class SyncResourceReconciler:
    def __init__(
        self,
        *,
        kcp: client.ApiClient,
        clients: runtime_clients.RuntimeClients,
        settings: SyncSettings,
        kymas: dict[str, dict[str, Any]],
    ) -> None:
        self._kcp = kcp
        self._clients = clients
        self._settings = settings
        self._kymas = kymas
        """Kyma name -> Kyma CR, kept current by the manager's Kyma watch."""
        self.runtimes_of: dict[str, set[str]] = {}
        """SyncResource key -> runtimes it targeted or still has objects in."""

    def _path(self, key: str, *, status: bool = False) -> str:
        namespace, name = _key_parts(key)
        return f"{crds.SYNC_RESOURCE.path(namespace)}/{name}" + ("/status" if status else "")

    async def reconcile(self, key: str) -> Result:
        try:
            resource = await kube.request(self._kcp, "GET", self._path(key))
        except kube.NotFoundError:
            self.runtimes_of.pop(key, None)
            return Result()
        applied = model.applied_refs(resource.get("status"))
        if resource["metadata"].get("deletionTimestamp"):
            return await self._finalize(key, resource, applied)
        if FINALIZER not in (resource["metadata"].get("finalizers") or []):
            await self._set_finalizers(key, [*(resource["metadata"].get("finalizers") or []), FINALIZER])
        try:
            spec = model.Spec.model_validate(resource.get("spec") or {})
        except pydantic.ValidationError as exc:
            await self._write_status(key, resource, state=model.State.ERROR, message=f"invalid spec: {exc}", items=[], applied=applied)
            return Result()
        targets = self._targets(spec)
        self.runtimes_of[key] = set(targets) | {a.runtime for a in applied}
        generation = resource["metadata"].get("generation")
        if (resource.get("status") or {}).get("observedGeneration") != generation:
            await self._write_status(
                key, resource, state=model.State.PROCESSING, message=f"applying generation {generation}",
                items=[], applied=applied,
            )
        semaphore = asyncio.Semaphore(self._settings.max_concurrent_runtimes)

        async def bounded(runtime: str, wanted: tuple[model.Item, ...]) -> RuntimeOutcome:
            async with semaphore:
                return await self._sync_runtime(key, runtime, wanted, [a for a in applied if a.runtime == runtime])

        leaving = sorted({a.runtime for a in applied} - set(targets))
        outcomes = await asyncio.gather(
            *(bounded(runtime, spec.items) for runtime in targets),
            *(bounded(runtime, ()) for runtime in leaving),
        )
        missing = [
            model.ItemStatus(name=item.name, runtime=runtime, state=model.State.ERROR, message=f"no Kyma {runtime!r} in KCP")
            for runtime in ([spec.kyma] if spec.kyma and spec.kyma not in self._kymas else [])
            for item in spec.items
        ]
        items = [status for outcome in outcomes for status in outcome.items] + missing
        new_applied = [ref for outcome in outcomes for ref in outcome.applied]
        state = _overall(items, [o for o in outcomes if o.error])
        errors = [o for o in outcomes if o.error]
        message = (
            f"{len(targets)} runtime(s), {len(spec.items)} item(s)"
            + (f"; unreachable: {', '.join(o.runtime for o in errors)}" if errors else "")
        )
        await self._write_status(key, resource, state=state, message=message, items=items, applied=new_applied)
        self.runtimes_of[key] = set(targets) | {a.runtime for a in new_applied}
        if state == model.State.ERROR:
            return Result(requeue_after=_ERROR_RETRY)
        return Result()

    def _targets(self, spec: model.Spec) -> list[str]:
        if spec.kyma is not None:
            return [spec.kyma] if spec.kyma in self._kymas else []
        assert spec.target is not None
        return sorted(
            name for name, kyma in self._kymas.items()
            if spec.target.selector.matches((kyma.get("metadata") or {}).get("labels") or {})
        )

    async def _sync_runtime(
        self, key: str, runtime: str, items: Iterable[model.Item], previously: list[model.AppliedRef]
    ) -> RuntimeOutcome:
        items = list(items)
        try:
            handle = await self._clients.get(runtime)
        except (runtime_clients.RuntimeUnavailableError, kube.KubeAPIError) as exc:
            return _unreachable(runtime, items, previously, str(exc))
        statuses: list[model.ItemStatus] = []
        applied: list[model.AppliedRef] = []
        unreachable: list[str] = []

        async def one(item: model.Item) -> None:
            if unreachable:
                statuses.append(model.ItemStatus(name=item.name, runtime=runtime, state=model.State.ERROR, message=unreachable[0]))
                return
            if item.gvk in self._settings.restricted_kinds:
                statuses.append(model.ItemStatus(
                    name=item.name, runtime=runtime, state=model.State.WARNING,
                    message=f"{item.gvk} is a restricted kind and is never synced",
                ))
                return
            async with handle.limit:
                try:
                    ref = await self._apply_item(handle.objects, key, item)
                except kube.KubeUnavailableError as exc:
                    unreachable.append(f"runtime unreachable: {exc.reason}")
                    statuses.append(model.ItemStatus(name=item.name, runtime=runtime, state=model.State.ERROR, message=unreachable[0]))
                    return
                except (kube.KubeAPIError, objects.UnknownKindError) as exc:
                    statuses.append(model.ItemStatus(name=item.name, runtime=runtime, state=model.State.ERROR, message=str(exc)))
                    return
            statuses.append(model.ItemStatus(name=item.name, runtime=runtime, state=model.State.READY))
            if ref is not None:
                applied.append(model.AppliedRef(runtime=runtime, item=item.name, apiVersion=ref.api_version, kind=ref.kind, namespace=ref.namespace, name=ref.name))

        await asyncio.gather(*(one(item) for item in items))
        if unreachable:
            return RuntimeOutcome(runtime, statuses, _merge(previously, applied), unreachable[0])
        wanted = {(_ref(a)) for a in applied}
        kept = list(applied)
        for stale in previously:
            if _ref(stale) in wanted:
                continue
            try:
                async with handle.limit:
                    await handle.objects.delete(_ref(stale))
                log.info("deleted object no longer in the spec", extra={"key": key, "runtime": runtime, "object": stale.name})
            except kube.KubeAPIError as exc:
                log.warning("could not delete stale object", extra={"key": key, "runtime": runtime, "error": str(exc)})
                kept.append(stale)
        return RuntimeOutcome(runtime, sorted(statuses, key=lambda s: s.name), kept)

    async def _apply_item(self, cluster: objects.ClusterObjects, key: str, item: model.Item) -> objects.Ref | None:
        """Bring one item about in one runtime; the ref of what now exists because of it."""
        body = _labelled(item, key)
        ref = await cluster.normalise(objects.Ref.of(body))
        if item.strategy == model.Strategy.DELETE:
            await cluster.delete(ref)
            return None
        created = True
        if item.strategy == model.Strategy.CREATE_AND_IGNORE and await cluster.get(ref) is not None:
            created = False
        if created:
            await cluster.apply(body)
            for name, content in (item.subresource or {}).items():
                await cluster.apply(
                    {"apiVersion": ref.api_version, "kind": ref.kind,
                     "metadata": {"name": ref.name, **({"namespace": ref.namespace} if ref.namespace else {})},
                     name: content},
                    subresource=name,
                )
        return ref

    async def _finalize(self, key: str, resource: dict[str, Any], applied: list[model.AppliedRef]) -> Result:
        remaining: list[model.AppliedRef] = []
        for runtime in sorted({a.runtime for a in applied}):
            outcome = await self._sync_runtime(key, runtime, (), [a for a in applied if a.runtime == runtime])
            remaining += outcome.applied
        if remaining:
            await self._write_status(
                key, resource, state=model.State.DELETING,
                message=f"{len(remaining)} object(s) still to delete", items=[], applied=remaining,
            )
            return Result(requeue_after=_ERROR_RETRY)
        await self._set_finalizers(key, [f for f in resource["metadata"].get("finalizers") or [] if f != FINALIZER])
        self.runtimes_of.pop(key, None)
        return Result()

    async def _set_finalizers(self, key: str, finalizers: list[str]) -> None:
        await kube.request(self._kcp, "PATCH", self._path(key), body={"metadata": {"finalizers": finalizers}}, content_type=_MERGE)

    async def _write_status(
        self,
        key: str,
        resource: dict[str, Any],
        *,
        state: model.State,
        message: str,
        items: list[model.ItemStatus],
        applied: list[model.AppliedRef],
    ) -> None:
        """Write status only when it says something new (its own watch event would loop otherwise)."""
        old = resource.get("status") or {}
        generation = resource["metadata"].get("generation")
        ready = "True" if state == model.State.READY else "False"
        previous: dict[str, Any] = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {})
        condition = {
            "type": "Ready",
            "status": ready,
            "reason": state.value,
            "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": previous.get("lastTransitionTime") if previous.get("status") == ready else _now(),
        }
        status = {
            "state": state.value,
            "observedGeneration": generation,
            "conditions": [condition],
            "items": [i.model_dump(exclude_defaults=True) for i in sorted(items, key=lambda i: (i.runtime, i.name))],
            "applied": [a.model_dump(by_alias=True, exclude_none=True) for a in sorted(applied, key=lambda a: (a.runtime, a.item))],
        }
        if all(old.get(k) == v for k, v in status.items()):
            return
        status["lastOperation"] = {"operation": message, "lastUpdateTime": _now()}
        try:
            await kube.request(self._kcp, "PATCH", self._path(key, status=True), body={"status": status}, content_type=_MERGE)
        except kube.NotFoundError:
            pass


def _overall(items: list[model.ItemStatus], failed: list[RuntimeOutcome]) -> model.State:
    states = {i.state for i in items}
    if failed or model.State.ERROR in states:
        return model.State.ERROR
    if model.State.WARNING in states:
        return model.State.WARNING
    return model.State.READY


def _merge(previously: list[model.AppliedRef], applied: list[model.AppliedRef]) -> list[model.AppliedRef]:
    """What may exist now: everything applied before plus what was applied this time."""
    refs = {_ref(a): a for a in previously}
    refs.update({_ref(a): a for a in applied})
    return list(refs.values())


def _unreachable(runtime: str, items: list[model.Item], previously: list[model.AppliedRef], reason: str) -> RuntimeOutcome:
    statuses = [
        model.ItemStatus(name=item.name, runtime=runtime, state=model.State.ERROR, message=f"runtime unreachable: {reason}")
        for item in items
    ]
    return RuntimeOutcome(runtime, statuses, previously, reason)
