"""SKR -> KCP mirror of VpcPeerings: mirrored, status back, deletion waits for KCP, no rollbacks."""

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from nats.aio.client import Client as Nats

from clients import informer, kube
from contract import events, ids, wire
from devenv import landscape as landscape_mod
from devenv import standins
from reconciler import crds, mirror

from ..waiting import eventually, failed_reconciles, more_reconciles, write_conflicts
from . import admission
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


async def test_a_new_object_of_a_mirrored_name_never_gets_the_status_of_the_one_before(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A VpcPeering's mirror has its status (peering made). While the reconciler is down, a user strips our finalizer,
    deletes the object and creates another of the same name for another VPC. After the restart the mirror of the
    earlier object is replaced, not applied over: the new object never shows the earlier peering's status as its
    own (it did: the old mirror's status flowed back to it)."""
    for api in (kcp.api, *kcp.skrs.values()):
        await crds.install(api, [crds.vpc_peering_crd()])
    skr = kcp.skrs["skr-1"]
    source_path = crds.VPC_PEERING.object_path(kcp.runtime_namespace, "peer-reused")
    mirror_path = crds.VPC_PEERING.object_path("mirror-skr-1", f"{kcp.runtime_namespace}.peer-reused")
    mirroring = {"mirror": {"enabled": True, "resync_seconds": 1}}
    async with run_controller(**mirroring):
        await kube.request(
            skr, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=peering(kcp, "peer-reused", "vpc-1")
        )
        await eventually(lambda: _exists(kcp.api, mirror_path), what="mirrored")
        await kube.merge_patch(kcp.api, f"{mirror_path}/status", {"status": {"peeringId": "pcx-vpc-1"}})
        await eventually(lambda: _status_is(skr, source_path, {"peeringId": "pcx-vpc-1"}), what="status back")
    await kube.merge_patch(skr, source_path, {"metadata": {"finalizers": None}})
    await kube.request(skr, "DELETE", source_path)
    again = await kube.request(
        skr, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=peering(kcp, "peer-reused", "vpc-9")
    )
    async with run_controller(**mirroring) as running:
        new_uid = again["metadata"]["uid"]
        await eventually(lambda: _mirrors(kcp.api, mirror_path, new_uid), what="the new object mirrored")
        await more_reconciles(running.shared.registry, "mirror", 3)
        assert (await kube.request(skr, "GET", source_path)).get("status") is None
        assert (await kube.request(kcp.api, "GET", mirror_path))["spec"] == {"remoteVpc": "vpc-9"}
    await _remove(skr, source_path, kcp.api, mirror_path)


async def test_a_mirror_its_manager_holds_is_warned_about_and_replaced_once_released(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A VpcPeering's mirror carries its manager's finalizer. While the reconciler is down, a user strips our finalizer,
    deletes the object and creates another of the name. The earlier mirror is deleted but its manager holds it: the new
    object waits unmirrored, and past the warning threshold a Warning Event on the held mirror and a warning log say
    so, once however often passes come (its manager updating it wakes one each time), and kyma_reconciler_mirrors_held
    counts it (before, only an info log every 5 s). Once the manager lets go the new object is mirrored and the gauge
    is back to 0."""
    for api in (kcp.api, *kcp.skrs.values()):
        await crds.install(api, [crds.vpc_peering_crd()])
    skr = kcp.skrs["skr-1"]
    source_path = crds.VPC_PEERING.object_path(kcp.runtime_namespace, "peer-held")
    mirror_path = crds.VPC_PEERING.object_path("mirror-skr-1", f"{kcp.runtime_namespace}.peer-held")
    async with run_controller(mirror={"enabled": True, "resync_seconds": 1}):
        await kube.request(
            skr, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=peering(kcp, "peer-held", "vpc-1")
        )
        await eventually(lambda: _exists(kcp.api, mirror_path), what="mirrored")
    earlier = await kube.merge_patch(kcp.api, mirror_path, {"metadata": {"finalizers": ["example.com/peering"]}})
    await kube.merge_patch(skr, source_path, {"metadata": {"finalizers": None}})
    await kube.request(skr, "DELETE", source_path)
    again = await kube.request(
        skr, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=peering(kcp, "peer-held", "vpc-9")
    )

    async def warnings() -> int:
        listing = await kube.request(
            kcp.api,
            "GET",
            kube.EVENTS.path("mirror-skr-1"),
            query=[("fieldSelector", f"involvedObject.uid={earlier['metadata']['uid']}")],
        )
        return sum(
            e.get("count") or 1
            for e in listing["items"]
            if e["type"] == "Warning" and e["reason"] == "EarlierMirrorHeld"
        )

    async def warned() -> bool:
        return await warnings() > 0

    # No resync after the start's: once warned about, a pass is woken by the earlier mirror's changes.
    async with run_controller(mirror={"enabled": True, "resync_seconds": 3600, "held_warning_seconds": 1}) as running:
        held = running.shared.registry.get_sample_value
        await eventually(warned, what="a Warning Event on the held mirror")
        assert held("kyma_reconciler_mirrors_held") == 1
        for n in range(2):
            await kube.merge_patch(kcp.api, mirror_path, {"metadata": {"annotations": {"manager/tries": str(n)}}})
            await more_reconciles(running.shared.registry, "mirror", 1)
        assert await warnings() == 1, "warned about once"
        assert await _mirrors(kcp.api, mirror_path, earlier["metadata"]["annotations"][mirror.SOURCE_UID])
        assert (await kube.request(skr, "GET", source_path)).get("status") is None
        await kube.merge_patch(kcp.api, mirror_path, {"metadata": {"finalizers": None}})
        await eventually(lambda: _mirrors(kcp.api, mirror_path, again["metadata"]["uid"]), what="the new one mirrored")
        assert held("kyma_reconciler_mirrors_held") == 0
    await _remove(skr, source_path, kcp.api, mirror_path)


async def test_a_status_flows_back_only_to_the_object_mirrored(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """Between the reconciler's read of a VpcPeering and its write of the mirror's status back, a user strips our
    finalizer, deletes the object and creates another of the name: the status write is refused (it is conditional
    on the object read), and the new object never shows the earlier peering's status (it did: written by name)."""
    for api in (kcp.api, *kcp.skrs.values()):
        await crds.install(api, [crds.vpc_peering_crd()])
    skr, label = kcp.skrs["skr-1"], uuid.uuid4().hex[:8]
    source_path = crds.VPC_PEERING.object_path(kcp.runtime_namespace, "peer-raced")
    mirror_path = crds.VPC_PEERING.object_path("mirror-skr-1", f"{kcp.runtime_namespace}.peer-raced")
    labelled = peering(kcp, "peer-raced", "vpc-1")
    labelled["metadata"]["labels"] = {"race": label}
    replaced: list[dict[str, Any]] = []

    async def replace(api: kube.ApiClient, obj: dict[str, Any]) -> None:
        await kube.merge_patch(api, source_path, {"metadata": {"finalizers": None}})
        await kube.request(api, "DELETE", source_path)
        again = {**labelled, "spec": {"remoteVpc": "vpc-9"}}
        replaced.append(await kube.request(api, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=again))

    async with run_controller(mirror={"enabled": True, "resync_seconds": 1}) as running:
        await kube.request(skr, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=labelled)
        await eventually(lambda: _exists(kcp.api, mirror_path), what="mirrored")
        async with admission.racing_admission(
            skr,
            label=label,
            race=replace,
            rule=admission.operations_on(crds.VPC_PEERING, "UPDATE", subresource="status"),
        ) as raced:
            await kube.merge_patch(kcp.api, f"{mirror_path}/status", {"status": {"peeringId": "pcx-vpc-1"}})
            await eventually(lambda: raced == ["peer-raced"], what="the status write raced")
            [again] = replaced
            new_uid = again["metadata"]["uid"]
            await eventually(lambda: _mirrors(kcp.api, mirror_path, new_uid), what="the new object mirrored")
            await more_reconciles(running.shared.registry, "mirror", 3)
        found = await kube.request(skr, "GET", source_path)
        assert found["metadata"]["uid"] == again["metadata"]["uid"]
        assert found.get("status") is None, "the earlier peering's status is not the new object's"
    await _remove(skr, source_path, kcp.api, mirror_path)


async def test_a_mirror_write_that_loses_a_race_is_read_and_made_again_at_once(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A user changes a mirrored VpcPeering. The mirror's update, conditional on the mirror as read, loses a race with
    another writer in KCP (its manager annotates the mirror): refused (409), read again and made in the same pass, not
    failed to its backoff. The mirror has the new spec, the manager's field stays, the conflict is counted and no
    reconcile failed."""
    for api in (kcp.api, *kcp.skrs.values()):
        await crds.install(api, [crds.vpc_peering_crd()])
    skr = kcp.skrs["skr-1"]
    source_path = crds.VPC_PEERING.object_path(kcp.runtime_namespace, "peer-changed")
    mirror_name = f"{kcp.runtime_namespace}.peer-changed"
    mirror_path = crds.VPC_PEERING.object_path("mirror-skr-1", mirror_name)

    async def mirror_spec_is(remote: str) -> bool:
        found = await kube.get_or_none(kcp.api, mirror_path)
        return found is not None and bool(found["spec"] == {"remoteVpc": remote})

    async with run_controller(mirror={"enabled": True, "resync_seconds": 1}) as running:
        await kube.request(
            skr, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=peering(kcp, "peer-changed", "vpc-1")
        )
        await eventually(lambda: mirror_spec_is("vpc-1"), what="mirrored")
        # The create settled first: its hand-over is an update of ours too, which the webhook would race.
        await more_reconciles(running.shared.registry, "mirror", 4)
        failures = failed_reconciles(running.shared.registry, "mirror")
        async with admission.racing_admission(
            kcp.api,
            label=uuid.uuid4().hex[:8],
            race=admission.annotating(mirror_path),
            rule=admission.operations_on(crds.VPC_PEERING, "UPDATE"),
            selector={wire.RUNTIME_LABEL: "skr-1"},
            name=mirror_name,
        ) as raced:
            await kube.merge_patch(skr, source_path, {"spec": {"remoteVpc": "vpc-2"}})
            await eventually(lambda: raced == [mirror_name], what="the mirror's update raced")
            await eventually(lambda: mirror_spec_is("vpc-2"), what="the change mirrored")
        found = await kube.request(kcp.api, "GET", mirror_path)
        assert found["metadata"]["annotations"]["raced"] == "yes", "the manager's field stays"
        assert write_conflicts(running.shared.registry, "mirror") == 1
        assert failed_reconciles(running.shared.registry, "mirror") == failures
    await _remove(skr, source_path, kcp.api, mirror_path)


async def _remove(runtime: kube.ApiClient, source_path: str, kcp_api: kube.ApiClient, mirror_path: str) -> None:
    """A test's VpcPeering and its mirror gone, the reconciler stopped (nobody removes our finalizer)."""
    await kube.merge_patch(runtime, source_path, {"metadata": {"finalizers": None}})
    await kube.delete(runtime, source_path)
    await kube.delete(kcp_api, mirror_path)


async def _mirrors(kcp_api: kube.ApiClient, mirror_path: str, uid: str) -> bool:
    """Whether the mirror is of the object with ``uid``."""
    found = await kube.get_or_none(kcp_api, mirror_path)
    return bool(((found or {"metadata": {}})["metadata"].get("annotations") or {}).get(mirror.SOURCE_UID) == uid)


async def _exists(api: kube.ApiClient, path: str) -> bool:
    return await kube.get_or_none(api, path) is not None


async def _status_is(api: kube.ApiClient, path: str, status: dict[str, Any]) -> bool:
    found = await kube.get_or_none(api, path)
    return found is not None and bool(found.get("status") == status)
