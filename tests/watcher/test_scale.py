"""The watcher at the size the checkpoint is built for: 50,000 watched objects in one runtime."""

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from clients import kube
from devenv import testbin

from .conftest import Runtime, own_apiserver, resource_version

pytestmark = pytest.mark.integration

OBJECTS = 50_000
CHANGED_WHILE_DOWN = 100
CREATING_AT_ONCE = 48


@pytest.fixture
async def skr_api(testbin_binaries: testbin.Binaries, tmp_path: Path) -> AsyncIterator[kube.ApiClient]:
    """An apiserver of this test's own, thrown away with its etcd afterwards: the shared one would keep 50,000
    objects in its watch cache for every later test, and deleting them took longer than the test's own checks on
    a slow machine of our kind (the fresh-clone CI ran past the 300 s timeout in that clean-up)."""
    async with own_apiserver(testbin_binaries, tmp_path, "scale") as (_, api):
        yield api


async def _create_all(runtime: Runtime, names: list[str]) -> None:
    pending = iter(names)

    async def creator() -> None:
        for name in pending:
            await runtime.create(name, {"k": "1"})

    await asyncio.gather(*(creator() for _ in range(CREATING_AT_ONCE)))


# Minutes on a 2-core machine (on a slow one of our kind: 75 s to create the objects, 157 s for the first
# start), and the timeout counts the fixtures too (starting its own apiserver).
@pytest.mark.timeout(900)
async def test_fifty_thousand_objects_restart_losslessly(runtime: Runtime, start_agent: Callable[..., Any]) -> None:
    """Every object is delivered once; the watcher stops (checkpoint saved across its shards); while it is down
    100 objects are edited, 100 deleted and 100 created; after the restart exactly those 300 arrive, each in its
    latest version, and none of the 49,900 unchanged objects is resent."""
    loop = asyncio.get_running_loop()
    names = [f"obj-{n:05d}" for n in range(OBJECTS)]
    started = loop.time()
    await _create_all(runtime, names)
    print(f"created {OBJECTS} ConfigMaps in {loop.time() - started:.1f}s")
    config = runtime.write_config(runtime.config(), "scale.yaml")
    async with start_agent(config) as running:
        started = loop.time()
        await running.wait_synced(timeout=300)
        await runtime.listener.wait_for(lambda: len(runtime.listener.received) >= OBJECTS, timeout=600)
        await running.settled(seen=OBJECTS, timeout=60)
        print(f"first start delivered {OBJECTS} objects in {loop.time() - started:.1f}s")
    assert {e.target.name for e in runtime.listener.received} == set(names)
    runtime.listener.received.clear()

    edited = {name: resource_version(await runtime.update(name, {"k": "2"})) for name in names[:CHANGED_WHILE_DOWN]}
    deleted = names[CHANGED_WHILE_DOWN : 2 * CHANGED_WHILE_DOWN]
    for name in deleted:
        await runtime.delete(name)
    added = {
        f"new-{n:03d}": resource_version(await runtime.create(f"new-{n:03d}", {"k": "1"}))
        for n in range(CHANGED_WHILE_DOWN)
    }

    async with start_agent(config) as running:
        started = loop.time()
        await running.wait_synced(timeout=300)
        await running.settled(seen=3 * CHANGED_WHILE_DOWN, timeout=120)
        print(f"restart relisted {OBJECTS} objects and delivered what changed in {loop.time() - started:.1f}s")
    delivered = {e.target.name: (e.change_type.value, e.resource_version) for e in runtime.listener.received}
    assert len(runtime.listener.received) == 3 * CHANGED_WHILE_DOWN, "each change once, nothing unchanged"
    assert {name: delivered[name] for name in edited} == {name: ("RESYNC", rv) for name, rv in edited.items()}
    assert {name: delivered[name] for name in added} == {name: ("RESYNC", rv) for name, rv in added.items()}
    assert {delivered[name][0] for name in deleted} == {"DELETED"}
