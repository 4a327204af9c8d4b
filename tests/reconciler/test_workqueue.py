"""The keyed work queue: collapsing, one run per key at a time, waiters always answered, bounded stop."""

import asyncio
import itertools

import pytest
from prometheus_client import CollectorRegistry

from reconciler import workqueue

pytestmark = pytest.mark.looptime


def make_queue(
    reconcile: "workqueue.Reconcile[str]", workers: int = 2, *, backoff: tuple[float, float] = (0.01, 0.05)
) -> "workqueue.WorkQueue[str]":
    return workqueue.WorkQueue(
        name="t",
        reconcile=reconcile,
        workers=workers,
        metrics=workqueue.QueueMetrics(CollectorRegistry()),
        backoff_initial=backoff[0],
        backoff_max=backoff[1],
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
    assert runs == 2 and overlaps == 1 and queue.peak_running == 1


async def test_failures_retry_with_backoff_and_crashes_are_contained() -> None:
    """A crashing reconcile is reported as an error result and retried until it succeeds."""
    attempts = 0
    done = asyncio.Event()

    async def reconcile(key: str) -> workqueue.Result:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("boom")
        done.set()
        return workqueue.Result()

    queue = make_queue(reconcile)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    first = await queue.add("a")
    assert not first.ok and "boom" in (first.error or "")
    await done.wait()
    stop.set()
    await running
    assert attempts == 3


async def test_a_terminal_failure_waits_for_the_next_trigger() -> None:
    """A refused key is not retried by the queue; adding it again runs it again."""
    attempts = 0

    async def reconcile(key: str) -> workqueue.Result:
        nonlocal attempts
        attempts += 1
        return workqueue.Result.refused("invalid spec")

    queue = make_queue(reconcile)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    assert (await queue.add("a")).terminal
    await asyncio.sleep(0.2)  # many backoff periods: nothing may run meanwhile
    assert attempts == 1
    await queue.add("a")
    stop.set()
    await running
    assert attempts == 2


async def test_retry_delay_tells_when_the_queue_retries_a_failed_key() -> None:
    """After a failure the key has a pending retry with a positive delay; a success clears it."""
    outcomes = [workqueue.Result.failed("no"), workqueue.Result()]

    async def reconcile(key: str) -> workqueue.Result:
        return outcomes.pop(0)

    queue = make_queue(reconcile, workers=1, backoff=(0.4, 0.4))
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    await queue.add("a")
    assert 0.19 <= queue.retry_delay("a") <= 0.4
    assert (await queue.add("a")).ok
    assert queue.retry_delay("a") == 0.0
    stop.set()
    await running


async def test_a_failing_key_retriggered_while_running_still_backs_off() -> None:
    """A trigger that arrives while a failing key runs is served by its retry, not by an immediate second run: five
    triggers before runs and five during them cost five runs, not ten. (Triggers from watcher events while a key
    backs off are held back by the controller: test_safety's test_events_about_a_failing_sync_resource_....)"""
    started: list[float] = []
    loop = asyncio.get_running_loop()

    async def reconcile(key: str) -> workqueue.Result:
        started.append(loop.time())
        await asyncio.sleep(0.01)
        return workqueue.Result.failed("still broken")

    queue = make_queue(reconcile, workers=1, backoff=(100, 100))
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    for _ in range(5):
        queue.add("a")
        await asyncio.sleep(0.005)
        queue.add("a")  # mid-run: served by the retry after the backoff, not by an immediate second run
        await asyncio.sleep(1.2)
    stop.set()
    await running
    assert len(started) == 5, started


async def test_a_key_waiting_for_something_comes_back_less_and_less_often() -> None:
    """requeue_after doubles while the key keeps asking (capped at a minute); an ordinary result resets it."""
    started: list[float] = []
    loop = asyncio.get_running_loop()

    async def reconcile(key: str) -> workqueue.Result:
        started.append(loop.time())
        return workqueue.Result(requeue_after=2) if len(started) < 9 else workqueue.Result()

    queue = make_queue(reconcile)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    queue.add("a")
    await asyncio.sleep(400)
    stop.set()
    await running
    gaps = [round(later - earlier) for earlier, later in itertools.pairwise(started)]
    assert gaps == [2, 4, 8, 16, 32, 60, 60, 60]


async def test_stop_lets_a_running_reconcile_finish_within_the_grace_period() -> None:
    """A reconcile that needs less than the grace period completes and its waiter gets its real result."""
    started, finished = asyncio.Event(), asyncio.Event()

    async def reconcile(key: str) -> workqueue.Result:
        started.set()
        await asyncio.sleep(0.2)
        finished.set()
        return workqueue.Result()

    queue = make_queue(reconcile)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop, grace=5))
    waiter = queue.add("a")
    await started.wait()
    stop.set()
    await running
    assert finished.is_set() and waiter.result().ok


