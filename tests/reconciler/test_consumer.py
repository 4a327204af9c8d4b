"""The event path against a real JetStream: settle by outcome, keep long work alive, dead-letter what never succeeds."""

import asyncio
import datetime
import uuid

import pytest
from nats.aio.client import Client as Nats
from prometheus_client import CollectorRegistry

from clients import bus
from contract import events, subjects, wire
from devenv import landscape as landscape_mod
from devenv import nats as nats_mod
from reconciler import consumer, workqueue

from ..conftest import connect_raw
from ..factories import configmap_event
from ..waiting import eventually

SETTINGS = consumer.ConsumerSettings(servers=(), subject="", durable="", stream="", max_deliveries=3)


@pytest.mark.parametrize(
    ("result", "deliveries", "action"),
    [
        pytest.param(None, 1, consumer.Action.ACK, id="not-ours"),
        pytest.param(workqueue.Result(), 1, consumer.Action.ACK, id="ok"),
        pytest.param(workqueue.Result.refused("invalid"), 1, consumer.Action.TERM, id="terminal"),
        pytest.param(workqueue.Result(error="x", requeue_after=7.0), 1, consumer.Action.NAK, id="failed"),
        pytest.param(workqueue.Result(error="x"), 3, consumer.Action.DEAD_LETTER, id="failed-too-often"),
    ],
)
def test_settlement(result: workqueue.Result | None, deliveries: int, action: consumer.Action) -> None:
    """One mapping decides; a nak waits as long as the queue's own retry."""
    decided = consumer.settlement(result, deliveries=deliveries, settings=SETTINGS)
    assert decided.action == action
    if action == consumer.Action.NAK:
        assert decided.delay == 7.0


async def publish(connection: bus.Bus, event: events.ChangeEvent, *, subject: str | None = None) -> None:
    await connection.publish(
        subject=subject or event.subject, payload=events.encode(event), msg_id=event.id, headers={}, timeout=5
    )


@pytest.mark.integration
async def test_a_failing_event_is_dead_lettered_while_others_flow(
    landscape: landscape_mod.Landscape, event_bus: bus.Bus
) -> None:
    """An event that never succeeds is tried max_deliveries times, then dead-lettered; a healthy one is not held up."""
    module = f"dl-{uuid.uuid4().hex[:6]}"
    poison, healthy = configmap_event(module, "skr-a", name="poison"), configmap_event(module, "skr-b", name="fine")
    calls: dict[str, int] = {"poison": 0, "fine": 0}
    order: list[str] = []

    async def handler(event: events.ChangeEvent) -> workqueue.Result | None:
        calls[event.target.name] += 1
        if event.target.name == "poison":
            await asyncio.sleep(0.3)
            order.append("poison")
            return workqueue.Result(error="always fails", requeue_after=0.05)
        order.append("fine")
        return workqueue.Result()

    registry = CollectorRegistry()
    metrics = consumer.ConsumerMetrics(registry)
    settings = consumer.ConsumerSettings(
        servers=(landscape.nats.url,),
        credentials=landscape.nats.credentials(),
        subject=f"kyma.events.{module}.*",
        durable=f"d-{module}",
        stream=bus.StreamSettings().name,
        max_deliveries=3,
    )
    dead = await event_bus.pull_consumer(
        bus.ConsumerSettings(
            stream=bus.DEAD_LETTERS.name,
            durable=f"dead-{module}",
            filter_subject=f"{subjects.DEAD_LETTER_PREFIX}.{module}.*",
            ack_wait_seconds=30,
            max_ack_pending=10,
        )
    )
    await publish(event_bus, poison)
    await publish(event_bus, healthy)
    stop = asyncio.Event()
    consuming = asyncio.create_task(consumer.consume(settings, handler, metrics=metrics, stop=stop))
    try:
        letters: list[bus.Delivery] = []
        while not letters:
            letters = await dead.fetch(1, timeout=1)
    finally:
        stop.set()
        await consuming
    assert letters[0].subject == f"{subjects.DEAD_LETTER_PREFIX}.{module}.skr-a"
    assert "always fails" in letters[0].headers[wire.DEAD_LETTER_REASON_HEADER]
    assert events.decode(letters[0].data).id == poison.id
    assert calls == {"poison": 3, "fine": 1} and order[0] == "fine"
    assert registry.get_sample_value("kyma_reconciler_dead_letters_total", {"module": module}) == 1


