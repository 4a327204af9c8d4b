"""The custom resources the reconcilers own in KCP (and the Kyma CR they read), installed at start."""

import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from clients import kube, objects
from contract import watch_sets
from reconciler import kinds, model

GROUP = "operator.kyma-project.io"
SYNC_RESOURCE = kube.Gvr(GROUP, "v1alpha1", "syncresources")
SYNC_BINDING = kube.Gvr(GROUP, "v1alpha1", "syncbindings")
SYNC_RECORD = kube.Gvr(GROUP, "v1alpha1", "syncrecords")
MODULE_WATCH = kube.Gvr(GROUP, "v1alpha1", "modulewatches")
SYNC_RECORD_SHARDS = 64
"""How many SyncRecords a SyncResource's records are spread over (``reconciler.records``)."""
KYMA = kube.KYMAS
MODULE_TEMPLATE = kube.Gvr(GROUP, "v1beta2", "moduletemplates")


def kyma_ref(kyma: dict[str, Any]) -> objects.Ref:
    """A Kyma as read (a list's items may lack apiVersion and kind)."""
    return objects.Ref(KYMA.api_version, "Kyma", kyma["metadata"]["namespace"], kyma["metadata"]["name"])


VPC_PEERING = kube.Gvr("cloud-resources.kyma-project.io", "v1beta1", "vpcpeerings")

