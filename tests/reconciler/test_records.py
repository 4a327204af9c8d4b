"""Records and status sized for 10,000 runtimes: SyncRecord shards and a status that summarises."""

import json
from collections.abc import Iterable
from typing import Any

import pytest

from clients import kube
from contract import wire
from reconciler import crds, model, records, sync_plan

from ..waiting import eventually
from .conftest import Kcp

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


def _same_shard(count: int) -> list[str]:
    by_shard: dict[int, list[str]] = {}
    for n in range(10_000):
        found = by_shard.setdefault(records.shard_of(f"skr-{n}"), [])
        found.append(f"skr-{n}")
        if len(found) == count:
            return found
    raise AssertionError("unreachable: 64 shards")


def _record(runtime: str, name: str) -> model.AppliedRef:
    return model.AppliedRef(runtime=runtime, item=name, apiVersion="v1", kind="ConfigMap", namespace="ns", name=name)


def _at(resource: dict[str, Any], generation: int) -> dict[str, Any]:
    return {**resource, "metadata": {**resource["metadata"], "generation": generation}}


def _ready(runtime: str, name: str) -> list[model.ItemStatus]:
    return [model.ItemStatus(name=name, runtime=runtime, state=model.State.READY)]


async def _created(kcp: Kcp, name: str, runtime: str) -> tuple[dict[str, Any], records.RecordStore]:
    """A SyncResource for ``runtime`` (no controller runs), and a record store once SyncRecords are served."""
    await kcp.create(name, {"kyma": runtime, "items": [kcp.configmap("c", {"k": "v"})]})
    resource = await kcp.get(name)
    assert resource is not None
    store = records.RecordStore(kcp.api)
    await eventually(
        lambda: _loads(store, resource), what="SyncRecords served (a CRD installed moments ago answers 429)"
    )
    return resource, store


async def _loads(store: records.RecordStore, resource: dict[str, Any]) -> bool:
    try:
        await store.load(resource)
    except kube.ThrottledError:
        return False
    return True


def _dumped(found: Iterable[model.AppliedRef]) -> list[str]:
    return sorted(r.model_dump_json() for r in found)


@pytest.mark.integration
async def test_passes_saving_over_the_same_read_keep_each_others_records(kcp: Kcp) -> None:
    """Two passes (two reconciler replicas, or a pass over one runtime beside a pass over all) read the records
    at once, each visited runtimes of the same SyncRecord shard, and saved one after the other: the later save
    keeps what the earlier one recorded — a lost record is an object never released — and what it released
    itself stays released; states and errors of runtimes a pass did not visit are the other pass's."""
    first, second, third = _same_shard(3)
    resource, store = await _created(kcp, "sr", first)
    empty = await store.load(resource)
    await store.save(resource, empty, [_record(third, "old")], {third: _ready(third, "old")}, visited={third})
    loaded = await store.load(resource)

    # a visits `first`: records something there, keeps `third`'s record as it was
    await store.save(
        resource,
        loaded,
        [_record(first, "a"), _record(third, "old")],
        {first: _ready(first, "a"), third: _ready(third, "old")},
        {first: "slow"},
        visited={first},
    )
    # b read before a saved; it visits `second` and `third`, releasing `third`'s object
    await store.save(resource, loaded, [_record(second, "b")], {second: _ready(second, "b")}, visited={second, third})

    final = await store.load(resource)
    assert _dumped(final.records) == _dumped([_record(first, "a"), _record(second, "b")])
    assert sorted(final.states) == [first, second] and final.errors == {first: "slow"}


