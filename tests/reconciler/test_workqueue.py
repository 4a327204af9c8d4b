"""The keyed work queue: collapsing, one run per key at a time, waiters always answered."""

import asyncio

from prometheus_client import CollectorRegistry

from reconciler import workqueue


def make_queue(reconcile: workqueue.Reconcile, workers: int = 2) -> workqueue.WorkQueue:
    return workqueue.WorkQueue(
        reconcile=reconcile, workers=workers, metrics=workqueue.QueueMetrics(CollectorRegistry(), controller="t"),
        backoff_initial=0.01, backoff_max=0.05,
    )


async def test_keys_added_while_pending_collapse_into_one_run() -> None:
    """Three adds of a waiting key cost one reconcile; all three waiters get its result."""
    runs: list[str] = []

    async def reconcile(key: str) -> workqueue.Result:
        runs.append(key)
        return workqueue.Result()

    queue = make_queue(reconcile)
    futures = [queue.add("a") for _ in range(3)]
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    results = await asyncio.gather(*futures)
    stop.set()
    await running
    assert runs == ["a"] and all(r.ok for r in results)


async def test_a_key_changed_while_running_runs_again_afterwards() -> None:
    """An add during a run is not lost and never runs concurrently with it."""
    active, overlaps, runs = 0, 0, 0
    release = asyncio.Event()

    async def reconcile(key: str) -> workqueue.Result:
        nonlocal active, overlaps, runs
        active += 1
        overlaps = max(overlaps, active)
        runs += 1
        if runs == 1:
            await release.wait()
        active -= 1
        return workqueue.Result()

    queue = make_queue(reconcile, workers=4)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    first = queue.add("a")
    await asyncio.sleep(0.05)
    second = queue.add("a")
    release.set()
    await asyncio.gather(first, second)
    stop.set()
    await running
    assert runs == 2 and overlaps == 1


async def test_failures_retry_with_backoff_and_crashes_are_contained() -> None:
    """A crashing reconcile is reported as an error result and retried until it succeeds."""
    attempts = 0

    async def reconcile(key: str) -> workqueue.Result:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("boom")
        return workqueue.Result()

    queue = make_queue(reconcile)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    first = await queue.add("a")
    assert not first.ok and "boom" in (first.error or "")
    while attempts < 3:
        await asyncio.sleep(0.01)
    stop.set()
    await running
    assert attempts == 3


async def test_stopping_mid_reconcile_answers_its_waiters() -> None:
    """A waiter of a run interrupted by stop is cancelled, never left hanging."""
    started = asyncio.Event()

    async def reconcile(key: str) -> workqueue.Result:
        started.set()
        await asyncio.sleep(3600)
        return workqueue.Result()

    queue = make_queue(reconcile)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    waiter = queue.add("a")
    await started.wait()
    stop.set()
    await running
    assert waiter.cancelled()


async def test_adds_after_stop_are_cancelled_not_left_waiting() -> None:
    """Once stopped, add() answers at once (cancelled): nobody waits for a worker that is gone."""

    async def reconcile(key: str) -> workqueue.Result:
        return workqueue.Result()

    queue = make_queue(reconcile)
    stop = asyncio.Event()
    stop.set()
    await queue.run(stop=stop)
    assert queue.add("late").cancelled()