@pytest.mark.integration
async def test_an_event_on_another_runtimes_subject_is_refused(
    landscape: landscape_mod.Landscape, event_bus: bus.Bus
) -> None:
    """A message whose subject does not match its event's runtime never reaches a handler."""
    module = f"sp-{uuid.uuid4().hex[:6]}"
    forged = configmap_event(module, "skr-a", name="forged")
    handled: list[str] = []

    async def handler(event: events.ChangeEvent) -> workqueue.Result | None:
        handled.append(event.id)
        return workqueue.Result()

    registry = CollectorRegistry()
    metrics = consumer.ConsumerMetrics(registry)
    await publish(event_bus, forged, subject=f"kyma.events.{module}.skr-b")
    await publish(event_bus, configmap_event(module, "skr-b", name="genuine"))
    settings = consumer.ConsumerSettings(
        servers=(landscape.nats.url,),
        credentials=landscape.nats.credentials(),
        subject=f"kyma.events.{module}.*",
        durable=f"d-{module}",
        stream=bus.StreamSettings().name,
    )
    stop = asyncio.Event()
    consuming = asyncio.create_task(consumer.consume(settings, handler, metrics=metrics, stop=stop))
    try:
        await eventually(
            lambda: (
                bool(
                    registry.get_sample_value(
                        "kyma_reconciler_events_total", {"module": module, "action": "dead_letter"}
                    )
                )
                and bool(handled)
            ),
            what="settled",
        )
    finally:
        stop.set()
        await consuming
    assert handled == [configmap_event(module, "skr-b", name="genuine").id]


@pytest.mark.integration
async def test_a_reconcile_longer_than_ack_wait_is_not_redelivered(
    landscape: landscape_mod.Landscape, event_bus: bus.Bus, nats_client: Nats
) -> None:
    """While the handler works, the ack timer is kept alive: one delivery, one call, acked."""
    module = f"hb-{uuid.uuid4().hex[:6]}"
    calls = 0

    async def handler(event: events.ChangeEvent) -> workqueue.Result | None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(6)  # two ack waits: only heartbeats keep it
        return workqueue.Result()

    registry = CollectorRegistry()
    metrics = consumer.ConsumerMetrics(registry)
    await publish(event_bus, configmap_event(module, "skr-a", name="slow"))
    settings = consumer.ConsumerSettings(
        servers=(landscape.nats.url,),
        credentials=landscape.nats.credentials(),
        subject=f"kyma.events.{module}.*",
        durable=f"d-{module}",
        stream=bus.StreamSettings().name,
        # Heartbeats every second leave 2 s for a stalled loop: with 2 s (every 2/3 s) a loaded 2-core CI,
        # late in the suite, redelivered once.
        ack_wait_seconds=3,
    )
    stop = asyncio.Event()
    consuming = asyncio.create_task(consumer.consume(settings, handler, metrics=metrics, stop=stop))
    try:
        await eventually(
            lambda: bool(
                registry.get_sample_value("kyma_reconciler_events_total", {"module": module, "action": "ack"})
            ),
            what="acked",
        )
    finally:
        stop.set()
        await consuming
    js = nats_client.jetstream()

    async def settled() -> bool:  # the ack is a message of its own: the server may count it a moment later
        return bool((await js.consumer_info(bus.StreamSettings().name, f"d-{module}")).num_ack_pending == 0)

    await eventually(settled, what="the ack counted")
    info = await js.consumer_info(bus.StreamSettings().name, f"d-{module}")
    assert info.config.ack_wait == 3, "with the server's 30 s the sleep would pass without a heartbeat"
    assert calls == 1 and info.num_redelivered == 0


