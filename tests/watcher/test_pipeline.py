"""The leader's pipeline, at its own seams."""

import asyncio

from contract import events, ids
from watcher import checkpoint, pipeline


class SlowStore(checkpoint.CheckpointStore):
    """A store whose every save takes 0.2 s and leaves the checkpoint dirty, as while 50,000 objects arrive."""

    def __init__(self) -> None:
        self.saves = 0

    async def save(self, state: checkpoint.Checkpoint) -> None:
        self.saves += 1
        await asyncio.sleep(0.2)


async def test_saves_that_take_long_are_spaced_out() -> None:
    """With a 10 ms interval, saves of 0.2 s one after another would take all the time: after one, the next
    waits nine times as long, so within a second there is one, and the last one when stopped."""
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
    store, stop = SlowStore(), asyncio.Event()
    keeping = asyncio.create_task(pipeline._keep_checkpoint(store, state, interval=0.01, stop=stop))
    await asyncio.sleep(1)
    stop.set()
    await keeping
    assert store.saves == 2
