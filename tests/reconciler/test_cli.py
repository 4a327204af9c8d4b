"""kyma-reconciler as a process: syncs a SyncResource, exits cleanly on SIGTERM."""

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devenv import landscape as landscape_mod
from devenv import net

from .conftest import Kcp, eventually

pytestmark = pytest.mark.integration


async def test_reconciler_process_syncs_and_stops_on_sigterm(
    landscape: landscape_mod.Landscape, kcp: Kcp, tmp_path: Path
) -> None:
    """Started with --config and --kcp-kubeconfig it syncs; SIGTERM ends it with exit 0."""
    config = tmp_path / "reconciler.yaml"
    config.write_text(yaml.safe_dump({"management_port": net.free_port(), "sync_resources": {"namespace": kcp.namespace}}))
    process = subprocess.Popen(
        [sys.executable, "-m", "reconciler.cli", "--config", str(config),
         "--kcp-kubeconfig", str(landscape.kcp.admin_kubeconfig_path), "--log-level", "WARNING"],
    )
    try:
        await kcp.create("cli", {"kyma": "skr-2", "items": [kcp.configmap("cm-cli", {"k": "v"})]})

        async def synced() -> bool:
            found = await kcp.configmap_in("skr-2", "cm-cli")
            return found is not None and await kcp.state("cli") == "Ready"

        await eventually(synced, what="synced by the process")
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.get_running_loop().run_in_executor(None, lambda: process.wait(timeout=20))
    assert code == 0


def test_invalid_configuration_exits_2(tmp_path: Path) -> None:
    """A configuration error is reported with exit code 2 before anything starts."""
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"sync_resources": {"workers": 0}}))
    result = subprocess.run([sys.executable, "-m", "reconciler.cli", "--config", str(config)], capture_output=True, text=True)
    assert result.returncode == 2 and "sync_resources.workers" in result.stderr
