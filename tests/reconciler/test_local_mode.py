"""Local mode: KCP is its own runtime (one cluster). Copies land beside the originals and nothing is mistaken for them."""

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from clients import kube
from devenv import landscape as landscape_mod
from reconciler import crds

from ..waiting import eventually
from .conftest import Kcp, register_runtime

pytestmark = pytest.mark.integration

RUNTIME_KYMA = crds.KYMA.object_path("kyma-system", "default")


async def test_kcp_as_its_own_runtime(
    landscape: landscape_mod.Landscape, kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """The runtime Kyma and the template copies go to kyma-system of the same cluster; KCP's Kymas and templates in
    kcp-system stay as they are, and the runtime Kyma is never taken for a runtime of its own."""
    template = f"local-{uuid.uuid4().hex[:6]}"
    original = crds.MODULE_TEMPLATE.object_path("kcp-system", template)
    await register_runtime(kcp.api, "local", landscape.kcp.admin_kubeconfig(), {})
    await kube.request(
        kcp.api,
        "POST",
        crds.MODULE_TEMPLATE.path("kcp-system"),
        body={
            "apiVersion": crds.MODULE_TEMPLATE.api_version,
            "kind": "ModuleTemplate",
            "metadata": {"name": template, "namespace": "kcp-system"},
            "spec": {"moduleName": "keda", "version": "1.0.0"},
        },
    )
    create = {"runtime_crds": "create-if-absent", "resync_seconds": 1}
    try:
        async with run_controller(
            kyma={"enabled": True, **create}, module_templates={"enabled": True, **create}
        ) as running:
            copy = crds.MODULE_TEMPLATE.object_path("kyma-system", template)
            await eventually(lambda: _exists(kcp, copy), what="the template copied beside its original")
            await eventually(lambda: _exists(kcp, RUNTIME_KYMA), what="the runtime Kyma in KCP's kyma-system")
            assert await _exists(kcp, original), "the original is KCP's, never a copy to remove"
            assert "default" not in running.shared.runtimes(), "the runtime Kyma is not a runtime of KCP"
    finally:
        await kube.delete(kcp.api, original)
        await kube.delete(kcp.api, crds.KYMA.object_path("kcp-system", "local"))
        if await kube.get_or_none(kcp.api, RUNTIME_KYMA) is not None:
            await kube.merge_patch(kcp.api, RUNTIME_KYMA, {"metadata": {"finalizers": None}})
            await kube.delete(kcp.api, RUNTIME_KYMA)
        await kube.delete(kcp.api, crds.MODULE_TEMPLATE.object_path("kyma-system", template))


async def _exists(kcp: Kcp, path: str) -> bool:
    return await kube.get_or_none(kcp.api, path) is not None
