"""Watch sets derived in KCP: what is synced to a runtime is watched there, so its drift is an event."""

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from clients import kube
from contract import watch_sets, wire
from devenv import landscape as landscape_mod
from reconciler import diff
from reconciler import watch_sets as reconciler_watch_sets

from ..waiting import eventually, failed_reconciles, more_reconciles, write_conflicts
from . import admission
from .conftest import Kcp, bind, label_kyma

pytestmark = pytest.mark.integration

WATCH_SET = f"/api/v1/namespaces/{watch_sets.NAMESPACE}/configmaps/{watch_sets.CONFIG_MAP}"


async def _watch_set(kcp: Kcp) -> watch_sets.WatchSet | None:
    try:
        found = await kube.request(kcp.skrs["skr-1"], "GET", WATCH_SET)
    except kube.NotFoundError:
        return None
    return watch_sets.WatchSet.decode(found["data"][watch_sets.DATA_KEY])


def _service_account(kcp: Kcp) -> dict[str, Any]:
    return {
        "name": "sa",
        "strategy": "CreateAndSync",
        "resource": {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "synced-sa", "namespace": kcp.runtime_namespace, "labels": {"tier": "gold"}},
        },
    }


def _deployment(kcp: Kcp) -> dict[str, Any]:
    labels = {"app": "synced"}
    return {
        "name": "deploy",
        "strategy": "CreateAndSync",
        "resource": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "synced-app", "namespace": kcp.runtime_namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
                },
            },
        },
    }


def _storage_class(kcp: Kcp) -> dict[str, Any]:
    return {
        "name": "storage",
        "strategy": "CreateAndSync",
        "resource": {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": kcp.runtime_namespace, "labels": {"tier": "gold"}},
            "provisioner": "example.com/fast",
            "allowVolumeExpansion": False,
        },
    }


