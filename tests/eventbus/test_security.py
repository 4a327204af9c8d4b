"""The event bus against a real nats-server: identities, least privilege, retention, backpressure."""

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client as Nats
from nats.js import api as js_api
from prometheus_client import CollectorRegistry

from clients import bus
from contract import events, wire
from devenv import nats as nats_mod
from reconciler import consumer

from ..factories import configmap_event
from ..waiting import eventually

pytestmark = pytest.mark.integration

Connect = Callable[..., Awaitable[tuple[Nats, list[str]]]]


@pytest.fixture
async def connect(bare_nats: nats_mod.NatsServer) -> AsyncIterator[Connect]:
    """Connect as an identity; the server's complaints (permission violations) are collected."""
    opened: list[Nats] = []

    async def open_as(identity: str) -> tuple[Nats, list[str]]:
        complaints: list[str] = []

        async def note(error: Exception) -> None:
            complaints.append(str(error))

        options = bus.connect_options([bare_nats.url], name=identity, credentials=bare_nats.credentials(identity))
        connection = await nats.connect(**{**options, "error_cb": note})  # type: ignore[arg-type]
        opened.append(connection)
        return connection, complaints

    yield open_as
    for connection in opened:
        await connection.close()


async def publish_as_listener(connect: Connect, *changes: events.ChangeEvent) -> None:
    connection, _ = await connect("listener")
    js = connection.jetstream()
    for change in changes:
        await js.publish(change.subject, events.encode(change), headers={bus.MSG_ID_HEADER: change.id})


async def refused(operation: Awaitable[Any], complaints: list[str], subject: str) -> bool:
    """True when the operation fails and the server said why: a permissions violation on ``subject``."""
    try:
        await asyncio.wait_for(operation, timeout=3)
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
        pass
    else:
        return False
    deadline = asyncio.get_running_loop().time() + 3
    while not any("permissions violation" in c.lower() and subject.lower() in c.lower() for c in complaints):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _connection_refused(servers: list[str], **options: Any) -> None:
    """Connect once, without retrying: it must fail. The client is closed either way: nats-py leaves the socket of a
    failed first connect open (one that timed out on a loaded machine was left to the GC, failing the run). Its close
    has shut the socket when it waits, forever, for a stream whose TLS upgrade failed: that wait is cut short."""
    client = Nats()
    try:
        with pytest.raises((nats.errors.Error, OSError)):
            await client.connect(servers, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5, **options)
    finally:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(client.close(), timeout=1)


async def test_anonymous_and_plaintext_clients_are_refused(bare_nats: nats_mod.NatsServer, connect: Connect) -> None:
    """No identity: the connection is refused; no TLS: the connection is refused; nothing is stored."""
    anonymous = ssl.create_default_context(cafile=str(bare_nats.credentials().ca_file))
    await _connection_refused([bare_nats.url], tls=anonymous)
    await _connection_refused([bare_nats.url.replace("tls://", "nats://")])
    admin, _ = await connect("admin")
    info = await admin.jetstream().stream_info(wire.STREAM_NAME)
    assert info.state.messages == 0


async def test_the_listener_may_publish_events_and_nothing_else(connect: Connect) -> None:
    """It gets JetStream's ack for an event; reading events, creating consumers or streams is refused."""
    listener, complaints = await connect("listener")
    js = listener.jetstream(timeout=2)
    ack = await js.publish(f"kyma.events.{wire.SYNC_MODULE}.skr-1", b"{}", headers={bus.MSG_ID_HEADER: "x"})
    assert ack.stream == wire.STREAM_NAME
    sneak = js.pull_subscribe("kyma.events.>", durable="sneak", stream=wire.STREAM_NAME)
    assert await refused(sneak, complaints, "sneak")
    assert await refused(js.stream_info(wire.STREAM_NAME), complaints, f"STREAM.INFO.{wire.STREAM_NAME}")
    assert await refused(js.add_stream(name="ROGUE", subjects=["rogue.>"]), complaints, "STREAM.CREATE.ROGUE")
    assert await refused(js.delete_stream(wire.STREAM_NAME), complaints, f"STREAM.DELETE.{wire.STREAM_NAME}")
    await listener.subscribe("kyma.events.>")
    await listener.flush()
    await eventually(lambda: any("subscription" in c.lower() for c in complaints), what="the subscription refused")


