"""Connections the apiserver drops mid-request are ordinary Kubernetes errors, never a crash."""

import asyncio
from collections.abc import AsyncIterator

import pytest

from clients import kube, leases
from pki import kubeconfigs, pki
from watcher import checkpoint, config


@pytest.fixture
async def hanging_up_server() -> AsyncIterator[str]:
    """An 'apiserver' that reads the request and closes the connection without answering."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.close()
    await server.wait_closed()


async def test_lease_and_checkpoint_treat_a_dropped_connection_as_an_api_error(hanging_up_server: str) -> None:
    """Lease acquisition says no; checkpoint loading raises UnreachableError (which the pipeline retries)."""
    kubeconfig = kubeconfigs.build(
        cluster="c", server=hanging_up_server, ca_pem=pki.create_ca("x").cert_pem, user="u", token="t"
    )
    async with await kube.api_client(kubeconfig) as api:
        settings = config.LeaseSettings()
        candidate = leases.Lease(api, settings.namespace, settings.name, identity="me", duration_seconds=6)
        assert await candidate.try_acquire() is False
        assert not candidate.reachable
        with pytest.raises(kube.UnreachableError):
            await checkpoint.CheckpointStore(api, config.CheckpointSettings()).load()
