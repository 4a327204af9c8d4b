"""Runtime API clients follow activity: built on use from the kubeconfig Secrets, closed when idle."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from clients import informer, kube
from contract import wire
from reconciler import runtime_clients

from ..waiting import eventually
from .conftest import MODULE, Kcp

pytestmark = pytest.mark.integration

IDLE = 0.5
"""Seconds a client may go unused before it is retired, here."""


@contextlib.asynccontextmanager
async def _clients(kcp: Kcp, *, sweeping: bool) -> AsyncIterator[runtime_clients.RuntimeClients]:
    """Clients with a half-second idle time over the cached kubeconfig Secrets (``sweeping``: their sweep runs)."""
    secrets = informer.Informer(
        kcp.api,
        kube.SECRETS,
        namespace=wire.KUBECONFIG_NAMESPACE,
        label_selector=f"{wire.MODULE_LABEL}={MODULE}",
    )
    stop = asyncio.Event()
    following = asyncio.create_task(secrets.run(stop=stop))
    clients = runtime_clients.RuntimeClients(
        secrets, module=MODULE, namespace=wire.KUBECONFIG_NAMESPACE, idle_seconds=IDLE
    )
    sweep = asyncio.create_task(clients.run(stop=stop)) if sweeping else None
    try:
        await secrets.synced.wait()
        yield clients
    finally:
        stop.set()
        if sweep is not None:
            await sweep
        await clients.close()
        await following


def _closed(handle: runtime_clients.RuntimeHandle) -> bool:
    return bool(handle.objects.api.rest_client.pool_manager.closed)


async def _works(handle: runtime_clients.RuntimeHandle, kcp: Kcp) -> bool:
    return await kube.get_or_none(handle.objects.api, f"/api/v1/namespaces/{kcp.runtime_namespace}") is not None


async def test_an_idle_runtime_client_is_closed_and_built_again_on_use(kcp: Kcp) -> None:
    """A client nobody used for the idle time is retired and closed at the next use of any other; the idle
    runtime's next use builds a new working client. Only clients in use are held."""
    async with _clients(kcp, sweeping=False) as clients:
        async with clients.use("skr-1") as first:
            assert await _works(first, kcp)
        async with clients.use("skr-2"):
            pass
        assert clients.cached == 2
        await asyncio.sleep(IDLE + 0.1)
        async with clients.use("skr-2") as busy:  # skr-1 has been idle: retired, and closed
            pass
        await asyncio.sleep(IDLE / 10 + 0.01)  # past a tenth of the idle time: the next use looks again
        async with clients.use("skr-2") as again_busy:
            assert again_busy is busy
        assert clients.cached == 1, "only the runtime in use holds a client"
        assert clients.retired == 0
        assert _closed(first), "the idle client's connections are closed"
        async with clients.use("skr-1") as again:
            assert again is not first
            assert await _works(again, kcp)


async def test_idle_clients_are_closed_while_nothing_uses_any(kcp: Kcp) -> None:
    """A landscape gone quiet: no use of any client comes to retire the idle ones, yet they are closed (the fleet
    benchmark's 1,000 runtimes kept all 1,000 clients through 150 s of rest when only a use looked)."""
    async with _clients(kcp, sweeping=True) as clients:
        used = []
        for runtime in ("skr-1", "skr-2"):
            async with clients.use(runtime) as handle:
                used.append(handle)
        assert clients.cached == 2
        await eventually(lambda: clients.cached == 0, timeout=10, what="the idle clients retired")
        await eventually(lambda: all(_closed(h) for h in used), timeout=10, what="their connections closed")
        assert clients.retired == 0


async def test_a_retired_client_is_closed_as_soon_as_nobody_uses_it(kcp: Kcp) -> None:
    """A retired client nobody uses is closed at once, not kept for the longest reconcile timeout in case a
    reconcile still held it: the 10,000-runtime benchmark's surviving replica had 4,536 such clients open
    after 330 s of rest, the resync passes' clients lingering for five minutes after their last use."""
    async with _clients(kcp, sweeping=True) as clients:
        async with clients.use("skr-1") as idle:
            pass
        await eventually(lambda: _closed(idle), timeout=10, what="the idle client closed")
        assert clients.cached == 0 and clients.retired == 0
        async with clients.use("skr-1") as replaced:
            pass
        assert clients.invalidate("skr-1"), "retired, as when its kubeconfig Secret changes"
        await eventually(lambda: _closed(replaced), timeout=10, what="the replaced client closed")
        assert clients.retired == 0


async def test_a_client_in_use_is_never_idle_nor_closed_under_its_reconcile(kcp: Kcp) -> None:
    """A reconcile longer than the idle time keeps its client; one whose client is retired meanwhile (its Secret
    changed) goes on with it, counted as retired, and it is closed once that reconcile is done."""
    async with _clients(kcp, sweeping=True) as clients:
        async with clients.use("skr-1") as held:
            await asyncio.sleep(3 * IDLE)  # several sweeps, each past the idle time since it was taken
            assert clients.cached == 1, "a client in use is not idle"
            assert clients.invalidate("skr-1")
            await asyncio.sleep(3 * IDLE / 10)  # sweeps that would close a retired client nobody uses
            assert not _closed(held)
            assert clients.retired == 1
            assert await _works(held, kcp), "the reconcile's requests still go through"
        await eventually(lambda: _closed(held), timeout=10, what="the retired client closed after its reconcile")
        assert clients.retired == 0