@pytest.mark.integration
async def test_a_shard_says_the_latest_generation_a_pass_saving_it_acted_on(kcp: Kcp) -> None:
    """Each save writes the generation its pass acted on, even when records and states are unchanged (a pass on a
    new generation over a runtime that kept its records); a save merged with a concurrent one keeps the later
    generation, so a cache holding the earlier one is known to be behind. No shard says nothing."""
    first, second = _same_shard(2)
    resource, store = await _created(kcp, "gen", first)
    assert (await store.load(resource, runtime=first)).acted_on is None
    at = {n: _at(resource, n) for n in (1, 2)}
    await store.save(at[1], await store.load(resource), [_record(first, "a")], visited={first})
    assert (await store.load(resource, runtime=first)).acted_on == 1
    read_at_1 = await store.load(resource, runtime=first)
    await store.save(at[2], read_at_1, [_record(first, "a")], visited={first})
    assert (await store.load(resource, runtime=second)).acted_on == 2
    # a pass on generation 1 that read before the save above, saving its own runtime's record after it
    await store.save(at[1], read_at_1, [_record(first, "a"), _record(second, "b")], visited={second})
    after = await store.load(resource, runtime=second)
    assert after.acted_on == 2
    assert _dumped(after.records) == _dumped([_record(first, "a"), _record(second, "b")])


@pytest.mark.integration
async def test_a_shard_being_deleted_or_not_labelled_as_its_sync_resources_vouches_for_nothing(kcp: Kcp) -> None:
    """A shard read by name says no generation when it is being deleted (its SyncResource went without releasing)
    or does not carry its SyncResource's label (hand-edited; a listing would not have found it): a pass over one
    runtime then reads the SyncResource live."""
    runtime, other = _same_shard(2)
    resource, store = await _created(kcp, "vouch", runtime)
    at_1 = _at(resource, 1)
    await store.save(at_1, await store.load(resource), [_record(runtime, "a")], visited={runtime})
    loaded = await store.load(resource, runtime=runtime)
    assert loaded.acted_on == 1
    [shard] = loaded.shards.values()
    path = crds.SYNC_RECORD.object_path(kcp.namespace, shard["metadata"]["name"])
    await kube.merge_patch(kcp.api, path, {"metadata": {"labels": {wire.RECORDS_OF_LABEL: "someone-else"}}})
    assert (await store.load(resource, runtime=other)).acted_on is None
    await kube.merge_patch(
        kcp.api, path, {"metadata": {"labels": {wire.RECORDS_OF_LABEL: resource["metadata"]["uid"]}}}
    )
    assert (await store.load(resource, runtime=other)).acted_on == 1
    await kube.request(kcp.api, "DELETE", path)  # held by the records finalizer: terminating
    assert (await store.load(resource, runtime=other)).acted_on is None


class _Interleaved(records.RecordStore):
    """A record store that lets another pass in, made certain: after each of its first ``times`` loads of a whole
    SyncResource, and before its caller goes on, a pass over ``runtime`` acting on ``theirs`` (the SyncResource as
    that pass read it) saves into the shard just read, as such a pass does: the others' records and states kept,
    its own runtime's replaced by ``<name>-<n>`` after the n-th load (``name`` None: its records all released)."""

    def __init__(self, kcp: Kcp, theirs: dict[str, Any], runtime: str, name: str | None, *, times: int = 1) -> None:
        super().__init__(kcp.api)
        self._api, self._theirs, self._runtime, self._name = kcp.api, theirs, runtime, name
        self._times, self.loads = times, 0

    async def load(self, resource: dict[str, Any], *, runtime: str | None = None) -> records.Loaded:
        loaded = await super().load(resource, runtime=runtime)
        if runtime is None:
            self.loads += 1
            if self.loads <= self._times:
                await self._other_pass(loaded)
        return loaded

    async def _other_pass(self, loaded: records.Loaded) -> None:
        kept = [r for r in loaded.records if r.runtime != self._runtime]
        states = {r: s for r, s in loaded.states.items() if r != self._runtime}
        if self._name is not None:
            kept.append(_record(self._runtime, f"{self._name}-{self.loads}"))
            states[self._runtime] = _ready(self._runtime, f"{self._name}-{self.loads}")
        await records.RecordStore(self._api).save(self._theirs, loaded, kept, states, visited={self._runtime})


