"""The Kyma CR: created in the runtime, modules are the union of both sides, status flows KCP -> SKR."""

from collections.abc import Callable
from typing import Any

import pytest

from clients import kube
from reconciler import crds

from ..waiting import eventually
from .conftest import Kcp

pytestmark = pytest.mark.integration

KCP_KYMA = f"{crds.KYMA.path('kcp-system')}/skr-2"
SKR_KYMA = f"{crds.KYMA.path('kyma-system')}/default"
MERGE = "application/merge-patch+json"


async def skr_modules(kcp: Kcp) -> set[str] | None:
    try:
        kyma = await kube.request(kcp.skrs["skr-2"], "GET", SKR_KYMA)
    except kube.NotFoundError:
        return None
    return {m["name"] for m in kyma.get("spec", {}).get("modules") or []}


async def test_kyma_modules_are_the_union_and_status_flows_down(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """KCP's modules and a runtime user's modules coexist; KCP status appears in the runtime."""
    await kube.request(kcp.api, "PATCH", KCP_KYMA, body={"spec": {"modules": [{"name": "keda"}]}}, content_type=MERGE)
    async with run_controller(kyma={"enabled": True, "resync_seconds": 1, "runtime_crds": "create-if-absent"}):
        await eventually(lambda: _equals(skr_modules(kcp), {"keda"}), what="Kyma created in the runtime")
        await kube.request(
            kcp.skrs["skr-2"],
            "PATCH",
            SKR_KYMA,
            query=[("fieldManager", "kubectl")],
            content_type=MERGE,
            body={"spec": {"modules": [{"name": "keda"}, {"name": "istio"}]}},
        )
        await kube.request(
            kcp.api,
            "PATCH",
            KCP_KYMA,
            content_type=MERGE,
            body={"spec": {"modules": [{"name": "keda"}, {"name": "btp-operator"}]}},
        )
        await eventually(
            lambda: _equals(skr_modules(kcp), {"keda", "istio", "btp-operator"}), what="union of both sides"
        )
        await kube.request(
            kcp.api, "PATCH", f"{KCP_KYMA}/status", body={"status": {"state": "Ready"}}, content_type=MERGE
        )

        async def status_down() -> bool:
            kyma = await kube.request(kcp.skrs["skr-2"], "GET", SKR_KYMA)
            return (kyma.get("status") or {}).get("state") == "Ready"

        await eventually(status_down, what="status in the runtime")
        assert await skr_modules(kcp) == {"keda", "istio", "btp-operator"}


async def _equals(value: Any, expected: set[str]) -> bool:
    return bool(await value == expected)
