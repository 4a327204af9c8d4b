"""The Kyma CR: created in the runtime, modules are the union of both sides, status flows KCP -> SKR."""

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from clients import kube
from contract import wire
from devenv import landscape as landscape_mod
from reconciler import crds, kyma_sync

from ..waiting import eventually, failed_reconciles, more_reconciles, reconciles, write_conflicts
from . import admission
from .conftest import Kcp

pytestmark = pytest.mark.integration

KCP_KYMA = f"{crds.KYMA.path('kcp-system')}/skr-2"
SKR_KYMA = f"{crds.KYMA.path('kyma-system')}/default"
MERGE = "application/merge-patch+json"


@pytest.fixture(autouse=True)
async def no_runtime_kyma(kcp: Kcp) -> None:
    """Each test starts without runtime Kymas (one object per runtime, shared by the tests)."""
    for api in kcp.skrs.values():
        try:
            await kube.merge_patch(api, SKR_KYMA, {"metadata": {"finalizers": None}})
            await kube.request(api, "DELETE", SKR_KYMA)
        except kube.NotFoundError:
            pass


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


async def _skr_kyma(kcp: Kcp, runtime: str) -> dict[str, Any] | None:
    try:
        return await kube.request(kcp.skrs[runtime], "GET", SKR_KYMA)
    except kube.NotFoundError:
        return None


async def _channel(kcp: Kcp, runtime: str) -> str | None:
    return ((await _skr_kyma(kcp, runtime) or {}).get("spec") or {}).get("channel")


