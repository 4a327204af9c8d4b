"""Central teams subscribe to the event subjects alongside the reconcilers."""

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
from nats.aio.client import Client as Nats

from clients import bus
from contract import events, ids
from devenv import landscape as landscape_mod
from reconciler import consumer

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).parents[2] / "examples" / "central_team_subscriber.py"


async def test_sample_subscriber_and_a_reconciler_consumer_each_get_every_event(
    landscape: landscape_mod.Landscape, nats_client: Nats
) -> None:
    """Two durable consumers on one module's subjects both receive both runtimes' events."""
    module = f"team-{uuid.uuid4().hex[:6]}"
    await bus.ensure_stream(nats_client.jetstream(), bus.StreamSettings())
    sample = await asyncio.create_subprocess_exec(
        sys.executable, str(SAMPLE), "--nats", landscape.nats.url, "--module", module, "--durable", "team-a", "--limit", "2",
        stdout=asyncio.subprocess.PIPE,
    )
    await asyncio.sleep(1.5)  # the sample's consumer delivers new messages only
    sent = []
    for runtime in ("skr-1", "skr-2"):
        event = events.ChangeEvent.create(
            runtime=ids.RuntimeId(runtime), module=ids.ModuleName(module),
            target=events.WatchedObject(group="", version="v1", resource="configmaps", kind="ConfigMap",
                                        namespace="default", name="cm", uid=f"{runtime}-uid"),
            resource_version="7", change_type=events.ChangeType.ADDED, body={"data": {}},
        )
        await bus.publish(nats_client.jetstream(), subject=event.subject, payload=events.encode(event),
                          msg_id=event.id, headers={}, timeout=5)
        sent.append(event.id)
    received: list[str] = []

    async def handler(event: events.ChangeEvent) -> consumer.Outcome:
        received.append(event.id)
        return consumer.Outcome.ACK

    stop = asyncio.Event()
    consuming = asyncio.create_task(consumer.consume(
        consumer.ConsumerSettings(servers=(landscape.nats.url,), subject=f"kyma.events.{module}.*", durable="reconciler"),
        handler, stop=stop,
    ))
    try:
        output, _ = await asyncio.wait_for(sample.communicate(), timeout=30)
        deadline = asyncio.get_running_loop().time() + 10
        while len(received) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await consuming
    assert sample.returncode == 0
    assert sorted(json.loads(line)["event_id"] for line in output.decode().splitlines()) == sorted(sent)
    assert sorted(received) == sorted(sent)