async def test_a_team_reads_only_its_module_and_deletes_nothing(
    bare_nats: nats_mod.NatsServer, connect: Connect
) -> None:
    """Team A's durable over module A works; module B, the unfiltered form, other names and deletes are refused."""
    await bare_nats.add_team("team-a", module="module-a")
    team, complaints = await connect("team-a")
    js = team.jetstream(timeout=2)
    own = await js.pull_subscribe("kyma.events.module-a.*", durable="team-a", stream=wire.STREAM_NAME)
    mine, theirs = configmap_event("module-a"), configmap_event("module-b")
    await publish_as_listener(connect, mine, theirs)
    [message] = await own.fetch(1, timeout=5)
    assert events.decode(message.data).id == mine.id
    await message.ack()
    with pytest.raises(nats.errors.TimeoutError):
        await own.fetch(1, timeout=1)  # module B's event never reaches team A's durable
    other_module = js.pull_subscribe("kyma.events.module-b.*", durable="team-a-b", stream=wire.STREAM_NAME)
    assert await refused(other_module, complaints, "team-a-b")
    unfiltered = js_api.ConsumerConfig(durable_name="team-a", ack_policy=js_api.AckPolicy.EXPLICIT)
    unfiltered_create = f"$JS.API.CONSUMER.DURABLE.CREATE.{wire.STREAM_NAME}.team-a"
    request = json.dumps({"stream_name": wire.STREAM_NAME, "config": unfiltered.as_dict()}).encode()
    assert await refused(team.request(unfiltered_create, request, timeout=2), complaints, unfiltered_create)
    assert await refused(js.delete_consumer(wire.STREAM_NAME, "team-a"), complaints, "CONSUMER.DELETE")
    assert await refused(js.delete_stream(wire.STREAM_NAME), complaints, "STREAM.DELETE")
    assert await refused(js.purge_stream(wire.STREAM_NAME), complaints, "STREAM.PURGE")


async def test_the_reconciler_uses_only_its_own_durables(connect: Connect) -> None:
    """Its durable per module works (filtered to the module), and each declared replica's; another name, another
    module's filter, a stream: refused."""
    reconciler, complaints = await connect("reconciler")
    js = reconciler.jetstream(timeout=2)
    durable = f"kyma-reconciler-{wire.SYNC_MODULE}"
    await js.pull_subscribe(f"kyma.events.{wire.SYNC_MODULE}.*", durable=durable, stream=wire.STREAM_NAME)
    replica = f"{durable}-{nats_mod.RECONCILER_REPLICAS[0]}"  # a sharded replica's own durable
    await js.pull_subscribe(f"kyma.events.{wire.SYNC_MODULE}.*", durable=replica, stream=wire.STREAM_NAME)
    other_name = js.pull_subscribe("kyma.events.team-b.*", durable=f"{durable}-x", stream=wire.STREAM_NAME)
    assert await refused(other_name, complaints, f"{durable}-x")
    other_module = js.pull_subscribe(
        "kyma.events.other.*", durable="kyma-reconciler-cloud-manager", stream=wire.STREAM_NAME
    )
    assert await refused(other_module, complaints, "kyma.events.other")
    assert await refused(js.add_stream(name="ROGUE", subjects=["rogue.>"]), complaints, "STREAM.CREATE.ROGUE")
    info = await js.stream_info(wire.STREAM_NAME)  # its fill, for the stream-near-limit alert
    assert info.config.name == wire.STREAM_NAME
    dead_letters = js.stream_info(wire.DEAD_LETTER_STREAM_NAME)
    assert await refused(dead_letters, complaints, f"STREAM.INFO.{wire.DEAD_LETTER_STREAM_NAME}")
    assert await refused(js.get_msg(wire.STREAM_NAME, 1), complaints, "STREAM.MSG.GET")


