"""The custom resources the reconcilers own in KCP (and the Kyma CR they read), installed at start."""

import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from kubernetes_asyncio import client

from clients import kube

GROUP = "operator.kyma-project.io"
SYNC_RESOURCE = kube.Gvr(GROUP, "v1alpha1", "syncresources")
KYMA = kube.Gvr(GROUP, "v1beta2", "kymas")
MODULE_TEMPLATE = kube.Gvr(GROUP, "v1beta2", "moduletemplates")
VPC_PEERING = kube.Gvr("cloud-resources.kyma-project.io", "v1beta1", "vpcpeerings")

_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_STATES = ["Ready", "Processing", "Warning", "Error", "Deleting"]


def _crd(*, gvr: kube.Gvr, kind: str, short: str, schema: dict[str, Any], printer: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{gvr.resource}.{gvr.group}"},
        "spec": {
            "group": gvr.group,
            "scope": "Namespaced",
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


def sync_resource_crd() -> dict[str, Any]:
    selector = {
        "type": "object",
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
    item = {
        "type": "object",
        "required": ["name", "strategy", "resource"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 253},
            "strategy": {"type": "string", "enum": ["CreateAndSync", "CreateAndIgnore", "Delete"]},
            "resource": _OBJECT,
            "subresource": _OBJECT,
        },
    }
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["items"],
                "x-kubernetes-validations": [
                    {"rule": "has(self.kyma) != has(self.target)", "message": "set exactly one of spec.kyma and spec.target"}
                ],
                "properties": {
                    "kyma": {"type": "string", "minLength": 1},
                    "target": {"type": "object", "required": ["selector"], "properties": {"selector": selector}},
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


async def install(api: client.ApiClient, definitions: list[dict[str, Any]], *, timeout: float = 30) -> None:
    """Create or update the CRDs and wait until the apiserver serves them."""
    for definition in definitions:
        name = definition["metadata"]["name"]
        try:
            await kube.request(api, "POST", CRDS.path(), body=definition)
        except kube.ConflictError:
            current = await kube.request(api, "GET", f"{CRDS.path()}/{name}")
            metadata = {**definition["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
            await kube.request(api, "PUT", f"{CRDS.path()}/{name}", body={**definition, "metadata": metadata})
    deadline = asyncio.get_running_loop().time() + timeout
    for definition in definitions:
        name = definition["metadata"]["name"]
        while True:
            crd = await kube.request(api, "GET", f"{CRDS.path()}/{name}")
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                break
            if asyncio.get_running_loop().time() > deadline:
                raise kube.KubeAPIError(0, f"CRD {name} not established within {timeout:.0f}s")
            await asyncio.sleep(0.1)


def kcp_crds() -> list[dict[str, Any]]:
    """The CRDs the reconciler chart ships (`python -m reconciler.crds DIR` writes them)."""
    return [sync_resource_crd(), kyma_crd(), module_template_crd()]


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for definition in kcp_crds():
        path = directory / f"{definition['metadata']['name']}.yaml"
        path.write_text("# Generated by `python -m reconciler.crds charts/kyma-reconciler/crds`; do not edit.\n"
                        + yaml.safe_dump(definition, sort_keys=False))
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "charts/kyma-reconciler/crds")):
        print(written_path)
