"""The leader's work: sources feed the queue, senders drain it, the checkpoint follows deliveries."""

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from clients import kube
from contract import events, ids
from kit import aio
from watcher import checkpoint, config, delivery, metrics, noise, source
from watcher import queue as queue_mod

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Progress:
    """How far the leader's pipeline is: ready once every source has listed (its readiness)."""

    sources: int = 0
    listed: set[str] = dataclasses.field(default_factory=set)

    def unlisted(self) -> int:
        return self.sources - len(self.listed)


async def _load_checkpoint(store: checkpoint.CheckpointStore, *, stop: asyncio.Event) -> checkpoint.Checkpoint | None:
    backoff = aio.Backoff(initial=0.5)
    while not stop.is_set():
        try:
            return await store.load()
        except kube.KubeError as exc:
            log.warning("cannot read the checkpoint yet", extra={"error": str(exc)})
            await aio.sleep_unless(stop, backoff.delay())
    return None


async def _send(
    *,
    queue: queue_mod.CoalescingQueue,
    sender: delivery.Delivery,
    state: checkpoint.Checkpoint,
    watcher_metrics: metrics.WatcherMetrics,
    stop: asyncio.Event,
) -> None:
    while True:
        item = await queue.get()
        try:
            outcome = await sender.deliver(
                item.event, item.payload, stop=stop, superseded=functools.partial(queue.superseded, item)
            )
            if outcome == delivery.Outcome.DELIVERED:
                watcher_metrics.sent.labels(item.event.module).inc()
                # Only what the listener took is checkpointed: a refusal (a module it does not know yet,
                # a limit) is sent again at the next relist, e.g. once the configuration is fixed.
                state.record(item.watch_key, item.event)
            elif outcome == delivery.Outcome.REJECTED:
                state.owe(item.watch_key, item.event)
        finally:
            await queue.done(item)


async def _heartbeat(
    *, sender: delivery.Delivery, runtime: str, queue: queue_mod.CoalescingQueue, every: float, stop: asyncio.Event
) -> None:
    """While leading: one heartbeat now, then every ``every`` seconds (a silent runtime alerts in KCP)."""
    while not stop.is_set():
        try:
            await sender.heartbeat(
                events.Heartbeat(runtime=ids.RuntimeId(runtime), sent_at=datetime.now(UTC), queue_depth=queue.depth)
            )
        except Exception:  # best effort: a heartbeat's surprise must never end the delivery of events beside it
            log.exception("heartbeat failed")
        if await aio.sleep_unless(stop, every):
            return


async def _drain(
    queue: queue_mod.CoalescingQueue, *, stop: asyncio.Event, seconds: Callable[[], float], then: asyncio.Event
) -> None:
    """After ``stop``: wait until the queue is empty or ``seconds()`` passed, then set ``then`` (senders end)."""
    await stop.wait()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds()):
            await queue.empty()
    then.set()


_SAVE_SHARE = 0.1
"""At most this share of the time goes to checkpoint saves: while a first start delivers 50,000 objects every
shard changes between saves, and saving all of them every interval took a third of the watcher's CPU."""
_LONGEST_SAVE_WAIT_SECONDS = 30.0
"""However long saves take, what a crash makes the watcher resend is at most this much of its deliveries."""


async def _keep_checkpoint(
    store: checkpoint.CheckpointStore, state: checkpoint.Checkpoint, *, interval: float, stop: asyncio.Event
) -> None:
    """Save what changed every ``interval``, or less often (up to 30 s) while saves take long; a failed save is
    retried after ``interval``."""
    wait = interval
    while True:
        stopping = await aio.sleep_unless(stop, wait)
        if state.dirty:
            started = time.monotonic()
            try:
                await store.save(state)
            except kube.KubeError as exc:
                log.warning("checkpoint not saved, retrying", extra={"error": str(exc)})
                wait = interval
            else:
                took = time.monotonic() - started
                wait = min(max(interval, took * (1 - _SAVE_SHARE) / _SAVE_SHARE), _LONGEST_SAVE_WAIT_SECONDS)
        if stopping:
            return


async def run(
    *,
    api: kube.ApiClient,
    settings: config.WatcherConfig,
    watcher_metrics: metrics.WatcherMetrics,
    stop: asyncio.Event,
    progress: Progress | None = None,
    watch_set_revision: str | None = None,
    drain_for: Callable[[], float] = lambda: 0.0,
) -> None:
    """Watch, filter, queue and deliver until ``stop``; then save the checkpoint one last time.

    When ``stop`` comes, the sources stop at once and the senders get ``drain_for()`` seconds to deliver
    what was already detected (a configuration change: under the old configuration, before the switch).
    """
    progress = progress or Progress()
    store = checkpoint.CheckpointStore(api, settings.checkpoint)
    state = await _load_checkpoint(store, stop=stop)
    if state is None:
        return
    queue = queue_mod.CoalescingQueue(maxsize=settings.delivery.queue_size)
    # Read at scrape time: a value set after each delivery missed everything queued since.
    watcher_metrics.queue_depth.set_function(lambda: queue.depth)
    sender = delivery.Delivery(settings, watcher_metrics)
    sources = [
        source.Source(
            api=api,
            spec=spec,
            namespace=namespace,
            runtime=ids.RuntimeId(settings.runtime),
            noise_filter=noise.NoiseFilter(
                ignore_fields=spec.ignore_fields, ignore_managers=settings.ignore_field_managers
            ),
            queue=queue,
            state=state,
            watcher_metrics=watcher_metrics,
            paused=settings.is_paused,
            watch_timeout_seconds=settings.watch_timeout_seconds,
            on_listed=progress.listed.add,
            watch_set_revision=watch_set_revision,
        )
        for spec in settings.watches
        for namespace in (spec.namespaces or (None,))
    ]
    progress.sources = len(sources)
    try:
        async with asyncio.TaskGroup() as group:
            delivered = asyncio.Event()
            group.create_task(_drain(queue, stop=stop, seconds=drain_for, then=delivered))
            group.create_task(
                _keep_checkpoint(store, state, interval=settings.checkpoint.interval_seconds, stop=delivered)
            )
            group.create_task(
                _heartbeat(
                    sender=sender,
                    runtime=settings.runtime,
                    queue=queue,
                    every=settings.delivery.heartbeat_seconds,
                    stop=stop,
                )
            )
            for s in sources:
                group.create_task(s.run(stop=stop))
            for _ in range(settings.delivery.senders):
                # Senders block in the queue: they are cancelled on stop, not asked.
                group.create_task(
                    aio.run_until(
                        delivered,
                        _send(queue=queue, sender=sender, state=state, watcher_metrics=watcher_metrics, stop=delivered),
                    )
                )
    finally:
        await sender.close()
