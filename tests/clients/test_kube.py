"""The raw Kubernetes client against a real apiserver: errors are raised, not misread."""

import uuid

import pytest
from kubernetes_asyncio import client

from clients import kube

pytestmark = pytest.mark.integration

CONFIGMAPS = kube.Gvr("", "v1", "configmaps")


async def test_list_of_an_unknown_resource_raises_not_found(skr_api: client.ApiClient) -> None:
    """A 404 answer to a list is NotFoundError, not an empty list."""
    with pytest.raises(kube.NotFoundError):
        await kube.list_objects(skr_api, kube.Gvr("nope.example.com", "v1", "things"), namespace=None, label_selector=None)


async def test_watch_refused_by_the_apiserver_raises_instead_of_ending(skr_api: client.ApiClient) -> None:
    """A watch the apiserver answers with an error status raises KubeAPIError with that status."""
    with pytest.raises(kube.KubeAPIError) as raised:
        async for _ in kube.watch_objects(
            skr_api, CONFIGMAPS, namespace="default", label_selector=None, resource_version="not-a-number", timeout_seconds=5
        ):
            pass
    assert raised.value.status in (400, 410, 500)


async def test_request_creates_and_conflicts(skr_api: client.ApiClient) -> None:
    """request() returns the created object; creating it again is ConflictError."""
    name = f"req-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}}
    created = await kube.request(skr_api, "POST", CONFIGMAPS.path("default"), body=body)
    assert created["metadata"]["name"] == name and created["data"] == {"a": "1"}
    with pytest.raises(kube.ConflictError):
        await kube.request(skr_api, "POST", CONFIGMAPS.path("default"), body=body)
    items, _ = await kube.list_objects(skr_api, CONFIGMAPS, namespace="default", label_selector=None)
    assert any(i["metadata"]["name"] == name and i["kind"] == "ConfigMap" for i in items)
