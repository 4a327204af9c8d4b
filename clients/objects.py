"""Generic object operations on one cluster, addressed by apiVersion + kind.

Kinds are mapped to resources through API discovery, cached per cluster and refreshed once on
a miss (a CRD installed since). Writes carry one field manager; server-side applies are
forced, so for what it declares the writer owns the fields and resets anyone else's edits.
"""

import dataclasses
import logging
from typing import Any

from clients import kube, managed_fields

log = logging.getLogger(__name__)

OWNERSHIP_ATTEMPTS = 3


class UnknownKindError(LookupError):
    """The cluster serves no such apiVersion/kind."""


@dataclasses.dataclass(frozen=True)
class Ref:
    api_version: str
    kind: str
    namespace: str | None
    name: str

    @property
    def group(self) -> str:
        group, _, _ = self.api_version.rpartition("/")
        return group

    @classmethod
    def of(cls, obj: dict[str, Any]) -> "Ref":
        metadata = obj.get("metadata") or {}
        return cls(str(obj["apiVersion"]), str(obj["kind"]), metadata.get("namespace") or None, str(metadata["name"]))

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.api_version}/{self.kind} {where}{self.name}"


@dataclasses.dataclass(frozen=True)
class Resource:
    gvr: kube.Gvr
    namespaced: bool
    singular: str


