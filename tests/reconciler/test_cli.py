"""kyma-reconciler as a process: syncs a SyncResource, exits cleanly on SIGTERM."""

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from clients import kube
from devenv import landscape as landscape_mod
from devenv import net
from pki import kubeconfigs, pki
from reconciler import crds

from ..waiting import eventually
from .conftest import Kcp, register_runtime

pytestmark = pytest.mark.integration


async def test_reconciler_process_syncs_and_stops_on_sigterm(
    landscape: landscape_mod.Landscape, kcp: Kcp, tmp_path: Path
) -> None:
    """Started with --config and --kcp-kubeconfig it syncs; SIGTERM ends it with exit 0."""
    config = tmp_path / "reconciler.yaml"
    config.write_text(
        yaml.safe_dump({"management_port": net.free_port(), "sync_resources": {"namespace": kcp.namespace}})
    )
    process = await start_reconciler(landscape, config)
    try:
        await kcp.create("cli", {"kyma": "skr-2", "items": [kcp.configmap("cm-cli", {"k": "v"})]})

        async def synced() -> bool:
            found = await kcp.configmap_in("skr-2", "cm-cli")
            return found is not None and await kcp.state("cli") == "Ready"

        await eventually(synced, what="synced by the process")
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=20)
    assert code == 0


def test_invalid_configuration_exits_2(tmp_path: Path) -> None:
    """A configuration error is reported with exit code 2 before anything starts."""
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"sync_resources": {"workers": 0}}))
    result = subprocess.run(
        [sys.executable, "-m", "reconciler.cli", "--config", str(config)], capture_output=True, text=True
    )
    assert result.returncode == 2 and "sync_resources.workers" in result.stderr


async def test_a_durable_nats_does_not_grant_shows_in_readiness_while_syncing_goes_on(
    landscape: landscape_mod.Landscape, kcp: Kcp, tmp_path: Path
) -> None:
    """The reconciler identity asked to use a durable it was not granted: /readyz says which and why, an error is
    logged, and everything else (SyncResources) keeps working — a permission to grant, not an outage."""
    credentials = landscape.nats.credentials("reconciler")
    config = tmp_path / "reconciler.yaml"
    port = net.free_port()
    config.write_text(
        yaml.safe_dump(
            {
                "management_port": port,
                "sync_resources": {"namespace": kcp.namespace},
                "mirror": {"enabled": False},
                "nats": {
                    "servers": [landscape.nats.url],
                    "credentials": credentials.model_dump(mode="json", exclude_none=True),
                    "durable_prefix": "not-granted",
                },
            }
        )
    )
    process = await start_reconciler(landscape, config)
    try:

        async def readiness() -> str:
            async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/readyz") as reply:
                return f"{reply.status} {await reply.text()}"

        async def refused() -> bool:
            with contextlib.suppress(aiohttp.ClientError):
                return "not-granted-kyma-sync" in await readiness()
            return False

        await eventually(refused, timeout=60, what="readiness naming the refused durable")
        assert (await readiness()).startswith("503")
        await kcp.create("despite", {"kyma": "skr-2", "items": [kcp.configmap("cm-despite", {"k": "v"})]})
        await eventually(lambda: _synced(kcp, "despite", "cm-despite"), what="synced all the same")
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=20)
    assert code == 0


async def test_sigterm_under_a_backlog_of_failing_keys_exits_within_the_grace_period(
    landscape: landscape_mod.Landscape, kcp: Kcp, tmp_path: Path
) -> None:
    """Forty SyncResources stuck on a runtime whose apiserver never answers: SIGTERM still ends the process in time."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accept, then never answer: every request waits for its timeout

    blackhole = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = blackhole.sockets[0].getsockname()[1]
    runtime = "skr-blackhole"
    ca = pki.create_ca("blackhole")
    await register_runtime(
        kcp.api,
        runtime,
        kubeconfigs.build(cluster=runtime, server=f"https://127.0.0.1:{port}", ca_pem=ca.cert_pem, user="x", token="x"),
        {},
    )
    for n in range(40):
        await kcp.create(f"stuck-{n}", {"kyma": runtime, "items": [kcp.configmap("cm-stuck", {"k": "v"})]})
    grace = 5
    config = tmp_path / "reconciler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "management_port": net.free_port(),
                "shutdown_grace_seconds": grace,
                "sync_resources": {"namespace": kcp.namespace, "workers": 8},
            }
        )
    )
    process = await start_reconciler(landscape, config)
    try:
        await eventually(lambda: len(held) >= 8, timeout=60, what="workers stuck on the blackhole")
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=grace + 15)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        for writer in held:
            writer.close()
        blackhole.close()
        await blackhole.wait_closed()
        await kube.request(kcp.api, "DELETE", f"{crds.KYMA.path('kcp-system')}/{runtime}")
    assert code == 0


async def start_reconciler(landscape: landscape_mod.Landscape, config: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reconciler.cli",
        "--config",
        str(config),
        "--kcp-kubeconfig",
        str(landscape.kcp.admin_kubeconfig_path),
        "--log-level",
        "WARNING",
    )


async def _synced(kcp: Kcp, name: str, configmap: str) -> bool:
    return await kcp.configmap_in("skr-2", configmap) is not None and await kcp.state(name) == "Ready"
