"""Drift on a synced object travels the whole pipeline and is reset within seconds."""

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import nats.errors
import nats.js.errors
import pytest

from clients import kube
from contract import events, wire
from devenv import landscape as landscape_mod

from ..conftest import connect_raw
from ..waiting import eventually
from .conftest import Kcp

pytestmark = pytest.mark.integration


async def test_user_edit_in_runtime_is_reset_through_watcher_listener_and_nats(
    landscape: landscape_mod.Landscape, kcp: Kcp, run_controller: Callable[..., Any], pipeline: Callable[..., Any]
) -> None:
    """With the periodic resync far away, only the watcher event can reset the edit; it does, and the reset is not echoed."""
    watches = [
        {
            "version": "v1",
            "resource": "configmaps",
            "namespaces": [kcp.runtime_namespace],
            "label_selector": "kyma-project.io/synced-by=kyma-sync",
            "module": "kyma-sync",
        }
    ]
    async with (
        pipeline(watches, ["kyma-sync"]) as running,
        run_controller(resync_seconds=3600, nats_servers=(landscape.nats.url,)) as reconciling,
    ):
        await kcp.create("drift", {"kyma": "skr-1", "items": [kcp.configmap("cm-drift", {"k": "desired"})]})
        await eventually(lambda: _data_is(kcp, "cm-drift", "desired"), what="created")
        await eventually(lambda: _ready(kcp, "drift"), what="Ready")
        edited_at = asyncio.get_running_loop().time()
        edited = await kube.request(
            kcp.skrs["skr-1"],
            "PATCH",
            f"/api/v1/namespaces/{kcp.runtime_namespace}/configmaps/cm-drift",
            body={"data": {"k": "edited"}},
            query=[("fieldManager", "kubectl")],
            content_type="application/merge-patch+json",
        )
        assert edited["data"] == {"k": "edited"}
        await eventually(lambda: _data_is(kcp, "cm-drift", "desired"), timeout=20, what="drift reset by event")
        reset_after = asyncio.get_running_loop().time() - edited_at
        sample = running.watcher.metrics.registry.get_sample_value
        await eventually(
            lambda: (sample("kyma_watcher_events_noise_total", {"reason": "ignored_field_manager"}) or 0) >= 1,
            what="the reset recognised as our own write, not echoed",
        )
        applied = reconciling.shared.registry.get_sample_value(
            "kyma_reconciler_change_applied_seconds_count", {"controller": "sync_resources", "module": "kyma-sync"}
        )
        assert (applied or 0) >= 1, "the change seen by the watcher is timed until applied"
    print(f"drift reset {reset_after:.2f}s after the edit")


async def _ready(kcp: Kcp, name: str) -> bool:
    return await kcp.state(name) == "Ready"


async def _data_is(kcp: Kcp, name: str, value: str) -> bool:
    found = await kcp.configmap_in("skr-1", name)
    return found is not None and (found.get("data") or {}).get("k") == value


def _synced_configmaps(
    kcp: Kcp, *, module: str = "kyma-sync", selector: str = "kyma-project.io/synced-by=kyma-sync"
) -> list[dict[str, Any]]:
    return [
        {
            "version": "v1",
            "resource": "configmaps",
            "namespaces": [kcp.runtime_namespace],
            "label_selector": selector,
            "module": module,
        }
    ]


