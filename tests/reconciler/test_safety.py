"""The SyncResource engine off the happy path: restarts, refused applies, foreign objects, hostile items."""

import asyncio
import contextlib
import dataclasses
import functools
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from clients import kube
from contract import events, wire
from reconciler import cli, crds, manager, records, settings, sync_controller, sync_resources

from ..factories import configmap_event
from ..waiting import eventually, failed_reconciles, more_reconciles, reconciles, write_conflicts
from . import admission
from .conftest import Kcp, bind, label_kyma, register_runtime

pytestmark = pytest.mark.integration

MERGE = "application/merge-patch+json"


@contextlib.asynccontextmanager
async def watching_deletions(kcp: Kcp, runtime: str) -> AsyncIterator[list[str]]:
    """Names of ConfigMaps deleted in the test's runtime namespace while the block runs."""
    deleted: list[str] = []
    seen: set[str] = set()
    listing = await kube.request(kcp.skrs[runtime], "GET", kube.CONFIGMAPS.path(kcp.runtime_namespace))

    async def watch() -> None:
        resource_version = listing["metadata"]["resourceVersion"]
        while True:
            async for kind, obj in kube.watch_objects(
                kcp.skrs[runtime],
                kube.CONFIGMAPS,
                namespace=kcp.runtime_namespace,
                label_selector=None,
                resource_version=resource_version,
                timeout_seconds=60,
            ):
                resource_version = obj["metadata"]["resourceVersion"]
                seen.add(obj["metadata"]["name"])
                if kind == "DELETED":
                    deleted.append(obj["metadata"]["name"])

    task = asyncio.create_task(watch())
    try:
        yield deleted
        # A watch delivers in order: once a marker written now arrives, everything before it has.
        marker = f"marker-{uuid.uuid4().hex[:6]}"
        await kube.request(
            kcp.skrs[runtime], "POST", kube.CONFIGMAPS.path(kcp.runtime_namespace), body={"metadata": {"name": marker}}
        )
        await eventually(lambda: marker in seen, what="the watch to catch up")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def create_kymas(kcp: Kcp, namespace: str, count: int) -> None:
    semaphore = asyncio.Semaphore(32)

    async def one(n: int) -> None:
        async with semaphore:
            await kube.request(
                kcp.api,
                "POST",
                crds.KYMA.path(namespace),
                body={
                    "apiVersion": crds.KYMA.api_version,
                    "kind": "Kyma",
                    "metadata": {"name": f"filler-{n}", "namespace": namespace},
                    "spec": {"channel": "regular"},
                },
            )

    await asyncio.gather(*(one(n) for n in range(count)))


