"""The leader's pipeline, at its own seams."""

import asyncio
import time

from clients import kube
from contract import events, ids
from watcher import checkpoint, pipeline


def _dirty_checkpoint() -> checkpoint.Checkpoint:
    state = checkpoint.Checkpoint()
    state.record(
        "v1/configmaps",
        events.ChangeEvent.create(
            runtime=ids.RuntimeId("skr-1"),
            module=ids.ModuleName("kyma-sync"),
            target=events.WatchedObject(
                group="", version="v1", resource="configmaps", kind="ConfigMap", namespace="a", name="b", uid="u"
            ),
            resource_version="1",
            change_type=events.ChangeType.MODIFIED,
            body={},
        ),
    )
    return state


class SlowStore(checkpoint.CheckpointStore):
    """A store whose every save takes 0.2 s and leaves the checkpoint dirty, as while 50,000 objects arrive."""

    def __init__(self) -> None:
        self.saves = 0

    async def save(self, state: checkpoint.Checkpoint) -> None:
        self.saves += 1
        await asyncio.sleep(0.2)


class SlowThenFailingStore(checkpoint.CheckpointStore):
    """The first save takes 0.1 s and succeeds, the second fails at once (the apiserver refused it), the rest
    succeed at once; it notes when each save began."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.third_began = asyncio.Event()

    async def save(self, state: checkpoint.Checkpoint) -> None:
        self.started.append(time.monotonic())
        if len(self.started) == 3:
            self.third_began.set()
        if len(self.started) == 1:
            await asyncio.sleep(0.1)
        elif len(self.started) == 2:
            raise kube.ApiError(500, "etcdserver: request timed out")


async def test_saves_that_take_long_are_spaced_out() -> None:
    """With a 10 ms interval, saves of 0.2 s one after another would take all the time: after one, the next
    waits nine times as long, so within a second there is one, and the last one when stopped."""
    store, stop = SlowStore(), asyncio.Event()
    keeping = asyncio.create_task(pipeline._keep_checkpoint(store, _dirty_checkpoint(), interval=0.01, stop=stop))
    await asyncio.sleep(1)
    stop.set()
    await keeping
    assert store.saves == 2


async def test_a_failed_save_is_retried_after_the_interval_not_the_spacing_of_slow_saves() -> None:
    """After a 0.1 s save the next waits 0.9 s; when that one fails, what was not saved is tried again after
    the interval (10 ms) rather than after another long wait earned by the save before it."""
    store, stop = SlowThenFailingStore(), asyncio.Event()
    keeping = asyncio.create_task(pipeline._keep_checkpoint(store, _dirty_checkpoint(), interval=0.01, stop=stop))
    await asyncio.wait_for(store.third_began.wait(), timeout=30)
    stop.set()
    await keeping
    after_success = store.started[1] - store.started[0]
    after_failure = store.started[2] - store.started[1]
    assert after_failure < after_success / 4, (after_success, after_failure)