class ClusterObjects:
    def __init__(self, api: kube.ApiClient, *, field_manager: str) -> None:
        self.api = api
        self.field_manager = field_manager
        self._resources: dict[str, dict[str, Resource]] = {}

    async def _discover(self, api_version: str) -> dict[str, Resource]:
        group, _, version = api_version.rpartition("/")
        try:
            listing = await kube.request(self.api, "GET", kube.Gvr(group, version, "").group_version_path)
        except kube.NotFoundError:
            return {}
        return {
            r["kind"]: Resource(
                kube.Gvr(group, version, r["name"]), bool(r["namespaced"]), r.get("singularName") or r["kind"].lower()
            )
            for r in listing.get("resources", [])
            if "/" not in r["name"]
        }

    async def resource(self, api_version: str, kind: str) -> Resource:
        known = self._resources.get(api_version)
        if known is None or kind not in known:
            known = self._resources[api_version] = await self._discover(api_version)
        if kind not in known:
            raise UnknownKindError(f"the cluster serves no {kind} in {api_version}")
        return known[kind]

    async def _path(self, ref: Ref, *, subresource: str | None = None) -> tuple[str, str | None]:
        resource = await self.resource(ref.api_version, ref.kind)
        namespace = (ref.namespace or "default") if resource.namespaced else None
        return resource.gvr.object_path(namespace, ref.name, subresource=subresource), namespace

    async def normalise(self, ref: Ref) -> Ref:
        """The ref as stored: namespace filled in for namespaced kinds, dropped for cluster-scoped ones."""
        _, namespace = await self._path(ref)
        return dataclasses.replace(ref, namespace=namespace)

    def _placed(self, obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        metadata = {k: v for k, v in obj["metadata"].items() if k != "namespace"}
        return {**obj, "metadata": {**metadata, **({"namespace": namespace} if namespace else {})}}

    async def get(self, ref: Ref) -> dict[str, Any] | None:
        path, _ = await self._path(ref)
        return await kube.get_or_none(self.api, path)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create; ConflictError when an object of that name exists (it is never taken over). What it set is then
        owned as if applied (``_owned_as_applied``): a later apply that leaves a field out removes it."""
        resource = await self.resource(str(obj["apiVersion"]), str(obj["kind"]))
        _, namespace = await self._path(Ref.of(obj))
        created = await kube.request(
            self.api,
            "POST",
            resource.gvr.path(namespace),
            query=[("fieldManager", self.field_manager)],
            body=self._placed(obj, namespace),
        )
        return await self._owned_as_applied(created)

    async def _owned_as_applied(self, created: dict[str, Any]) -> dict[str, Any]:
        """``created``, what the create set (fields the apiserver defaulted included: set again when removed) moved
        from the Update entry the create made to our Apply entry (``managed_fields.as_applied``), conditional on the
        object as read. A write in between (a controller adding a finalizer) or a failed call costs a read and
        another try while it is still the object created; only the create's own fields move, never what our other
        writes set since. The object replaced or gone meanwhile is returned as created (whoever wrote it next judges
        it). After OWNERSHIP_ATTEMPTS failures, or entries it cannot move, it is left as it is with a warning, for the
        next write over it to hand over (``with_create_handed_over``): until then its fields are kept, never fewer."""
        ref, current = Ref.of(created), created
        fields = managed_fields.created_fields(created["metadata"].get("managedFields") or [], self.field_manager)
        why = ""
        for _ in range(OWNERSHIP_ATTEMPTS):
            try:
                entries = managed_fields.as_applied(
                    current["metadata"].get("managedFields") or [], self.field_manager, fields
                )
            except managed_fields.UnmovableError as exc:
                why = str(exc)
                break
            if entries is None:
                return current
            try:
                return await self._set_managed_fields(current, entries)
            except kube.NotFoundError:
                return created
            except kube.KubeError as exc:  # another writer in between (409), a refusal, a blip: read, try again
                why = str(exc)
            try:
                current = await self.get(ref) or {"metadata": {}}
            except kube.KubeError as exc:
                why = str(exc)
            if current["metadata"].get("uid") != created["metadata"]["uid"]:
                return created
        log.warning(
            "a created object's fields stay owned by its create (an apply leaving one out keeps it): %s",
            why,
            extra={"object": str(ref)},
        )
        return current

    async def write_as_read(self, obj: dict[str, Any], read: dict[str, Any] | None) -> dict[str, Any]:
        """``obj`` written over the object as it was ``read``: created when it was missing, else applied conditional
        on the read's resourceVersion (after ``with_create_handed_over``). ConflictError when another writer created,
        changed or replaced it in between, so what was decided on the read (missing, ours, drifted) never lands on an
        object it was not decided on; one only deleted in between is created again (an apply creates whatever its
        resourceVersion), as the next pass would create a missing one."""
        if read is None:
            return await self.create(obj)
        try:
            read = await self.with_create_handed_over(read)
        except kube.NotFoundError:
            pass  # deleted meanwhile: the apply creates it again
        metadata = {**obj["metadata"], "resourceVersion": read["metadata"]["resourceVersion"]}
        return await self.apply({**obj, "metadata": metadata})

    def unwanted(self, live: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
        """Fields we own on ``live`` that ``wanted`` leaves out (``managed_fields.unwanted``), once what a create left
        is handed over as the write will: writing ``wanted`` is due to remove them, even when ``live`` holds
        everything it says."""
        entries = live["metadata"].get("managedFields") or []
        return managed_fields.unwanted(self._handed_over(live) or entries, self.field_manager, wanted)

    def unwanted_once_handed_over(self, live: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
        """Fields of ``live`` a write of ``wanted`` removes only because it hands a create's leftovers over first
        (``managed_fields.unwanted_once_handed_over``): what a dry run's apply does not show."""
        entries = live["metadata"].get("managedFields") or []
        return managed_fields.unwanted_once_handed_over(entries, self.field_manager, wanted)

    async def with_create_handed_over(self, live: dict[str, Any]) -> dict[str, Any]:
        """``live`` with what an earlier create of ours still leaves to an Update entry (``managed_fields.
        left_by_a_create``: objects an earlier kyma-sync created without handing that over, or whose hand-over
        failed) moved to our Apply entry, so that our next apply removes what it leaves out: a patch conditional on
        ``live``: ConflictError when the object moved, NotFoundError when it is gone (the caller decides whether a
        write may create it again). ``live`` itself when nothing is left to move, as on every object since (a check
        in memory, no call), or when the patch fails otherwise (refused, a blip: logged, and the write goes on;
        those fields are kept, never fewer)."""
        moved = self._handed_over(live)
        if moved is None:
            return live
        ref = Ref.of(live)
        try:
            handed = await self._set_managed_fields(live, moved)
        except (kube.ConflictError, kube.NotFoundError):
            raise
        except kube.KubeError as exc:
            log.warning("a create's fields not handed over, kept for now: %s", exc, extra={"object": str(ref)})
            return live
        log.info("fields an earlier create left to an Update entry handed to our apply", extra={"object": str(ref)})
        return handed

    def _handed_over(self, live: dict[str, Any]) -> list[dict[str, Any]] | None:
        """``live``'s managedFields with what a create left handed over, or None when nothing is to move."""
        try:
            return managed_fields.handed_over(live["metadata"].get("managedFields") or [], self.field_manager)
        except managed_fields.UnmovableError as exc:
            log.debug("a create's fields left where they are: %s", exc, extra={"object": str(Ref.of(live))})
            return None

    async def _set_managed_fields(self, live: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
        """``entries`` as ``live``'s managedFields, conditional on its resourceVersion (a rewrite, as csaupgrade's)."""
        changes = {"resourceVersion": live["metadata"]["resourceVersion"], "managedFields": entries}
        return await self.merge_patch(Ref.of(live), {"metadata": changes})

    async def apply(
        self, obj: dict[str, Any], *, subresource: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Server-side apply, forced; a ``metadata.resourceVersion`` in ``obj`` makes it conditional."""
        path, namespace = await self._path(Ref.of(obj), subresource=subresource)
        return await kube.apply(
            self.api, path, self._placed(obj, namespace), field_manager=self.field_manager, dry_run=dry_run
        )

    async def merge_patch(self, ref: Ref, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge patch under our field manager. On an object we also apply, set nothing but finalizers this way
        (``set_finalizer``): any other field it sets is taken for a create's leftover (``with_create_handed_over``),
        handed to our apply, and removed by the next apply that leaves it out."""
        path, _ = await self._path(ref)
        return await kube.merge_patch(self.api, path, patch, field_manager=self.field_manager)

    async def set_finalizer(self, obj: dict[str, Any], finalizer: str, *, present: bool) -> dict[str, Any]:
        """Add or remove ``finalizer`` on ``obj`` as it was read (its resourceVersion: ConflictError if it moved)."""
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if (finalizer in finalizers) == present:
            return obj
        updated = [*finalizers, finalizer] if present else [f for f in finalizers if f != finalizer]
        return await self.merge_patch(
            Ref.of(obj), {"metadata": {"finalizers": updated, "resourceVersion": obj["metadata"]["resourceVersion"]}}
        )

    async def list(
        self, api_version: str, kind: str, *, namespace: str | None, label_selector: str | None
    ) -> list[dict[str, Any]]:
        resource = await self.resource(api_version, kind)
        items, _ = await kube.list_objects(self.api, resource.gvr, namespace=namespace, label_selector=label_selector)
        return items

    async def delete(self, ref: Ref, *, preconditions: kube.Preconditions | None = None) -> bool:
        """Delete; False when it was already gone (or its kind is no longer served)."""
        try:
            path, _ = await self._path(ref)
        except UnknownKindError:
            return False
        return await kube.delete(self.api, path, preconditions=preconditions)
