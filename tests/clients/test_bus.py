"""Our JetStream seam against a real server: what nats-py reports is translated into empty work or an outage."""

import asyncio
import time
import uuid

import pytest

from clients import bus


@pytest.mark.integration
async def test_a_fetch_whose_loop_stalled_past_its_timeout_is_empty_not_an_outage(event_bus: bus.Bus) -> None:
    """nats-py raises a bare asyncio.TimeoutError when its deadline passed while the loop was busy elsewhere.

    Taken for an outage it closed the consumer's connection, and the work in flight lost its ack heartbeats
    (a loaded CI redelivered a 6 s reconcile).
    """
    module = f"stall-{uuid.uuid4().hex[:6]}"
    pull = await event_bus.pull_consumer(
        bus.ConsumerSettings(
            stream=bus.StreamSettings().name,
            durable=f"d-{module}",
            filter_subject=f"kyma.events.{module}.*",
            ack_wait_seconds=30,
            max_ack_pending=10,
            inactive_threshold_seconds=60,
        )
    )

    async def stall_the_loop() -> None:
        time.sleep(0.6)  # noqa: ASYNC251 - the point: a busy loop, as under load

    stalling = asyncio.create_task(stall_the_loop())
    assert await pull.fetch(2, timeout=0.5) == []
    await stalling
