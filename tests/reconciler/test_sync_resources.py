"""SyncResource against a real KCP and two real SKR apiservers."""

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from clients import kube
from contract import wire
from devenv import net
from pki import kubeconfigs, pki
from reconciler import controller, crds, sync_resources

from ..waiting import eventually, more_reconciles
from .conftest import Kcp, as_created_before_the_hand_over, bind, ensure_namespace, label_kyma, register_runtime

pytestmark = pytest.mark.integration


async def test_create_and_sync_creates_and_resets_drift_and_deletion(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """CreateAndSync: created, a user's edit is reset, a user's deletion is undone."""
    async with run_controller(resync_seconds=1):
        await kcp.create("sync", {"kyma": "skr-1", "items": [kcp.configmap("cm-sync", {"k": "desired"})]})
        await eventually(lambda: _has(kcp, "skr-1", "cm-sync", {"k": "desired"}), what="created")
        await eventually(lambda: _state_is(kcp, "sync", "Ready"), what="Ready")
        await kube.request(
            kcp.skrs["skr-1"],
            "PATCH",
            _cm_path(kcp, "cm-sync"),
            body={"data": {"k": "edited"}},
            query=[("fieldManager", "kubectl")],
            content_type="application/merge-patch+json",
        )
        await eventually(lambda: _has(kcp, "skr-1", "cm-sync", {"k": "desired"}), what="drift reset")
        await kube.request(kcp.skrs["skr-1"], "DELETE", _cm_path(kcp, "cm-sync"))
        await eventually(lambda: _has(kcp, "skr-1", "cm-sync", {"k": "desired"}), what="recreated")
    assert await kcp.configmap_in("skr-2", "cm-sync") is None


async def test_what_an_item_no_longer_sets_leaves_the_object_it_created(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A key and a label taken out of an item leave the object the reconciler created: what its create set is owned
    as if applied, so the next apply that leaves it out removes it (a create is an Update in managedFields, and what
    an Update set no apply removes)."""
    item = kcp.configmap("cm-shrinks", {"kept": "v", "dropped": "v"})
    item["resource"]["metadata"]["labels"] = {"kept": "v", "dropped": "v"}
    async with run_controller():
        await kcp.create("shrinks", {"kyma": "skr-1", "items": [item]})
        await eventually(lambda: _has(kcp, "skr-1", "cm-shrinks", {"kept": "v", "dropped": "v"}), what="created")
        item["resource"]["data"] = {"kept": "v"}
        item["resource"]["metadata"]["labels"] = {"kept": "v"}
        await kcp.patch_spec("shrinks", {"items": [item]})
        await eventually(lambda: _has(kcp, "skr-1", "cm-shrinks", {"kept": "v"}), what="the key removed")
        labels = ((await kcp.configmap_in("skr-1", "cm-shrinks")) or {})["metadata"]["labels"]
        assert "dropped" not in labels and labels["kept"] == "v"


LEFTOVERS_SAID = (
    "what an earlier create set and the item leaves out would go (defaulted again where the apiserver defaults it): "
    "/data/dropped"
)


async def test_what_an_item_no_longer_sets_leaves_an_object_created_before_creates_handed_their_fields_over(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """An object an earlier kyma-sync created (its fields owned by the create's Update entry too) loses a key taken out
    of its item once the reconciler runs today's code: the next pass hands what the create left over to our apply
    first, and a dry run says so. Before, the key stayed until the object was deleted, and a dry run said in sync."""
    item = kcp.configmap("cm-legacy", {"kept": "v", "dropped": "v"})
    path = kube.CONFIGMAPS.object_path(kcp.runtime_namespace, "cm-legacy")
    async with run_controller():
        await kcp.create("legacy", {"kyma": "skr-1", "items": [item]})
        await eventually(lambda: _has(kcp, "skr-1", "cm-legacy", {"kept": "v", "dropped": "v"}), what="created")
    await as_created_before_the_hand_over(kcp.skrs["skr-1"], path)
    item["resource"]["data"] = {"kept": "v"}
    await kcp.patch_spec("legacy", {"items": [item], "dryRun": True})
    async with run_controller():

        async def said() -> bool:
            items = ((await kcp.get("legacy") or {}).get("status") or {}).get("items") or []
            return any(i.get("message") == LEFTOVERS_SAID for i in items)

        await eventually(said, what="the dry run saying the key goes")
        assert await _has(kcp, "skr-1", "cm-legacy", {"kept": "v", "dropped": "v"}), "a dry run writes nothing"
        await kcp.patch_spec("legacy", {"dryRun": False})
        await eventually(lambda: _has(kcp, "skr-1", "cm-legacy", {"kept": "v"}), what="the key removed")
    live = await kcp.configmap_in("skr-1", "cm-legacy") or {}
    assert wire.OWNER_ANNOTATION in live["metadata"]["annotations"], "still ours, marked"


async def test_a_new_generation_shows_processing_then_ready(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """While a spec change is being applied the state is Processing; then Ready, with observedGeneration."""
    states: list[str] = []

    async def record() -> None:
        listing = await kube.request(kcp.api, "GET", kcp.path())
        async for _, obj in kube.watch_objects(
            kcp.api,
            crds.SYNC_RESOURCE,
            namespace=kcp.namespace,
            label_selector=None,
            resource_version=listing["metadata"]["resourceVersion"],
            timeout_seconds=30,
        ):
            state = (obj.get("status") or {}).get("state")
            if state and (not states or states[-1] != state):
                states.append(state)

    watching = asyncio.create_task(record())
    try:
        async with run_controller():
            await kcp.create("phases", {"kyma": "skr-1", "items": [kcp.configmap("cm-phases", {"k": "v"})]})
            await eventually(lambda: _state_is(kcp, "phases", "Ready"), what="Ready")
            await eventually(lambda: bool(states) and states[-1] == "Ready", what="the watch to see Ready")
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    assert states[:2] == ["Processing", "Ready"]
    status = (await kcp.get("phases") or {})["status"]
    assert status["observedGeneration"] == 1 and status["conditions"][0]["observedGeneration"] == 1


async def test_create_and_ignore_keeps_user_edits_but_recreates(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """CreateAndIgnore: an edit survives resyncs; a deletion is undone."""
    async with run_controller(resync_seconds=0.5) as running:
        await kcp.create(
            "ignore", {"kyma": "skr-1", "items": [kcp.configmap("cm-ignore", {"k": "initial"}, "CreateAndIgnore")]}
        )
        await eventually(lambda: _has(kcp, "skr-1", "cm-ignore", {"k": "initial"}), what="created")
        await kube.request(
            kcp.skrs["skr-1"],
            "PATCH",
            _cm_path(kcp, "cm-ignore"),
            body={"data": {"k": "mine"}},
            content_type="application/merge-patch+json",
        )
        await more_reconciles(running.shared.registry, "sync_resources", 3)  # resyncs leave the edit alone
        assert await _has(kcp, "skr-1", "cm-ignore", {"k": "mine"})
        await kube.request(kcp.skrs["skr-1"], "DELETE", _cm_path(kcp, "cm-ignore"))
        await eventually(lambda: _has(kcp, "skr-1", "cm-ignore", {"k": "initial"}), what="recreated")


async def test_delete_strategy_removes_and_not_found_is_success(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """Delete: an unmanaged object goes only with adoption IfUnmanaged (the binding allowing it); one that never existed is Ready too."""
    for name in ("doomed", "spared"):
        await kube.request(
            kcp.skrs["skr-1"],
            "POST",
            f"/api/v1/namespaces/{kcp.runtime_namespace}/configmaps",
            body={"metadata": {"name": name}, "data": {"a": "b"}},
        )
    doomed = {**kcp.configmap("doomed", {}, "Delete"), "adoption": "IfUnmanaged"}
    await bind(kcp.api, kcp.namespace, allowAdoption=True)
    async with run_controller():
        await kcp.create(
            "delete",
            {
                "kyma": "skr-1",
                "items": [doomed, kcp.configmap("spared", {}, "Delete"), kcp.configmap("never-existed", {}, "Delete")],
            },
        )
        await eventually(lambda: _state_is(kcp, "delete", "Warning"), what="Warning")
    assert await kcp.configmap_in("skr-1", "doomed") is None
    assert await kcp.configmap_in("skr-1", "spared") is not None
    status = (await kcp.get("delete") or {})["status"]
    assert {i["name"]: i["state"] for i in status["items"]} == {
        "doomed": "Ready",
        "spared": "Warning",
        "never-existed": "Ready",
    }
    assert await kcp.applied("delete") == []


async def test_changing_an_item_to_delete_removes_what_it_created(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """CreateAndSync, then the same item as Delete: our object goes without any adoption policy."""
    async with run_controller():
        await kcp.create("switch", {"kyma": "skr-1", "items": [kcp.configmap("cm-switch", {"k": "v"})]})
        await eventually(lambda: _has(kcp, "skr-1", "cm-switch", {"k": "v"}), what="created")
        await kcp.patch_spec("switch", {"items": [kcp.configmap("cm-switch", {}, "Delete")]})
        await eventually(lambda: _absent(kcp, "skr-1", "cm-switch"), what="deleted")
        await eventually(lambda: _state_is(kcp, "switch", "Ready"), what="Ready")
    assert await kcp.applied("switch") == []


async def test_renamed_and_removed_items_are_deleted_from_the_runtime(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A rename deletes the old object; removing an item deletes its object."""
    async with run_controller():
        await kcp.create(
            "rename",
            {
                "kyma": "skr-1",
                "items": [
                    kcp.configmap("old-name", {"k": "v"}, item="a"),
                    kcp.configmap("stays", {"k": "v"}, item="b"),
                ],
            },
        )
        await eventually(lambda: _has(kcp, "skr-1", "old-name", {"k": "v"}), what="created")
        await kcp.patch_spec("rename", {"items": [kcp.configmap("new-name", {"k": "v"}, item="a")]})
        await eventually(lambda: _has(kcp, "skr-1", "new-name", {"k": "v"}), what="renamed")
        await eventually(lambda: _absent(kcp, "skr-1", "old-name"), what="old name deleted")
        await eventually(lambda: _absent(kcp, "skr-1", "stays"), what="removed item deleted")
        applied = await kcp.applied("rename")
        assert [(a["item"], a["name"]) for a in applied] == [("a", "new-name")]


async def test_deleting_the_sync_resource_removes_what_it_created(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """The finalizer deletes every applied object in every runtime, then lets the SyncResource go."""
    async with run_controller():
        await kcp.create("gone", {"target": {"selector": {}}, "items": [kcp.configmap("cm-gone", {"k": "v"})]})
        for runtime in ("skr-1", "skr-2"):
            await eventually(functools.partial(_has, kcp, runtime, "cm-gone", {"k": "v"}), what=f"created in {runtime}")
        await kube.request(kcp.api, "DELETE", kcp.path("gone"))
        await eventually(lambda: _gone(kcp, "gone"), what="SyncResource deleted")
    for runtime in ("skr-1", "skr-2"):
        assert await kcp.configmap_in(runtime, "cm-gone") is None


async def test_group_targeting_follows_kyma_labels(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """Labelling a Kyma adds its runtime to the group; unlabelling removes the objects there."""
    label = f"test-{uuid.uuid4().hex[:6]}"
    async with run_controller():
        await label_kyma(kcp.api, "skr-1", {label: "beta"})
        await kcp.create(
            "group",
            {
                "target": {"selector": {"matchLabels": {label: "beta"}}},
                "items": [kcp.configmap("cm-group", {"k": "v"})],
            },
        )
        await eventually(lambda: _has(kcp, "skr-1", "cm-group", {"k": "v"}), what="in skr-1")
        assert await kcp.configmap_in("skr-2", "cm-group") is None
        await label_kyma(kcp.api, "skr-2", {label: "beta"})
        await eventually(lambda: _has(kcp, "skr-2", "cm-group", {"k": "v"}), what="joined skr-2")
        await label_kyma(kcp.api, "skr-1", {label: None})
        await eventually(lambda: _absent(kcp, "skr-1", "cm-group"), what="left skr-1")
    await label_kyma(kcp.api, "skr-2", {label: None})


async def test_a_kyma_status_write_reconciles_no_sync_resource(
    kcp: Kcp, run_controller: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kyma CRs' status changes all the time; only existence and labels place objects, so a status write queues
    no SyncResource while a label change queues the group's (seen in watch order: status first, then labels)."""
    label = f"test-{uuid.uuid4().hex[:6]}"
    async with run_controller() as running:
        await label_kyma(kcp.api, "skr-1", {label: "beta"})
        await kcp.create(
            "group",
            {"target": {"selector": {"matchLabels": {label: "beta"}}}, "items": [kcp.configmap("cm-st", {"k": "v"})]},
        )
        await eventually(lambda: _has(kcp, "skr-1", "cm-st", {"k": "v"}), what="in skr-1")
        [sync] = [c for c in running.controllers if c.name == "sync_resources"]
        triggered: list[tuple[controller.RuntimeChange, list[str]]] = []
        monkeypatch.setattr(
            sync,
            "runtime_changed",
            lambda change: triggered.append((change, [str(k) for k in sync.keys_for_runtime(change)])),
        )
        await kube.request(
            kcp.api,
            "PATCH",
            crds.KYMA.object_path(wire.KCP_NAMESPACE, "skr-1", subresource="status"),
            body={"status": {"state": "Processing"}},
            content_type="application/merge-patch+json",
        )
        await label_kyma(kcp.api, "skr-1", {f"{label}-other": "x"})
        await eventually(lambda: len(triggered) >= 2, what="both Kyma changes seen")
    await label_kyma(kcp.api, "skr-1", {label: None, f"{label}-other": None})
    (status_change, status_keys), (label_change, label_keys) = triggered[:2]
    assert status_change.content_only and status_keys == []
    assert not label_change.content_only and f"{kcp.namespace}/group@skr-1" in label_keys


async def test_restricted_kind_is_a_warning_and_not_applied(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """A Secret item is never synced: Warning with a message, nothing created."""
    secret = {
        "name": "secret",
        "strategy": "CreateAndSync",
        "resource": {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "leak", "namespace": kcp.runtime_namespace},
            "stringData": {"password": "x"},
        },
    }
    async with run_controller():
        await kcp.create("restricted", {"kyma": "skr-1", "items": [secret, kcp.configmap("fine", {"k": "v"})]})
        await eventually(lambda: _state_is(kcp, "restricted", "Warning"), what="Warning")
    status = (await kcp.get("restricted") or {})["status"]
    states = {i["name"]: (i["state"], i.get("message", "")) for i in status["items"]}
    assert states["secret"][0] == "Warning" and "restricted" in states["secret"][1]
    assert states["fine"][0] == "Ready"
    with pytest.raises(kube.NotFoundError):
        await kube.request(kcp.skrs["skr-1"], "GET", f"/api/v1/namespaces/{kcp.runtime_namespace}/secrets/leak")


async def test_unreachable_runtime_is_error_for_itself_only(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """A runtime whose apiserver does not answer shows Error (and is counted for the errors top-k); the reachable one is synced."""
    label = f"test-{uuid.uuid4().hex[:6]}"
    ca = pki.create_ca("nowhere")
    dead = kubeconfigs.build(
        cluster="skr-down", server=f"https://127.0.0.1:{net.free_port()}", ca_pem=ca.cert_pem, user="x", token="x"
    )
    await register_runtime(kcp.api, "skr-down", dead, {label: "yes"})
    await label_kyma(kcp.api, "skr-1", {label: "yes"})
    try:
        async with run_controller() as running:
            await kcp.create(
                "partial",
                {
                    "target": {"selector": {"matchLabels": {label: "yes"}}},
                    "items": [kcp.configmap("cm-partial", {"k": "v"})],
                },
            )
            await eventually(lambda: _has(kcp, "skr-1", "cm-partial", {"k": "v"}), what="synced to skr-1")
            await eventually(lambda: _state_is(kcp, "partial", "Error"), what="Error")
            errors = running.shared.registry.get_sample_value
            labels = {"controller": "sync_resources"}
            assert (errors("kyma_reconciler_runtime_errors_total", {**labels, "runtime": "skr-down"}) or 0) >= 1
            assert errors("kyma_reconciler_runtime_errors_total", {**labels, "runtime": "skr-1"}) is None
            assert errors("kyma_reconciler_runtime_info", {"runtime": "skr-down"}) == 1
        status = (await kcp.get("partial") or {})["status"]
        per_runtime = {i["runtime"]: i["state"] for i in status["items"]}
        assert per_runtime == {"skr-1": "Ready", "skr-down": "Error"}
        assert "unreachable" in next(i["message"] for i in status["items"] if i["runtime"] == "skr-down")
        await kube.request(kcp.api, "DELETE", f"{crds.KYMA.path('kcp-system')}/skr-down")
        async with run_controller() as running:
            await eventually(lambda: running.readiness() is None, what="ready")
            info = running.shared.registry.get_sample_value
            assert info("kyma_reconciler_runtime_info", {"runtime": "skr-1"}) == 1
            assert info("kyma_reconciler_runtime_info", {"runtime": "skr-down"}) is None, "a deprovisioned runtime"
    finally:
        await label_kyma(kcp.api, "skr-1", {label: None})
        await kube.delete(kcp.api, f"{crds.KYMA.path('kcp-system')}/skr-down")


async def test_a_group_retries_only_its_failing_runtime(
    kcp: Kcp, run_controller: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A group failing in one runtime retries that runtime alone, on its own backoff: the pass over every runtime is
    not repeated for it (over 10,000 runtimes, one bad runtime would make the pass over all of them run again and
    again). Fixed there without any trigger, the runtime's retry syncs it and the status turns Ready."""
    caplog.set_level(logging.WARNING, logger="reconciler.workqueue")
    async with _refused_by_skr_2(kcp) as group:
        async with run_controller():
            await kcp.create("retried", {"target": group.target, "items": [group.configmap("cm-retried", "v")]})
            whole = f"{kcp.namespace}/retried"
            await eventually(lambda: _failures_of(caplog, f"{whole}@skr-2") >= 2, what="skr-2 retried on its own twice")
            assert _failures_of(caplog, whole) == 0, "the pass over every runtime was repeated for one failing runtime"
            assert await kcp.state("retried") == "Error"
            assert await group.has("skr-1", "cm-retried", "v")

            await ensure_namespace(kcp.skrs["skr-2"], group.namespace)  # nothing in KCP changes
            await eventually(lambda: _state_is(kcp, "retried", "Ready"), timeout=60, what="Ready after the retry")
        assert await group.has("skr-2", "cm-retried", "v")


async def test_a_group_comes_back_for_a_runtime_waiting_for_its_object_to_go_while_another_fails(
    kcp: Kcp, run_controller: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A group's pass that fails in one runtime while in another its object is still being deleted comes back for
    the one waiting: once the object is gone it is created again (the failing runtime's own retries visit only it)."""
    caplog.set_level(logging.WARNING, logger="reconciler.workqueue")

    async def waiting() -> bool:
        items = ((await kcp.get("waiting") or {}).get("status") or {}).get("items") or []
        return any(i["runtime"] == "skr-1" and "being deleted" in i.get("message", "") for i in items)

    async with _refused_by_skr_2(kcp) as group:
        path = kube.CONFIGMAPS.object_path(group.namespace, "cm-waiting")
        # Retries at most 2 s apart: the runtime's own failures and the group's passes both double its backoff, so
        # at the default a loaded machine waited minutes for the retries this test counts.
        async with run_controller(sync_resources={"backoff_max_seconds": 2}) as running:
            await kcp.create("waiting", {"target": group.target, "items": [group.configmap("cm-waiting", "v1")]})
            await eventually(lambda: group.has("skr-1", "cm-waiting", "v1"), what="synced to skr-1")
            # Keys the start queued for each runtime (turned away while the first pass ran) have run by the time
            # skr-2 failed on its own three times: none of them is left to come back for skr-1 later.
            skr_2 = f"{kcp.namespace}/waiting@skr-2"
            await eventually(lambda: _failures_of(caplog, skr_2) >= 3, what="skr-2 retried three times")
            await kube.merge_patch(kcp.skrs["skr-1"], path, {"metadata": {"finalizers": ["test/hold"]}})
            await kube.request(kcp.skrs["skr-1"], "DELETE", path)
            await kcp.patch_spec("waiting", {"items": [group.configmap("cm-waiting", "v2")]})
            await eventually(waiting, what="skr-1 waiting for its object to go")
            # The passes the spec change triggered have run once skr-2 failed on its own twice more: from here only
            # the pass's own request to come back brings skr-1 back.
            failed_before = _failures_of(caplog, skr_2)
            await eventually(lambda: _failures_of(caplog, skr_2) >= failed_before + 2, what="skr-2 retried twice")
            [sync] = [c for c in running.controllers if c.name == "sync_resources"]
            # Just failed for the fifth time or more: the retry is taken at most backoff_max_seconds later.
            assert 0 < sync.queue.retry_delay(sync_resources.Key(kcp.namespace, "waiting", "skr-2")) <= 2
            await kube.merge_patch(kcp.skrs["skr-1"], path, {"metadata": {"finalizers": None}})
            await eventually(lambda: group.has("skr-1", "cm-waiting", "v2"), timeout=60, what="created again once gone")


@dataclasses.dataclass
class _RefusedBySkr2:
    """A group target over skr-1 and skr-2, and a namespace that exists in skr-1 only: an object there fails in
    skr-2."""

    kcp: Kcp
    target: dict[str, Any]
    namespace: str

    def configmap(self, name: str, value: str) -> dict[str, Any]:
        item = self.kcp.configmap(name, {"k": value})
        item["resource"]["metadata"]["namespace"] = self.namespace
        return item

    async def has(self, runtime: str, name: str, value: str) -> bool:
        found = await kube.get_or_none(self.kcp.skrs[runtime], kube.CONFIGMAPS.object_path(self.namespace, name))
        return found is not None and found.get("data") == {"k": value}


@contextlib.asynccontextmanager
async def _refused_by_skr_2(kcp: Kcp) -> AsyncIterator[_RefusedBySkr2]:
    label = f"test-{uuid.uuid4().hex[:6]}"
    namespace = f"only-skr-1-{uuid.uuid4().hex[:6]}"
    await ensure_namespace(kcp.skrs["skr-1"], namespace)
    await label_kyma(kcp.api, "skr-1", {label: "yes"})
    await label_kyma(kcp.api, "skr-2", {label: "yes"})
    try:
        yield _RefusedBySkr2(kcp, {"selector": {"matchLabels": {label: "yes"}}}, namespace)
    finally:
        await label_kyma(kcp.api, "skr-1", {label: None})
        await label_kyma(kcp.api, "skr-2", {label: None})


async def test_five_hundred_items_converge(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """A 500-item SyncResource to two runtimes ends Ready with every object present."""
    items = [kcp.configmap(f"bulk-{n}", {"n": str(n)}) for n in range(500)]
    started = time.perf_counter()
    async with run_controller():
        await kcp.create("bulk", {"target": {"selector": {}}, "items": items})
        await eventually(lambda: _state_is(kcp, "bulk", "Ready"), timeout=180, what="500 items Ready")
    print(f"500 items x 2 runtimes converged in {time.perf_counter() - started:.1f}s")
    for runtime in ("skr-1", "skr-2"):
        listed = await kube.request(
            kcp.skrs[runtime],
            "GET",
            f"/api/v1/namespaces/{kcp.runtime_namespace}/configmaps",
            query=[("labelSelector", "kyma-project.io/synced-by=kyma-sync")],
        )
        assert len(listed["items"]) == 500


def _cm_path(kcp: Kcp, name: str) -> str:
    return f"/api/v1/namespaces/{kcp.runtime_namespace}/configmaps/{name}"


def _failures_of(caplog: pytest.LogCaptureFixture, key: str) -> int:
    """Failed reconciles of ``key`` the queue logged."""
    return sum(1 for r in caplog.records if r.getMessage() == "reconcile failed" and getattr(r, "key", None) == key)


async def _has(kcp: Kcp, runtime: str, name: str, data: dict[str, str]) -> bool:
    found = await kcp.configmap_in(runtime, name)
    return found is not None and found.get("data") == data


async def _absent(kcp: Kcp, runtime: str, name: str) -> bool:
    return await kcp.configmap_in(runtime, name) is None


async def _state_is(kcp: Kcp, name: str, state: str) -> bool:
    return await kcp.state(name) == state


async def _gone(kcp: Kcp, name: str) -> bool:
    return await kcp.get(name) is None


def test_passes_over_single_runtimes_run_together_and_a_pass_over_all_alone() -> None:
    """The gate of one SyncResource's passes in its replica: passes over different runtimes together (each visits
    its own), a pass over all runtimes (or a status sum, or the finalizer) alone — and one turned away is let in
    next: passes over single runtimes make way for it for a while."""
    passes = sync_resources._Passes()
    assert passes.enter(alone=False, now=0) and passes.enter(alone=False, now=0)
    assert not passes.enter(alone=True, now=1), "not while passes over single runtimes run"
    assert not passes.enter(alone=False, now=2), "making way for the pass over all"
    passes.leave(alone=False)
    passes.leave(alone=False)
    assert passes.idle() and passes.enter(alone=True, now=3)
    assert not passes.enter(alone=False, now=4) and not passes.enter(alone=True, now=4)
    passes.leave(alone=True)
    assert passes.enter(alone=False, now=4 + sync_resources._MAKE_WAY_SECONDS + 1)
