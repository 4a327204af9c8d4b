"""The coalescing queue: latest wins per object, nothing lost across objects, bounded."""

import asyncio

import pytest

from contract import events, ids
from watcher import queue as queue_mod

pytestmark = pytest.mark.looptime


def item(uid: str, rv: str) -> queue_mod.Item:
    event = events.ChangeEvent.create(
        runtime=ids.RuntimeId("skr-1"),
        module=ids.ModuleName("m"),
        target=events.WatchedObject(group="", version="v1", resource="configmaps", kind="ConfigMap", name="n", uid=uid),
        resource_version=rv,
        change_type=events.ChangeType.MODIFIED,
        body={},
    )
    return queue_mod.Item("watch", event, b"")


async def test_repeated_changes_of_one_object_coalesce_to_the_latest() -> None:
    """Three pending changes of one object leave only the newest, in the oldest one's place."""
    queue = queue_mod.CoalescingQueue(maxsize=10)
    for rv in ("1", "2", "3"):
        await queue.put(item("a", rv))
    await queue.put(item("b", "1"))
    first, second = await queue.get(), await queue.get()
    assert (first.event.target.uid, first.event.resource_version) == ("a", "3")
    assert second.event.target.uid == "b"
    assert queue.coalesced == 2


async def test_an_object_in_flight_is_not_handed_out_twice() -> None:
    """A newer change of an object being delivered waits until that delivery is done."""
    queue = queue_mod.CoalescingQueue(maxsize=10)
    await queue.put(item("a", "1"))
    in_flight = await queue.get()
    await queue.put(item("a", "2"))
    assert queue.superseded(in_flight)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(), timeout=0.05)
    await queue.done(in_flight)
    assert (await queue.get()).event.resource_version == "2"


async def test_full_queue_makes_the_producer_wait_but_still_coalesces() -> None:
    """At the bound, a new object waits for room; a change of a pending object does not."""
    queue = queue_mod.CoalescingQueue(maxsize=1)
    await queue.put(item("a", "1"))
    await asyncio.wait_for(queue.put(item("a", "2")), timeout=1)
    blocked = asyncio.create_task(queue.put(item("b", "1")))
    await asyncio.sleep(0.05)
    assert not blocked.done()
    taken = await queue.get()
    await asyncio.wait_for(blocked, timeout=1)
    await queue.done(taken)
    assert (await queue.get()).event.target.uid == "b"
    assert taken.event.resource_version == "2"