async def test_restart_with_thousands_of_kymas_deletes_nothing(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """A reconciler restarted while KCP holds 2,000 Kyma CRs must not delete (and recreate) what it synced."""
    kymas = f"kymas-{uuid.uuid4().hex[:6]}"
    await kube.ensure_namespace(kcp.api, kymas)
    label = {"restart-test": kymas}
    await register_runtime(kcp.api, "skr-1", {}, label, namespace=kymas, kubeconfig_secret=False)
    await create_kymas(kcp, kymas, 2000)
    items = [kcp.configmap(f"cm-restart-{n}", {"k": "v"}) for n in range(5)]
    try:
        async with run_controller(kyma_namespace=kymas):
            await kcp.create("restart", {"target": {"selector": {"matchLabels": label}}, "items": items})
            await eventually(lambda: _state_is(kcp, "restart", "Ready"), timeout=60, what="Ready")
        async with watching_deletions(kcp, "skr-1") as deleted:
            for _ in range(2):
                async with run_controller(kyma_namespace=kymas, resync_seconds=1) as running:
                    await more_reconciles(running.shared.registry, "sync_resources", 3)
        assert deleted == []
        for n in range(5):
            assert await kcp.configmap_in("skr-1", f"cm-restart-{n}") is not None
    finally:
        await kube.request(kcp.api, "DELETE", crds.KYMA.path(kymas))


async def test_a_refused_apply_keeps_the_live_object(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """An item changed to something the runtime's apiserver refuses leaves the object there, and says Error."""
    async with run_controller() as running:
        await kcp.create("refused", {"kyma": "skr-1", "items": [kcp.configmap("cm-refused", {"k": "good"})]})
        await eventually(lambda: _has(kcp, "skr-1", "cm-refused"), what="created")
        bad = kcp.configmap("cm-refused", {"k": "good"})
        bad["resource"]["metadata"]["labels"] = {"not a valid label key!": "x"}
        async with watching_deletions(kcp, "skr-1") as deleted:
            await kcp.patch_spec("refused", {"items": [bad]})
            await eventually(lambda: _state_is(kcp, "refused", "Error"), what="Error")
            await more_reconciles(running.shared.registry, "sync_resources", 2)  # retries of the failure
        assert deleted == []
    live = await kcp.configmap_in("skr-1", "cm-refused")
    assert live is not None and live["data"] == {"k": "good"}
    assert [a["name"] for a in await kcp.applied("refused")] == ["cm-refused"]


async def test_a_pre_existing_object_is_neither_adopted_nor_deleted(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A user's ConfigMap named by a CreateAndIgnore item: Warning 'exists, not managed', and it survives the SyncResource."""
    await kube.request(
        kcp.skrs["skr-1"],
        "POST",
        kube.CONFIGMAPS.path(kcp.runtime_namespace),
        body={"metadata": {"name": "users-own"}, "data": {"mine": "yes"}},
    )
    async with run_controller():
        await kcp.create(
            "foreign",
            {
                "kyma": "skr-1",
                "items": [
                    kcp.configmap("users-own", {"k": "v"}, "CreateAndIgnore"),
                    kcp.configmap("cm-ours", {"k": "v"}),
                ],
            },
        )
        await eventually(lambda: _state_is(kcp, "foreign", "Warning"), what="Warning")
        status = (await kcp.get("foreign") or {})["status"]
        item = next(i for i in status["items"] if i["name"] == "users-own")
        assert item["state"] == "Warning" and "not managed" in item["message"]
        await kube.request(kcp.api, "DELETE", kcp.path("foreign"))
        await eventually(lambda: _gone(kcp, "foreign"), what="SyncResource deleted")
    assert await kcp.configmap_in("skr-1", "cm-ours") is None
    survivor = await kcp.configmap_in("skr-1", "users-own")
    assert survivor is not None and survivor["data"] == {"mine": "yes"}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("x/../../secrets/{secret}", id="dot-dot-segments"),
        pytest.param("..%2F..%2Fsecrets%2F{secret}", id="encoded-slashes"),
        pytest.param("{secret}?dryRun=All", id="query"),
    ],
)
async def test_a_delete_item_cannot_reach_another_path(kcp: Kcp, run_controller: Callable[..., Any], name: str) -> None:
    """A Delete item whose name carries path segments is refused; the Secret it aims at survives."""
    secret = f"target-{uuid.uuid4().hex[:6]}"
    await kube.request(
        kcp.skrs["skr-1"],
        "POST",
        kube.SECRETS.path(kcp.runtime_namespace),
        body={"metadata": {"name": secret}, "stringData": {"a": "b"}},
    )
    item = kcp.configmap(name.format(secret=secret), {}, "Delete", item="sneaky")
    async with run_controller():
        try:
            await kcp.create("traversal", {"kyma": "skr-1", "items": [item]})
        except kube.InvalidError:
            pass  # refused by the CRD's validation: the reconciler never sees it
        else:
            await eventually(lambda: _state_is(kcp, "traversal", "Error"), what="Error")
    assert (
        await kube.get_or_none(kcp.skrs["skr-1"], kube.SECRETS.object_path(kcp.runtime_namespace, secret)) is not None
    )


async def test_two_sync_resources_claiming_one_object_do_not_flip_flop(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """The second claimant gets Conflict; the object keeps the first owner's content and marker over many resyncs."""
    async with run_controller(resync_seconds=0.5) as running:
        await kcp.create("first", {"kyma": "skr-1", "items": [kcp.configmap("cm-claimed", {"owner": "first"})]})
        await eventually(lambda: _state_is(kcp, "first", "Ready"), what="first Ready")
        first_uid = (await kcp.get("first") or {})["metadata"]["uid"]
        await kcp.create("second", {"kyma": "skr-1", "items": [kcp.configmap("cm-claimed", {"owner": "second"})]})
        await eventually(lambda: _state_is(kcp, "second", "Conflict"), what="second in Conflict")
        for _ in range(3):
            await more_reconciles(running.shared.registry, "sync_resources", 2)  # both claimants resynced
            live = await kcp.configmap_in("skr-1", "cm-claimed")
            assert live is not None and live["data"] == {"owner": "first"}
            assert live["metadata"]["annotations"][wire.OWNER_ANNOTATION].startswith(first_uid)
        await kube.request(kcp.api, "DELETE", kcp.path("second"))
        await eventually(lambda: _gone(kcp, "second"), what="second deleted")
        assert await kcp.configmap_in("skr-1", "cm-claimed") is not None


async def test_a_namespace_without_a_binding_applies_nothing(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """A SyncResource in a namespace no SyncBinding covers puts no privileged Pod into any runtime; it says Forbidden."""
    tenant = f"tenant-{uuid.uuid4().hex[:6]}"
    await kube.ensure_namespace(kcp.api, tenant)
    pod = {
        "name": "pod",
        "strategy": "CreateAndSync",
        "resource": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"evil-{tenant}", "namespace": "kube-system"},
            "spec": {
                "hostPID": True,
                "containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}],
            },
        },
    }
    async with run_controller(sync_resources={"namespace": tenant}):
        await kube.request(
            kcp.api,
            "POST",
            crds.SYNC_RESOURCE.path(tenant),
            body={
                "apiVersion": crds.SYNC_RESOURCE.api_version,
                "kind": "SyncResource",
                "metadata": {"name": "escalate", "namespace": tenant},
                "spec": {"target": {"selector": {}}, "items": [pod]},
            },
        )

        async def forbidden() -> bool:
            resource = await kube.request(kcp.api, "GET", crds.SYNC_RESOURCE.object_path(tenant, "escalate"))
            return (resource.get("status") or {}).get("state") == "Forbidden"

        await eventually(forbidden, what="Forbidden")
    for runtime in kcp.skrs:
        assert await kube.get_or_none(kcp.skrs[runtime], f"/api/v1/namespaces/kube-system/pods/evil-{tenant}") is None
    events = await kube.request(kcp.api, "GET", kube.EVENTS.path(tenant))
    assert any(e["involvedObject"]["name"] == "escalate" and e["type"] == "Warning" for e in events["items"])


async def test_adoption_is_the_bindings_decision_not_the_tenants(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """``adoption: IfUnmanaged`` takes over a user's object only once a SyncBinding sets allowAdoption; an object
    another kyma-sync controller wrote (our label, no owner marker) is never taken over."""
    for name, labels in (("users-cm", {}), ("controllers-cm", {wire.SYNCED_LABEL: wire.SYNCED_VALUE})):
        await kube.request(
            kcp.skrs["skr-1"],
            "POST",
            kube.CONFIGMAPS.path(kcp.runtime_namespace),
            body={"metadata": {"name": name, "labels": labels}, "data": {"mine": "yes"}},
        )
    items = [
        {**kcp.configmap("users-cm", {"k": "taken"}), "adoption": "IfUnmanaged"},
        {**kcp.configmap("controllers-cm", {"k": "taken"}), "adoption": "IfUnmanaged"},
    ]
    async with run_controller():
        await kcp.create("adopt", {"kyma": "skr-1", "items": items})
        await eventually(lambda: _state_is(kcp, "adopt", "Warning"), what="Warning")
        assert (await kcp.configmap_in("skr-1", "users-cm") or {}).get("data") == {"mine": "yes"}
        status = (await kcp.get("adopt") or {})["status"]
        assert all("allowAdoption" in i["message"] or "another kyma-sync" in i["message"] for i in status["items"])

        await bind(kcp.api, kcp.namespace, allowAdoption=True)

        async def users_cm_taken() -> bool:
            data = (await kcp.configmap_in("skr-1", "users-cm") or {}).get("data") or {}
            return data.get("k") == "taken"  # applied server-side: the user's own key stays

        await eventually(users_cm_taken, what="the user's ConfigMap adopted")
    assert (await kcp.configmap_in("skr-1", "controllers-cm") or {}).get("data") == {"mine": "yes"}
    states = {i["name"]: (i["state"], i["message"]) for i in (await kcp.get("adopt") or {})["status"]["items"]}
    assert states["controllers-cm"][0] == "Warning" and "another kyma-sync controller" in states["controllers-cm"][1]
    assert states["users-cm"][0] == "Ready"


async def test_a_harmless_body_cannot_adopt_a_privileged_object(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """Adoption is a server-side apply that keeps the fields others own: a body that only sets an image, adopting a
    hostPID Deployment, would run that image on the host. The live object is classified too, and refused."""
    name = f"host-{uuid.uuid4().hex[:6]}"

    def deployment(image: str, **pod_spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": kcp.runtime_namespace},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": image}], **pod_spec},
                },
            },
        }

    path = f"/apis/apps/v1/namespaces/{kcp.runtime_namespace}/deployments"
    await kube.request(kcp.skrs["skr-1"], "POST", path, body=deployment("node-agent", hostPID=True))
    await bind(kcp.api, kcp.namespace, allowAdoption=True)
    item = {"name": "adopt", "strategy": "CreateAndSync", "resource": deployment("evil"), "adoption": "IfUnmanaged"}
    async with run_controller():
        await kcp.create("takeover", {"kyma": "skr-1", "items": [item]})
        await eventually(lambda: _state_is(kcp, "takeover", "Warning"), what="Warning")
    [status] = (await kcp.get("takeover") or {})["status"]["items"]
    assert "privileged" in status["message"] and "hostPID" in status["message"]
    live = await kube.request(kcp.skrs["skr-1"], "GET", f"{path}/{name}")
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "node-agent"


