"""KCP installs the watcher in every runtime, repairs it, removes it with the Kyma, and says when it cannot."""

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from clients import kube, objects
from contract import wire
from devenv import net
from pki import kubeconfigs, pki
from reconciler import crds, settings, watch_sets, watcher_objects
from watcher import config as watcher_config

from ..waiting import eventually, more_reconciles
from . import admission
from .conftest import Kcp, register_runtime

pytestmark = pytest.mark.integration

DEPLOYMENT = "/apis/apps/v1/namespaces/kyma-system/deployments/kyma-watcher"
CONFIG = "/api/v1/namespaces/kyma-system/configmaps/kyma-watcher-config"
INSTALL = {"enabled": True, "resync_seconds": 1, "listeners": ["https://listener.kcp.example.com"]}


async def _get(api: kube.ApiClient, path: str) -> dict[str, Any] | None:
    return await kube.get_or_none(api, path)


async def test_the_watcher_is_installed_repaired_and_valid(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """Two replicas spread over nodes with the certificate and configuration mounted; a deleted Deployment and an
    edited configuration come back; the configuration is one the watcher accepts."""
    skr = kcp.skrs["skr-1"]
    async with run_controller(watcher_install=INSTALL) as running:
        await eventually(lambda: _exists(skr, DEPLOYMENT), what="the watcher installed")
        deployment = await _get(skr, DEPLOYMENT)
        assert deployment is not None and deployment["spec"]["replicas"] == 2
        spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        assert spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == (
            "kubernetes.io/hostname"
        )
        config_map = await _get(skr, CONFIG)
        assert config_map is not None
        parsed = watcher_config.WatcherConfig.model_validate(yaml.safe_load(config_map["data"]["watcher.yaml"]))
        assert parsed.runtime == "skr-1" and parsed.central is not None
        await kube.request(skr, "DELETE", DEPLOYMENT)
        await kube.merge_patch(skr, CONFIG, {"data": {"watcher.yaml": "tampered"}})
        await eventually(lambda: _exists(skr, DEPLOYMENT), what="the Deployment restored")
        await eventually(lambda: _config_restored(skr), what="the configuration restored")
        reachable = running.shared.registry.get_sample_value("kyma_reconciler_runtime_reachable", {"runtime": "skr-1"})
        assert reachable == 1

        async def ready_in_kcp() -> bool:
            kyma = await kube.request(kcp.api, "GET", crds.KYMA.object_path("kcp-system", "skr-1"))
            return bool(_watcher_state(kyma).get("state") == "Ready")

        await eventually(ready_in_kcp, what="Ready in KCP's Kyma status")


async def _exists(api: kube.ApiClient, path: str) -> bool:
    return await _get(api, path) is not None


async def _config_restored(api: kube.ApiClient) -> bool:
    found = await _get(api, CONFIG)
    return found is not None and found["data"]["watcher.yaml"] != "tampered"


async def test_a_field_an_earlier_version_set_is_removed_on_upgrade(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """An earlier reconciler version applied a field today's no longer renders (emulated: the watcher's configuration
    applied again under our field manager with one more label). Today's pass removes it, though the object holds
    everything today's renders. Before, it stayed: the pass found nothing drifted and wrote nothing."""
    skr = kcp.skrs["skr-1"]
    async with run_controller(watcher_install=INSTALL):
        await eventually(lambda: _exists(skr, CONFIG), what="the watcher installed")
    live = await _get(skr, CONFIG) or {}
    metadata = live["metadata"]
    earlier = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "labels": {**metadata["labels"], "example.com/earlier": "yes"},
        },
        "data": live["data"],
    }
    await kube.apply(skr, CONFIG, earlier, field_manager=wire.RECONCILER_FIELD_MANAGER)

    async def label_gone() -> bool:
        return "example.com/earlier" not in ((await _get(skr, CONFIG) or {})["metadata"].get("labels") or {})

    async with run_controller(watcher_install=INSTALL) as running:
        await eventually(label_gone, what="the earlier version's label removed")
        assert (await _get(skr, CONFIG) or {})["data"] == live["data"]
        # Once the pass is over nothing else we own is left out of what is rendered (a port's defaulted protocol
        # names its item too): a pass that found something would write on every pass.
        cluster = objects.ClusterObjects(skr, field_manager=wire.RECONCILER_FIELD_MANAGER)
        config = settings.WatcherInstallSettings.model_validate(INSTALL)
        rendered = watcher_objects.render("skr-1", config, module=running.shared.config.events_module)

        async def nothing_left_out() -> bool:
            found = [await cluster.get(objects.Ref.of(wanted)) for wanted in rendered]
            assert all(found), "every watcher object is there"
            return not any(cluster.unwanted(live or {}, wanted) for live, wanted in zip(found, rendered, strict=True))

        await eventually(nothing_left_out, what="nothing of ours left out of the watcher's objects")