async def test_a_deletion_while_the_watcher_is_down_is_delivered_after_it_restarts(
    landscape: landscape_mod.Landscape, kcp: Kcp, pipeline: Callable[..., Any]
) -> None:
    """A ConfigMap edited, then deleted while the watcher is down: the relist's deletion event reaches the stream.

    Its id must differ from the edit's event's, or JetStream's duplicate window drops it and consumers
    (a CreateAndIgnore item to recreate) only notice at the periodic resync.
    """
    watches = _synced_configmaps(kcp, selector="team=gone")
    path = f"/api/v1/namespaces/{kcp.runtime_namespace}/configmaps/cm-gone"
    created = await _labelled_configmap(kcp, "cm-gone", team="gone")
    async with pipeline(watches, ["kyma-sync"]) as running:
        sent = running.watcher.metrics.registry.get_sample_value
        await eventually(
            lambda: (sent("kyma_watcher_events_sent_total", {"module": "kyma-sync"}) or 0) >= 1, what="listed"
        )
        await kube.request(
            kcp.skrs["skr-1"],
            "PATCH",
            path,
            body={"data": {"k": "edited"}},
            query=[("fieldManager", "kubectl")],
            content_type="application/merge-patch+json",
        )
        await eventually(
            lambda: (sent("kyma_watcher_events_sent_total", {"module": "kyma-sync"}) or 0) >= 2,
            what="the edit delivered (and so checkpointed)",
        )
    await kube.request(kcp.skrs["skr-1"], "DELETE", path)
    uid = created["metadata"]["uid"]
    async with pipeline(watches, ["kyma-sync"]):
        await eventually(
            lambda: _stored_change(landscape, "kyma.events.kyma-sync.skr-1", uid, events.ChangeType.DELETED),
            timeout=30,
            what="the deletion made while down stored",
        )


async def _labelled_configmap(kcp: Kcp, name: str, *, team: str) -> dict[str, Any]:
    """A ConfigMap a user creates in skr-1 (not synced), labelled for the test's watch."""
    return await kube.request(
        kcp.skrs["skr-1"],
        "POST",
        f"/api/v1/namespaces/{kcp.runtime_namespace}/configmaps",
        body={"metadata": {"name": name, "labels": {"team": team}}, "data": {"k": "v"}},
    )


async def _stored_change(landscape: landscape_mod.Landscape, subject: str, uid: str, change: events.ChangeType) -> bool:
    """Whether the stream holds a ``change`` event of object ``uid`` on ``subject``."""
    raw = await connect_raw(landscape.nats)
    try:
        consumer = await raw.jetstream().pull_subscribe(subject, stream=wire.STREAM_NAME)
        try:
            messages = []
            while batch := await _fetch(consumer):
                messages += batch
        finally:
            await consumer.unsubscribe()
    finally:
        await raw.close()
    decoded = [events.decode(m.data) for m in messages]
    return any(e.target.uid == uid and e.change_type == change for e in decoded)


async def _fetch(consumer: Any) -> list[Any]:
    try:
        return list(await consumer.fetch(512, timeout=0.5))
    except TimeoutError:  # nats-py also raises a bare one when the 408 beats its deadline
        return []


async def test_an_event_refused_for_its_module_is_sent_again_once_the_module_is_allowed(
    landscape: landscape_mod.Landscape, kcp: Kcp, pipeline: Callable[..., Any]
) -> None:
    """422 (module unknown to the listener) is a configuration to fix, not a delivery: after the fix and a restart
    the change arrives, because the watcher did not checkpoint it as delivered."""
    module = f"late-{uuid.uuid4().hex[:6]}"
    watches = _synced_configmaps(kcp, module=module, selector="team=late")
    await _labelled_configmap(kcp, "cm-late", team="late")
    async with pipeline(watches, ["kyma-sync"]) as running:
        refused = running.watcher.metrics.registry.get_sample_value
        await eventually(
            lambda: (refused("kyma_watcher_events_rejected_total", {"status": "422"}) or 0) >= 1, what="refused"
        )
    subject = f"kyma.events.{module}.skr-1"
    async with pipeline(watches, ["kyma-sync", module]):
        raw = await connect_raw(landscape.nats)
        try:

            async def stored() -> bool:
                try:
                    message = await raw.jetstream().get_last_msg(wire.STREAM_NAME, subject)
                except nats.js.errors.NotFoundError:
                    return False
                return events.decode(message.data or b"").target.name == "cm-late"

            await eventually(stored, timeout=30, what=f"the change stored on {subject}")
        finally:
            await raw.close()