async def test_an_item_without_a_namespace_is_held_to_where_it_lands(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """With targetNamespaces, a namespaced item naming no namespace lands in ``default`` and is refused; a
    cluster-scoped object is refused; and two items naming one object (namespace given or implied) are an Error."""
    await bind(kcp.api, kcp.namespace, targetNamespaces=[kcp.runtime_namespace])
    name = f"implied-{uuid.uuid4().hex[:6]}"

    def configmap(item: str, metadata: dict[str, str]) -> dict[str, Any]:
        resource = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {}}
        return {"name": item, "strategy": "CreateAndSync", "resource": resource}

    implied = configmap("implied", {"name": name})
    cluster_scoped = {
        "name": "cluster-scoped",
        "strategy": "CreateAndSync",
        "resource": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    }
    async with run_controller():
        await kcp.create("escape", {"kyma": "skr-1", "items": [implied, cluster_scoped]})
        await eventually(lambda: _state_is(kcp, "escape", "Forbidden"), what="Forbidden")
        status = (await kcp.get("escape") or {})["status"]
        messages = {i["name"]: i["message"] for i in status["items"]}
        assert "namespace default is not among" in messages["implied"]
        assert "cluster-scoped Namespace" in messages["cluster-scoped"]
        await kube.request(kcp.api, "DELETE", kcp.path("escape"))
        await eventually(lambda: _gone(kcp, "escape"), what="deleted")

        await bind(kcp.api, kcp.namespace)
        explicit = configmap("explicit", {"name": name, "namespace": "default"})
        await kcp.create("twice", {"kyma": "skr-1", "items": [implied, explicit]})
        await eventually(lambda: _state_is(kcp, "twice", "Error"), what="Error")
        states = {i["name"]: i for i in (await kcp.get("twice") or {})["status"]["items"]}
        assert states["explicit"]["state"] == "Error" and "same object as item implied" in states["explicit"]["message"]
        assert states["implied"]["state"] == "Ready"
        await kube.request(kcp.api, "DELETE", kcp.path("twice"))
        await eventually(lambda: _gone(kcp, "twice"), what="deleted")
    assert await kube.get_or_none(kcp.skrs["skr-1"], f"/api/v1/namespaces/{name}") is None
    assert await kube.get_or_none(kcp.skrs["skr-1"], kube.CONFIGMAPS.object_path("default", name)) is None