async def test_the_union_is_visible_in_kcp_and_the_runtimes_channel_choice_stands(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """KCP's Kyma lists every module of the runtime and who asked for it; the channel is KCP's only at creation."""
    body = {"spec": {"channel": "regular", "modules": [{"name": "keda"}]}}
    await kube.request(kcp.api, "PATCH", KCP_KYMA, body=body, content_type=MERGE)
    async with run_controller(
        kyma={"enabled": True, "resync_seconds": 1, "runtime_crds": "create-if-absent"}
    ) as running:
        await eventually(lambda: _equals(skr_modules(kcp), {"keda"}), what="Kyma in the runtime")
        assert await _channel(kcp, "skr-2") == "regular", "KCP's channel when created"
        await kube.request(
            kcp.skrs["skr-2"],
            "PATCH",
            SKR_KYMA,
            query=[("fieldManager", "kubectl")],
            content_type=MERGE,
            body={"spec": {"channel": "fast", "modules": [{"name": "keda"}, {"name": "istio"}]}},
        )

        async def union_in_kcp() -> bool:
            annotations = (await kube.request(kcp.api, "GET", KCP_KYMA))["metadata"].get("annotations") or {}
            union = json.loads(annotations.get(wire.RUNTIME_MODULES_ANNOTATION, "[]"))
            return bool(union == [{"name": "keda", "source": "kcp"}, {"name": "istio", "source": "runtime"}])

        await eventually(union_in_kcp, what="the union on KCP's Kyma")
        await kube.request(kcp.api, "PATCH", KCP_KYMA, body={"spec": {"channel": "stable"}}, content_type=MERGE)
        passes = reconciles(running.shared.registry, "kyma")
        await eventually(lambda: reconciles(running.shared.registry, "kyma") >= passes + 3, what="three more passes")
        assert await _channel(kcp, "skr-2") == "fast", "the runtime's choice stands after creation"


async def test_a_runtime_kyma_deleted_by_a_user_is_back_at_once(
    landscape: landscape_mod.Landscape,
    kcp: Kcp,
    run_controller: Callable[..., Any],
    pipeline: Callable[..., Any],
) -> None:
    """Its finalizer turns the deletion into an event the watcher reports; the reconciler recreates it (the periodic
    resync is an hour away here)."""
    watches = [
        {
            "group": "operator.kyma-project.io",
            "version": "v1beta2",
            "resource": "kymas",
            "namespaces": ["kyma-system"],
            "label_selector": wire.SYNCED_SELECTOR,
            "module": "kyma-sync",
        }
    ]
    nats = (landscape.nats.url,)
    settings = {"enabled": True, "resync_seconds": 3600, "runtime_crds": "create-if-absent"}
    async with run_controller(kyma=settings, nats_servers=nats), pipeline(watches, ["kyma-sync"]):
        await eventually(lambda: _has_finalizer(kcp, "skr-1"), what="the runtime Kyma, protected")
        before = await _skr_kyma(kcp, "skr-1")
        assert before is not None
        deleted_at = asyncio.get_running_loop().time()
        await kube.request(kcp.skrs["skr-1"], "DELETE", SKR_KYMA)

        async def recreated() -> bool:
            now = await _skr_kyma(kcp, "skr-1")
            return now is not None and now["metadata"]["uid"] != before["metadata"]["uid"]

        await eventually(recreated, timeout=20, what="the runtime Kyma recreated")
        print(f"runtime Kyma back {asyncio.get_running_loop().time() - deleted_at:.2f}s after its deletion")
        assert await _has_finalizer(kcp, "skr-1")


async def _has_finalizer(kcp: Kcp, runtime: str) -> bool:
    kyma = await _skr_kyma(kcp, runtime)
    return kyma is not None and wire.RUNTIME_KYMA_FINALIZER in (kyma["metadata"].get("finalizers") or [])


async def test_kcps_kyma_deleted_removes_the_runtime_kyma(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    async with run_controller(kyma={"enabled": True, "resync_seconds": 1, "runtime_crds": "create-if-absent"}):
        await eventually(lambda: _has_finalizer(kcp, "skr-2"), what="the runtime Kyma")
        await kube.request(kcp.api, "DELETE", KCP_KYMA)
        await eventually(lambda: _gone(kcp, "skr-2"), what="the runtime Kyma removed")


async def _gone(kcp: Kcp, runtime: str) -> bool:
    return await _skr_kyma(kcp, runtime) is None


async def test_a_runtime_kyma_someone_else_created_is_synced_but_never_finalized_or_removed(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """lifecycle-manager's own runtime Kyma gets KCP's modules, but not our finalizer, and stays when KCP's goes."""
    skr = kcp.skrs["skr-2"]
    await crds.install_if_absent(skr, [crds.kyma_crd()])
    await kube.ensure_namespace(skr, "kyma-system")
    await kube.request(
        skr,
        "POST",
        crds.KYMA.path("kyma-system"),
        body={
            "apiVersion": crds.KYMA.api_version,
            "kind": "Kyma",
            "metadata": {"name": "default", "namespace": "kyma-system"},
            "spec": {"channel": "fast"},
        },
    )
    await kube.request(kcp.api, "PATCH", KCP_KYMA, body={"spec": {"modules": [{"name": "keda"}]}}, content_type=MERGE)
    async with run_controller(kyma={"enabled": True, "resync_seconds": 1}):
        await eventually(lambda: _equals(skr_modules(kcp), {"keda"}), what="KCP's modules in it")
        assert not await _has_finalizer(kcp, "skr-2")
        await kube.request(kcp.api, "DELETE", KCP_KYMA)
        await asyncio.sleep(2)  # passes run every second: time for a wrong removal to happen
        assert await _skr_kyma(kcp, "skr-2") is not None, "not ours to remove"


async def test_a_runtime_kyma_someone_else_creates_first_is_never_taken_over(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """lifecycle-manager creates its runtime Kyma between the reconciler's read (none there) and its write: the write
    is refused (it is a create), and theirs is then synced as any Kyma found there: KCP's modules, never our
    finalizer or created-by mark, and it stays when KCP's Kyma goes (a forced apply took it over as ours)."""
    skr = kcp.skrs["skr-2"]
    await crds.install_if_absent(skr, [crds.kyma_crd()])
    await kube.ensure_namespace(skr, "kyma-system")

    async def theirs_first(api: kube.ApiClient, obj: dict[str, Any]) -> None:
        theirs = {
            "apiVersion": crds.KYMA.api_version,
            "kind": "Kyma",
            "metadata": {"name": "default", "namespace": "kyma-system"},
            "spec": {"channel": "fast"},
        }
        await kube.request(api, "POST", crds.KYMA.path("kyma-system"), body=theirs)

    await kube.request(kcp.api, "PATCH", KCP_KYMA, body={"spec": {"modules": [{"name": "keda"}]}}, content_type=MERGE)
    async with (
        admission.racing_admission(
            skr,
            label=uuid.uuid4().hex[:8],
            race=theirs_first,
            rule=admission.operations_on(crds.KYMA, "CREATE"),
            selector={wire.SYNCED_LABEL: wire.SYNCED_VALUE},
        ) as raced,
        run_controller(kyma={"enabled": True, "resync_seconds": 1}) as running,
    ):
        await eventually(lambda: _equals(skr_modules(kcp), {"keda"}), what="KCP's modules in theirs")
        assert raced == ["default"], "the create raced"
        theirs = await _skr_kyma(kcp, "skr-2") or {}
        assert not await _has_finalizer(kcp, "skr-2") and theirs["spec"]["channel"] == "fast"
        assert kyma_sync.CREATED_BY_ANNOTATION not in (theirs["metadata"].get("annotations") or {})
        await kube.request(kcp.api, "DELETE", KCP_KYMA)
        await more_reconciles(running.shared.registry, "kyma", 3)
        assert await _skr_kyma(kcp, "skr-2") is not None, "not ours to remove"


async def test_a_status_write_that_loses_a_race_is_read_and_made_again_at_once(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """KCP's Kyma gets a status. Its write to the runtime Kyma, conditional on the Kyma just written, loses a race with
    another writer (it annotates the runtime Kyma): refused (409), read again and made in the same pass, not failed
    to its backoff. The status is down, the other writer's field stays, the conflict is counted and no reconcile
    failed."""
    skr = kcp.skrs["skr-2"]

    async def status_down() -> bool:
        return ((await _skr_kyma(kcp, "skr-2") or {}).get("status") or {}).get("state") == "Warning"

    async with run_controller(
        kyma={"enabled": True, "resync_seconds": 1, "runtime_crds": "create-if-absent"}
    ) as running:
        await eventually(lambda: _has_finalizer(kcp, "skr-2"), what="the runtime Kyma created")
        await more_reconciles(running.shared.registry, "kyma", 4)  # the passes after the create are over
        failures = failed_reconciles(running.shared.registry, "kyma")
        async with admission.racing_admission(
            skr,
            label=uuid.uuid4().hex[:8],
            race=admission.annotating(SKR_KYMA),
            rule=admission.operations_on(crds.KYMA, "UPDATE", subresource="status"),
            selector={wire.SYNCED_LABEL: wire.SYNCED_VALUE},
        ) as raced:
            await kube.merge_patch(kcp.api, f"{KCP_KYMA}/status", {"status": {"state": "Warning"}})
            await eventually(lambda: raced == ["default"], what="the status write raced")
            await eventually(status_down, what="the status in the runtime")
        kyma = await _skr_kyma(kcp, "skr-2") or {}
        assert kyma["metadata"]["annotations"]["raced"] == "yes", "the other writer's field stays"
        assert write_conflicts(running.shared.registry, "kyma") == 1
        assert failed_reconciles(running.shared.registry, "kyma") == failures
