"""SKR -> KCP mirror of VpcPeerings: mirrored, status back, deletion waits for KCP, no rollbacks."""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from nats.aio.client import Client as Nats

from clients import informer, kube
from contract import events, ids
from devenv import landscape as landscape_mod
from devenv import standins
from reconciler import crds, mirror

from ..waiting import eventually
from .conftest import Kcp

pytestmark = pytest.mark.integration

API = "cloud-resources.kyma-project.io/v1beta1"


def peering(kcp: Kcp, name: str, remote: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "VpcPeering",
        "metadata": {"name": name, "namespace": kcp.runtime_namespace},
        "spec": {"remoteVpc": remote},
    }


async def test_vpc_peering_is_mirrored_gets_status_and_is_cleaned_up(
    landscape: landscape_mod.Landscape,
    kcp: Kcp,
    run_controller: Callable[..., Any],
    pipeline: Callable[..., Any],
    nats_client: Nats,
) -> None:
    """Create in SKR -> mirror in KCP -> status back in SKR; stale events change nothing; delete cleans both."""
    for api in (kcp.api, *kcp.skrs.values()):
        await crds.install(api, [crds.vpc_peering_crd()])
    source_path = f"{crds.VPC_PEERING.path(kcp.runtime_namespace)}/peer-a"
    mirror_path = f"{crds.VPC_PEERING.path('mirror-skr-1')}/{kcp.runtime_namespace}.peer-a"
    watches = [
        {
            "group": "cloud-resources.kyma-project.io",
            "version": "v1beta1",
            "resource": "vpcpeerings",
            "namespaces": [kcp.runtime_namespace],
            "label_selector": "!kyma-project.io/skip-mirror",
            "module": "cloud-manager",
        }
    ]
    stop_manager = asyncio.Event()
    manager_task = asyncio.create_task(
        informer.follow(
            kcp.api,
            crds.VPC_PEERING,
            namespace="mirror-skr-1",
            label_selector=None,
            handler=standins.PeeringManager(kcp.api),
            stop=stop_manager,
        )
    )
    try:
        async with (
            pipeline(watches, ["cloud-manager"]),
            run_controller(
                resync_seconds=3600,
                nats_servers=(landscape.nats.url,),
                mirror={"enabled": True, "resync_seconds": 3600},
            ) as reconcilers,
        ):
            await kube.request(
                kcp.skrs["skr-1"],
                "POST",
                crds.VPC_PEERING.path(kcp.runtime_namespace),
                body=peering(kcp, "peer-a", "vpc-1"),
            )

            async def mirrored() -> bool:
                try:
                    found = await kube.request(kcp.api, "GET", mirror_path)
                except kube.NotFoundError:
                    return False
                return bool(found["spec"] == {"remoteVpc": "vpc-1"})

            await eventually(mirrored, what="mirror in KCP")
            mirror_obj = await kube.request(kcp.api, "GET", mirror_path)
            assert mirror_obj["metadata"]["labels"]["kyma-project.io/runtime"] == "skr-1"
            assert mirror_obj["metadata"]["annotations"][mirror.SOURCE_NAME] == "peer-a"

            async def status_back(peering_id: str) -> bool:
                source = await kube.request(kcp.skrs["skr-1"], "GET", source_path)
                return (source.get("status") or {}).get("peeringId") == peering_id

            await eventually(lambda: status_back("pcx-vpc-1"), what="status written back to SKR")
            source = await kube.request(kcp.skrs["skr-1"], "GET", source_path)
            assert mirror.FINALIZER in source["metadata"]["finalizers"]

            updated = await kube.request(
                kcp.skrs["skr-1"],
                "PATCH",
                source_path,
                body={"spec": {"remoteVpc": "vpc-2"}},
                content_type="application/merge-patch+json",
            )

            async def mirror_has(remote: str) -> bool:
                return bool((await kube.request(kcp.api, "GET", mirror_path))["spec"] == {"remoteVpc": remote})

            await eventually(lambda: mirror_has("vpc-2"), what="spec change mirrored")

            # An old change arriving late, and the same one again: neither rolls the mirror back.
            stale = events.ChangeEvent.create(
                runtime=ids.RuntimeId("skr-1"),
                module=ids.ModuleName("cloud-manager"),
                target=events.WatchedObject(
                    group="cloud-resources.kyma-project.io",
                    version="v1beta1",
                    resource="vpcpeerings",
                    kind="VpcPeering",
                    namespace=kcp.runtime_namespace,
                    name="peer-a",
                    uid=updated["metadata"]["uid"],
                ),
                resource_version="1",
                change_type=events.ChangeType.MODIFIED,
                body={**updated, "spec": {"remoteVpc": "vpc-1"}},
            )
            reconciles = reconcilers.shared.registry.get_sample_value
            before = reconciles("kyma_reconciler_reconciles_total", {"controller": "mirror", "outcome": "ok"}) or 0
            js = nats_client.jetstream()
            for _ in range(2):
                await js.publish(stale.subject, events.encode(stale), headers={"Nats-Msg-Id": stale.id})
            await eventually(
                lambda: _greater(
                    reconciles("kyma_reconciler_reconciles_total", {"controller": "mirror", "outcome": "ok"}) or 0,
                    before,
                ),
                what="stale event processed",
            )
            assert await mirror_has("vpc-2")

            await kube.request(kcp.skrs["skr-1"], "DELETE", source_path)

            async def gone(api: Any, path: str) -> bool:
                try:
                    await kube.request(api, "GET", path)
                except kube.NotFoundError:
                    return True
                return False

            await eventually(lambda: gone(kcp.api, mirror_path), what="mirror deleted")
            await eventually(lambda: gone(kcp.skrs["skr-1"], source_path), what="runtime object released")
    finally:
        stop_manager.set()
        await manager_task


async def _greater(value: float, than: float) -> bool:
    return value > than
