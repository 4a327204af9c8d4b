"""Generic object operations on one cluster, addressed by apiVersion + kind.

Kinds are mapped to resources through API discovery, cached per cluster and refreshed once on
a miss (a CRD installed since). Writes use server-side apply under one field manager, forced:
for CreateAndSync the reconciler owns the fields it declares and resets anyone else's edits.
"""

import dataclasses
from typing import Any

from kubernetes_asyncio import client

from clients import kube

FIELD_MANAGER = "kyma-sync-reconciler"
_APPLY = "application/apply-patch+yaml"


class UnknownKindError(LookupError):
    """The cluster serves no such apiVersion/kind."""


@dataclasses.dataclass(frozen=True)
class Ref:
    api_version: str
    kind: str
    namespace: str | None
    name: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> "Ref":
        metadata = obj.get("metadata") or {}
        return cls(str(obj["apiVersion"]), str(obj["kind"]), metadata.get("namespace"), str(metadata["name"]))


class ClusterObjects:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    async def _discover(self, api_version: str) -> dict[str, tuple[str, bool]]:
        path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        try:
            listing = await kube.request(self.api, "GET", path)
        except kube.NotFoundError:
            return {}
        return {
            r["kind"]: (r["name"], bool(r["namespaced"]))
            for r in listing.get("resources", [])
            if "/" not in r["name"]
        }

    async def _resource(self, api_version: str, kind: str) -> tuple[kube.Gvr, bool]:
        known = self._resources.get(api_version)
        if known is None or kind not in known:
            known = self._resources[api_version] = await self._discover(api_version)
        if kind not in known:
            raise UnknownKindError(f"the cluster serves no {kind} in {api_version}")
        plural, namespaced = known[kind]
        group, _, version = api_version.rpartition("/")
        return kube.Gvr(group, version, plural), namespaced

    async def _path(self, ref: Ref, *, subresource: str | None = None) -> tuple[str, str | None]:
        gvr, namespaced = await self._resource(ref.api_version, ref.kind)
        namespace = (ref.namespace or "default") if namespaced else None
        path = f"{gvr.path(namespace)}/{ref.name}" + (f"/{subresource}" if subresource else "")
        return path, namespace

    async def normalise(self, ref: Ref) -> Ref:
        """The ref as stored: namespace filled in for namespaced kinds, dropped for cluster-scoped ones."""
        _, namespace = await self._path(ref)
        return dataclasses.replace(ref, namespace=namespace)

    async def apply(
        self, obj: dict[str, Any], *, subresource: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Server-side apply, forced; ``dry_run`` validates and admits it without persisting."""
        ref = Ref.of(obj)
        path, namespace = await self._path(ref, subresource=subresource)
        metadata = {**obj["metadata"], **({"namespace": namespace} if namespace else {})}
        metadata.pop("resourceVersion", None)
        return await kube.request(
            self.api,
            "PATCH",
            path,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")] + ([("dryRun", "All")] if dry_run else []),
            body={**obj, "metadata": metadata},
            content_type=_APPLY,
        )

    async def merge_patch(self, ref: Ref, patch: dict[str, Any]) -> dict[str, Any]:
        path, _ = await self._path(ref)
        return await kube.request(
            self.api, "PATCH", path, query=[("fieldManager", FIELD_MANAGER)], body=patch,
            content_type="application/merge-patch+json",
        )

    async def list(self, api_version: str, kind: str, *, namespace: str | None, label_selector: str | None) -> list[dict[str, Any]]:
        gvr, _ = await self._resource(api_version, kind)
        items, _ = await kube.list_objects(self.api, gvr, namespace=namespace, label_selector=label_selector)
        return items

    async def get(self, ref: Ref) -> dict[str, Any] | None:
        path, _ = await self._path(ref)
        try:
            return await kube.request(self.api, "GET", path)
        except kube.NotFoundError:
            return None

    async def delete(self, ref: Ref) -> bool:
        """Delete; False when it was already gone."""
        try:
            path, _ = await self._path(ref)
            await kube.request(self.api, "DELETE", path, body={"propagationPolicy": "Background"})
        except (kube.NotFoundError, UnknownKindError):
            return False
        return True
