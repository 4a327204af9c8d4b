"""`kubectl explain` on our CRDs explains every field: each has a description, and the apiserver serves it."""

from collections.abc import Callable
from typing import Any

import pytest

from clients import kube
from reconciler import crds

from ..waiting import eventually, reconciles
from .conftest import Kcp

OURS = [crds.sync_resource_crd, crds.sync_binding_crd, crds.sync_record_crd, crds.module_watch_crd]


def _undescribed(schema: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, field in (schema.get("properties") or {}).items():
        if "description" not in field:
            missing.append(f"{path}.{name}")
        missing += _undescribed(field, f"{path}.{name}")
    if "items" in schema:
        missing += _undescribed(schema["items"], f"{path}[]")
    return missing


@pytest.mark.parametrize("crd", OURS, ids=lambda make: make.__name__)
def test_every_field_of_our_crds_is_described(crd: Any) -> None:
    definition = crd()
    schema = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _undescribed(schema, definition["spec"]["names"]["kind"]) == []


@pytest.mark.integration
async def test_the_apiserver_serves_the_descriptions_kubectl_explain_shows(kcp_api: kube.ApiClient) -> None:
    await crds.install(kcp_api, [crd() for crd in OURS])
    group, version = crds.SYNC_RESOURCE.group, crds.SYNC_RESOURCE.version
    published: dict[str, Any] = {}

    async def served() -> bool:  # the apiserver publishes a new CRD's OpenAPI a moment after it is established
        try:
            published.update(await kube.request(kcp_api, "GET", f"/openapi/v3/apis/{group}/{version}"))
        except kube.NotFoundError:
            return False
        return any(name.endswith(".SyncResource") for name in published["components"]["schemas"])

    await eventually(served, what="the OpenAPI of our group served")
    schemas = published["components"]["schemas"]
    [sync_resource] = [s for name, s in schemas.items() if name.endswith(".SyncResource")]
    assert sync_resource["properties"]["spec"]["description"]
    selector = sync_resource["properties"]["spec"]["properties"]["target"]["properties"]["selector"]
    assert "Kyma" in selector["properties"]["matchLabels"]["description"]


LIFECYCLE_MANAGER = "lifecycle-manager"


async def _mark_as_lifecycle_managers(api: kube.ApiClient, definition: dict[str, Any]) -> str:
    """Make the CRD lifecycle-manager's own (an extra served version, its marker); its resourceVersion after."""
    await crds.install_if_absent(api, [definition])
    path = crds.CRDS.object_path(None, definition["metadata"]["name"])
    live = await kube.request(api, "GET", path)
    live["metadata"].setdefault("annotations", {})["owner"] = LIFECYCLE_MANAGER
    if not any(v["name"] == "v1beta1" for v in live["spec"]["versions"]):
        older = {**live["spec"]["versions"][0], "name": "v1beta1", "storage": False}
        live["spec"]["versions"].append(older)
    updated = await kube.request(api, "PUT", path, body=live)
    return str(updated["metadata"]["resourceVersion"])


@pytest.mark.integration
async def test_crds_of_lifecycle_manager_are_never_replaced_in_kcp_or_runtimes(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Kyma and ModuleTemplate CRDs belong to lifecycle-manager: a reconciler start and its per-runtime
    reconciles leave them exactly as they are (an older served version, annotations, schema)."""
    kcp_kyma = await _mark_as_lifecycle_managers(kcp.api, crds.kyma_crd())
    skr = kcp.skrs["skr-1"]
    skr_kyma = await _mark_as_lifecycle_managers(skr, crds.kyma_crd())
    skr_templates = await _mark_as_lifecycle_managers(skr, crds.module_template_crd())
    async with run_controller(
        kyma={"enabled": True, "runtime_crds": "create-if-absent"},
        module_templates={"enabled": True, "runtime_crds": "create-if-absent"},
    ) as running:
        await eventually(lambda: running.readiness() is None, what="ready")
        await eventually(lambda: (reconciles(running.shared.registry, "kyma") or 0) >= 2, what="runtimes reconciled")
        await eventually(
            lambda: (reconciles(running.shared.registry, "module_templates") or 0) >= 2, what="templates reconciled"
        )

    async def version_of(api: kube.ApiClient, definition: dict[str, Any]) -> str:
        live = await kube.request(api, "GET", crds.CRDS.object_path(None, definition["metadata"]["name"]))
        return str(live["metadata"]["resourceVersion"])

    assert await version_of(kcp.api, crds.kyma_crd()) == kcp_kyma
    assert await version_of(skr, crds.kyma_crd()) == skr_kyma
    assert await version_of(skr, crds.module_template_crd()) == skr_templates
