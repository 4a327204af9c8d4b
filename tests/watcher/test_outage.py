"""A watcher rides out its runtime apiserver going away and coming back."""

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from clients import kube
from devenv import testbin
from watcher import agent as agent_mod

from .conftest import SELECTOR_LABEL, Runtime, own_apiserver

pytestmark = pytest.mark.integration


async def test_agent_survives_an_apiserver_outage_and_reports_changes_after_it(
    testbin_binaries: testbin.Binaries, runtime: Runtime, tmp_path: Path
) -> None:
    """Stop the apiserver for a few seconds: the agent keeps running and a change made afterwards arrives."""
    async with own_apiserver(testbin_binaries, tmp_path, "outage") as (cluster, api):
        await kube.ensure_namespace(api, runtime.namespace)
        config = runtime.write_config(
            runtime.config(lease={"namespace": runtime.namespace, "duration_seconds": 3, "renew_interval_seconds": 1})
        )
        agent = agent_mod.Agent(config_path=config, api=api, identity="survivor", registry=CollectorRegistry())
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop=stop))
        try:
            await runtime.listener.wait_for(lambda: agent.leading)
            await asyncio.get_running_loop().run_in_executor(None, cluster.stop_apiserver)
            await asyncio.sleep(4)
            assert not task.done(), task.exception() if task.done() else None
            await asyncio.get_running_loop().run_in_executor(None, cluster.start_apiserver)
            await kube.request(
                api,
                "POST",
                kube.CONFIGMAPS.path(runtime.namespace),
                body={
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "after-outage", "labels": {SELECTOR_LABEL: "true"}},
                },
            )
            await runtime.listener.wait_for(lambda: len(runtime.listener.of("after-outage")) == 1, timeout=30)
            assert not task.done()
        finally:
            stop.set()
            await task