OBJECT_SCHEMA = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def definition(
    *,
    gvr: kube.Gvr,
    kind: str,
    short: str,
    schema: dict[str, Any],
    printer: list[dict[str, Any]],
    scope: str = "Namespaced",
) -> dict[str, Any]:
    """A CustomResourceDefinition of one served version with a status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{gvr.resource}.{gvr.group}"},
        "spec": {
            "group": gvr.group,
            "scope": scope,
            "names": {"kind": kind, "plural": gvr.resource, "singular": kind.lower(), "shortNames": [short]},
            "versions": [
                {
                    "name": gvr.version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def _selector(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": {
            "matchLabels": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "labels a Kyma CR must carry, all of them (ANDed with matchExpressions)",
            },
            "matchExpressions": {
                "type": "array",
                "description": "label requirements a Kyma CR must meet, all of them",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string", "description": "the label key"},
                        "operator": {
                            "type": "string",
                            "enum": ["In", "NotIn", "Exists", "DoesNotExist"],
                            "description": "how the label's value relates to values",
                        },
                        "values": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "for In and NotIn: the values; empty for Exists and DoesNotExist",
                        },
                    },
                },
            },
        },
    }


def _string(pattern: str, max_length: int, description: str) -> dict[str, Any]:
    return {"type": "string", "pattern": pattern, "maxLength": max_length, "description": description}


def _any(description: str) -> dict[str, Any]:
    """A field that may be an object or a string (YAML/JSON text); the reconciler parses it per item."""
    return {"x-kubernetes-preserve-unknown-fields": True, "description": description}


def _described(description: str, **schema: Any) -> dict[str, Any]:
    return {**schema, "description": description}


def sync_resource_crd() -> dict[str, Any]:
    item = {
        "type": "object",
        "description": "One object to sync, or to delete, or whose status to set.",
        "required": ["name", "strategy"],
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "description": "The item's name, unique in the list (not necessarily the object's name). Its status "
                "is reported under this name; renaming an item releases the old item's object.",
            },
            "strategy": {
                "type": "string",
                "enum": [s.value for s in model.Strategy],
                "description": "CreateAndSync: keep the object identical (drift is reset, a deletion undone). "
                "CreateAndIgnore: create it, recreate it when deleted, leave edits alone. "
                "Delete: ensure the object is gone (Deleting until it is, then Ready). "
                "UpdateAndDelete: keep an existing object identical but never create it; once it is being deleted "
                "it is left alone (Deleting), and the item is Ready with 'gone' when it no longer exists. "
                "Changing an item's strategy is allowed in every direction.",
            },
            "resource": _any(
                "The object, as YAML/JSON text (resource: |) or as an object: apiVersion, kind, metadata.name "
                "(DNS-1123), metadata.namespace for namespaced kinds (default: default). Text that does not parse "
                "or does not name an object is this item's Error; the other items are synced."
            ),
            "subresource": _any(
                "The status to set after the object, as text or an object: a whole object (apiVersion, kind, "
                "metadata, status: the design document's form) or {status: {...}}. Without resource the item only "
                "sets the status of an object someone else creates (never creates or deletes it; CreateAndSync or "
                "UpdateAndDelete). Only the status subresource may be set."
            ),
            "adoption": {
                "type": "string",
                "enum": [a.value for a in model.Adoption],
                "default": model.Adoption.NEVER.value,
                "description": "Never: an existing object without kyma-sync's owner marker is left alone (Warning). "
                "IfUnmanaged: take such an object over (Delete: delete it), if a SyncBinding sets allowAdoption. "
                "Objects of another SyncResource or another kyma-sync controller never are.",
            },
            "ignoreFields": {
                "type": "array",
                "maxItems": 64,
                "items": {"type": "string", "pattern": "^/.+", "maxLength": 1024},
                "description": "JSON pointers (RFC 6901, e.g. /spec/replicas, /data/key) to fields whose value in "
                "the runtime is kept: set when the object is created, never reset afterwards (as Open Cluster "
                "Management's and Sveltos' ignore rules). Not the object's apiVersion, kind, name or namespace.",
            },
            "secretRef": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": _string(model.DNS_SUBDOMAIN, 253, "the KCP Secret, in this namespace")},
                "description": "For a v1 Secret item: take its data (and type) from this KCP Secret of the "
                "SyncResource's namespace, re-applied whenever that Secret changes. The Secret must be labelled "
                "sync.kyma-project.io/source=true and the namespace enabled by the operator; the item itself may "
                "hold no data (inline Secrets stay restricted).",
            },
            "deletePolicy": {
                "type": "string",
                "enum": [p.value for p in model.DeletePolicy],
                "default": model.DeletePolicy.DELETE.value,
                "description": "What happens to the object when this item goes (removed, renamed, its runtime left "
                "the group, the SyncResource deleted). Delete: it is deleted (if still ours). Orphan: it stays, "
                "released from management (owner marker and synced-by label removed).",
            },
        },
    }
    item_status = {
        "type": "object",
        "description": "An item's state in one runtime.",
        "properties": {
            "name": _described("The item.", type="string"),
            "runtime": _described("The runtime (Kyma name).", type="string"),
            "state": _described(
                "Ready, Processing, Deleting, Warning (e.g. exists but not managed), Conflict (another "
                "SyncResource manages it), Forbidden (no SyncBinding admits it), Error.",
                type="string",
            ),
            "message": _described("Why, when not Ready.", type="string"),
        },
    }
    status = {
        "type": "object",
        "description": "What the reconciler did, written by it only.",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "state": _described(
                "The worst item state: Error > Conflict > Forbidden > Warning > Deleting/Processing > Ready.",
                type="string",
            ),
            "observedGeneration": _described("The generation this status describes.", type="integer"),
            "syncedGeneration": _described(
                "The generation the last pass over every runtime applied (passes over one runtime, for a drift "
                "event or one runtime's change, rely on it).",
                type="integer",
            ),
            "conditions": _described(
                "Ready: True when every item is Ready in every runtime.",
                type="array",
                items=OBJECT_SCHEMA,
            ),
            "lastOperation": _described("The last change of state, in words, and when.", **OBJECT_SCHEMA),
            "itemCount": _described("Items in the spec.", type="integer"),
            "runtimeCount": _described("Runtimes the items are synced to.", type="integer"),
            "ready": _described("Item-runtime pairs Ready, of all (e.g. 19/20).", type="string"),
            "items": _described(
                "Per item and runtime: state and message — for every runtime when the SyncResource covers up to "
                "10 runtimes, beyond that only for runtimes not Ready (at most 100; detailsOmitted says how many "
                "more).",
                type="array",
                items=item_status,
            ),
            "summary": _described(
                "Per item: in how many runtimes it is Ready, of how many.", type="array", items=OBJECT_SCHEMA
            ),
            "detailsOmitted": _described("Entries not listed in items (beyond the first 100).", type="integer"),
        },
    }
    schema = {
        "type": "object",
        "description": "Objects KCP keeps in one runtime or a group of runtimes (kyma-sync).",
        # Required: a rule comparing with oldSelf is skipped when the old value is absent, so a spec that could
        # be removed and added back would let spec.kyma change after all.
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "description": "What to sync where.",
                "required": ["items"],
                "x-kubernetes-validations": [
                    {
                        "rule": "has(self.kyma) != has(self.target)",
                        "message": "set exactly one of spec.kyma and spec.target",
                    },
                    {
                        # Every pass of a SyncResource for one runtime runs in that runtime's reconciler replica: a
                        # new kyma would move it to another while the old one may still be writing.
                        "rule": "has(self.kyma) == has(oldSelf.kyma) && (!has(self.kyma) || self.kyma == oldSelf.kyma)",
                        "message": "spec.kyma cannot change (nor can a SyncResource switch between kyma and target): "
                        "create a new SyncResource and delete this one",
                    },
                ],
                "properties": {
                    "kyma": {
                        **_string(
                            model.DNS_SUBDOMAIN,
                            253,
                            "The one runtime (Kyma CR name) to sync to; the SyncResource is then labelled "
                            "operator.kyma-project.io/kyma-name with it.",
                        ),
                        "minLength": 1,
                    },
                    "target": {
                        "type": "object",
                        "required": ["selector"],
                        "description": "A group of runtimes, chosen by their Kyma CRs' labels.",
                        "properties": {
                            "selector": _selector("Runtimes whose Kyma CR has these labels ({} selects all).")
                        },
                    },
                    "dryRun": {
                        "type": "boolean",
                        "default": False,
                        "description": "Write nothing; report per item and runtime what would change: would create, "
                        "would change (the fields, as the apiserver's dryRun=All answers), in sync, would delete, "
                        "would release. Deleting the SyncResource still releases what earlier runs wrote.",
                    },
                    "items": {
                        "type": "array",
                        "description": "The objects, each with a strategy.",
                        "maxItems": 2000,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": item,
                    },
                },
            },
            "status": status,
        },
    }
    printer = [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "Items", "type": "integer", "jsonPath": ".status.itemCount"},
        {"name": "Runtimes", "type": "integer", "jsonPath": ".status.runtimeCount"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return definition(gvr=SYNC_RESOURCE, kind="SyncResource", short="sr", schema=schema, printer=printer)


def _kind_rules(description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "description": description,
        "items": {
            "type": "object",
            "required": ["kind"],
            "properties": {
                "group": _string(f"^$|{kinds.GROUP.pattern}", 253, 'API group ("" for the core group)'),
                "kind": _string(model.KIND, 63, "the kind (or its plural)"),
            },
        },
    }


def module_watch_crd() -> dict[str, Any]:
    """A module team's watch in every (selected) runtime (cluster-scoped: admins grant what watchers may read)."""
    spec = {
        "type": "object",
        "description": "What the watchers of the selected runtimes also watch and report to a module's subjects.",
        "required": ["module", "version", "resource", "labelSelector"],
        "properties": {
            "module": _string(
                model.DNS_LABEL, 63, "the module the changes are routed to (kyma.events.<module>.<runtime>)"
            ),
            "group": _described(
                'API group of the watched resource; "" for the core group',
                type="string",
                maxLength=253,
                pattern=watch_sets.API_GROUP,
            ),
            "version": _described("its API version", type="string", pattern=watch_sets.DNS_LABEL),
            "resource": _described(
                "its plural resource name, e.g. configmaps (no wildcard, no subresource)",
                type="string",
                maxLength=253,
                pattern=watch_sets.RESOURCE,
            ),
            "labelSelector": _described(
                "only objects with these labels are reported (required: a watch of everything would be noise)",
                type="string",
                minLength=1,
            ),
            "ignoreFields": {
                "type": "array",
                "items": {"type": "string"},
                "description": "dotted paths whose changes alone are noise, e.g. status",
            },
            "runtimeSelector": _selector(
                "the runtimes (by Kyma labels) whose watchers take this watch; {} or absent: all"
            ),
        },
    }
    schema = {"type": "object", "properties": {"spec": spec}, "required": ["spec"]}
    printer = [
        {"name": "Module", "type": "string", "jsonPath": ".spec.module"},
        {"name": "Resource", "type": "string", "jsonPath": ".spec.resource"},
    ]
    return definition(gvr=MODULE_WATCH, kind="ModuleWatch", short="mw", schema=schema, printer=printer, scope="Cluster")


