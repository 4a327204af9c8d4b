"""`kubectl explain` on our CRDs explains every field: each has a description, and the apiserver serves it."""

from typing import Any

import pytest

from clients import kube
from reconciler import crds

from ..waiting import eventually

OURS = [crds.sync_resource_crd, crds.sync_binding_crd, crds.sync_record_crd]


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
