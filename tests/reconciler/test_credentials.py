"""The reconciler across credential rotations: kubeconfigs renewed again and again, not one 401."""

import asyncio
import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from certs import access, rotation, stores
from contract import wire
from devenv import demo
from devenv import landscape as landscape_mod
from pki import authority, kubeconfigs

from ..waiting import eventually
from .conftest import Kcp

pytestmark = pytest.mark.integration


async def test_no_reconcile_fails_while_its_kubeconfig_is_rotated_under_it(
    landscape: landscape_mod.Landscape, kcp: Kcp, run_controller: Callable[..., Any], tmp_path: Path
) -> None:
    """Eight rotations of the reconciler's token, 1.5 s apart (each revoking the one before; the apiserver's token
    cache lets a revoked token live up to 10 s, so the run outlasts it), the reconciler passing every 0.2 s
    meanwhile: every pass succeeds. A reconciler still using a revoked token would get 401s (errors)."""
    await stores.write_secret(
        kcp.api,
        namespace=wire.KCP_NAMESPACE,
        name=wire.master_kubeconfig_secret("skr-1"),
        data={wire.KUBECONFIG_KEY: kubeconfigs.dump(landscape.runtimes["skr-1"].admin_kubeconfig()).encode()},
        labels={wire.KYMA_NAME_LABEL: "skr-1"},
    )
    store = stores.DirectoryStore(tmp_path / "ca")
    await store.write(authority.Authority.create("ca").to_files())
    always_due = rotation.RotationSettings(
        certificate_lifetime=datetime.timedelta(hours=1),
        renew_fraction=0.0,
        module_access=access.AccessConfig.model_validate({"modules": {wire.SYNC_MODULE: demo.RECONCILER_ACCESS}}),
    )
    await rotation.rotate_once(kcp=kcp.api, store=store, settings=always_due)
    async with run_controller(resync_seconds=0.2) as running:
        await kcp.create("rotating", {"kyma": "skr-1", "items": [kcp.configmap("cm-rotating", {"k": "v"})]})
        await eventually(lambda: _ready(kcp, "rotating"), what="Ready with the minted kubeconfig")
        for _ in range(8):
            report = await rotation.rotate_once(kcp=kcp.api, store=store, settings=always_due)
            assert "kyma-sync/skr-1" in report.kubeconfigs
            await asyncio.sleep(1.5)
        errors = running.shared.registry.get_sample_value(
            "kyma_reconciler_runtime_errors_total", {"controller": "sync_resources", "runtime": "skr-1"}
        )
        assert errors is None, f"{errors} reconciles of skr-1 failed during the rotations"
        assert await _ready(kcp, "rotating")


async def _ready(kcp: Kcp, name: str) -> bool:
    return await kcp.state(name) == "Ready"