async def test_the_watch_set_follows_what_is_synced_and_kcps_pause(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Every kind a SyncResource applied in the runtime is in its watch set, with read access for the watcher; a
    pause label on the runtime's Kyma in KCP reaches it too."""
    async with run_controller(watch_sets={"enabled": True, "resync_seconds": 3600}):
        await kcp.create("watched", {"kyma": "skr-1", "items": [_service_account(kcp), _deployment(kcp)]})

        async def derived() -> bool:
            found = await _watch_set(kcp)
            return found is not None and {(w.group, w.resource) for w in found.watches} >= {
                ("", "serviceaccounts"),
                ("apps", "deployments"),
            }

        await eventually(derived, what="the synced kinds in the watch set")
        found = await _watch_set(kcp)
        assert found is not None and all(w.label_selector == wire.SYNCED_SELECTOR for w in found.watches)
        role = await kube.request(
            kcp.skrs["skr-1"], "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/kyma-watcher-watch-set"
        )
        granted = {(r["apiGroups"][0], r["resources"][0]) for r in role["rules"]}
        assert granted >= {("", "serviceaccounts"), ("apps", "deployments")}
        assert all(r["verbs"] == ["get", "list", "watch"] for r in role["rules"])
        await label_kyma(kcp.api, "skr-1", {watch_sets.PAUSED_LABEL: "true"})
        try:
            await eventually(lambda: _paused(kcp), what="the pause in the watch set")
        finally:
            await label_kyma(kcp.api, "skr-1", {watch_sets.PAUSED_LABEL: None})
        await eventually(lambda: _not_paused(kcp), what="resumed")


async def _paused(kcp: Kcp) -> bool:
    return bool((found := await _watch_set(kcp)) and found.paused)


async def _not_paused(kcp: Kcp) -> bool:
    return bool((found := await _watch_set(kcp)) and not found.paused)


async def test_drift_of_any_synced_kind_is_reset_through_the_derived_watch_set(
    landscape: landscape_mod.Landscape,
    kcp: Kcp,
    run_controller: Callable[..., Any],
    pipeline: Callable[..., Any],
) -> None:
    """The watcher's own configuration watches ConfigMaps only; KCP's watch set adds ServiceAccounts,
    Deployments and StorageClasses, so an edit to any of them is reset by an event (the periodic resync is
    an hour away). Each kind is edited and awaited alone, and its time to reset printed."""
    own = [
        {
            "version": "v1",
            "resource": "configmaps",
            "namespaces": [kcp.runtime_namespace],
            "label_selector": wire.SYNCED_SELECTOR,
            "module": "kyma-sync",
        }
    ]
    await bind(kcp.api, kcp.namespace, allowPrivileged=True)  # a StorageClass is cluster-admin territory
    sa = f"/api/v1/namespaces/{kcp.runtime_namespace}/serviceaccounts/synced-sa"
    deployment = f"/apis/apps/v1/namespaces/{kcp.runtime_namespace}/deployments/synced-app"
    storage_class = f"/apis/storage.k8s.io/v1/storageclasses/{kcp.runtime_namespace}"
    drifts: list[tuple[str, dict[str, Any], Callable[[], Awaitable[bool]]]] = [
        (sa, {"metadata": {"labels": {"tier": "tin"}}}, lambda: _label_is(kcp, sa, "tier", "gold")),
        (deployment, {"spec": {"replicas": 5}}, lambda: _replicas_are(kcp, deployment, 1)),
        (
            storage_class,
            {"allowVolumeExpansion": True, "metadata": {"labels": {"tier": "tin"}}},
            lambda: _label_is(kcp, storage_class, "tier", "gold"),
        ),
    ]
    nats = (landscape.nats.url,)
    items = [_service_account(kcp), _deployment(kcp), _storage_class(kcp)]
    async with run_controller(resync_seconds=3600, nats_servers=nats, watch_sets={"enabled": True}):
        await kcp.create("drifting", {"kyma": "skr-1", "items": items})
        await eventually(lambda: _synced(kcp, "drifting"), what="synced (records are journaled before the writes)")
        await eventually(
            lambda: _watched(kcp, "serviceaccounts", "deployments", "storageclasses"), what="the watch set written"
        )
        written = await _watch_set(kcp)
        assert written is not None
        async with pipeline(own, ["kyma-sync"], central={}) as running:
            following = running.watcher.metrics.registry.get_sample_value
            await eventually(
                lambda: bool(following("kyma_watcher_watch_set_info", {"revision": written.revision})),
                what="the watcher following the watch set",
            )
            for path, patch, reset in drifts:
                edited = await kube.request(
                    kcp.skrs["skr-1"],
                    "PATCH",
                    path,
                    body=patch,
                    query=[("fieldManager", "kubectl")],
                    content_type="application/merge-patch+json",
                )
                edited_at = asyncio.get_running_loop().time()
                assert diff.carries(edited, patch), "the edit took"
                await eventually(reset, timeout=20, what=f"{path} reset")
                print(
                    f"{path.split('/')[-2]} reset {asyncio.get_running_loop().time() - edited_at:.2f}s after the edit"
                )
        await kcp.patch_spec("drifting", {"items": []})
        await eventually(lambda: _gone(kcp, storage_class), what="the StorageClass removed with its item")


async def _synced(kcp: Kcp, name: str) -> bool:
    return await kcp.state(name) == "Ready"


async def _watched(kcp: Kcp, *resources: str) -> bool:
    found = await _watch_set(kcp)
    return found is not None and {w.resource for w in found.watches} >= set(resources)


async def _label_is(kcp: Kcp, path: str, key: str, value: str) -> bool:
    found = await kube.request(kcp.skrs["skr-1"], "GET", path)
    return bool((found["metadata"].get("labels") or {}).get(key) == value)


async def _gone(kcp: Kcp, path: str) -> bool:
    try:
        await kube.request(kcp.skrs["skr-1"], "GET", path)
    except kube.NotFoundError:
        return True
    return False


async def _replicas_are(kcp: Kcp, path: str, replicas: int) -> bool:
    found = await kube.request(kcp.skrs["skr-1"], "GET", path)
    return bool(found["spec"]["replicas"] == replicas)


async def test_module_teams_declare_watches_for_the_runtimes_they_select_and_never_secrets(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A ModuleWatch (cluster-scoped: an admin's grant) adds its resource, selector, module and ignored fields to the
    watch sets of the runtimes it selects; one for Secrets is ignored (their bodies would reach the team)."""
    base = "/apis/operator.kyma-project.io/v1alpha1/modulewatches"
    declared = {
        "team-peerings": {
            "module": "cloud-manager",
            "group": "cloud-resources.kyma-project.io",
            "version": "v1beta1",
            "resource": "vpcpeerings",
            "labelSelector": "team=cloud",
            "ignoreFields": ["status"],
            "runtimeSelector": {"matchLabels": {"team-cloud": "yes"}},
        },
        "team-secrets": {"module": "cloud-manager", "version": "v1", "resource": "secrets", "labelSelector": "a=b"},
    }
    for name, spec in declared.items():
        await kube.create_or_replace(
            kcp.api,
            base,
            {
                "apiVersion": "operator.kyma-project.io/v1alpha1",
                "kind": "ModuleWatch",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
    await label_kyma(kcp.api, "skr-1", {"team-cloud": "yes"})
    try:
        async with run_controller(watch_sets={"enabled": True, "resync_seconds": 3600}):

            async def team_watch() -> watch_sets.CentralWatch | None:
                found = await _watch_set(kcp)
                return next((w for w in (found.watches if found else ()) if w.resource == "vpcpeerings"), None)

            await eventually(lambda: _has(team_watch()), what="the team's watch in skr-1's set")
            watch = await team_watch()
            assert watch is not None
            assert (watch.module, watch.label_selector, watch.ignore_fields) == (
                "cloud-manager",
                "team=cloud",
                ("status",),
            )
            found = await _watch_set(kcp)
            assert found is not None and all(w.resource != "secrets" for w in found.watches)
            await label_kyma(kcp.api, "skr-1", {"team-cloud": None})
            await eventually(lambda: _without(kcp, "vpcpeerings"), what="gone once skr-1 is no longer selected")
    finally:
        await label_kyma(kcp.api, "skr-1", {"team-cloud": None})
        for name in declared:
            await kube.delete(kcp.api, f"{base}/{name}")


async def _has(found: Any) -> bool:
    return await found is not None


async def _without(kcp: Kcp, resource: str) -> bool:
    found = await _watch_set(kcp)
    return found is not None and all(w.resource != resource for w in found.watches)


async def test_a_module_watch_cannot_name_a_wildcard_or_a_subresource(kcp: Kcp) -> None:
    """A wildcard would become a wildcard RBAC grant to every watcher (Secrets included): the CRD refuses it."""
    for resource in ("*", "pods/log"):
        with pytest.raises(kube.InvalidError):
            await kube.request(
                kcp.api,
                "POST",
                "/apis/operator.kyma-project.io/v1alpha1/modulewatches",
                body={
                    "apiVersion": "operator.kyma-project.io/v1alpha1",
                    "kind": "ModuleWatch",
                    "metadata": {"name": f"wild-{resource.replace('*', 'star').replace('/', '-')}"},
                    "spec": {"module": "m", "version": "v1", "resource": resource, "labelSelector": "a=b"},
                },
            )


def test_secrets_are_never_watchable_whoever_asks() -> None:
    """Synced Secrets (secretRef items) and ModuleWatches of Secrets alike: an event carries the object."""
    assert not reconciler_watch_sets.watchable("", "secrets")
    assert reconciler_watch_sets.watchable("", "configmaps") and reconciler_watch_sets.watchable("apps", "deployments")


async def test_a_deleted_grant_is_repaired_though_the_set_did_not_change(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    role = "/apis/rbac.authorization.k8s.io/v1/clusterroles/kyma-watcher-watch-set"
    async with run_controller(watch_sets={"enabled": True, "resync_seconds": 1}):
        await kcp.create("granted", {"kyma": "skr-1", "items": [_service_account(kcp)]})
        await eventually(lambda: _watched(kcp, "serviceaccounts"), what="the watch set")
        await kube.request(kcp.skrs["skr-1"], "DELETE", role)
        await eventually(lambda: _role_exists(kcp, role), what="the ClusterRole back")


async def test_a_repair_that_loses_a_race_is_read_and_made_again_at_once(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A user empties a runtime's watch set. Its repair, conditional on the ConfigMap as read, loses a race with another
    writer (it annotates the ConfigMap): refused (409), read again and made in the same pass, not failed to its
    backoff. The watch set is back, the other writer's field stays, the conflict is counted and no reconcile
    failed."""
    skr = kcp.skrs["skr-1"]

    async with run_controller(watch_sets={"enabled": True, "resync_seconds": 1}) as running:
        await kcp.create("raced", {"kyma": "skr-1", "items": [_service_account(kcp)]})
        await eventually(lambda: _watched(kcp, "serviceaccounts"), what="the watch set")
        # The create settled first: its hand-over is an update of ours too, which the webhook would race.
        await more_reconciles(running.shared.registry, "watch_sets", 4)
        failures = failed_reconciles(running.shared.registry, "watch_sets")
        async with admission.racing_admission(
            skr,
            label=uuid.uuid4().hex[:8],
            race=admission.annotating(WATCH_SET),
            selector={wire.SYNCED_LABEL: wire.SYNCED_VALUE},
            name=watch_sets.CONFIG_MAP,
        ) as raced:
            await kube.merge_patch(skr, WATCH_SET, {"data": {watch_sets.DATA_KEY: watch_sets.WatchSet.of([]).encode()}})
            await eventually(lambda: raced == [watch_sets.CONFIG_MAP], what="the repair raced")
            await eventually(lambda: _watched(kcp, "serviceaccounts"), what="the watch set repaired")
        found = await kube.request(skr, "GET", WATCH_SET)
        assert found["metadata"]["annotations"]["raced"] == "yes", "the other writer's field stays"
        assert write_conflicts(running.shared.registry, "watch_sets") == 1
        assert failed_reconciles(running.shared.registry, "watch_sets") == failures


async def _role_exists(kcp: Kcp, path: str) -> bool:
    return await kube.get_or_none(kcp.skrs["skr-1"], path) is not None
