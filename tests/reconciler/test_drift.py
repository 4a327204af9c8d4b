"""Drift on a synced object travels the whole pipeline and is reset within seconds."""

import asyncio
import datetime
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from certs import authority
from clients import kube
from devenv import landscape as landscape_mod
from listener import server, settings
from watcher import agent as agent_mod

from ..listener.conftest import wait_ready
from .conftest import Kcp, eventually

pytestmark = pytest.mark.integration


def _write(directory: Path, name: str, data: bytes) -> str:
    (directory / name).write_bytes(data)
    return str(directory / name)


async def test_user_edit_in_runtime_is_reset_through_watcher_listener_and_nats(
    landscape: landscape_mod.Landscape, kcp: Kcp, run_controller: Callable[..., Any], tmp_path: Path
) -> None:
    """With the periodic resync far away, only the watcher event can reset the edit; it does, and the reset is not echoed."""
    ca = authority.Authority.create("kyma-sync-ca")
    hour = datetime.timedelta(hours=1)
    serving, client_cert = ca.issue_server(["127.0.0.1"], lifetime=hour), ca.issue_runtime("skr-1", lifetime=hour)
    bundle = _write(tmp_path, "bundle.crt", ca.to_files()[authority.BUNDLE])
    listener_config = settings.ListenerSettings.model_validate({
        "host": "127.0.0.1", "port": 0, "management_port": 0, "modules": ["kyma-sync"],
        "tls": {"cert_file": _write(tmp_path, "srv.crt", serving.cert_pem), "key_file": _write(tmp_path, "srv.key", serving.key_pem)},
        "trust": {"client_ca_file": bundle},
        "nats": {"servers": [landscape.nats.url]},
    })
    async with server.serving(listener_config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        watcher_config = tmp_path / "watcher.yaml"
        watcher_config.write_text(yaml.safe_dump({
            "runtime": "skr-1",
            "listeners": [{"url": bound.events_url}],
            "tls": {"cert_file": _write(tmp_path, "c.crt", client_cert.cert_pem),
                    "key_file": _write(tmp_path, "c.key", client_cert.key_pem), "ca_file": bundle},
            "watches": [{"version": "v1", "resource": "configmaps", "namespaces": [kcp.runtime_namespace],
                         "label_selector": "kyma-project.io/synced-by=kyma-sync", "module": "kyma-sync"}],
            "lease": {"namespace": kcp.runtime_namespace},
            "checkpoint": {"namespace": kcp.runtime_namespace},
            "management_port": 0,
        }))
        watcher = agent_mod.Agent(config_path=watcher_config, api=kcp.skrs["skr-1"], identity="w", registry=CollectorRegistry())
        stop_watcher = asyncio.Event()
        watching = asyncio.create_task(watcher.run(stop=stop_watcher))
        try:
            async with run_controller(resync_seconds=3600, nats_servers=(landscape.nats.url,), durable=f"drift-{uuid.uuid4().hex[:6]}"):
                await kcp.create("drift", {"kyma": "skr-1", "items": [kcp.configmap("cm-drift", {"k": "desired"})]})
                await eventually(lambda: _data_is(kcp, "cm-drift", "desired"), what="created")
                await eventually(lambda: _true(watcher.leading), what="watcher leading")
                await asyncio.sleep(1)
                edited_at = asyncio.get_running_loop().time()
                edited = await kube.request(
                    kcp.skrs["skr-1"], "PATCH", f"/api/v1/namespaces/{kcp.runtime_namespace}/configmaps/cm-drift",
                    body={"data": {"k": "edited"}}, query=[("fieldManager", "kubectl")],
                    content_type="application/merge-patch+json",
                )
                assert edited["data"] == {"k": "edited"}
                await eventually(lambda: _data_is(kcp, "cm-drift", "desired"), timeout=20, what="drift reset by event")
                reset_after = asyncio.get_running_loop().time() - edited_at
                await asyncio.sleep(1.5)
        finally:
            stop_watcher.set()
            await watching
    sample = watcher.metrics.registry.get_sample_value
    assert reset_after < 20
    assert (sample("kyma_watcher_events_noise_total", {"reason": "ignored_field_manager"}) or 0) >= 1
    print(f"drift reset {reset_after:.2f}s after the edit")


async def _data_is(kcp: Kcp, name: str, value: str) -> bool:
    found = await kcp.configmap_in("skr-1", name)
    return found is not None and (found.get("data") or {}).get("k") == value


async def _true(value: bool) -> bool:
    return value
