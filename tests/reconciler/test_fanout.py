"""Central teams subscribe to the event subjects alongside the reconcilers."""

import asyncio
import json
import sys
import uuid
from pathlib import Path

import nats.js.errors
import pytest
from nats.aio.client import Client as Nats
from prometheus_client import CollectorRegistry

from clients import bus
from contract import events
from devenv import landscape as landscape_mod
from reconciler import consumer, workqueue

from ..factories import configmap_event
from ..waiting import eventually

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).parents[2] / "examples" / "central_team_subscriber.py"


async def test_sample_subscriber_and_a_reconciler_consumer_each_get_every_event(
    landscape: landscape_mod.Landscape, event_bus: bus.Bus, nats_client: Nats
) -> None:
    """Two durable consumers on one module's subjects both receive both runtimes' events; the team's with its own identity."""
    suffix = uuid.uuid4().hex[:6]
    module, team = f"mod-{suffix}", f"team-{suffix}"
    credentials = await landscape.nats.add_team(team, module=module)
    assert credentials.nkey_seed_file is not None and credentials.ca_file is not None
    sample = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SAMPLE),
        "--nats",
        landscape.nats.url,
        "--ca",
        str(credentials.ca_file),
        "--nkey",
        str(credentials.nkey_seed_file),
        "--team",
        team,
        "--module",
        module,
        "--limit",
        "2",
        stdout=asyncio.subprocess.PIPE,
    )
    await eventually(
        lambda: _has_consumer(nats_client, team), what="the sample's consumer (it delivers new messages only)"
    )
    sent = []
    for runtime in ("skr-1", "skr-2"):
        event = configmap_event(module, runtime, name="cm", resource_version="7", change_type=events.ChangeType.ADDED)
        await event_bus.publish(
            subject=event.subject, payload=events.encode(event), msg_id=event.id, headers={}, timeout=5
        )
        sent.append(event.id)
    received: list[str] = []

    async def handler(event: events.ChangeEvent) -> workqueue.Result | None:
        received.append(event.id)
        return workqueue.Result()

    stop = asyncio.Event()
    consuming = asyncio.create_task(
        consumer.consume(
            consumer.ConsumerSettings(
                servers=(landscape.nats.url,),
                subject=f"kyma.events.{module}.*",
                durable=f"reconciler-{suffix}",
                stream=bus.StreamSettings().name,
                credentials=landscape.nats.credentials(),
            ),
            handler,
            metrics=consumer.ConsumerMetrics(CollectorRegistry()),
            stop=stop,
        )
    )
    try:
        output, _ = await asyncio.wait_for(sample.communicate(), timeout=30)
        await eventually(lambda: len(received) >= 2, timeout=10, what="both events at the reconciler's consumer")
    finally:
        stop.set()
        await consuming
    assert sample.returncode == 0
    assert sorted(json.loads(line)["event_id"] for line in output.decode().splitlines()) == sorted(sent)
    assert sorted(received) == sorted(sent)


async def _has_consumer(nats_client: Nats, durable: str) -> bool:
    try:
        await nats_client.jetstream().consumer_info(bus.StreamSettings().name, durable)
    except nats.js.errors.NotFoundError:
        return False
    return True