@pytest.mark.integration
async def test_work_in_flight_does_not_hold_up_the_reconnect(private_nats: nats_mod.NatsServer) -> None:
    """The durable vanishes (an operator removed it) while one event's reconcile is still running: the consumer
    comes back at once and handles later events, not after that reconcile ends (it may run for minutes)."""
    module = "kyma-sync"
    started, release = asyncio.Event(), asyncio.Event()
    handled: list[str] = []

    async def handler(event: events.ChangeEvent) -> workqueue.Result | None:
        if event.target.name == "slow":
            started.set()
            await release.wait()
        handled.append(event.target.name)
        return workqueue.Result()

    async def publish_as_listener(name: str) -> None:
        connection = await bus.Bus.connect(
            [private_nats.url], name="test-listener", credentials=private_nats.credentials("listener")
        )
        try:
            await publish(connection, configmap_event(module, "skr-a", name=name))
        finally:
            await connection.close()

    settings = consumer.ConsumerSettings(
        servers=(private_nats.url,),
        credentials=private_nats.credentials("reconciler"),
        subject=f"kyma.events.{module}.*",
        durable=f"kyma-reconciler-{module}",
        stream=bus.StreamSettings().name,
    )
    stop = asyncio.Event()
    consuming = asyncio.create_task(
        consumer.consume(settings, handler, metrics=consumer.ConsumerMetrics(CollectorRegistry()), stop=stop)
    )
    try:
        await publish_as_listener("slow")
        await asyncio.wait_for(started.wait(), timeout=30)
        admin = await connect_raw(private_nats)
        try:
            await admin.jetstream().delete_consumer(settings.stream, settings.durable)
        finally:
            await admin.close()
        await publish_as_listener("after-restart")
        await eventually(lambda: "after-restart" in handled, timeout=60, what="the later event handled")
        assert "slow" not in handled
    finally:
        release.set()
        stop.set()
        await consuming


@pytest.mark.integration
async def test_the_consumer_reports_its_backlog_and_the_streams_fill(
    landscape: landscape_mod.Landscape, event_bus: bus.Bus
) -> None:
    """What the queue panels and the stream-near-limit alert read: undelivered, unsettled, the stream's bytes and limit."""
    module = f"bl-{uuid.uuid4().hex[:6]}"
    release = asyncio.Event()

    async def handler(event: events.ChangeEvent) -> workqueue.Result | None:
        await release.wait()
        return workqueue.Result()

    for n in range(5):
        await publish(event_bus, configmap_event(module, "skr-a", name=f"cm-{n}"))
    registry = CollectorRegistry()
    settings = consumer.ConsumerSettings(
        servers=(landscape.nats.url,),
        credentials=landscape.nats.credentials(),
        subject=f"kyma.events.{module}.*",
        durable=f"d-{module}",
        stream=bus.StreamSettings().name,
        max_in_flight=2,
        backlog_report_seconds=0.1,
    )
    sample = registry.get_sample_value
    stop = asyncio.Event()
    consuming = asyncio.create_task(
        consumer.consume(settings, handler, metrics=consumer.ConsumerMetrics(registry), stop=stop)
    )
    try:
        durable = {"durable": settings.durable}
        await eventually(
            lambda: (
                sample("kyma_reconciler_consumer_pending_messages", durable) == 3
                and sample("kyma_reconciler_consumer_ack_pending_messages", durable) == 2
            ),
            what="3 waiting and 2 in flight",
        )
        stream = {"stream": settings.stream}
        assert (sample("kyma_eventbus_stream_messages", stream) or 0) >= 5
        assert (sample("kyma_eventbus_stream_bytes", stream) or 0) > 0
        assert sample("kyma_eventbus_stream_max_bytes", stream) == bus.StreamSettings().max_bytes
        release.set()
        await eventually(
            lambda: (
                sample("kyma_reconciler_consumer_pending_messages", durable) == 0
                and sample("kyma_reconciler_consumer_ack_pending_messages", durable) == 0
            ),
            what="the backlog drained",
        )
    finally:
        release.set()
        stop.set()
        await consuming


@pytest.mark.parametrize(
    ("observed_seconds_before_storing", "trusted_seconds_before_storing"),
    [(2, 2), (3600, 30), (-600, 0)],
    ids=["ordinary", "dated-an-hour-back", "clock-ten-minutes-ahead"],
)
def test_observed_at_is_held_to_the_time_the_stream_stored_the_event(
    observed_seconds_before_storing: float, trusted_seconds_before_storing: float
) -> None:
    """The runtime's clock (or a tenant) cannot move the change-to-applied latency beyond a 30 s allowance."""
    stored = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.UTC)
    event = configmap_event("m").model_copy(
        update={"observed_at": stored - datetime.timedelta(seconds=observed_seconds_before_storing)}
    )
    trusted = consumer.with_trusted_observed_at(event, stored_at=stored)
    assert stored - trusted.observed_at == datetime.timedelta(seconds=trusted_seconds_before_storing)
