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
async def _clients(kcp: Kcp, *, sweeping: bool, idle: float = IDLE) -> AsyncIterator[runtime_clients.RuntimeClients]:
    """Clients over the cached kubeconfig Secrets (``sweeping``: their sweep runs, every tenth of ``idle``)."""
    secrets = informer.Informer(
        kcp.api,
        kube.SECRETS,
        namespace=wire.KUBECONFIG_NAMESPACE,
        label_selector=f"{wire.MODULE_LABEL}={MODULE}",
    )
    stop = asyncio.Event()
    following = asyncio.create_task(secrets.run(stop=stop))
    clients = runtime_clients.RuntimeClients(
        secrets, module=MODULE, namespace=wire.KUBECONFIG_NAMESPACE, idle_seconds=idle
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
    """Its pool is closed. aiohttp marks it closed, then awaits at least one loop turn (longer while kept-alive TLS
    connections shut down) before the sweep drops the client from the retired ones: a check of the retired count
    waits for that too."""
    return bool(handle.objects.api.rest_client.pool_manager.closed)


async def _works(handle: runtime_clients.RuntimeHandle, kcp: Kcp) -> bool:
    return await kube.get_or_none(handle.objects.api, f"/api/v1/namespaces/{kcp.runtime_namespace}") is not None


async def test_an_idle_runtime_client_is_retired_and_built_again_on_use(kcp: Kcp) -> None:
    """A client nobody used for the idle time is retired at the next use of any other (closing it is the sweep's
    job); the idle runtime's next use builds a new working client. Only clients in use are held."""
    async with _clients(kcp, sweeping=False) as clients:
        async with clients.use("skr-1") as first:
            assert await _works(first, kcp)
        await asyncio.sleep(IDLE + 0.1)
        async with clients.use("skr-2"):  # skr-1 has been idle: retired
            assert clients.cached == 1, "only the runtime in use holds a client"
            assert clients.retired == 1
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
        await eventually(
            lambda: all(_closed(h) for h in used) and clients.retired == 0, timeout=10, what="their connections closed"
        )


async def test_a_retired_client_is_closed_as_soon_as_nobody_uses_it(kcp: Kcp) -> None:
    """A retired client nobody uses is closed at the next sweep, not kept for the longest reconcile timeout in
    case a reconcile still held it: the 10,000-runtime benchmark's surviving replica had 4,536 such clients open
    after 330 s of rest, the resync passes' clients lingering for five minutes after their last use."""
    async with _clients(kcp, sweeping=True) as clients:
        async with clients.use("skr-1") as idle:
            pass
        await eventually(lambda: _closed(idle) and clients.retired == 0, timeout=10, what="the idle client closed")
        assert clients.cached == 0
    async with _clients(kcp, sweeping=True, idle=60) as clients:  # swept every 6 s, idle only after a minute
        async with clients.use("skr-1") as replaced:
            pass
        assert clients.invalidate("skr-1"), "retired, as when its kubeconfig Secret changes"
        await eventually(
            lambda: _closed(replaced) and clients.retired == 0, timeout=15, what="the replaced client closed"
        )


async def test_a_client_in_use_is_never_idle_nor_closed_under_its_reconcile(kcp: Kcp) -> None:
    """A reconcile longer than the idle time keeps its client; one whose client is retired meanwhile (its Secret
    changed) goes on with it, counted as retired, and it is closed once that reconcile is done, or failed."""
    async with _clients(kcp, sweeping=True) as clients:
        async with clients.use("skr-1") as held:
            async with clients.use("skr-2") as taken_later:
                pass
            await eventually(lambda: _closed(taken_later), timeout=10, what="a client taken later closed as idle")
            assert clients.cached == 1, "the client in use for longer is not idle"
            assert clients.invalidate("skr-1")
            async with clients.use("skr-2") as witness:
                pass
            assert clients.invalidate("skr-2")
            await eventually(
                lambda: _closed(witness) and clients.retired == 1,
                timeout=10,
                what="a sweep since skr-1's client was retired",
            )
            assert not _closed(held), "a retired client in use stays open"
            assert await _works(held, kcp), "the reconcile's requests still go through"
        await eventually(
            lambda: _closed(held) and clients.retired == 0,
            timeout=10,
            what="the retired client closed after its reconcile",
        )
        with pytest.raises(RuntimeError):
            async with clients.use("skr-1") as failed:
                raise RuntimeError("the reconcile failed")
        await eventually(lambda: _closed(failed), timeout=10, what="a failed reconcile's client closed once idle")


async def test_what_was_prepared_in_a_runtime_outlives_an_idle_client_not_a_new_kubeconfig_nor_a_failure(
    kcp: Kcp,
) -> None:
    """A resync pass every 5 minutes builds every runtime's client again; what was ensured there (namespaces,
    CRDs) is not ensured again by each new client. A reconcile that failed forgets it (a user may have deleted
    the namespace), and so does a changed kubeconfig Secret, even one changing while nobody held a client."""
    async with _clients(kcp, sweeping=True) as clients:
        async with clients.use("skr-1") as first:
            first.prepared.add("namespace/kyma-system")
        await eventually(lambda: _closed(first), timeout=10, what="the idle client closed")
        async with clients.use("skr-1") as rebuilt:
            assert rebuilt is not first
            assert rebuilt.prepared == {"namespace/kyma-system"}
        clients.unprepared("skr-1")
        async with clients.use("skr-1") as after_failure:
            assert after_failure.prepared == set(), "ensured again after a failed reconcile"
            after_failure.prepared.add("namespace/kyma-system")
        secret_name = wire.module_kubeconfig_secret(MODULE, "skr-1")
        version = after_failure.secret_version
        await kube.request(
            kcp.api,
            "PATCH",
            kube.SECRETS.object_path(wire.KUBECONFIG_NAMESPACE, secret_name),
            body={"metadata": {"annotations": {"rotated": "now"}}},
            content_type="application/merge-patch+json",
        )
        renewed: list[runtime_clients.RuntimeHandle] = []

        async def a_new_client() -> bool:
            async with clients.use("skr-1") as handle:
                renewed.append(handle)
                return handle is not after_failure

        await eventually(a_new_client, timeout=10, what="a client built from the changed Secret")
        assert renewed[-1].secret_version != version
        assert renewed[-1].prepared == set(), "ensured again through the new kubeconfig"
        await eventually(lambda: _closed(after_failure), timeout=10, what="the old client closed")