async def test_an_unreachable_runtime_shows_in_its_kyma_and_a_metric(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    name = f"skr-gone-{uuid.uuid4().hex[:4]}"
    nowhere = kubeconfigs.build(
        cluster=name,
        server=f"https://127.0.0.1:{net.free_port()}",
        ca_pem=pki.create_ca("x").cert_pem,
        user="x",
        token="x",
    )
    await register_runtime(kcp.api, name, nowhere, {})
    try:
        async with run_controller(watcher_install=INSTALL) as running:

            async def unreachable() -> bool:
                kyma = await kube.request(kcp.api, "GET", crds.KYMA.object_path("kcp-system", name))
                return bool(_watcher_state(kyma).get("state") == "Unreachable")

            await eventually(unreachable, what="Unreachable in KCP's Kyma status")
            sample = running.shared.registry.get_sample_value
            assert sample("kyma_reconciler_runtime_reachable", {"runtime": name}) == 0
    finally:
        await kube.delete(kcp.api, crds.KYMA.object_path("kcp-system", name))


async def test_the_watcher_goes_with_its_kyma(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    skr = kcp.skrs["skr-2"]
    async with run_controller(watcher_install=INSTALL):
        await eventually(lambda: _exists(skr, DEPLOYMENT), what="installed in skr-2")
        await kube.request(kcp.api, "DELETE", crds.KYMA.object_path("kcp-system", "skr-2"))
        await eventually(lambda: _all_gone(skr), what="every watcher object removed")


async def _all_gone(api: kube.ApiClient) -> bool:
    paths = [DEPLOYMENT, CONFIG, "/apis/rbac.authorization.k8s.io/v1/clusterroles/kyma-watcher"]
    return all([await _get(api, path) is None for path in paths])


def test_a_daemonset_instead_where_asked() -> None:
    daemons = settings.WatcherInstallSettings.model_validate({**INSTALL, "kind": "DaemonSet"})
    rendered = watcher_objects.render("skr-1", daemons, module="kyma-sync")
    [workload] = [o for o in rendered if o["kind"] in ("Deployment", "DaemonSet")]
    assert workload["kind"] == "DaemonSet" and "replicas" not in workload["spec"]


async def test_a_watcher_installed_by_someone_else_is_left_alone(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """A kyma-watcher ClusterRole without our labels (the chart's) is neither overwritten nor removed; the Kyma says
    why nothing was installed."""
    skr = kcp.skrs["skr-2"]
    role = "/apis/rbac.authorization.k8s.io/v1/clusterroles/kyma-watcher"
    theirs = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}
    await kube.ensure_namespace(skr, "kyma-system")
    await kube.create_or_replace(
        skr,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "kyma-watcher"},
            "rules": [theirs],
        },
    )
    try:
        async with run_controller(watcher_install=INSTALL):

            async def refused() -> bool:
                kyma = await kube.request(kcp.api, "GET", crds.KYMA.object_path("kcp-system", "skr-2"))
                watcher = _watcher_state(kyma)
                return bool(watcher.get("state") == "Error" and "not kyma-sync's" in watcher.get("message", ""))

            await eventually(refused, what="Error in KCP's Kyma status")
            live = await kube.request(skr, "GET", role)
            assert live["rules"] == [theirs]
    finally:
        await kube.delete(skr, role)


DEPLOYMENTS = kube.Gvr("apps", "v1", "deployments")