def sync_binding_crd() -> dict[str, Any]:
    """Tenancy: which KCP namespaces may sync what to which runtimes (cluster-scoped: admins only)."""
    spec = {
        "type": "object",
        "description": "Which KCP namespaces may sync what to which runtimes; a SyncResource needs a binding "
        "admitting its namespace, its target runtimes and every item's kind.",
        "required": ["namespaces", "runtimeSelector"],
        "properties": {
            "namespaces": {
                "type": "array",
                "minItems": 1,
                "items": _string(model.DNS_LABEL, 63, "a KCP namespace"),
                "description": "KCP namespaces whose SyncResources this binding admits",
            },
            "runtimeSelector": _selector("runtimes (by Kyma labels) they may target; {} selects every runtime"),
            "kinds": _kind_rules("kinds they may sync; empty: every kind not denied"),
            "deniedKinds": _kind_rules("kinds they may never sync"),
            "targetNamespaces": {
                "type": "array",
                "items": _string(model.DNS_LABEL, 63, "a runtime namespace"),
                "description": "runtime namespaces objects may go to (cluster-scoped objects are then refused, "
                "except Namespaces named here); empty: any but the protected ones (kube-system, kyma-system, ...)",
            },
            "allowPrivileged": {
                "type": "boolean",
                "default": False,
                "description": "allow cluster-admin-equivalent objects: CRDs, webhooks, cluster RBAC, privileged pods, "
                "protected namespaces",
            },
            "allowAdoption": {
                "type": "boolean",
                "default": False,
                "description": "let items with adoption: IfUnmanaged take over (or delete) objects kyma-sync did not "
                "create",
            },
        },
    }
    schema = {"type": "object", "properties": {"spec": spec}, "required": ["spec"]}
    printer = [{"name": "Namespaces", "type": "string", "jsonPath": ".spec.namespaces"}]
    return definition(gvr=SYNC_BINDING, kind="SyncBinding", short="sb", schema=schema, printer=printer, scope="Cluster")


