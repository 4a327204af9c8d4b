"""ModuleTemplates copied write-only from KCP into every runtime."""

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from clients import kube
from contract import wire
from reconciler import crds

from ..waiting import eventually, failed_reconciles, more_reconciles, write_conflicts
from . import admission
from .conftest import Kcp, as_created_before_the_hand_over, label_kyma

pytestmark = pytest.mark.integration

RUNTIME_PATH = crds.MODULE_TEMPLATE.path("kyma-system")
KCP_PATH = crds.MODULE_TEMPLATE.path("kcp-system")


async def template_in(kcp: Kcp, runtime: str, name: str) -> dict[str, Any] | None:
    try:
        return await kube.request(kcp.skrs[runtime], "GET", f"{RUNTIME_PATH}/{name}")
    except kube.NotFoundError:
        return None


def template(name: str, namespace: str, version: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": crds.MODULE_TEMPLATE.api_version,
        "kind": "ModuleTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"moduleName": "keda", "version": version},
    }


async def create_template(kcp: Kcp, name: str, version: str, labels: dict[str, str] | None = None) -> None:
    await kube.request(kcp.api, "POST", KCP_PATH, body=template(name, "kcp-system", version, labels))


async def test_templates_reach_every_runtime_edits_revert_deletions_follow(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A KCP template appears in both runtimes; a runtime edit is reverted; a KCP deletion removes all copies."""
    name = f"keda-{uuid.uuid4().hex[:6]}"
    async with run_controller(
        module_templates={"enabled": True, "workers": 1, "resync_seconds": 1, "runtime_crds": "create-if-absent"}
    ) as running:
        await create_template(kcp, name, "1.0.0")

        async def everywhere(version: str) -> bool:
            copies = [await template_in(kcp, r, name) for r in ("skr-1", "skr-2")]
            return all(c is not None and c["spec"]["version"] == version for c in copies)

        await eventually(lambda: everywhere("1.0.0"), what="copied to both runtimes")
        await kube.request(
            kcp.skrs["skr-1"],
            "PATCH",
            f"{RUNTIME_PATH}/{name}",
            body={"spec": {"version": "hacked"}},
            content_type="application/merge-patch+json",
        )
        await eventually(lambda: everywhere("1.0.0"), what="edit reverted")
        await kube.request(
            kcp.api,
            "PATCH",
            f"{KCP_PATH}/{name}",
            body={"spec": {"version": "1.1.0"}},
            content_type="application/merge-patch+json",
        )
        await eventually(lambda: everywhere("1.1.0"), what="update fanned out")
        await kube.request(kcp.api, "DELETE", f"{KCP_PATH}/{name}")

        async def nowhere() -> bool:
            return all([await template_in(kcp, r, name) is None for r in ("skr-1", "skr-2")])

        await eventually(nowhere, what="deleted from every runtime")
        controller = next(c for c in running.controllers if c.name == "module_templates")
    assert controller.queue.peak_running == 1


async def test_disabled_flag_copies_nothing(kcp: Kcp, run_controller: Callable[..., Any]) -> None:
    """With module_templates disabled no such controller runs, and no template reaches a runtime."""
    name = f"off-{uuid.uuid4().hex[:6]}"
    async with run_controller(module_templates={"enabled": False}) as running:
        await create_template(kcp, name, "1.0.0")
        await eventually(lambda: running.readiness() is None, what="ready")
        assert "module_templates" not in {c.name for c in running.controllers}
        assert await template_in(kcp, "skr-1", name) is None
    await kube.request(kcp.api, "DELETE", f"{KCP_PATH}/{name}")


async def test_copies_keep_labels_and_annotations_and_beta_or_internal_go_only_where_asked(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """As lifecycle-manager does: a copy carries the template's labels and annotations; a beta (internal) template
    reaches only runtimes whose Kyma is labelled beta (internal)."""
    plain, beta, internal = (f"{kind}-{uuid.uuid4().hex[:6]}" for kind in ("plain", "beta", "internal"))
    for name, labels in (
        (plain, {"operator.kyma-project.io/module-name": "keda"}),
        (beta, {wire.BETA_LABEL: "true"}),
        (internal, {wire.INTERNAL_LABEL: "true"}),
    ):
        await kube.request(
            kcp.api,
            "POST",
            KCP_PATH,
            body={
                "apiVersion": "operator.kyma-project.io/v1beta2",
                "kind": "ModuleTemplate",
                "metadata": {
                    "name": name,
                    "namespace": "kcp-system",
                    "labels": labels,
                    "annotations": {"operator.kyma-project.io/doc-url": "https://kyma-project.io/keda"},
                },
                "spec": {"moduleName": "keda", "version": "1.0.0"},
            },
        )
    await label_kyma(kcp.api, "skr-2", {wire.BETA_LABEL: "true"})
    try:
        async with run_controller(
            module_templates={"enabled": True, "resync_seconds": 1, "runtime_crds": "create-if-absent"}
        ):
            await eventually(lambda: _present(kcp, "skr-2", beta), what="the beta template in the beta runtime")
            await eventually(lambda: _present(kcp, "skr-1", plain), what="the plain template everywhere")
            copy = await template_in(kcp, "skr-1", plain)
            assert copy is not None
            assert copy["metadata"]["labels"]["operator.kyma-project.io/module-name"] == "keda"
            assert copy["metadata"]["annotations"]["operator.kyma-project.io/doc-url"] == "https://kyma-project.io/keda"
            assert await template_in(kcp, "skr-1", beta) is None, "skr-1 is not labelled beta"
            assert (
                await template_in(kcp, "skr-1", internal) is None and await template_in(kcp, "skr-2", internal) is None
            )
            await label_kyma(kcp.api, "skr-2", {wire.BETA_LABEL: None})
            await eventually(lambda: _absent(kcp, "skr-2", beta), what="the beta copy gone with the label")
    finally:
        await label_kyma(kcp.api, "skr-2", {wire.BETA_LABEL: None})
        for name in (plain, beta, internal):
            await kube.delete(kcp.api, f"{KCP_PATH}/{name}")


async def test_a_template_someone_else_creates_first_in_a_runtime_is_never_taken_over(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """Someone else creates a ModuleTemplate of a KCP template's name in a runtime between the reconciler's read
    (absent) and its write: the write is refused (it is a create), and theirs is left as it is, without our synced-by
    label, so deleting the KCP template later does not delete theirs (a forced apply took it over, and the deletion
    followed)."""
    label = uuid.uuid4().hex[:8]
    name = f"raced-{label}"
    created = admission.operations_on(crds.MODULE_TEMPLATE, "CREATE")

    async def theirs_first(api: kube.ApiClient, obj: dict[str, Any]) -> None:
        theirs = template(name, "kyma-system", "theirs", {"race": label})
        await kube.request(api, "POST", RUNTIME_PATH, body=theirs)

    async with (
        run_controller(
            module_templates={"enabled": True, "resync_seconds": 1, "runtime_crds": "create-if-absent"}
        ) as running,
        admission.racing_admission(kcp.skrs["skr-1"], label=label, race=theirs_first, rule=created) as raced,
    ):
        await create_template(kcp, name, "1.0.0", {"race": label})
        await eventually(lambda: _present(kcp, "skr-2", name), what="copied where nobody raced")
        await eventually(lambda: raced == [name], what="the copy's create raced")
        await more_reconciles(running.shared.registry, "module_templates", 4)
        theirs = await template_in(kcp, "skr-1", name) or {}
        assert theirs["spec"]["version"] == "theirs" and wire.SYNCED_LABEL not in theirs["metadata"]["labels"]
        await kube.request(kcp.api, "DELETE", f"{KCP_PATH}/{name}")
        await eventually(lambda: _absent(kcp, "skr-2", name), what="our copy deleted with the template")
        await more_reconciles(running.shared.registry, "module_templates", 4)
        assert await _present(kcp, "skr-1", name), "theirs is not ours to delete"
    await kube.delete(kcp.skrs["skr-1"], f"{RUNTIME_PATH}/{name}")


async def test_a_repair_that_loses_a_race_is_read_and_made_again_at_once(
    kcp: Kcp, run_controller: Callable[..., Any]
) -> None:
    """A user edits a template's copy in a runtime. The repair, conditional on the copy as read, loses a race with
    another writer (it annotates the copy): refused (409), read again and made in the same pass, not failed to its
    backoff. The copy is back, the other writer's annotation stays, the conflict is counted and no reconcile
    failed."""
    label = uuid.uuid4().hex[:8]
    name = f"repaired-{label}"
    skr, path = kcp.skrs["skr-1"], f"{RUNTIME_PATH}/{name}"

    async def version_is(version: str) -> bool:
        return bool(((await template_in(kcp, "skr-1", name)) or {}).get("spec", {}).get("version") == version)

    await create_template(kcp, name, "1.0.0", {"race": label})
    async with run_controller(
        module_templates={"enabled": True, "resync_seconds": 1, "runtime_crds": "create-if-absent"}
    ) as running:
        await eventually(lambda: version_is("1.0.0"), what="copied")
        # The create settled first: its hand-over is an update of ours too, which the webhook would race.
        await more_reconciles(running.shared.registry, "module_templates", 4)
        failures = failed_reconciles(running.shared.registry, "module_templates")
        updated = admission.operations_on(crds.MODULE_TEMPLATE, "UPDATE")
        async with admission.racing_admission(skr, label=label, race=admission.annotating(path), rule=updated) as raced:
            await kube.merge_patch(skr, path, {"spec": {"version": "6.6.6"}})
            await eventually(lambda: raced == [name], what="the repair raced")
            await eventually(lambda: version_is("1.0.0"), what="the copy repaired")
        copy = await template_in(kcp, "skr-1", name) or {}
        assert copy["metadata"]["annotations"]["raced"] == "yes", "the other writer's field stays"
        assert write_conflicts(running.shared.registry, "module_templates") == 1
        assert failed_reconciles(running.shared.registry, "module_templates") == failures
    await kube.delete(kcp.api, f"{KCP_PATH}/{name}")
    await kube.delete(skr, path)


@pytest.mark.parametrize("made", ["today", "before_creates_handed_their_fields_over"])
async def test_a_label_the_template_loses_leaves_its_copies(
    kcp: Kcp, run_controller: Callable[..., Any], made: str
) -> None:
    """A template in KCP loses a label (a module out of preview): its copy in a runtime loses it too, whether made by
    today's code or by an earlier kyma-sync's, whose create's Update entry owns the label too. Before, it stayed on
    both: a pass found the copy carrying every label wanted and wrote nothing, and a write would not have removed
    what a create owned."""
    name = f"loses-{uuid.uuid4().hex[:8]}"
    copy_path = f"{RUNTIME_PATH}/{name}"
    enabled = {"enabled": True, "resync_seconds": 1, "runtime_crds": "create-if-absent"}
    await create_template(kcp, name, "1.0.0", {"example.com/stage": "preview", "example.com/team": "a"})
    async with run_controller(module_templates=enabled):
        await eventually(lambda: _present(kcp, "skr-1", name), what="copied")
    if made != "today":
        await as_created_before_the_hand_over(kcp.skrs["skr-1"], copy_path)
    await kube.merge_patch(kcp.api, f"{KCP_PATH}/{name}", {"metadata": {"labels": {"example.com/stage": None}}})

    async def label_gone() -> bool:
        labels = ((await template_in(kcp, "skr-1", name)) or {"metadata": {}})["metadata"].get("labels") or {}
        return "example.com/stage" not in labels and labels.get("example.com/team") == "a"

    async with run_controller(module_templates=enabled):
        await eventually(label_gone, what="the label gone from the copy")
    await kube.delete(kcp.api, f"{KCP_PATH}/{name}")
    await kube.delete(kcp.skrs["skr-1"], copy_path)
    await kube.delete(kcp.skrs["skr-2"], copy_path)


async def _present(kcp: Kcp, runtime: str, name: str) -> bool:
    return await template_in(kcp, runtime, name) is not None


async def _absent(kcp: Kcp, runtime: str, name: str) -> bool:
    return await template_in(kcp, runtime, name) is None
