"""The SyncResource API of the design document (seed 001) against a real KCP and runtime: text manifests,
status-only items, UpdateAndDelete, strategy changes in every direction, per-item errors, status summary."""

import base64
import contextvars
import itertools
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from clients import kube
from contract import wire
from reconciler import crds

from ..factories import DESIGN_EXAMPLE, configmap_event
from ..waiting import eventually
from .conftest import Kcp, bind, label_kyma

pytestmark = pytest.mark.integration

SOME_MODULE = kube.Gvr("operator.kyma-project.io", "v1alpha1", "somemodules")


def some_module_crd() -> dict[str, Any]:
    return crds.definition(gvr=SOME_MODULE, kind="SomeModule", short="sm", schema=crds.OBJECT_SCHEMA, printer=[])


async def test_the_design_documents_example_applies_as_yaml_text(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """The example, posted as YAML text: the ConfigMap and Deployment exist, some-config is gone, the module CR
    (created by someone else) gets its status, every item is Ready; deleting the SyncResource removes only ours."""
    runtime = kcp.skrs["skr-1"]
    await kube.ensure_namespace(runtime, "kyma-system")
    await crds.install(runtime, [some_module_crd()])
    await kube.create_or_replace(
        runtime,
        SOME_MODULE.path("kyma-system"),
        {
            "apiVersion": "operator.kyma-project.io/v1alpha1",
            "kind": "SomeModule",
            "metadata": {"name": "module-cr-name"},
        },
    )
    await kube.create_or_replace(
        runtime, kube.CONFIGMAPS.path("kyma-system"), {"metadata": {"name": "some-config", **_ours()}}
    )
    await bind(kcp.api, kcp.namespace, targetNamespaces=["kyma-system"], allowAdoption=True)
    manifest = yaml.safe_load(DESIGN_EXAMPLE)
    manifest["metadata"]["namespace"] = kcp.namespace
    manifest["spec"]["items"][1]["adoption"] = "IfUnmanaged"  # some-config was put there before kyma-sync
    async with run_controller():
        await kube.request(kcp.api, "POST", kcp.path(), body=manifest)
        await eventually(lambda: _state_is(kcp, "design-example", "Ready"), what="Ready")
        status = (await kcp.get("design-example") or {})["status"]
        assert {i["name"]: i["state"] for i in status["items"]} == {
            "config-update": "Ready",
            "config-to-deleted": "Ready",
            "module-cr": "Ready",
            "some-deployment": "Ready",
        }
        assert (status["itemCount"], status["runtimeCount"], status["ready"]) == (4, 1, "4/4")
        config = await kube.request(runtime, "GET", kube.CONFIGMAPS.object_path("kyma-system", "config-update"))
        assert config["data"] == {"update.properties": "foo=bar\n"}
        assert await kube.get_or_none(runtime, kube.CONFIGMAPS.object_path("kyma-system", "some-config")) is None
        module_cr = await kube.request(runtime, "GET", SOME_MODULE.object_path("kyma-system", "module-cr-name"))
        assert module_cr["status"] == {"state": "Ready"}
        assert await kube.get_or_none(runtime, "/apis/apps/v1/namespaces/kyma-system/deployments/app") is not None
        await kube.request(kcp.api, "DELETE", kcp.path("design-example"))
        await eventually(lambda: _gone(kcp, "design-example"), what="deleted")
    assert await kube.get_or_none(runtime, kube.CONFIGMAPS.object_path("kyma-system", "config-update")) is None
    assert await kube.get_or_none(runtime, "/apis/apps/v1/namespaces/kyma-system/deployments/app") is None
    assert await kube.get_or_none(runtime, SOME_MODULE.object_path("kyma-system", "module-cr-name")) is not None
    await kube.request(runtime, "DELETE", SOME_MODULE.object_path("kyma-system", "module-cr-name"))


async def test_changing_the_strategy_works_in_every_direction(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """One item walks all twelve strategy changes; after each the object is as the new strategy says."""
    name = f"cm-{uuid.uuid4().hex[:6]}"
    walk = ["S", "I", "U", "D", "S", "U", "I", "D", "U", "S", "D", "I", "S"]
    strategies = {"S": "CreateAndSync", "I": "CreateAndIgnore", "U": "UpdateAndDelete", "D": "Delete"}
    pairs = set(itertools.pairwise(walk))
    assert len(pairs) == 12  # every ordered pair of two different strategies
    expected: dict[str, str] | None = None  # the object's data, None when absent
    async with run_controller():
        for step, letter in enumerate(walk):
            item = kcp.configmap(name, {"step": str(step)}, strategies[letter], item="the-item")
            if step == 0:
                await kcp.create("walk", {"kyma": "skr-1", "items": [item]})
            else:
                await kcp.patch_spec("walk", {"items": [item]})
            # S writes; U writes only what exists; I writes only what is absent; D removes.
            writes = letter == "S" or (letter == "U" and expected is not None) or (letter == "I" and expected is None)
            if writes:
                expected = {"step": str(step)}
            elif letter == "D":
                expected = None

            async def settled(generation: int = step + 1) -> bool:
                status = (await kcp.get("walk") or {}).get("status") or {}
                return status.get("observedGeneration") == generation and status.get("state") == "Ready"

            await eventually(settled, what=f"step {step} ({strategies[letter]}) Ready")
            live = await kcp.configmap_in("skr-1", name)
            assert (None if live is None else live.get("data")) == expected, f"after step {step} ({letter})"


async def test_update_and_delete_stops_at_deletion_and_reports_gone(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """UpdateAndDelete keeps an existing object in sync; while it is being deleted (a finalizer holds it) the item is
    Deleting and the object is left alone; once gone the item is Ready with 'gone', and it is never recreated."""
    name = f"cm-{uuid.uuid4().hex[:6]}"
    async with run_controller():
        await kcp.create("uad", {"kyma": "skr-1", "items": [kcp.configmap(name, {"k": "v1"}, item="x")]})
        await eventually(lambda: _state_is(kcp, "uad", "Ready"), what="created")
        await kcp.patch_spec("uad", {"items": [kcp.configmap(name, {"k": "v2"}, "UpdateAndDelete", item="x")]})
        await eventually(lambda: _data(kcp, name, {"k": "v2"}), what="updated")
        path = kube.CONFIGMAPS.object_path(kcp.runtime_namespace, name)
        await kube.merge_patch(kcp.skrs["skr-1"], path, {"metadata": {"finalizers": ["test/hold"]}})
        await kube.request(kcp.skrs["skr-1"], "DELETE", path)
        await kcp.patch_spec("uad", {"items": [kcp.configmap(name, {"k": "v3"}, "UpdateAndDelete", item="x")]})
        await eventually(lambda: _state_is(kcp, "uad", "Deleting"), what="Deleting")
        assert await _item_message_has(kcp, "uad", "being deleted")
        assert await _data(kcp, name, {"k": "v2"})  # v3 is not applied to an object being deleted
        await kube.merge_patch(kcp.skrs["skr-1"], path, {"metadata": {"finalizers": None}})
        await eventually(lambda: _item_message_has(kcp, "uad", "gone: nothing to update"), what="reported gone")
        assert await _state_is(kcp, "uad", "Ready")
    assert await kcp.configmap_in("skr-1", name) is None


async def test_a_bad_item_is_its_own_error_and_keeps_what_it_had(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """An item whose text breaks is that item's Error; the other items sync, and the object the broken item had
    put there stays (its record too) until the item is fixed or removed."""
    name = f"cm-{uuid.uuid4().hex[:6]}"
    async with run_controller():
        await kcp.create("broken", {"kyma": "skr-1", "items": [kcp.configmap(name, {"k": "v"}, item="was-good")]})
        await eventually(lambda: _state_is(kcp, "broken", "Ready"), what="Ready")
        broken = {"name": "was-good", "strategy": "CreateAndSync", "resource": "apiVersion: v1\nkind: [oops"}
        other = kcp.configmap(f"{name}-other", {"k": "v"})
        await kcp.patch_spec("broken", {"items": [broken, other]})
        await eventually(lambda: _state_is(kcp, "broken", "Error"), what="Error")
        await eventually(lambda: _data(kcp, f"{name}-other", {"k": "v"}), what="the other item synced")
        status = (await kcp.get("broken") or {})["status"]
        states = {i["name"]: i for i in status["items"]}
        assert states["was-good"]["state"] == "Error" and "not valid YAML" in states["was-good"]["message"]
        assert name in {a["name"] for a in await kcp.applied("broken")}
        assert await kcp.configmap_in("skr-1", name) is not None


async def test_an_orphaned_item_leaves_its_object_in_place_unmanaged(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """deletePolicy Orphan: removing the item keeps the object, without our marker and label (so nothing of ours
    touches it again); deleting the SyncResource then deletes only the objects of Delete items."""
    kept, dropped = f"cm-{uuid.uuid4().hex[:6]}", f"cm-{uuid.uuid4().hex[:6]}"
    orphan = {**kcp.configmap(kept, {"k": "v"}), "deletePolicy": "Orphan"}
    async with run_controller():
        await kcp.create("orphan", {"kyma": "skr-1", "items": [orphan, kcp.configmap(dropped, {"k": "v"})]})
        await eventually(lambda: _state_is(kcp, "orphan", "Ready"), what="Ready")
        applied = {a["name"]: a for a in await kcp.applied("orphan")}
        assert applied[kept]["deletePolicy"] == "Orphan" and "deletePolicy" not in applied[dropped]
        await kcp.patch_spec("orphan", {"items": [kcp.configmap(dropped, {"k": "v"})]})

        async def released() -> bool:
            live = await kcp.configmap_in("skr-1", kept)
            return live is not None and wire.OWNER_ANNOTATION not in (live["metadata"].get("annotations") or {})

        await eventually(released, what="released from management")
        await kube.request(kcp.api, "DELETE", kcp.path("orphan"))
        await eventually(lambda: _gone(kcp, "orphan"), what="deleted")
    live = await kcp.configmap_in("skr-1", kept)
    assert live is not None and live["data"] == {"k": "v"}
    assert wire.SYNCED_LABEL not in (live["metadata"].get("labels") or {})
    assert await kcp.configmap_in("skr-1", dropped) is None


async def test_an_orphaned_object_adopted_again_keeps_what_its_first_item_set(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """deletePolicy Orphan lets an object go: its content is no longer ours. Adopted later by another SyncResource's
    item (adoption IfUnmanaged, allowed by the SyncBinding) that sets one of its keys, the other keys stay, as they do
    when any object not ours is adopted (a server-side apply keeps what others own). Before, they were removed: our
    field manager still owned what the first item had set."""
    name = f"cm-{uuid.uuid4().hex[:6]}"
    await bind(kcp.api, kcp.namespace, allowAdoption=True)
    first = {**kcp.configmap(name, {"a": "1", "b": "2"}), "deletePolicy": "Orphan"}
    other = kcp.configmap(f"other-{name}", {"k": "v"})
    async with run_controller():
        await kcp.create("first", {"kyma": "skr-1", "items": [first, other]})
        await eventually(lambda: _data(kcp, name, {"a": "1", "b": "2"}), what="created")
        await kcp.patch_spec("first", {"items": [other]})

        async def released() -> bool:
            live = await kcp.configmap_in("skr-1", name)
            return live is not None and wire.OWNER_ANNOTATION not in (live["metadata"].get("annotations") or {})

        await eventually(released, what="let go")
        await kcp.create(
            "second", {"kyma": "skr-1", "items": [{**kcp.configmap(name, {"a": "9"}), "adoption": "IfUnmanaged"}]}
        )
        await eventually(lambda: _state_is(kcp, "second", "Ready"), what="adopted")
    live = await kcp.configmap_in("skr-1", name) or {}
    assert live["data"] == {"a": "9", "b": "2"}, "what the first item set is not ours any more: it stays"


async def test_ignored_fields_are_set_once_and_never_reset(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """ignoreFields: /data/b is created with the item's value; a user's edit of it stays while drift of /data/a is
    reset (each resync applies the rest)."""
    name = f"cm-{uuid.uuid4().hex[:6]}"
    item = {**kcp.configmap(name, {"a": "1", "b": "1"}), "ignoreFields": ["/data/b", "/metadata/annotations"]}
    async with run_controller(resync_seconds=1):
        await kcp.create("ignoring", {"kyma": "skr-1", "items": [item]})
        await eventually(lambda: _data(kcp, name, {"a": "1", "b": "1"}), what="created with b")
        await kube.request(
            kcp.skrs["skr-1"],
            "PATCH",
            kube.CONFIGMAPS.object_path(kcp.runtime_namespace, name),
            body={"data": {"a": "2", "b": "2"}},
            query=[("fieldManager", "kubectl")],
            content_type="application/merge-patch+json",
        )
        await eventually(lambda: _data(kcp, name, {"a": "1", "b": "2"}), what="a reset, b kept")
        live = await kcp.configmap_in("skr-1", name) or {}
        assert wire.OWNER_ANNOTATION in live["metadata"]["annotations"]  # an ignored map never drops our marker


async def test_a_dry_run_reports_what_would_change_and_changes_nothing(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """dryRun: a changed item says which fields would change, a new one 'would create', a removed one 'would release',
    an unchanged one 'in sync' — and the runtime stays as it was until dryRun is switched off."""
    suffix = uuid.uuid4().hex[:6]
    same, changed, added, removed = (f"{n}-{suffix}" for n in ("same", "changed", "added", "removed"))
    async with run_controller():
        await kcp.create(
            "dry",
            {
                "kyma": "skr-1",
                "items": [kcp.configmap(n, {"k": "v1"}, item=n) for n in (same, changed, removed)],
            },
        )
        await eventually(lambda: _state_is(kcp, "dry", "Ready"), what="Ready")
        planned = [kcp.configmap(same, {"k": "v1"}, item=same), kcp.configmap(changed, {"k": "v2"}, item=changed)]
        planned.append(kcp.configmap(added, {"k": "v1"}, item=added))
        await kcp.patch_spec("dry", {"dryRun": True, "items": planned})

        async def reported() -> bool:
            status = (await kcp.get("dry") or {}).get("status") or {}
            # "Processing" is also what the pass writes first (applying generation 2): wait for the report itself.
            return status.get("observedGeneration") == 2 and "dry run" in status["conditions"][0].get("message", "")

        await eventually(reported, what="the dry run reported")
        status = (await kcp.get("dry") or {})["status"]
        messages = {i["name"]: i["message"] for i in status["items"]}
        assert messages[same] == "in sync"
        assert messages[changed] == "would change /data/k"
        assert messages[added] == "would create"
        assert messages[removed].startswith("would release")
        assert status["conditions"][0]["message"].startswith("dry run, nothing written")
        assert await _data(kcp, changed, {"k": "v1"})
        assert await kcp.configmap_in("skr-1", added) is None
        assert await kcp.configmap_in("skr-1", removed) is not None
        await kcp.patch_spec("dry", {"dryRun": False})
        await eventually(lambda: _data(kcp, changed, {"k": "v2"}), what="applied once dryRun is off")
        await eventually(lambda: _absent(kcp, removed), what="released once dryRun is off")


async def test_applies_and_deletions_are_kubernetes_events(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """kubectl describe tells the story: Created, then Updated when a change is applied, Deleted when the item goes;
    a no-op pass records nothing."""
    name = f"cm-{uuid.uuid4().hex[:6]}"
    async with run_controller():
        await kcp.create("told", {"kyma": "skr-1", "items": [kcp.configmap(name, {"k": "1"}, item="x")]})
        await eventually(lambda: _reasons(kcp, "told", {"Created"}), what="Created")
        await kcp.patch_spec("told", {"items": [kcp.configmap(name, {"k": "2"}, item="x")]})
        await eventually(lambda: _reasons(kcp, "told", {"Created", "Updated"}), what="Updated")
        await kcp.patch_spec("told", {"items": [kcp.configmap(f"{name}-b", {"k": "1"}, item="y")]})
        await eventually(lambda: _reasons(kcp, "told", {"Created", "Updated", "Deleted"}), what="Deleted")
    events = await _events(kcp, "told")
    created = next(e for e in events if e["reason"] == "Created" and "item x" in e["message"])
    assert created["type"] == "Normal" and "skr-1" in created["message"]
    assert sum(1 for e in events if e["reason"] == "Updated") == 1


async def _events(kcp: Kcp, name: str) -> list[dict[str, Any]]:
    listing = await kube.request(kcp.api, "GET", kube.EVENTS.path(kcp.namespace))
    return [e for e in listing["items"] if e["involvedObject"]["name"] == name]


async def _reasons(kcp: Kcp, name: str, wanted: set[str]) -> bool:
    return wanted <= {e["reason"] for e in await _events(kcp, name)}


async def test_items_whose_objects_are_gone_show_as_orphaned(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """A Delete item whose object is gone is reported (condition Orphaned, metric per namespace) so the module's
    manager can remove it; removing it clears both."""
    name = f"cm-{uuid.uuid4().hex[:6]}"
    keep = kcp.configmap(f"{name}-kept", {"k": "v"}, item="kept")
    async with run_controller(resync_seconds=1) as running:
        await kcp.create("stale", {"kyma": "skr-1", "items": [keep, kcp.configmap(name, {}, "Delete", item="old")]})

        async def orphaned_condition() -> dict[str, Any]:
            status = (await kcp.get("stale") or {}).get("status") or {}
            return next((c for c in status.get("conditions") or [] if c["type"] == "Orphaned"), {})

        async def reported() -> bool:
            return (await orphaned_condition()).get("status") == "True"

        await eventually(reported, what="Orphaned")
        assert "old" in (await orphaned_condition())["message"]
        gauge = running.shared.registry.get_sample_value
        assert gauge("kyma_reconciler_orphaned_items", {"namespace": kcp.namespace}) == 1
        await kcp.patch_spec("stale", {"items": [keep]})

        async def cleared() -> bool:
            return (await orphaned_condition()).get("status") == "False"

        await eventually(cleared, what="no longer Orphaned")
        assert gauge("kyma_reconciler_orphaned_items", {"namespace": kcp.namespace}) == 0


async def test_a_secret_comes_from_a_kcp_secret_by_reference(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """secretRef: the runtime Secret carries the KCP Secret's data and follows its changes; a Secret not opted in by
    its label is an Error. No secret data ever appears in the SyncResource. (Inline Secrets stay restricted:
    test_sync_resources.py's test_restricted_kind_is_a_warning_and_not_applied.)"""
    name = f"sec-{uuid.uuid4().hex[:6]}"
    secrets = kube.SECRETS.path(kcp.namespace)
    for source, labels in ((name, {wire.SOURCE_SECRET_LABEL: "true"}), (f"{name}-private", {})):
        await kube.request(
            kcp.api,
            "POST",
            secrets,
            body={"metadata": {"name": source, "labels": labels}, "stringData": {"token": "s3cret-1"}},
        )

    def secret_item(item: str, source: str, **extra: Any) -> dict[str, Any]:
        target = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": item, "namespace": kcp.runtime_namespace}}
        return {
            "name": item,
            "strategy": "CreateAndSync",
            "resource": {**target, **extra},
            "secretRef": {"name": source},
        }

    runtime_secret = kube.SECRETS.object_path(kcp.runtime_namespace, "by-ref")
    async with run_controller(sync_resources={"secret_namespaces": [kcp.namespace]}):
        await kcp.create(
            "secrets",
            {
                "kyma": "skr-1",
                "items": [secret_item("by-ref", name), secret_item("private", f"{name}-private")],
            },
        )

        async def token_is(value: str) -> bool:
            live = await kube.get_or_none(kcp.skrs["skr-1"], runtime_secret)
            return live is not None and base64.b64decode(live["data"]["token"]).decode() == value

        await eventually(lambda: token_is("s3cret-1"), what="the referenced data in the runtime")
        await kube.merge_patch(kcp.api, f"{secrets}/{name}", {"stringData": {"token": "s3cret-2"}})
        await eventually(lambda: token_is("s3cret-2"), what="the change followed")
        status = (await kcp.get("secrets") or {})["status"]
    states = {i["name"]: (i["state"], i.get("message", "")) for i in status["items"]}
    assert states["private"][0] == "Error" and "labelled" in states["private"][1]
    for leak in ("s3cret", base64.b64encode(b"s3cret-1").decode(), base64.b64encode(b"s3cret-2").decode()):
        assert leak not in json.dumps(await kcp.get("secrets")) and leak not in json.dumps(
            await _events(kcp, "secrets")
        )


async def test_a_drift_event_reconciles_only_its_runtime(
    kcp: Kcp, run_controller: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event about a group's object in skr-1 runs that runtime's pass alone; the status still sums up both
    runtimes (their states live in the SyncRecords) and the drift is reset."""
    label = f"t-{uuid.uuid4().hex[:6]}"
    for runtime in ("skr-1", "skr-2"):
        await label_kyma(kcp.api, runtime, {label: "on"})
    name = f"cm-{uuid.uuid4().hex[:6]}"
    try:
        async with run_controller() as running:
            spec = {"target": {"selector": {"matchLabels": {label: "on"}}}, "items": [kcp.configmap(name, {"k": "v"})]}
            await kcp.create("grouped", spec)
            await eventually(lambda: _state_is(kcp, "grouped", "Ready"), what="Ready")
            [sync] = [c for c in running.controllers if c.name == "sync_resources"]
            visited: dict[str, list[str]] = {}
            current: contextvars.ContextVar[str] = contextvars.ContextVar("key", default="")
            place, reconcile = sync.reconciler._place, sync.reconciler.reconcile

            async def spying(owner: Any, spec: Any, parsed: Any, policy: Any, runtime: str, *rest: Any) -> Any:
                visited.setdefault(current.get(), []).append(runtime)
                return await place(owner, spec, parsed, policy, runtime, *rest)

            async def keyed(key: Any) -> Any:  # other passes may still run: tell them apart by key
                current.set(str(key))
                return await reconcile(key)

            monkeypatch.setattr(sync.reconciler, "reconcile", keyed)
            monkeypatch.setattr(sync.reconciler, "_place", spying)
            await kube.merge_patch(
                kcp.skrs["skr-1"], kube.CONFIGMAPS.object_path(kcp.runtime_namespace, name), {"data": {"k": "drift"}}
            )
            result = await sync.on_event(
                configmap_event("kyma-sync", "skr-1", name=name, namespace=kcp.runtime_namespace)
            )
            assert result is not None and result.ok
            assert visited[f"{kcp.namespace}/grouped@skr-1"] == ["skr-1"]
            assert await _data(kcp, name, {"k": "v"})
            status = (await kcp.get("grouped") or {})["status"]
            assert {(i["runtime"], i["state"]) for i in status["items"]} == {("skr-1", "Ready"), ("skr-2", "Ready")}
    finally:
        for runtime in ("skr-1", "skr-2"):
            await label_kyma(kcp.api, runtime, {label: None})


async def test_a_single_runtime_sync_resource_is_labelled_with_its_kyma(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """operator.kyma-project.io/kyma-name is set, so module managers can list a runtime's SyncResources."""
    async with run_controller():
        await kcp.create("labelled", {"kyma": "skr-2", "items": [kcp.configmap("cm-labelled", {"k": "v"})]})
        await eventually(lambda: _state_is(kcp, "labelled", "Ready"), what="Ready")
    labels = (await kcp.get("labelled") or {})["metadata"]["labels"]
    assert labels[wire.KYMA_NAME_LABEL] == "skr-2"


async def test_the_runtime_of_a_single_runtime_sync_resource_cannot_change(kcp: Kcp) -> None:
    """All passes of a SyncResource for one runtime run in that runtime's reconciler replica: a new spec.kyma would
    move it to another replica while the first may still write. The apiserver refuses it, and a switch to a group."""
    await kcp.create("fixed", {"kyma": "skr-1", "items": [kcp.configmap("cm-fixed", {"k": "v"})]})
    with pytest.raises(kube.InvalidError, match=r"spec\.kyma cannot change"):
        await kcp.patch_spec("fixed", {"kyma": "skr-2"})
    with pytest.raises(kube.InvalidError, match=r"spec\.kyma cannot change"):
        await kcp.patch_spec("fixed", {"kyma": None, "target": {"selector": {}}})
    with pytest.raises(kube.InvalidError, match="spec: Required"):  # a rule against oldSelf skips an absent old
        await kube.merge_patch(kcp.api, kcp.path("fixed"), {"spec": None})
    await kcp.patch_spec("fixed", {"items": [kcp.configmap("cm-fixed", {"k": "w"})]})  # the rest may change


def _ours() -> dict[str, Any]:
    return {"labels": {"test": "pre-existing"}}


async def _data(kcp: Kcp, name: str, data: dict[str, str]) -> bool:
    live = await kcp.configmap_in("skr-1", name)
    return live is not None and live.get("data") == data


async def _absent(kcp: Kcp, name: str) -> bool:
    return await kcp.configmap_in("skr-1", name) is None


async def _item_message_has(kcp: Kcp, name: str, text: str) -> bool:
    status = (await kcp.get(name) or {}).get("status") or {}
    return any(text in i.get("message", "") for i in status.get("items") or [])


async def _state_is(kcp: Kcp, name: str, state: str) -> bool:
    return await kcp.state(name) == state


async def _gone(kcp: Kcp, name: str) -> bool:
    return await kcp.get(name) is None


async def test_namespaces_and_crds_go_first_so_one_pass_is_enough(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """Items listed backwards (a custom resource, a ConfigMap in a new namespace, the CRD, the Namespace) converge in
    the first pass: the state goes Processing -> Ready with no Error in between; deleting removes them all."""
    suffix = uuid.uuid4().hex[:6]
    group, namespace = f"t{suffix}.example.com", f"ns-{suffix}"
    crd = crds.definition(
        gvr=kube.Gvr(group, "v1", "widgets"), kind="Widget", short="wd", schema=crds.OBJECT_SCHEMA, printer=[]
    )
    widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": namespace}}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": namespace}}
    items = [
        {"name": name, "strategy": "CreateAndSync", "resource": yaml.safe_dump(resource)}
        for name, resource in (
            ("widget", widget),
            ("configmap", configmap),
            ("crd", crd),
            ("namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
    ]
    await bind(kcp.api, kcp.namespace, allowPrivileged=True)
    states: list[str] = []
    async with run_controller():
        await kcp.create("ordered", {"kyma": "skr-1", "items": items})

        async def converged() -> bool:
            state = await kcp.state("ordered")
            if state and (not states or states[-1] != state):
                states.append(state)
            return state == "Ready"

        await eventually(converged, what="Ready")
        assert "Error" not in states, states
        runtime = kcp.skrs["skr-1"]
        assert await kube.get_or_none(runtime, f"/apis/{group}/v1/namespaces/{namespace}/widgets/w") is not None
        await kube.request(kcp.api, "DELETE", kcp.path("ordered"))
        await eventually(lambda: _gone(kcp, "ordered"), what="deleted")

    async def crd_gone() -> bool:  # the apiserver removes a CRD's objects before the CRD itself
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}"
        return await kube.get_or_none(runtime, path) is None

    await eventually(crd_gone, what="the CRD deleted")
