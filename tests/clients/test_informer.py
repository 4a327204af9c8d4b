"""The informer's cache against a real apiserver."""

import asyncio
import uuid
from typing import Any

import pytest

from clients import informer, kube

from ..waiting import eventually

pytestmark = pytest.mark.integration

CONFIGMAPS = kube.Gvr("", "v1", "configmaps")


async def test_the_cache_keeps_objects_without_their_managed_fields(skr_api: kube.ApiClient) -> None:
    """managedFields are the apiserver's bookkeeping, often the larger part of a small object: cached for every
    runtime's Kyma, Secret and SyncResource they cost KCP memory per runtime. Listed and watched objects are kept
    without them (controller-runtime's TransformStripManagedFields); everything else stays, resourceVersion too."""
    namespace = f"inf-{uuid.uuid4().hex[:6]}"
    await kube.ensure_namespace(skr_api, namespace)
    listed, watched = "listed", "watched"

    async def applied(name: str, value: str) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}}
        return await kube.apply(skr_api, CONFIGMAPS.object_path(namespace, name), body, field_manager="test")

    await applied(listed, "1")
    cache = informer.Informer(skr_api, CONFIGMAPS, namespace=namespace)
    stop = asyncio.Event()
    following = asyncio.create_task(cache.run(stop=stop))
    try:
        await asyncio.wait_for(cache.synced.wait(), timeout=30)
        live = await applied(watched, "2")
        assert live["metadata"].get("managedFields"), "the apiserver sends them: the test would prove nothing"
        await eventually(lambda: cache.get(watched, namespace) is not None, what="the watched object cached")
        for name, value in ((listed, "1"), (watched, "2")):
            cached = cache.get(name, namespace)
            assert cached is not None
            assert "managedFields" not in cached["metadata"]
            assert cached["data"] == {"k": value} and cached["metadata"]["resourceVersion"]
    finally:
        stop.set()
        await following
