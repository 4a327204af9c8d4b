"""Shared fixtures: the real local landscape (NATS + KCP + two SKR apiservers) and clients.

The landscape is session-scoped and started only when a test asks for it; unit tests of pure
logic never pay for it.
"""

import asyncio
import gc
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from kubernetes_asyncio import client
from nats.aio.client import Client as Nats
from nats.js import api as js_api
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clients import bus, kube
from devenv import landscape as landscape_mod
from devenv import nats as nats_mod
from devenv import testbin
from observability import tracing

# One provider per process (OpenTelemetry refuses a second); spans are kept in memory for tests.
_SPANS = InMemorySpanExporter()
tracing.configure(service_name="kyma-sync-tests", processors=[SimpleSpanProcessor(_SPANS)])


@pytest.fixture
def spans() -> InMemorySpanExporter:
    _SPANS.clear()
    return _SPANS


@pytest.fixture(autouse=True)
async def no_leftover_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running behind it; let its sockets finish closing on its loop."""
    yield
    current = asyncio.current_task()
    leftovers = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    for task in leftovers:
        task.cancel()
    assert not leftovers, f"test left tasks running: {leftovers}"
    await _sockets_closed(asyncio.get_running_loop())


async def _sockets_closed(loop: asyncio.AbstractEventLoop, *, within: float = 3.0) -> None:
    """A TLS connection closed gracefully (a request cancelled mid-flight, a client closed while its peer is busy)
    keeps its socket until the peer answers the close. The test's loop closes right after the test: a socket still
    open then is left to the garbage collector, whose ResourceWarning fails whichever later test runs at that moment
    (the CI saw it, from a test that had passed). Such sockets get ``within`` seconds to close, then are aborted
    here, named on stderr."""
    still_open = [t for t in gc.get_objects() if isinstance(t, asyncio.Transport) and getattr(t, "_loop", None) is loop]
    still_open = [t for t in still_open if not t.is_closing()]
    deadline = loop.time() + within
    while still_open and loop.time() < deadline:
        await asyncio.sleep(0.05)
        still_open = [t for t in still_open if not t.is_closing()]
    for transport in still_open:
        print(f"aborting a socket the test left open: {transport!r}", file=sys.stderr)
        transport.abort()
    await asyncio.sleep(0)  # a closing transport closes its socket on the loop's next turn


@pytest.fixture(scope="session")
def testbin_binaries() -> testbin.Binaries:
    return testbin.configured()


@pytest.fixture(scope="session")
def landscape(
    tmp_path_factory: pytest.TempPathFactory, testbin_binaries: testbin.Binaries
) -> Iterator[landscape_mod.Landscape]:
    running = landscape_mod.start(workdir=tmp_path_factory.mktemp("landscape"), binaries=testbin_binaries)
    asyncio.run(keep_every_event(running.nats))
    yield running
    running.stop()


ARCHIVE = "test-archive"


async def keep_every_event(server: nats_mod.NatsServer) -> None:
    """A durable over every event subject that is never read: with interest retention the stream then
    keeps everything, so tests can look at what was stored (tests of retention use a server of their own)."""
    connection = await connect_raw(server)
    try:
        await connection.jetstream().add_consumer(
            bus.EVENTS.name,
            js_api.ConsumerConfig(
                durable_name=ARCHIVE, filter_subject=bus.EVENTS.subjects[0], ack_policy=js_api.AckPolicy.EXPLICIT
            ),
        )
    finally:
        await connection.close()


async def connect_raw(server: nats_mod.NatsServer, identity: str = "admin") -> Nats:
    """A plain nats-py connection as one of the server's identities."""
    options = bus.connect_options([server.url], name=f"tests-{identity}", credentials=server.credentials(identity))
    return await nats.connect(**options)  # type: ignore[arg-type]


@pytest.fixture
async def kcp_api(landscape: landscape_mod.Landscape) -> AsyncIterator[client.ApiClient]:
    async with await kube.api_client(landscape.kcp.admin_kubeconfig()) as api:
        yield api


@pytest.fixture
async def skr_api(landscape: landscape_mod.Landscape) -> AsyncIterator[client.ApiClient]:
    async with await kube.api_client(landscape.runtimes["skr-1"].admin_kubeconfig()) as api:
        yield api


@pytest.fixture
async def nats_client(landscape: landscape_mod.Landscape) -> AsyncIterator[Nats]:
    """A plain nats-py connection as the admin, for tests that look at JetStream directly."""
    connection = await connect_raw(landscape.nats)
    yield connection
    await connection.close()


@pytest.fixture
async def event_bus(landscape: landscape_mod.Landscape) -> AsyncIterator[bus.Bus]:
    """Our own connection, as the admin."""
    connection = await bus.Bus.connect([landscape.nats.url], name="tests", credentials=landscape.nats.credentials())
    yield connection
    await connection.close()


@pytest.fixture
async def bare_nats(tmp_path: Path) -> AsyncIterator[nats_mod.NatsServer]:
    """A NATS server of the test's own, exactly as deployed: TLS, identities, streams, no consumer yet."""
    server = nats_mod.NatsServer(workdir=tmp_path / "nats")
    server.start()
    try:
        await asyncio.get_running_loop().run_in_executor(None, server.wait_ready)
        await server.ensure_streams()
        yield server
    finally:
        server.stop()


@pytest.fixture
async def private_nats(bare_nats: nats_mod.NatsServer) -> nats_mod.NatsServer:
    """A NATS server of the test's own that keeps every event, for tests that stop and restart it."""
    await keep_every_event(bare_nats)
    return bare_nats