async def test_a_reconciler_denied_its_durable_says_so(bare_nats: nats_mod.NatsServer) -> None:
    """A module the reconciler identity was not granted is a configuration error, not an outage: the consumer
    reports the refusal (for readiness and a metric) naming the durable, instead of looking like NATS is down."""
    settings = consumer.ConsumerSettings(
        servers=(bare_nats.url,),
        subject="kyma.events.not-granted.*",
        durable="kyma-reconciler-not-granted",
        stream=wire.STREAM_NAME,
        credentials=bare_nats.credentials("reconciler"),
    )

    async def handler(event: events.ChangeEvent) -> None:
        raise AssertionError("nothing can be delivered")

    registry = CollectorRegistry()
    metrics, stop = consumer.ConsumerMetrics(registry), asyncio.Event()
    consuming = asyncio.create_task(consumer.consume(settings, handler, metrics=metrics, stop=stop))
    try:
        await eventually(lambda: settings.durable in metrics.refusals, what="the refusal reported")
    finally:
        stop.set()
        await consuming
    assert "may not use durable kyma-reconciler-not-granted" in metrics.refusals[settings.durable]
    assert registry.get_sample_value("kyma_reconciler_consumer_refused", {"durable": settings.durable}) == 1


async def test_once_every_consumer_acked_the_stream_holds_nothing(
    bare_nats: nats_mod.NatsServer, connect: Connect
) -> None:
    """Interest retention: an event stays until each durable acked it, then it is gone; with no durable it is not kept."""
    await publish_as_listener(connect, configmap_event("module-a", name="before-anyone-listens"))
    admin, _ = await connect("admin")
    assert (await admin.jetstream().stream_info(wire.STREAM_NAME)).state.messages == 0
    await bare_nats.add_team("team-a", module="module-a")
    team, _ = await connect("team-a")
    reconciler, _ = await connect("reconciler")
    readers = [
        await team.jetstream().pull_subscribe("kyma.events.module-a.*", durable="team-a", stream=wire.STREAM_NAME),
        await reconciler.jetstream().pull_subscribe(
            f"kyma.events.{wire.SYNC_MODULE}.*", durable=f"kyma-reconciler-{wire.SYNC_MODULE}", stream=wire.STREAM_NAME
        ),
    ]
    await publish_as_listener(
        connect,
        *(configmap_event("module-a") for _ in range(3)),
        *(configmap_event(wire.SYNC_MODULE) for _ in range(2)),
    )
    assert (await admin.jetstream().stream_info(wire.STREAM_NAME)).state.messages == 5
    for reader, count in zip(readers, (3, 2), strict=True):
        for message in await reader.fetch(count, timeout=5):
            await message.ack_sync()
    assert (await admin.jetstream().stream_info(wire.STREAM_NAME)).state.messages == 0


async def test_a_full_stream_refuses_publishes_until_consumers_catch_up(
    bare_nats: nats_mod.NatsServer, connect: Connect
) -> None:
    """At max_bytes the publisher gets StreamFullError (nothing is dropped); once acked, publishing works again."""
    admin = await bus.Bus.connect([bare_nats.url], name="admin", credentials=bare_nats.credentials())
    try:
        await admin.ensure_stream(bus.EVENTS.model_copy(update={"max_bytes": 4096}))
    finally:
        await admin.close()
    reconciler, _ = await connect("reconciler")
    reader = await reconciler.jetstream().pull_subscribe(
        f"kyma.events.{wire.SYNC_MODULE}.*", durable=f"kyma-reconciler-{wire.SYNC_MODULE}", stream=wire.STREAM_NAME
    )
    listener = await bus.Bus.connect([bare_nats.url], name="listener", credentials=bare_nats.credentials("listener"))
    try:
        stored = 0
        with pytest.raises(bus.StreamFullError):
            for _ in range(100):
                change = configmap_event(wire.SYNC_MODULE)
                await listener.publish(
                    subject=change.subject, payload=events.encode(change), msg_id=change.id, headers={}, timeout=5
                )
                stored += 1
        assert 0 < stored < 100
        for message in await reader.fetch(stored, timeout=5):
            await message.ack_sync()
        change = configmap_event(wire.SYNC_MODULE)
        result = await listener.publish(
            subject=change.subject, payload=events.encode(change), msg_id=change.id, headers={}, timeout=5
        )
        assert not result.duplicate
    finally:
        await listener.close()
