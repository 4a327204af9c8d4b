"""Records and status sized for 10,000 runtimes: SyncRecord shards and a status that summarises."""

import json

from reconciler import model, records, sync_plan

RUNTIMES = [f"runtime-{n:05d}" for n in range(10_000)]
ITEMS = [f"item-{n}" for n in range(10)]


def test_shards_are_stable_and_spread() -> None:
    """A runtime's shard does not depend on the process (no salted hash); 10,000 runtimes fill every shard."""
    assert records.shard_of("skr-1") == 41  # pinned: another hash would rewrite every SyncRecord once
    assert {records.shard_of(r) for r in RUNTIMES} == set(range(records.SHARDS))
    assert len(records.record_name("x" * 253, "0123456789abcdef", 63)) <= 253
    assert records.record_name("a" * 229 + ".b", "0123456789abcdef", 5) == "a" * 229 + "-01234567-05"


def test_ten_thousand_runtimes_with_ten_items_fit() -> None:
    """The design target: status under 100 KB however many runtimes fail; every SyncRecord far under 1 MiB."""
    applied = [
        model.AppliedRef(
            runtime=runtime, item=item, apiVersion="v1", kind="ConfigMap", namespace="kyma-system", name=item
        )
        for runtime in RUNTIMES
        for item in ITEMS
    ]
    largest = max(
        len(json.dumps([r.model_dump(by_alias=True, exclude_none=True) for r in shard]))
        for shard in records.by_shard(applied).values()
    )
    assert largest < 400_000, largest
    statuses = [
        model.ItemStatus(
            name=item,
            runtime=runtime,
            state=model.State.ERROR if n % 3 == 0 else model.State.READY,
            message="runtime unreachable: connection refused" if n % 3 == 0 else "",
        )
        for n, runtime in enumerate(RUNTIMES)
        for item in ITEMS
    ]
    shown, counted = sync_plan.status_items(statuses, runtimes=len(RUNTIMES))
    size = len(json.dumps({"items": shown, **counted}))
    assert size < 100_000, size
    assert len(shown) == sync_plan.MAX_DETAILS and all(i["state"] == "Error" for i in shown)
    assert counted["detailsOmitted"] == 3334 * len(ITEMS) - sync_plan.MAX_DETAILS
    assert counted["summary"][0] == {"name": "item-0", "ready": 6666, "total": 10_000}


def test_a_small_sync_resource_shows_every_runtime() -> None:
    """Up to DETAILED_RUNTIMES runtimes, Ready entries are listed too (what a one-runtime user expects to see)."""
    statuses = [model.ItemStatus(name="i", runtime=f"skr-{n}", state=model.State.READY) for n in range(3)]
    shown, counted = sync_plan.status_items(statuses, runtimes=3)
    assert [i["runtime"] for i in shown] == ["skr-0", "skr-1", "skr-2"] and "detailsOmitted" not in counted