def kyma_crd() -> dict[str, Any]:
    """A minimal Kyma CR (the real one belongs to lifecycle-manager): channel, modules, status.

    ``spec.modules`` is a list-map keyed by name, so server-side apply merges entries per field
    manager: KCP's modules and a runtime user's modules coexist, neither side removing the other's.
    """
    modules = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {
            "type": "object",
            "required": ["name"],
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"name": {"type": "string"}, "channel": {"type": "string"}},
        },
    }
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"channel": {"type": "string"}, "modules": modules},
            },
            "status": OBJECT_SCHEMA,
        },
    }
    printer = [{"name": "State", "type": "string", "jsonPath": ".status.state"}]
    return definition(gvr=KYMA, kind="Kyma", short="kyma", schema=schema, printer=printer)


def module_template_crd() -> dict[str, Any]:
    schema = {"type": "object", "properties": {"spec": OBJECT_SCHEMA}}
    return definition(gvr=MODULE_TEMPLATE, kind="ModuleTemplate", short="mt", schema=schema, printer=[])


def vpc_peering_crd() -> dict[str, Any]:
    """The runtime-side resource of the SKR -> KCP mirror example (cloud-manager owns the real one)."""
    schema = {"type": "object", "properties": {"spec": OBJECT_SCHEMA, "status": OBJECT_SCHEMA}}
    printer = [{"name": "State", "type": "string", "jsonPath": ".status.state"}]
    return definition(gvr=VPC_PEERING, kind="VpcPeering", short="vpcp", schema=schema, printer=printer)


CRDS = kube.Gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions")


async def install(api: kube.ApiClient, definitions: list[dict[str, Any]], *, timeout: float = 30) -> None:
    """Create or update CRDs we own and wait until the apiserver serves them."""
    for definition in definitions:
        await kube.create_or_replace(api, CRDS.path(), definition)
    await _established(api, definitions, timeout=timeout)


