"""The custom resources the reconcilers own in KCP (and the Kyma CR they read), installed at start."""

import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from clients import kube
from reconciler import model

GROUP = "operator.kyma-project.io"
SYNC_RESOURCE = kube.Gvr(GROUP, "v1alpha1", "syncresources")
SYNC_BINDING = kube.Gvr(GROUP, "v1alpha1", "syncbindings")
KYMA = kube.Gvr(GROUP, "v1beta2", "kymas")
MODULE_TEMPLATE = kube.Gvr(GROUP, "v1beta2", "moduletemplates")
VPC_PEERING = kube.Gvr("cloud-resources.kyma-project.io", "v1beta1", "vpcpeerings")

_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _crd(
    *,
    gvr: kube.Gvr,
    kind: str,
    short: str,
    schema: dict[str, Any],
    printer: list[dict[str, Any]],
    scope: str = "Namespaced",
) -> dict[str, Any]:
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
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                        "values": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
        },
    }


def _string(pattern: str, max_length: int, description: str) -> dict[str, Any]:
    return {"type": "string", "pattern": pattern, "maxLength": max_length, "description": description}


def sync_resource_crd() -> dict[str, Any]:
    resource = {
        "type": "object",
        "description": "The object to keep in the runtime (or, for Delete, the object to remove).",
        "x-kubernetes-preserve-unknown-fields": True,
        "required": ["apiVersion", "kind", "metadata"],
        "properties": {
            "apiVersion": _string(model.API_VERSION, 316, "group/version, or version for the core group"),
            "kind": _string(model.KIND, 63, "the kind"),
            "metadata": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "required": ["name"],
                "properties": {
                    "name": _string(model.DNS_SUBDOMAIN, 253, "the object's name in the runtime"),
                    "namespace": _string(model.DNS_LABEL, 63, "its namespace (namespaced kinds; default: default)"),
                },
            },
        },
    }
    item = {
        "type": "object",
        "required": ["name", "strategy", "resource"],
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "description": "the item's name, unique in the list",
            },
            "strategy": {
                "type": "string",
                "enum": [s.value for s in model.Strategy],
                "description": "CreateAndSync: keep identical (drift is reset). CreateAndIgnore: create, recreate when "
                "deleted, leave edits alone. Delete: ensure the object is gone.",
            },
            "resource": resource,
            "subresource": {
                **_OBJECT,
                "description": "subresources to apply after the object: only {status: {...}} (others are an Error)",
            },
            "adoption": {
                "type": "string",
                "enum": [a.value for a in model.Adoption],
                "default": model.Adoption.NEVER.value,
                "description": "Never: an existing object without kyma-sync's owner marker is left alone (Warning). "
                "IfUnmanaged: take such an object over (Delete: delete it), if a SyncBinding sets allowAdoption. "
                "Objects of another SyncResource or another kyma-sync controller never are.",
            },
        },
    }
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["items"],
                "x-kubernetes-validations": [
                    {
                        "rule": "has(self.kyma) != has(self.target)",
                        "message": "set exactly one of spec.kyma and spec.target",
                    }
                ],
                "properties": {
                    "kyma": {
                        **_string(model.DNS_SUBDOMAIN, 253, "the one runtime (Kyma name) to sync to"),
                        "minLength": 1,
                    },
                    "target": {
                        "type": "object",
                        "required": ["selector"],
                        "description": "a group of runtimes",
                        "properties": {"selector": _selector("runtimes whose Kyma CR has these labels")},
                    },
                    "items": {
                        "type": "array",
                        "maxItems": 2000,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": item,
                    },
                },
            },
            "status": _OBJECT,
        },
    }
    printer = [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(gvr=SYNC_RESOURCE, kind="SyncResource", short="sr", schema=schema, printer=printer)


def _kind_rules(description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "description": description,
        "items": {
            "type": "object",
            "required": ["kind"],
            "properties": {
                "group": {"type": "string", "description": 'API group ("" for the core group)'},
                "kind": _string(model.KIND, 63, "the kind (or its plural)"),
            },
        },
    }


def sync_binding_crd() -> dict[str, Any]:
    """Tenancy: which KCP namespaces may sync what to which runtimes (cluster-scoped: admins only)."""
    spec = {
        "type": "object",
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
    return _crd(gvr=SYNC_BINDING, kind="SyncBinding", short="sb", schema=schema, printer=printer, scope="Cluster")


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
            "status": _OBJECT,
        },
    }
    printer = [{"name": "State", "type": "string", "jsonPath": ".status.state"}]
    return _crd(gvr=KYMA, kind="Kyma", short="kyma", schema=schema, printer=printer)


def module_template_crd() -> dict[str, Any]:
    schema = {"type": "object", "properties": {"spec": _OBJECT}}
    return _crd(gvr=MODULE_TEMPLATE, kind="ModuleTemplate", short="mt", schema=schema, printer=[])


def vpc_peering_crd() -> dict[str, Any]:
    """The runtime-side resource of the SKR -> KCP mirror example (cloud-manager owns the real one)."""
    schema = {"type": "object", "properties": {"spec": _OBJECT, "status": _OBJECT}}
    printer = [{"name": "State", "type": "string", "jsonPath": ".status.state"}]
    return _crd(gvr=VPC_PEERING, kind="VpcPeering", short="vpcp", schema=schema, printer=printer)


CRDS = kube.Gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions")


async def install(api: kube.ApiClient, definitions: list[dict[str, Any]], *, timeout: float = 30) -> None:
    """Create or update the CRDs and wait until the apiserver serves them."""
    for definition in definitions:
        await kube.create_or_replace(api, CRDS.path(), definition)
    deadline = asyncio.get_running_loop().time() + timeout
    for definition in definitions:
        name = definition["metadata"]["name"]
        while True:
            crd = await kube.request(api, "GET", CRDS.object_path(None, name))
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                break
            if asyncio.get_running_loop().time() > deadline:
                raise kube.ApiError(503, f"CRD {name} not established within {timeout:.0f}s")
            await asyncio.sleep(0.1)


def kcp_crds() -> list[dict[str, Any]]:
    """The CRDs the reconciler chart ships (`python -m reconciler.crds DIR` writes them)."""
    return [sync_resource_crd(), sync_binding_crd(), kyma_crd(), module_template_crd()]


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