async def test_a_repair_that_loses_a_race_is_read_and_made_again_at_once(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A user scales the watcher's Deployment; the reconciler's repair, conditional on the Deployment as read, loses a
    race with another writer (the deployment controller writing its status does, in a real cluster): it is refused
    (409), read again and made in the same pass. The Deployment is back to two replicas, the other writer's field
    stays, KCP's Kyma never says Error over it (watched), and the conflict is counted."""
    skr = kcp.skrs["skr-1"]
    async with run_controller(watcher_install=INSTALL) as running:
        await eventually(lambda: _exists(skr, DEPLOYMENT), what="the watcher installed")
        seen: list[dict[str, str]] = []
        since = (await kube.request(kcp.api, "GET", crds.KYMA.path("kcp-system")))["metadata"]["resourceVersion"]
        watching = asyncio.create_task(_record_annotations(kcp.api, "skr-1", since, seen))
        try:
            async with admission.racing_admission(
                skr,
                label=uuid.uuid4().hex[:8],
                race=admission.annotating(DEPLOYMENT),
                rule=admission.operations_on(DEPLOYMENTS, "UPDATE"),
                selector={wire.SYNCED_LABEL: wire.SYNCED_VALUE},
            ) as raced:
                await kube.merge_patch(skr, DEPLOYMENT, {"spec": {"replicas": 5}})

                async def repaired() -> bool:
                    return bool(((await _get(skr, DEPLOYMENT)) or {}).get("spec", {}).get("replicas") == 2)

                await eventually(repaired, what="the Deployment repaired")
                assert raced == [watcher_objects.NAME], "the repair lost its race"
                deployment = await _get(skr, DEPLOYMENT) or {}
                assert deployment["metadata"]["annotations"]["raced"] == "yes", "the other writer's field stays"
            # The watch has delivered everything before a mark put on the Kyma once it delivers the mark.
            mark = uuid.uuid4().hex
            patch = {"metadata": {"annotations": {"test/mark": mark}}}
            await kube.merge_patch(kcp.api, crds.KYMA.object_path("kcp-system", "skr-1"), patch)
            await eventually(lambda: any(a.get("test/mark") == mark for a in seen), what="the watch caught up")
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        states = [_watcher_state({"metadata": {"annotations": annotations}}).get("state") for annotations in seen]
        assert "Error" not in states, states
        conflicts = {"controller": "watcher_install"}
        assert running.shared.registry.get_sample_value("kyma_reconciler_write_conflicts_total", conflicts) == 1


async def _record_annotations(api: kube.ApiClient, runtime: str, since: str, seen: list[dict[str, str]]) -> None:
    """The annotations of KCP's Kyma of ``runtime`` at every change after resourceVersion ``since``, in order."""
    async for _, kyma in kube.watch_objects(
        api, crds.KYMA, namespace="kcp-system", label_selector=None, resource_version=since, timeout_seconds=120
    ):
        if kyma["metadata"]["name"] == runtime:
            seen.append(kyma["metadata"].get("annotations") or {})


CLUSTER_ROLES = kube.Gvr("rbac.authorization.k8s.io", "v1", "clusterroles")


@pytest.mark.parametrize(
    ("controller", "section", "role"),
    [
        ("watcher_install", INSTALL, watcher_objects.NAME),
        ("watch_sets", {"enabled": True, "resync_seconds": 1}, watch_sets.ROLE),
    ],
)
async def test_a_cluster_role_someone_else_creates_first_is_never_taken_over(
    kcp: Kcp, run_controller: Callable[..., Any], controller: str, section: dict[str, Any], role: str
) -> None:
    """Someone else creates a ClusterRole of the name the reconciler is about to create in a runtime, between its
    read (absent) and its write: the write is refused (it is a create), and theirs keeps its rules and gets no
    synced-by label (a forced apply rewrote its rules and marked it ours, to be removed with the Kyma)."""
    skr = kcp.skrs["skr-1"]
    await kube.delete(skr, CLUSTER_ROLES.object_path(None, role))  # ours, from an earlier test: to be created now
    theirs = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}

    async def theirs_first(api: kube.ApiClient, obj: dict[str, Any]) -> None:
        body = {"metadata": {"name": obj["metadata"]["name"]}, "rules": [theirs]}
        await kube.request(api, "POST", CLUSTER_ROLES.path(), body=body)

    try:
        async with (
            admission.racing_admission(
                skr,
                label=uuid.uuid4().hex[:8],
                race=theirs_first,
                rule=admission.operations_on(CLUSTER_ROLES, "CREATE"),
                selector={wire.SYNCED_LABEL: wire.SYNCED_VALUE},
            ) as raced,
            run_controller(**{controller: section}) as running,
        ):
            await eventually(lambda: raced == [role], what="the create raced")
            await more_reconciles(running.shared.registry, controller, 4)
            live = await kube.request(skr, "GET", CLUSTER_ROLES.object_path(None, role))
            assert live["rules"] == [theirs] and wire.SYNCED_LABEL not in (live["metadata"].get("labels") or {})
    finally:
        await kube.delete(skr, CLUSTER_ROLES.object_path(None, role))


def _watcher_state(kyma: dict[str, Any]) -> dict[str, str]:
    """What KCP's Kyma says of its runtime's watcher (an annotation: a real Kyma's status schema is not ours)."""
    return dict(json.loads((kyma["metadata"].get("annotations") or {}).get(wire.WATCHER_STATE_ANNOTATION, "{}")))