async def install_if_absent(api: kube.ApiClient, definitions: list[dict[str, Any]], *, timeout: float = 30) -> None:
    """Create the CRDs that do not exist yet, never touching one that does (another component owns it)."""
    waiting = []
    for definition in definitions:
        live = await kube.get_or_none(api, CRDS.object_path(None, definition["metadata"]["name"]))
        if live is None:
            try:
                await kube.request(api, "POST", CRDS.path(), body=definition)
            except kube.ConflictError:
                pass  # created meanwhile by its owner: theirs stands
        if live is None or not _is_established(live):
            waiting.append(definition)
    await _established(api, waiting, timeout=timeout)


def _is_established(crd: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
    return conditions.get("Established") == "True"


async def _established(api: kube.ApiClient, definitions: list[dict[str, Any]], *, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    for definition in definitions:
        name = definition["metadata"]["name"]
        while True:
            if _is_established(await kube.request(api, "GET", CRDS.object_path(None, name))):
                break
            if asyncio.get_running_loop().time() > deadline:
                raise kube.ApiError(503, f"CRD {name} not established within {timeout:.0f}s")
            await asyncio.sleep(0.1)


_APPLIED = {
    "type": "object",
    "description": "An object a SyncResource may have put into a runtime: released (deleted if still ours, or "
    "unmarked for deletePolicy Orphan) once no item wants it.",
    "properties": {
        "runtime": _described("The runtime (Kyma name) the object is in.", type="string"),
        "item": _described("The SyncResource item that put it there.", type="string"),
        "apiVersion": _described("The object's apiVersion.", type="string"),
        "kind": _described("The object's kind.", type="string"),
        "namespace": _described("The object's namespace; absent for cluster-scoped objects.", type="string"),
        "name": _described("The object's name.", type="string"),
        "deletePolicy": _described(
            "Delete: deleted when released (if still ours); Orphan: only unmarked, left in place.", type="string"
        ),
    },
}


def sync_record_crd() -> dict[str, Any]:
    """Where a SyncResource's records live, sharded by runtime (``reconciler.records``): written by the reconciler."""
    spec = {
        "type": "object",
        "description": "What one SyncResource may have put into the runtimes of one shard.",
        "required": ["syncResource", "shard", "applied"],
        "properties": {
            "syncResource": _described("The SyncResource (same namespace; it owns this object).", type="string"),
            "shard": _described(
                "The shard: a stable hash of the runtime's name.",
                type="integer",
                minimum=0,
                maximum=SYNC_RECORD_SHARDS - 1,
            ),
            "syncResourceGeneration": _described(
                "The SyncResource generation the last pass that wrote this shard acted on (or is acting on).",
                type="integer",
                minimum=1,
            ),
            "applied": _described(
                "Objects that may exist because of the SyncResource: released once no item wants them.",
                type="array",
                items=_APPLIED,
            ),
            "states": _described(
                "Per runtime of this shard: [item, state, message] as last reconciled (the status sums them up).",
                **OBJECT_SCHEMA,
            ),
            "errors": _described("Per runtime of this shard: why its last pass failed as a whole.", **OBJECT_SCHEMA),
        },
    }
    schema = {"type": "object", "properties": {"spec": spec}}
    printer = [{"name": "SyncResource", "type": "string", "jsonPath": ".spec.syncResource"}]
    return definition(gvr=SYNC_RECORD, kind="SyncRecord", short="srec", schema=schema, printer=printer)


def kcp_crds() -> list[dict[str, Any]]:
    """The CRDs kyma-sync owns, installed and upgraded by the reconciler and its chart
    (`python -m reconciler.crds DIR` writes them)."""
    return [sync_resource_crd(), sync_binding_crd(), sync_record_crd(), module_watch_crd()]


def lifecycle_manager_crds() -> list[dict[str, Any]]:
    """Stand-ins for lifecycle-manager's Kyma and ModuleTemplate CRDs, for clusters without it: only ever
    created where absent (``install_if_absent``), never replacing the real ones, never shipped in a chart."""
    return [kyma_crd(), module_template_crd()]


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for definition in kcp_crds():
        path = directory / f"{definition['metadata']['name']}.yaml"
        path.write_text(
            "# Generated by `python -m reconciler.crds charts/kyma-reconciler/crds`; do not edit.\n"
            + yaml.safe_dump(definition, sort_keys=False)
        )
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "charts/kyma-reconciler/crds")):
        print(written_path)