@pytest.mark.integration
async def test_a_shard_saved_between_the_load_and_its_stamp_is_loaded_again_and_stamped(kcp: Kcp) -> None:
    """A pass over every runtime loads the shards, and a pass over one runtime saves into one of them before the
    stamp: the stamp's conditional write conflicts. The pass loads again and stamps, rather than failing to its
    backoff; what it goes on with holds the other pass's record (the first load's records with the shard as it is
    now as the base of the next save would forget it: an object never released) and every shard says the
    generation. A shard written before every attempt fails the pass, once the attempts are spent."""
    first, second = _same_shard(2)
    resource, store = await _created(kcp, "stamp", first)
    await store.save(_at(resource, 1), await store.load(resource), [_record(first, "a")], visited={first})
    racing = _Interleaved(kcp, _at(resource, 1), second, "b")

    stamped = await racing.load_stamped(_at(resource, 2))

    assert racing.loads == 2, "the conflict was seen and everything loaded again"
    assert _dumped(stamped.records) == _dumped([_record(first, "a"), _record(second, "b-1")])
    assert (await store.load(resource, runtime=first)).acted_on == 2
    always = _Interleaved(kcp, _at(resource, 2), second, "c", times=records.STAMP_ATTEMPTS)
    with pytest.raises(records.RecordsError, match="kept changing"):
        await always.load_stamped(_at(resource, 3))
    assert always.loads == records.STAMP_ATTEMPTS


@pytest.mark.integration
async def test_no_write_takes_a_shard_back_to_an_earlier_generation(kcp: Kcp) -> None:
    """A pass that read the SyncResource before a change another pass already acts on: its stamp refuses (it is
    tried again with a fresh read) and leaves the shard as it is; its save, made all the same by a pass over one
    runtime, keeps the later generation. Either would otherwise let a cache holding the earlier generation be
    trusted again."""
    runtime, other = _same_shard(2)
    read_at_1, store = await _created(kcp, "back", runtime)
    await kcp.patch_spec("back", {"items": [kcp.configmap("c", {"k": "changed"})]})
    current = await kcp.get("back")
    assert current is not None and current["metadata"]["generation"] == 2
    await store.save(current, await store.load(current), [_record(runtime, "a")], visited={runtime})

    with pytest.raises(records.RecordsError, match="later ones were acted on"):
        await store.load_stamped(read_at_1)
    assert (await store.load(current, runtime=runtime)).acted_on == 2
    recorded = [_record(runtime, "a"), _record(other, "b")]
    await store.save(read_at_1, await store.load(read_at_1), recorded, visited={other})
    after = await store.load(current, runtime=other)
    assert after.acted_on == 2 and _dumped(after.records) == _dumped(recorded)


@pytest.mark.integration
async def test_a_shard_saying_a_generation_its_sync_resource_never_had_is_stamped_over(kcp: Kcp) -> None:
    """A shard edited by hand or by a tool to say a generation the SyncResource has not reached cannot hold up its
    passes for good: the SyncResource read again says the pass's read is current, so the shard is stamped over."""
    [runtime] = _same_shard(1)
    resource, store = await _created(kcp, "bogus", runtime)
    await store.save(_at(resource, 10**9), await store.load(resource), [_record(runtime, "a")], visited={runtime})

    stamped = await store.load_stamped(resource)

    assert (await store.load(resource, runtime=runtime)).acted_on == resource["metadata"]["generation"]
    assert _dumped(stamped.records) == _dumped([_record(runtime, "a")])


@pytest.mark.integration
async def test_a_shard_dropped_between_the_load_and_its_stamp_is_loaded_again(kcp: Kcp) -> None:
    """A pass over one runtime releases the last record of a shard (and drops it) between a pass's load and its
    stamp: the stamp finds it gone, and the pass loads again rather than failing to its backoff."""
    [first] = _same_shard(1)
    lone = next(f"skr-{n}" for n in range(100) if records.shard_of(f"skr-{n}") != records.shard_of(first))
    resource, store = await _created(kcp, "dropped", first)
    recorded = [_record(first, "a"), _record(lone, "z")]
    await store.save(_at(resource, 1), await store.load(resource), recorded, visited={first, lone})
    racing = _Interleaved(kcp, _at(resource, 1), lone, None)

    stamped = await racing.load_stamped(_at(resource, 2))

    assert racing.loads == 2 and len(stamped.shards) == 1
    assert _dumped(stamped.records) == _dumped([_record(first, "a")])