async def test_stop_cancels_what_outlives_the_grace_period_and_answers_every_waiter() -> None:
    """Past the grace period the reconcile is cancelled; its waiter and those of keys never run get a failure."""
    started = asyncio.Event()

    async def reconcile(key: str) -> workqueue.Result:
        started.set()
        await asyncio.sleep(3600)
        return workqueue.Result()

    queue = make_queue(reconcile, workers=1)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop, grace=0.1))
    stuck, queued = queue.add("a"), queue.add("b")
    await started.wait()
    stop.set()
    await asyncio.wait_for(running, timeout=5)
    assert not stuck.result().ok and not queued.result().ok
    assert not queue.add("late").result().ok


async def test_relinquished_keys_finish_within_the_grace_or_are_cancelled_and_others_go_on() -> None:
    """A hand-over: keys no longer admitted are dropped from the queue; one running past the grace is cancelled,
    one finishing within it completes; an admitted key is untouched, and a dropped key's waiter is answered."""
    owned = {"quick", "slow", "kept", "waiting"}
    finished: list[str] = []
    cancelled: list[str] = []
    started = {key: asyncio.Event() for key in owned}

    async def reconcile(key: str) -> workqueue.Result:
        started[key].set()
        try:
            await asyncio.sleep({"quick": 1, "slow": 100, "kept": 5, "waiting": 0}[key])
        except asyncio.CancelledError:
            cancelled.append(key)
            raise
        finished.append(key)
        return workqueue.Result()

    queue = workqueue.WorkQueue(
        name="t",
        reconcile=reconcile,
        workers=3,
        metrics=workqueue.QueueMetrics(CollectorRegistry()),
        admits=lambda key: key in owned,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    slow, quick, kept = queue.add("slow"), queue.add("quick"), queue.add("kept")
    waiting = queue.add("waiting")  # no worker left: it waits in the queue
    await asyncio.gather(started["slow"].wait(), started["quick"].wait(), started["kept"].wait())
    owned -= {"quick", "slow", "waiting"}
    await queue.relinquish(grace=10)
    assert cancelled == ["slow"] and "quick" in finished
    assert (await slow).error is not None and (await quick).ok
    assert (await waiting).ok and not started["waiting"].is_set(), "dropped unrun; its owner reconciles it"
    assert (await kept).ok and finished[-1] == "kept"
    assert queue.add("slow").done(), "a key of another replica is answered at once, never run"
    stop.set()
    await running


async def test_a_triggered_key_goes_before_thousands_queued_in_the_background() -> None:
    """A resync or a shard just acquired queues every key in the background: a key an event or a change asks for
    is reconciled next, not after them all (at 10,000 runtimes a take-over queued thousands); a background key
    triggered meanwhile moves ahead too, and every background key still runs once."""
    runs: list[str] = []
    all_ran = asyncio.Event()

    async def reconcile(key: str) -> workqueue.Result:
        runs.append(key)
        if len(runs) == 1001:
            all_ran.set()
        await asyncio.sleep(0.01)
        return workqueue.Result()

    queue = make_queue(reconcile, workers=1)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    queue.add_all((f"bg-{n}" for n in range(1000)), background=True)
    await asyncio.sleep(0.05)
    event = queue.add("event")
    queue.add_all(["bg-999"])
    assert (await event).ok
    await all_ran.wait()
    stop.set()
    await running
    assert runs.index("event") < 10 and runs.index("bg-999") < 10
    assert sorted(runs) == sorted(["event", *(f"bg-{n}" for n in range(1000))])


def _replica_queue(runs: list[str], owned: set[str], *, takes: float = 0.0) -> "workqueue.WorkQueue[str]":
    """A sharded replica's queue: one worker noting each key it runs, admitting the keys in ``owned``, remembering
    those it turned away for 60 s."""

    async def reconcile(key: str) -> workqueue.Result:
        runs.append(key)
        await asyncio.sleep(takes)
        return workqueue.Result()

    return workqueue.WorkQueue(
        name="t",
        reconcile=reconcile,
        workers=1,
        metrics=workqueue.QueueMetrics(CollectorRegistry()),
        admits=lambda key: key in owned,
        turned_away_memory=60,
    )


async def test_what_was_asked_for_while_a_shard_was_elsewhere_goes_first_when_it_comes_here() -> None:
    """A replica hears every event and change, and turns away the keys of runtimes it does not own. When it
    takes their shard over (its owner was killed), the keys it turned away lately (an event's, a change's, a
    delayed change's) are reconciled first, ahead of the pass over every key of the shard (at 10,000 runtimes that
    pass took minutes, and the changes made while the shard had no owner waited for it). Not first: a key of a
    shard not acquired, one reconciled here meanwhile, and a pass's key."""
    runs: list[str] = []
    owned: set[str] = set()
    queue = _replica_queue(runs, owned, takes=0.01)
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    await asyncio.sleep(0)
    queue.turn_away(["event", "event-meanwhile-ours"])
    queue.add_all(["change", "other-shard"])
    queue.add_later(["delayed-change"], delay=1)
    queue.add_all(["resynced"], background=True)  # a pass's key is no change: nothing to remember
    await asyncio.sleep(1)
    assert runs == [], "nothing of another replica's runs here"
    owned.add("event-meanwhile-ours")
    queue.add_all(["event-meanwhile-ours"])
    await asyncio.sleep(1)
    assert runs == ["event-meanwhile-ours"]

    acquired = {"event", "change", "delayed-change", "resynced", "event-meanwhile-ours"}
    pass_keys = [f"bg-{n}" for n in range(100)] + ["resynced", "event-meanwhile-ours"]
    owned |= acquired | set(pass_keys) | {"other-shard"}  # ours now too, but its shard was not just acquired
    queue.add_turned_away(lambda key: key in acquired)  # the shard was acquired: the manager's order
    queue.add_all(pass_keys, background=True)
    await asyncio.sleep(5)
    stop.set()
    await running
    assert runs[1:4] == ["event", "change", "delayed-change"]
    assert "other-shard" not in runs
    assert sorted(runs[4:]) == sorted(pass_keys), "the rest in the pass, each once"


async def test_keys_asked_for_before_the_queue_ran_or_longer_ago_than_its_memory_are_left_to_the_pass() -> None:
    """The caches' first listing asks for every key before the queue runs: remembered, a whole shard's keys
    would go ahead of live events at the first acquisition. A key turned away longer ago than the memory was
    its owner's to finish. Only the one asked for lately is queued at an acquisition."""
    runs: list[str] = []
    owned: set[str] = set()
    queue = _replica_queue(runs, owned)
    queue.add_all(["listed-at-start"])
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    await asyncio.sleep(0)
    queue.turn_away(["lately"])
    owned |= {"listed-at-start", "lately"}
    queue.add_turned_away(lambda key: True)
    await asyncio.sleep(1)
    assert runs == ["lately"]
    queue.turn_away(["long-ago"])
    await asyncio.sleep(61)
    owned.add("long-ago")
    queue.add_turned_away(lambda key: True)
    await asyncio.sleep(1)
    stop.set()
    await running
    assert runs == ["lately"]


async def test_a_put_off_key_answers_its_waiter_at_once_as_not_applied_and_comes_back() -> None:
    """A run that says "not yet, come back" (a pass turned away while another of its SyncResource runs, an object
    still going) answers the event waiting for it at once, as pending: ok (the message is acked, it holds no
    in-flight slot while the key waits), not applied (the change is not timed as applied). The key comes back by
    itself and is applied then; a key handed over answers its waiters as another replica's."""
    outcomes = iter([workqueue.Result(requeue_after=1), workqueue.Result()])
    runs: list[float] = []
    loop = asyncio.get_running_loop()

    async def reconcile(key: str) -> workqueue.Result:
        runs.append(loop.time())
        return next(outcomes)

    ours = True
    queue = workqueue.WorkQueue(
        name="t",
        reconcile=reconcile,
        workers=1,
        metrics=workqueue.QueueMetrics(CollectorRegistry()),
        admits=lambda key: ours,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run(stop=stop))
    started = loop.time()
    put_off = await queue.add("a")
    assert put_off.ok and put_off.pending and not put_off.applied
    assert loop.time() == started, "answered by the run that put it off"
    await asyncio.sleep(1.5)
    assert [round(t - started) for t in runs] == [0, 1], "it came back by itself"
    ours = False
    handed_over = await queue.add("a")
    assert handed_over.ok and handed_over.elsewhere and not handed_over.applied
    stop.set()
    await running
