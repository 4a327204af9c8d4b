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


@contextlib.asynccontextmanager
async def _clients(kcp: Kcp, *, linger: float, sweeping: bool) -> AsyncIterator[runtime_clients.RuntimeClients]:
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
        secrets, module=MODULE, namespace=wire.KUBECONFIG_NAMESPACE, idle_seconds=0.5, linger_seconds=linger
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


async def test_an_idle_runtime_client_is_closed_and_built_again_on_use(kcp: Kcp) -> None:
    """A client unused for the idle time is retired at the next use of any other and closed after the linger; the
    idle runtime's next use builds a new working client. Only clients in use are held."""
    async with _clients(kcp, linger=0, sweeping=False) as clients:
        first = await clients.get("skr-1")
        assert await kube.get_or_none(first.objects.api, f"/api/v1/namespaces/{kcp.runtime_namespace}")
        await clients.get("skr-2")
        assert clients.cached == 2
        await asyncio.sleep(0.6)
        busy = await clients.get("skr-2")  # skr-1 has been idle: retired, and closed (no linger here)
        await asyncio.sleep(0.06)  # past a tenth of the idle time: the next use looks again
        assert await clients.get("skr-2") is busy
        assert clients.cached == 1, "only the runtime in use holds a client"
        assert first.objects.api.rest_client.pool_manager.closed, "the idle client's connections are closed"
        again = await clients.get("skr-1")
        assert again is not first
        assert await kube.get_or_none(again.objects.api, f"/api/v1/namespaces/{kcp.runtime_namespace}")


async def test_idle_clients_are_closed_while_nothing_uses_any(kcp: Kcp) -> None:
    """A landscape gone quiet: no use of any client comes to retire the idle ones, yet they are closed (the fleet
    benchmark's 1,000 runtimes kept all 1,000 clients through 150 s of rest when only a use looked)."""
    async with _clients(kcp, linger=0.2, sweeping=True) as clients:
        used = [await clients.get(runtime) for runtime in ("skr-1", "skr-2")]
        assert clients.cached == 2
        await eventually(lambda: clients.cached == 0, timeout=10, what="the idle clients retired")
        await eventually(
            lambda: all(h.objects.api.rest_client.pool_manager.closed for h in used),
            timeout=10,
            what="their connections closed after the linger",
        )


async def test_a_retired_client_lingers_from_its_last_use_and_is_counted_until_closed(kcp: Kcp) -> None:
    """The linger protects a reconcile that took the client at its last use, so it counts from then, not from the
    retirement: an idle client past it is closed at once (the fleet benchmark found 1,000 clients open for the
    idle time plus the whole linger, none of them counted as held). One still within it is counted as retired."""
    async with _clients(kcp, linger=30, sweeping=False) as clients:
        recent = await clients.get("skr-1")
        await asyncio.sleep(0.6)  # idle: the next use retires it
        await clients.get("skr-2")
        assert clients.cached == 1 and clients.retired == 1, "retired, still open within the linger"
        assert not recent.objects.api.rest_client.pool_manager.closed
    async with _clients(kcp, linger=0.3, sweeping=False) as clients:
        idle = await clients.get("skr-1")
        await asyncio.sleep(0.6)  # idle, and longer than the linger since its last use
        await clients.get("skr-2")
        assert idle.objects.api.rest_client.pool_manager.closed, "closed when retired: its linger had passed"
        assert clients.retired == 0
