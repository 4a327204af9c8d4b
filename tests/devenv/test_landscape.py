"""Smoke test of the real landscape: a ConfigMap change in an SKR apiserver reaches JetStream."""

import asyncio
import uuid
from typing import Any

import nats.errors
import pytest
from kubernetes_asyncio import client, watch
from nats.aio.client import Client as Nats

from clients import bus
from contract import events, ids, subjects
from devenv import landscape as landscape_mod

pytestmark = pytest.mark.integration

SELECTOR = "kyma-project.io/smoke=true"


async def _watch_until_added(core: client.CoreV1Api, *, name: str, resource_version: str) -> Any:
    stream = watch.Watch()
    try:
        async for change in stream.stream(
            core.list_namespaced_config_map,
            "default",
            label_selector=SELECTOR,
            resource_version=resource_version,
            timeout_seconds=30,
        ):
            if change["type"] == "ADDED" and change["object"].metadata.name == name:
                return change["object"]
    finally:
        stream.stop()
        await stream.close()
    raise AssertionError(f"no ADDED event for {name}")


async def test_configmap_change_in_runtime_arrives_once_on_jetstream(
    landscape: landscape_mod.Landscape, skr_api: client.ApiClient, nats_client: Nats, event_bus: bus.Bus
) -> None:
    """Create a ConfigMap in SKR, watch it, publish it as an event twice: JetStream holds it once."""
    core = client.CoreV1Api(skr_api)
    js = nats_client.jetstream()
    stream = bus.StreamSettings()

    name = f"smoke-{uuid.uuid4().hex[:8]}"
    listing = await core.list_namespaced_config_map("default", label_selector=SELECTOR)
    watching = asyncio.create_task(
        _watch_until_added(core, name=name, resource_version=listing.metadata.resource_version)
    )
    await core.create_namespaced_config_map(
        "default",
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, labels={"kyma-project.io/smoke": "true"}),
            data={"hello": "runtime"},
        ),
    )
    seen = await asyncio.wait_for(watching, timeout=30)

    runtime, module = ids.runtime_id("skr-1"), ids.module_name("smoke")
    event = events.ChangeEvent.create(
        runtime=runtime,
        module=module,
        target=events.WatchedObject(
            group="",
            version="v1",
            resource="configmaps",
            kind="ConfigMap",
            namespace="default",
            name=name,
            uid=seen.metadata.uid,
        ),
        resource_version=seen.metadata.resource_version,
        change_type=events.ChangeType.ADDED,
        body=skr_api.sanitize_for_serialization(seen),
    )
    subject = subjects.event_subject(module=module, runtime=runtime)
    headers = {"Nats-Msg-Id": event.id}
    first = await js.publish(subject, events.encode(event), headers=headers, stream=stream.name)
    again = await js.publish(subject, events.encode(event), headers=headers, stream=stream.name)
    assert not first.duplicate and again.duplicate

    consumer = await js.pull_subscribe(subject, durable=f"smoke-{name}", stream=stream.name)
    try:
        [message] = await consumer.fetch(1, timeout=5)
        received = events.decode(message.data)
        await message.ack()
        assert received == event
        assert received.body is not None and received.body["data"] == {"hello": "runtime"}
        with pytest.raises(nats.errors.TimeoutError):
            await consumer.fetch(1, timeout=1)
    finally:
        await consumer.unsubscribe()
