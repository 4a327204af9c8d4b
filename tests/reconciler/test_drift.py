"""Drift on a synced object travels the whole pipeline and is reset within seconds."""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from clients import kube
from devenv import landscape as landscape_mod

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