async def test_a_deprovisioned_runtime_lets_the_sync_resource_finish(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A runtime whose Kyma and kubeconfig are gone is dropped from the record; deleting the SyncResource completes."""
    runtime = f"skr-tmp-{uuid.uuid4().hex[:4]}"
    label = {"deprovision-test": runtime}
    await register_runtime(kcp.api, runtime, _kubeconfig_of(kcp, "skr-2"), label)
    async with run_controller():
        await kcp.create(
            "deprovision",
            {"target": {"selector": {"matchLabels": label}}, "items": [kcp.configmap("cm-deprovision", {"k": "v"})]},
        )
        await eventually(lambda: _state_is(kcp, "deprovision", "Ready"), what="Ready")
        await kube.request(kcp.api, "DELETE", crds.KYMA.object_path(wire.KCP_NAMESPACE, runtime))
        await kube.request(
            kcp.api,
            "DELETE",
            kube.SECRETS.object_path(
                wire.KUBECONFIG_NAMESPACE, wire.module_kubeconfig_secret(wire.SYNC_MODULE, runtime)
            ),
        )

        async def dropped() -> bool:
            status = (await kcp.get("deprovision") or {}).get("status") or {}
            return not await kcp.applied("deprovision") and status.get("state") == "Ready"

        await eventually(dropped, what="runtime dropped from the record")
        await kube.request(kcp.api, "DELETE", kcp.path("deprovision"))
        await eventually(lambda: _gone(kcp, "deprovision"), what="SyncResource deleted")


def _kubeconfig_of(kcp: Kcp, runtime: str) -> dict[str, Any]:
    return kcp.kubeconfigs[runtime]


async def _has(kcp: Kcp, runtime: str, name: str) -> bool:
    return await kcp.configmap_in(runtime, name) is not None


async def _state_is(kcp: Kcp, name: str, state: str) -> bool:
    return await kcp.state(name) == state


async def _gone(kcp: Kcp, name: str) -> bool:
    return await kcp.get(name) is None


async def test_an_event_reconciles_what_kcp_recorded_not_what_its_body_claims(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Owner annotations forged in a runtime do not choose the SyncResource; KCP's record of what went where does."""
    async with run_controller() as running:
        await kcp.create("routed", {"kyma": "skr-1", "items": [kcp.configmap("cm-routed", {"k": "v"})]})
        await kcp.create("victim", {"kyma": "skr-2", "items": [kcp.configmap("cm-victim", {"k": "v"})]})
        for name in ("routed", "victim"):
            await eventually(functools.partial(_state_is, kcp, name, "Ready"), what=f"{name} Ready")
        victim = await kcp.get("victim") or {}
        forged = {
            wire.OWNER_ANNOTATION: f"{victim['metadata']['uid']}/cm-victim",
            wire.SOURCE_ANNOTATION: f"{kcp.namespace}/victim",
        }
        controller = next(c for c in running.controllers if c.name == "sync_resources")

        def event_about(name: str) -> events.ChangeEvent:
            return configmap_event(
                wire.SYNC_MODULE,
                name=name,
                namespace=kcp.runtime_namespace,
                body={"metadata": {"name": name, "annotations": forged}},
            )

        await eventually(
            lambda: bool(list(controller.keys_for_event(event_about("cm-routed")))), what="the record indexed"
        )
        assert [str(k) for k in controller.keys_for_event(event_about("cm-routed"))] == [
            f"{kcp.namespace}/routed@skr-1"
        ]
        assert list(controller.keys_for_event(event_about("someone-elses"))) == []


async def test_an_event_about_a_name_every_runtime_uses_reaches_its_own_runtimes_sync_resources(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Items of the SyncResources of many runtimes name the same object: an event from one runtime reaches that
    runtime's SyncResource and the groups selecting the runtime, not the others'."""
    label = f"test-{uuid.uuid4().hex[:6]}"
    async with run_controller() as running:
        await label_kyma(kcp.api, "skr-2", {label: "beta"})
        await kcp.create("one", {"kyma": "skr-1", "items": [kcp.configmap("cm-shared", {"k": "v"})]})
        await kcp.create("unknown", {"kyma": "skr-9", "items": [kcp.configmap("cm-shared", {"k": "v"})]})
        await kcp.create(
            "group",
            {"target": {"selector": {"matchLabels": {label: "beta"}}}, "items": [kcp.configmap("cm-shared", {})]},
        )
        controller = next(c for c in running.controllers if c.name == "sync_resources")

        def keys(runtime: str) -> list[str]:
            event = configmap_event(wire.SYNC_MODULE, runtime, name="cm-shared", namespace=kcp.runtime_namespace)
            return [str(k) for k in controller.keys_for_event(event)]

        await eventually(lambda: len(keys("skr-1")) == 1 and len(keys("skr-2")) == 1, what="the items indexed")
        assert keys("skr-1") == [f"{kcp.namespace}/one@skr-1"]
        assert keys("skr-2") == [f"{kcp.namespace}/group@skr-2"]
        assert keys("skr-9") == [f"{kcp.namespace}/unknown@skr-9"]
    await label_kyma(kcp.api, "skr-2", {label: None})


async def test_not_ready_and_not_reconciling_until_every_cache_listed(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """/readyz says which caches are still listing; once all have, it is ready."""
    config = settings.ReconcilerSettings.model_validate({"sync_resources": {"namespace": kcp.namespace}})
    idle = cli.build_manager(config, kcp=kcp.api, registry=CollectorRegistry())
    assert "kymas" in (idle.readiness() or "") and "syncresources" in (idle.readiness() or "")
    async with run_controller() as running:
        await eventually(lambda: running.readiness() is None, what="ready")


@contextlib.asynccontextmanager
async def hanging_admission(
    api: kube.ApiClient, *, label: str, operation: str = "CREATE"
) -> AsyncIterator[list[asyncio.StreamWriter]]:
    """``operation`` on ConfigMaps labelled ``label`` hangs in the runtime's apiserver: its webhook never answers.
    Yields the webhook's connections held so far."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    path = await admission.webhook(
        api,
        f"hang-{label}",
        {"url": f"https://127.0.0.1:{port}/"},
        rules=[admission.operations_on(kube.CONFIGMAPS, operation)],
        selector={"hang": label},
        timeout=30,
    )
    try:
        yield held
    finally:
        await kube.request(api, "DELETE", path)
        for writer in held:
            writer.close()
        server.close()


async def test_a_runtime_cut_short_keeps_the_record_of_what_was_written(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """One item's write hangs past the runtime's time limit: the reconcile still saves the records of what it wrote
    before (journal), so removing that item later deletes its object instead of leaving an orphan."""
    label = uuid.uuid4().hex[:8]
    hanging = kcp.configmap("cm-hangs", {"k": "v"})
    hanging["resource"]["metadata"]["labels"] = {"hang": label}
    sections = {
        "sync_resources": {"per_runtime_concurrency": 1, "runtime_timeout_seconds": 3, "reconcile_timeout_seconds": 8}
    }
    async with hanging_admission(kcp.skrs["skr-1"], label=label), run_controller(**sections):
        await kcp.create("cut", {"kyma": "skr-1", "items": [kcp.configmap("cm-first", {"k": "v"}), hanging]})

        async def recorded() -> bool:
            return "cm-first" in {a["name"] for a in await kcp.applied("cut")}

        await eventually(recorded, what="the written object recorded")
        await eventually(lambda: _state_is(kcp, "cut", "Error"), what="Error")  # status is written after records
        status = (await kcp.get("cut") or {})["status"]
        assert all("did not finish within 3s" in i["message"] for i in status["items"])
        assert await kcp.configmap_in("skr-1", "cm-first") is not None
        await kcp.patch_spec("cut", {"items": [kcp.configmap("cm-other", {"k": "v"})]})
        await eventually(lambda: _absent(kcp, "skr-1", "cm-first"), what="the removed item's object deleted")


async def _absent(kcp: Kcp, runtime: str, name: str) -> bool:
    return await kcp.configmap_in(runtime, name) is None


async def test_events_about_a_failing_sync_resource_wait_for_its_backoff(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A runtime posting events about an object of a failing SyncResource cannot make it spin: the first event runs
    that runtime's pass, which fails; while it backs off, further events run nothing and their messages are told
    to come back when the queue retries."""
    name = f"cm-{uuid.uuid4().hex[:6]}"
    failing = {
        "name": "failing",
        "strategy": "CreateAndSync",
        "resource": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "no-such-ns"}},
    }
    async with run_controller() as running:
        await kcp.create("spin", {"kyma": "skr-1", "items": [failing]})
        await eventually(lambda: _state_is(kcp, "spin", "Error"), what="Error")
        [sync] = [c for c in running.controllers if c.name == "sync_resources"]
        await eventually(lambda: sync.queue.retry_delay(_key(kcp, "spin")) > 0, what="backing off")
        before = reconciles(running.shared.registry, "sync_resources")
        results = [
            await sync.on_event(configmap_event("kyma-sync", "skr-1", name=name, namespace="no-such-ns"))
            for _ in range(20)
        ]
        assert reconciles(running.shared.registry, "sync_resources") == before + 1
    assert all(r is not None and not r.ok and (r.requeue_after or 0) > 0 for r in results)


def _key(kcp: Kcp, name: str) -> sync_controller.Key:
    return sync_controller.Key(kcp.namespace, name)


async def test_records_of_an_earlier_version_are_honoured_then_moved(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A SyncResource whose records still sit in status.applied (written before SyncRecords): the object of an item
    removed meanwhile is still released, and the records move to SyncRecords, leaving the status."""
    stale = f"cm-{uuid.uuid4().hex[:6]}"
    await kcp.create("legacy", {"kyma": "skr-1", "items": [kcp.configmap(f"{stale}-kept", {"k": "v"})]})
    uid = (await kcp.get("legacy") or {})["metadata"]["uid"]
    await kube.request(
        kcp.skrs["skr-1"],
        "POST",
        kube.CONFIGMAPS.path(kcp.runtime_namespace),
        body={
            "metadata": {
                "name": stale,
                "labels": {wire.SYNCED_LABEL: wire.SYNCED_VALUE},
                "annotations": {wire.OWNER_ANNOTATION: f"{uid}/removed-item"},
            }
        },
    )
    record = {
        "runtime": "skr-1",
        "item": "removed-item",
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "namespace": kcp.runtime_namespace,
        "name": stale,
    }
    await kube.merge_patch(
        kcp.api,
        crds.SYNC_RESOURCE.object_path(kcp.namespace, "legacy", subresource="status"),
        {"status": {"applied": [record]}},
    )
    async with run_controller():
        await eventually(lambda: _absent(kcp, "skr-1", stale), what="the removed item's object released")

        async def moved() -> bool:
            status = (await kcp.get("legacy") or {}).get("status") or {}
            return "applied" not in status and [a["name"] for a in await kcp.applied("legacy")] == [f"{stale}-kept"]

        await eventually(moved, what="records moved to SyncRecords")


async def test_legacy_records_survive_a_reconcile_that_saves_nothing(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Records in status.applied (written before SyncRecords) are not erased by a reconcile that stops early (no
    SyncBinding covers the namespace any more): they move only when they are saved as SyncRecords."""
    record = {"runtime": "skr-1", "item": "x", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "a", "name": "b"}
    await kcp.create("legacy-early", {"kyma": "skr-1", "items": [kcp.configmap("cm-x", {}, item="x")]})
    path = crds.SYNC_RESOURCE.object_path(kcp.namespace, "legacy-early", subresource="status")
    await kube.merge_patch(kcp.api, path, {"status": {"applied": [record]}})
    await kube.request(kcp.api, "DELETE", crds.SYNC_BINDING.object_path(None, f"test-{kcp.namespace}"))
    async with run_controller():
        await eventually(lambda: _state_is(kcp, "legacy-early", "Forbidden"), what="Forbidden")
    status = (await kcp.get("legacy-early") or {})["status"]
    assert status["applied"] == [record]


async def test_a_role_binding_cannot_borrow_a_role_it_does_not_own(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Naming an existing Role in an item (left alone: not ours) does not make it 'defined by this SyncResource':
    a RoleBinding to it is refused."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{kcp.runtime_namespace}/roles"
    await kube.request(
        kcp.skrs["skr-1"],
        "POST",
        rbac,
        body={
            "metadata": {"name": "powerful"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
        },
    )
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "powerful", "namespace": kcp.runtime_namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "borrow", "namespace": kcp.runtime_namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "powerful"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": kcp.runtime_namespace}],
    }
    items = [
        {"name": "role", "strategy": "CreateAndSync", "resource": role},
        {"name": "binding", "strategy": "CreateAndSync", "resource": binding},
    ]
    async with run_controller():
        await kcp.create("borrow", {"kyma": "skr-1", "items": items})
        await eventually(lambda: _state_is(kcp, "borrow", "Forbidden"), what="Forbidden")
    states = {i["name"]: (i["state"], i["message"]) for i in (await kcp.get("borrow") or {})["status"]["items"]}
    assert states["role"][0] == "Warning" and states["binding"][0] == "Forbidden"
    assert "does not define" in states["binding"][1]
    bindings = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{kcp.runtime_namespace}/rolebindings/borrow"
    assert await kube.get_or_none(kcp.skrs["skr-1"], bindings) is None


def _reads(registry: CollectorRegistry, source: str) -> float:
    return registry.get_sample_value("kyma_reconciler_sync_resource_reads_total", {"source": source}) or 0


async def _synced_at(kcp: Kcp, name: str, generation: int) -> bool:
    status = (await kcp.get(name) or {}).get("status") or {}
    return status.get("syncedGeneration") == generation and status.get("state") == "Ready"


async def test_a_pass_over_one_runtime_never_acts_on_a_cached_generation_its_records_are_past(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A pass over one runtime (a drift event's) takes its SyncResource from the informer's cache when the runtime's
    SyncRecord shard says the cache holds the generation last acted on. When the cache is behind that (a watch that
    lags while a resync read the new generation live and acted on it), the pass reads it live: acting on the older
    generation would recreate the object of a removed item and delete the one that replaced it."""
    async with run_controller() as running:
        sync, first = await _synced_for_skr_1(kcp, running, "behind", "cm-old")
        await eventually(lambda: _cached_synced(sync, kcp, "behind") == 1, what="the cache at generation 1, synced")
        from_cache = _reads(running.shared.registry, "cache")
        drift = sync_controller.Key(kcp.namespace, "behind", "skr-1")
        await _pass_on(sync, drift, cached=None)
        assert _reads(running.shared.registry, "cache") == from_cache + 1

        await kcp.patch_spec("behind", {"items": [kcp.configmap("cm-new", {"k": "v"})]})
        await eventually(lambda: _synced_at(kcp, "behind", 2), what="generation 2 synced")
        assert await kcp.configmap_in("skr-1", "cm-old") is None
        # The cache falls back to generation 1 (a lagging watch) while the records say generation 2 was acted on.
        await _pass_on(sync, drift, cached=first)
        assert await kcp.configmap_in("skr-1", "cm-old") is None
        assert await kcp.configmap_in("skr-1", "cm-new") is not None
        assert [a["name"] for a in await kcp.applied("behind")] == ["cm-new"]
        assert _reads(running.shared.registry, "cache") == from_cache + 1


async def test_a_pass_over_one_runtime_never_acts_on_a_cached_copy_of_a_sync_resource_being_deleted(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """The SyncResource is being deleted and its objects are released; a cache that has not seen the deletion yet
    finds no shard for the runtime any more, so the pass reads it live and puts nothing back."""
    async with run_controller() as running:
        sync, synced = await _synced_for_skr_1(kcp, running, "leaving", "cm-leaving")
        before = await kube.merge_patch(
            kcp.api,
            kcp.path("leaving"),
            {"metadata": {"finalizers": [*synced["metadata"]["finalizers"], "test/hold"]}},
        )
        await kube.request(kcp.api, "DELETE", kcp.path("leaving"))
        # The deletion is a generation of its own: shards a releasing pass saves (a group's) are past the cached one.
        assert ((await kcp.get("leaving")) or {"metadata": {}})["metadata"].get("generation") == 2
        await eventually(lambda: _only_held(kcp, "leaving"), what="released, our finalizer gone")
        assert await kcp.configmap_in("skr-1", "cm-leaving") is None
        from_cache = _reads(running.shared.registry, "cache")
        await _pass_on(sync, sync_controller.Key(kcp.namespace, "leaving", "skr-1"), cached=before)
        assert await kcp.configmap_in("skr-1", "cm-leaving") is None
        assert await kcp.applied("leaving") == []
        assert _reads(running.shared.registry, "cache") == from_cache
        await kube.merge_patch(kcp.api, kcp.path("leaving"), {"metadata": {"finalizers": None}})


_HELD_PASS: dict[str, Any] = {
    "sync_resources": {"runtime_timeout_seconds": 30, "reconcile_timeout_seconds": 60},
    "shutdown_grace_seconds": 1,  # a pass held in a runtime is cancelled a second into the shutdown
}
"""Controller settings for a test that holds a pass inside a runtime while it looks at KCP."""


def _labelled(item: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    item["resource"]["metadata"]["labels"] = labels
    return item


async def test_a_pass_over_every_runtime_stamps_the_records_before_it_acts(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A pass on a new generation makes the SyncRecord shards say so before it visits any runtime: while it is held
    inside a runtime (a webhook that never answers) — and had it failed there, or been cut short before saving —
    a pass over one runtime whose cache still holds the earlier generation reads the SyncResource live."""
    label = uuid.uuid4().hex[:8]
    hanging = _labelled(kcp.configmap("cm-hangs", {"k": "v"}), {"hang": label})
    async with hanging_admission(kcp.skrs["skr-1"], label=label) as held, run_controller(**_HELD_PASS):
        await kcp.create("stamped", {"kyma": "skr-1", "items": [kcp.configmap("cm-stays", {"k": "v"})]})
        await eventually(lambda: _synced_at(kcp, "stamped", 1), what="generation 1 synced")
        assert await _stamps(kcp, "stamped") == [1]
        await kcp.patch_spec("stamped", {"items": [kcp.configmap("cm-stays", {"k": "v"}), hanging]})
        await eventually(lambda: bool(held), what="the pass on generation 2 held in skr-1")
        assert await _stamps(kcp, "stamped") == [2]


async def test_a_deletion_stamps_the_records_before_it_releases_anything(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Deleting a SyncResource is a generation of its own, and its releasing pass stamps the shards with it before
    it visits a runtime: while it is held deleting an object (a webhook that never answers), a pass over one
    runtime whose cache has not seen the deletion reads the SyncResource live."""
    label = uuid.uuid4().hex[:8]
    item = _labelled(kcp.configmap("cm-held", {"k": "v"}), {"hang": label})
    hanging = hanging_admission(kcp.skrs["skr-1"], label=label, operation="DELETE")
    async with hanging as held, run_controller(**_HELD_PASS):
        await kcp.create("deleted", {"kyma": "skr-1", "items": [item]})
        await eventually(lambda: _synced_at(kcp, "deleted", 1), what="generation 1 synced")
        assert await _stamps(kcp, "deleted") == [1]
        await kube.request(kcp.api, "DELETE", kcp.path("deleted"))
        await eventually(lambda: bool(held), what="the releasing pass held in skr-1")
        assert await _stamps(kcp, "deleted") == [2]


async def _stamps(kcp: Kcp, name: str) -> list[Any]:
    """The SyncResource generation each of its SyncRecord shards says was last acted on."""
    resource = await kcp.get(name)
    assert resource is not None
    shards, _ = await kube.list_objects(
        kcp.api,
        crds.SYNC_RECORD,
        namespace=kcp.namespace,
        label_selector=f"{wire.RECORDS_OF_LABEL}={resource['metadata']['uid']}",
    )
    return [shard["spec"].get(records.GENERATION_FIELD) for shard in shards]


async def _synced_for_skr_1(
    kcp: Kcp, running: manager.Manager, name: str, configmap: str
) -> tuple[sync_controller.SyncResourceController, dict[str, Any]]:
    """A SyncResource putting ``configmap`` into skr-1, synced at generation 1; the controller, the object then."""
    [sync] = [c for c in running.controllers if isinstance(c, sync_controller.SyncResourceController)]
    await kcp.create(name, {"kyma": "skr-1", "items": [kcp.configmap(configmap, {"k": "v"})]})
    await eventually(lambda: _synced_at(kcp, name, 1), what="generation 1 synced")
    resource = await kcp.get(name)
    assert resource is not None
    return sync, resource


async def _pass_on(
    sync: sync_controller.SyncResourceController, key: sync_controller.Key, *, cached: dict[str, Any] | None
) -> None:
    """A pass over one runtime run now, the informer's cache holding ``cached`` (None: as it is) when it starts; tried
    again while another pass of the SyncResource runs (it would be turned away). The pass reads the cache before its
    first await, so nothing updates the cache first. The copy stays cached until the informer hears of the object
    again, and the controller, seeing another generation in its cache, queues a pass over every runtime."""

    async def ran() -> bool:
        if cached is not None:
            await sync.resources.changed("MODIFIED", cached)
        result = await sync.reconciler.reconcile(key)
        assert result.ok, result.error
        return result.requeue_after is None

    await eventually(ran, what=f"a pass over {key}")


def _cached_synced(sync: sync_controller.SyncResourceController, kcp: Kcp, name: str) -> Any:
    return ((sync.resources.get(name, kcp.namespace) or {}).get("status") or {}).get("syncedGeneration")


async def _only_held(kcp: Kcp, name: str) -> bool:
    resource = await kcp.get(name) or {"metadata": {}}
    return resource["metadata"].get("finalizers") == ["test/hold"] and await kcp.applied(name) == []


async def test_a_write_that_loses_a_race_with_another_writer_is_tried_again_at_once(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Another writer changes a synced object between the reconciler's read and its conditional write (a user, a
    controller, the drift the watcher reports): the write is refused (409), and the item is read again and written
    in the same pass, its checks made again on what it reads, rather than the whole pass failing to its backoff.
    The other writer's field stays (server-side apply), the new data arrives, no reconcile fails."""
    label = uuid.uuid4().hex[:8]
    item = kcp.configmap("cm-raced", {"k": "v1"})
    item["resource"]["metadata"]["labels"] = {"race": label}
    async with run_controller() as running:
        await kcp.create("race", {"kyma": "skr-1", "items": [item]})
        await eventually(lambda: _state_is(kcp, "race", "Ready"), what="Ready")
        async with admission.racing_admission(kcp.skrs["skr-1"], label=label) as raced:
            failed_before = failed_reconciles(running.shared.registry, sync_resources.CONTROLLER_NAME)
            item["resource"]["data"] = {"k": "v2"}
            await kcp.patch_spec("race", {"items": [item]})

            async def updated() -> bool:
                found = await kcp.configmap_in("skr-1", "cm-raced")
                return found is not None and (found.get("data") or {}).get("k") == "v2"

            await eventually(updated, what="the new data written")
            await eventually(lambda: _synced_at(kcp, "race", 2), what="generation 2 synced")
            assert raced == ["cm-raced"], "the update lost its race"
            found = await kcp.configmap_in("skr-1", "cm-raced")
            assert found is not None and found["metadata"]["annotations"]["raced"] == "yes"
            assert failed_reconciles(running.shared.registry, sync_resources.CONTROLLER_NAME) == failed_before, (
                "no reconcile failed over the lost race"
            )
            assert write_conflicts(running.shared.registry, sync_resources.CONTROLLER_NAME) == 1


async def test_an_object_created_by_someone_else_first_is_judged_at_once_as_found(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Someone else creates the object between the reconciler's read (absent) and its create: the create is refused
    (409), and the item is read again in the same pass and judged as any object found there: not ours, not
    adopted (no SyncBinding allows it), left alone with a warning; no reconcile fails, the other's data stays."""
    label = uuid.uuid4().hex[:8]
    item = kcp.configmap("cm-first-come", {"k": "ours"})
    item["resource"]["metadata"]["labels"] = {"race": label}
    async with (
        run_controller() as running,
        admission.racing_admission(
            kcp.skrs["skr-1"],
            label=label,
            race=admission.created_first,
            rule=admission.operations_on(kube.CONFIGMAPS, "CREATE"),
        ) as raced,
    ):
        failed_before = failed_reconciles(running.shared.registry, sync_resources.CONTROLLER_NAME)
        await kcp.create("first-come", {"kyma": "skr-1", "items": [item]})
        await eventually(lambda: _state_is(kcp, "first-come", "Warning"), what="Warning")
        assert raced == ["cm-first-come"], "the create lost its race"
        [status] = (await kcp.get("first-come") or {})["status"]["items"]
        assert "not managed by kyma-sync" in status["message"]
        found = await kcp.configmap_in("skr-1", "cm-first-come")
        assert found is not None and found["data"] == {"k": "theirs"}
        assert failed_reconciles(running.shared.registry, sync_resources.CONTROLLER_NAME) == failed_before, (
            "no reconcile failed over the lost race"
        )
        assert write_conflicts(running.shared.registry, sync_resources.CONTROLLER_NAME) == 1


async def test_an_object_changed_right_after_its_create_still_loses_what_its_item_no_longer_sets(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Another of our controllers adds a finalizer (by a merge patch, under the same field manager) to an object the
    reconciler has just created, before the fields the create set are handed to its apply: the hand-over is refused
    (409) and made again on the object as read, moving only what the create set. So a key later taken out of the item
    is still removed, and the finalizer, which no apply of the item sets, is not removed with it."""
    label = uuid.uuid4().hex[:8]
    item = kcp.configmap("cm-raced-create", {"kept": "v", "dropped": "v"})
    item["resource"]["metadata"]["labels"] = {"race": label}
    path = kube.CONFIGMAPS.object_path(kcp.runtime_namespace, "cm-raced-create")

    async def finalized_by_us(api: kube.ApiClient, obj: dict[str, Any]) -> None:
        patch = {"metadata": {"finalizers": ["kyma-project.io/test-ours"]}}
        await kube.merge_patch(api, path, patch, field_manager=wire.RECONCILER_FIELD_MANAGER)

    try:
        async with run_controller():
            async with admission.racing_admission(kcp.skrs["skr-1"], label=label, race=finalized_by_us) as raced:
                await kcp.create("raced-create", {"kyma": "skr-1", "items": [item]})
                await eventually(lambda: _state_is(kcp, "raced-create", "Ready"), what="Ready")
                assert raced == ["cm-raced-create"], "the hand-over lost its race"
            item["resource"]["data"] = {"kept": "v"}
            await kcp.patch_spec("raced-create", {"items": [item]})

            async def shrunk() -> bool:
                found = await kcp.configmap_in("skr-1", "cm-raced-create")
                return found is not None and found.get("data") == {"kept": "v"}

            await eventually(shrunk, what="the key taken out of the item removed")
            found = await kcp.configmap_in("skr-1", "cm-raced-create")
            assert found is not None and found["metadata"]["finalizers"] == ["kyma-project.io/test-ours"]
    finally:
        with contextlib.suppress(kube.NotFoundError):  # a test failing before the create: its failure, not this one
            await kube.merge_patch(kcp.skrs["skr-1"], path, {"metadata": {"finalizers": None}})


@dataclasses.dataclass(frozen=True)
class _StatusItem:
    """A VpcPeering item with a status, for skr-1 (whose apiserver serves VpcPeerings), labelled for a race."""

    label: str
    path: str
    peering: dict[str, Any]
    item: dict[str, Any]


async def _status_item(kcp: Kcp, strategy: str) -> _StatusItem:
    label = uuid.uuid4().hex[:8]
    await crds.install(kcp.skrs["skr-1"], [crds.vpc_peering_crd()])
    peering = {
        "apiVersion": crds.VPC_PEERING.api_version,
        "kind": "VpcPeering",
        "metadata": {"name": "peer", "namespace": kcp.runtime_namespace, "labels": {"race": label}},
        "spec": {"remote": "ours"},
    }
    item = {"name": "peer", "strategy": strategy, "resource": peering, "subresource": {"status": {"state": "Ours"}}}
    return _StatusItem(label, crds.VPC_PEERING.object_path(kcp.runtime_namespace, "peer"), peering, item)


STATUS_WRITES = admission.operations_on(crds.VPC_PEERING, "UPDATE", subresource="status")


async def test_a_status_is_written_only_to_the_object_it_was_judged_on(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """An item with a status: the reconciler creates its object, then writes the status conditional on the object
    it created. Someone else deletes that object and creates their own of the name in between: the status write is
    refused (409), the item is read again and finds an object that is not ours (Warning), and that object gets no
    status from us; no reconcile fails."""
    api, status_item = kcp.skrs["skr-1"], await _status_item(kcp, "CreateAndSync")

    async def replaced(api: kube.ApiClient, obj: dict[str, Any]) -> None:
        await kube.request(api, "DELETE", status_item.path)
        theirs = {**status_item.peering, "spec": {"remote": "theirs"}}
        await kube.request(api, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=theirs)

    async with (
        run_controller() as running,
        admission.racing_admission(api, label=status_item.label, race=replaced, rule=STATUS_WRITES) as raced,
    ):
        failed_before = failed_reconciles(running.shared.registry, sync_resources.CONTROLLER_NAME)
        await kcp.create("peer", {"kyma": "skr-1", "items": [status_item.item]})
        await eventually(lambda: _state_is(kcp, "peer", "Warning"), what="Warning: the object is not ours")
        assert raced == ["peer"], "the status write lost its race"
        [status] = (await kcp.get("peer") or {})["status"]["items"]
        assert "not managed by kyma-sync" in status["message"]
        found = await kube.request(api, "GET", status_item.path)
        assert found["spec"] == {"remote": "theirs"} and found.get("status") is None, "nothing of ours on theirs"
        assert (
            failed_reconciles(running.shared.registry, sync_resources.CONTROLLER_NAME) == failed_before
            and write_conflicts(running.shared.registry, sync_resources.CONTROLLER_NAME) == 1
        )


async def test_a_status_whose_object_of_ours_changed_meanwhile_is_written_to_it_as_it_is_now(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A CreateAndIgnore item with a status (set when the object is created): a controller changes the object
    between our create and our status write (a finalizer, its own status). The object is still ours, the same one:
    the status is written to it as it is now, rather than the item being judged again and, ignored once it exists,
    never getting its status."""
    api, status_item = kcp.skrs["skr-1"], await _status_item(kcp, "CreateAndIgnore")

    changed = admission.annotating(status_item.path, controller="was here")
    async with (
        run_controller() as running,
        admission.racing_admission(api, label=status_item.label, race=changed, rule=STATUS_WRITES) as raced,
    ):
        await kcp.create("ignored", {"kyma": "skr-1", "items": [status_item.item]})
        await eventually(lambda: _state_is(kcp, "ignored", "Ready"), what="Ready")
        assert raced == ["peer"], "the status write lost its race"
        found = await kube.request(api, "GET", status_item.path)
        assert found["metadata"]["annotations"]["controller"] == "was here"
        assert found.get("status") == {"state": "Ours"}
        assert write_conflicts(running.shared.registry, sync_resources.CONTROLLER_NAME) == 1


async def test_a_status_only_item_whose_write_loses_a_race_is_read_and_written_again_at_once(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A status-only item sets the status of a VpcPeering someone else created (the SyncBinding allows adoption). Its
    controller annotates the object between our read and our status write, which is conditional on the object as
    read: refused (409), read and judged again, and written in the same pass; the controller's field stays, the
    conflict is counted and no reconcile fails."""
    api, status_item = kcp.skrs["skr-1"], await _status_item(kcp, "CreateAndSync")
    await bind(kcp.api, kcp.namespace, allowAdoption=True)
    await kube.request(api, "POST", crds.VPC_PEERING.path(kcp.runtime_namespace), body=status_item.peering)
    status_only = {"name": "peer", "strategy": "CreateAndSync", "subresource": status_item.item["subresource"]}
    status_only["subresource"] = {**status_only["subresource"], **_identity(status_item.peering)}

    annotated = admission.annotating(status_item.path, controller="was here")
    async with (
        run_controller() as running,
        admission.racing_admission(api, label=status_item.label, race=annotated, rule=STATUS_WRITES) as raced,
    ):
        failed_before = failed_reconciles(running.shared.registry, sync_resources.CONTROLLER_NAME)
        await kcp.create("status-only", {"kyma": "skr-1", "items": [status_only]})
        await eventually(lambda: _state_is(kcp, "status-only", "Ready"), what="Ready")
        assert raced == ["peer"], "the status write lost its race"
        found = await kube.request(api, "GET", status_item.path)
        assert found["metadata"]["annotations"]["controller"] == "was here"
        assert found.get("status") == {"state": "Ours"} and found["spec"] == {"remote": "ours"}
        assert (
            failed_reconciles(running.shared.registry, sync_resources.CONTROLLER_NAME) == failed_before
            and write_conflicts(running.shared.registry, sync_resources.CONTROLLER_NAME) == 1
        )
    await kube.request(api, "DELETE", status_item.path)


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
    }
