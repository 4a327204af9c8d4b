"""Where a SyncResource's record of what it applied where lives: SyncRecords, sharded by runtime.

A group SyncResource over 10,000 runtimes with 10 items has 100,000 records, far more than one
object (or its status) may hold. They live in SyncRecord objects next to the SyncResource (same
namespace, owned by it, labelled with its uid), each holding the records of the runtimes that
hash to its shard — and the item states last seen there, so the status can be summed up after a
pass over one runtime as well as after a pass over all — so a reconcile rewrites only the shards
that changed, and a pass over one runtime reads and writes only that runtime's shard. Passes over
different runtimes run at once: every write is conditional on the version read, and a conflict
is merged three ways (``merged``). Records are read from the
apiserver at the start of every reconcile, never from a cache: a record missed because a cache
was behind would be an object never released. Each shard also says which generation of the
SyncResource the last pass that wrote it acted on, written by a pass over every runtime before it
acts on a new generation (``RecordStore.load_stamped``) and again with its records, never written
back over a later one: a pass over one runtime takes its SyncResource from the informer's cache
only when the cache holds that generation (``reconciler.sync_resources``).

Each SyncRecord carries a finalizer of ours: deleting the namespace (or a foreground cascade from
the SyncResource) cannot take the records away while the SyncResource still releases what they
name; the finalizer goes when a shard is dropped. A shard's size grows with items x runtimes / 64:
a save that would pass MAX_SHARD_BYTES fails with the reason instead of writing an object the
apiserver refuses. SyncRecords that are not exactly the shards of their SyncResource (hand-made,
damaged) are ignored, with a warning.

A SyncResource written before SyncRecords existed keeps its records in ``status.applied``; they
are read from there until the first save moves them.
"""

import asyncio
import dataclasses
import hashlib
import json
import logging
import random
from collections.abc import Iterable, Set
from typing import Any, TypeVar

from clients import kube
from contract import wire
from reconciler import crds, model

log = logging.getLogger(__name__)

SHARDS = crds.SYNC_RECORD_SHARDS
MAX_SHARD_BYTES = 900_000
"""Below the apiserver's request limit (about 1.5 MB), with room for metadata."""
FINALIZER = "sync.kyma-project.io/records"
GENERATION_FIELD = "syncResourceGeneration"
"""In a shard's spec: the SyncResource generation the last pass that wrote it acted on (or is acting on)."""


class RecordsError(Exception):
    """Records could not be saved (too large, or writes refused): the reconcile fails and is retried."""


class _ShardChanged(Exception):
    """A shard was written or dropped by another pass after it was loaded: load again."""


def shard_of(runtime: str) -> int:
    """The shard of a runtime's records: stable across processes (not Python's salted hash)."""
    return int.from_bytes(hashlib.sha256(runtime.encode()).digest()[:4], "big") % SHARDS


def record_name(resource_name: str, uid: str, shard: int) -> str:
    """A SyncRecord's name: readable, unique per SyncResource incarnation, within the 253-character limit."""
    return f"{resource_name[:230].rstrip('.-')}-{uid[:8]}-{shard:02d}"


def by_shard(records: Iterable[model.AppliedRef]) -> dict[int, list[model.AppliedRef]]:
    shards: dict[int, list[model.AppliedRef]] = {}
    for record in records:
        shards.setdefault(shard_of(record.runtime), []).append(record)
    return {shard: sorted(entries, key=lambda r: (r.runtime, r.item, r.name)) for shard, entries in shards.items()}


def applied_of(record: dict[str, Any]) -> list[model.AppliedRef]:
    """The records a SyncRecord object holds; ValueError when one is malformed."""
    return [model.AppliedRef.model_validate(entry) for entry in (record.get("spec") or {}).get("applied") or []]


def _dump(records: list[model.AppliedRef]) -> list[dict[str, Any]]:
    return [r.model_dump(by_alias=True, exclude_none=True) for r in records]


States = dict[str, list[model.ItemStatus]]
"""Runtime -> its items' states as last reconciled."""


_STORED_MESSAGE = 100
"""States are kept for the status' sake; their messages are cut so that they never crowd records out of a shard."""


def _dump_states(states: States) -> dict[str, list[list[str]]]:
    return {
        runtime: [[s.name, s.state.value, s.message[:_STORED_MESSAGE]] for s in entries]
        for runtime, entries in sorted(states.items())
    }


def _load_states(raw: Any) -> States:
    if not isinstance(raw, dict):
        return {}
    return {
        str(runtime): [
            model.ItemStatus(name=name, runtime=str(runtime), state=model.State(state), message=message)
            for name, state, message in entries
        ]
        for runtime, entries in raw.items()
    }


@dataclasses.dataclass
class Loaded:
    """The records as read, and the shards they came from (to rewrite only what changed)."""

    records: list[model.AppliedRef]
    states: States
    errors: dict[str, str]
    """Runtime -> why its last pass failed as a whole (an unreachable runtime, a release that failed)."""
    shards: dict[int, dict[str, Any]]
    """Shard -> the SyncRecord object as read."""
    legacy: bool
    """Some records are still in ``status.applied`` (moved on the next successful save and status write)."""
    acted_on: int | None = None
    """The SyncResource generation the last pass that wrote these shards acted on: the lowest when they differ, None
    when there is no shard, or one does not say (written before shards said) or is being deleted."""


class RecordStore:
    def __init__(self, kcp: kube.ApiClient) -> None:
        self._kcp = kcp

    async def load(self, resource: dict[str, Any], *, runtime: str | None = None) -> Loaded:
        """Every shard (``runtime``: only that runtime's shard, read by name — a pass over one runtime of a group
        over thousands must not read them all)."""
        metadata = resource["metadata"]
        if runtime is None:
            listing, _ = await kube.list_objects(
                self._kcp,
                crds.SYNC_RECORD,
                namespace=metadata["namespace"],
                label_selector=f"{wire.RECORDS_OF_LABEL}={metadata['uid']}",
            )
        else:
            name = record_name(metadata["name"], metadata["uid"], shard_of(runtime))
            found = await kube.get_or_none(self._kcp, crds.SYNC_RECORD.object_path(metadata["namespace"], name))
            listing = [found] if found is not None else []
        shards: dict[int, dict[str, Any]] = {}
        acted_on: list[int | None] = []
        records: list[model.AppliedRef] = []
        states: States = {}
        errors: dict[str, str] = {}
        for obj in listing:
            shard = (obj.get("spec") or {}).get("shard")
            name = obj["metadata"]["name"]
            try:
                if (
                    not isinstance(shard, int)
                    or name != record_name(metadata["name"], metadata["uid"], shard)
                    or (obj["metadata"].get("labels") or {}).get(wire.RECORDS_OF_LABEL) != metadata["uid"]
                ):  # read by name, a shard is checked for the label a listing selects by
                    raise ValueError(f"not a shard of SyncResource {metadata['name']}")
                entries = applied_of(obj)
            except ValueError as exc:
                log.warning("ignoring a SyncRecord", extra={"record": name, "error": str(exc)[:300]})
                continue
            shards[shard] = obj
            # A shard being deleted belongs to a SyncResource that is gone (or going): it vouches for no cache.
            acted_on.append(None if obj["metadata"].get("deletionTimestamp") else Content.of(obj).generation)
            records.extend(entries)
            try:  # states only inform the status: unreadable ones are written again by the next pass, never cost records
                states.update(_load_states(obj["spec"]["states"]))
                errors.update({str(r): str(m) for r, m in (obj["spec"].get("errors") or {}).items()})
            except (KeyError, ValueError, TypeError, AttributeError):
                log.warning("unreadable item states in a SyncRecord", extra={"record": name})
        # Records an earlier version kept in status.applied count until the status write that drops them.
        earlier = model.applied_refs(resource.get("status"))
        merged = [*records, *(r for r in earlier if r not in records)]
        generations = [g for g in acted_on if g is not None]
        lowest = min(generations) if acted_on and len(generations) == len(acted_on) else None
        return Loaded(merged, states, errors, shards, legacy=bool(earlier), acted_on=lowest)

    async def load_stamped(self, resource: dict[str, Any]) -> Loaded:
        """``load`` every shard, then make each say the SyncResource generation about to be acted on, before any
        runtime is visited: so a pass over one runtime whose cache holds an earlier generation reads the SyncResource
        live even when this pass fails or is cut short before it saves. Later saves are conditional on the shards as
        stamped (returned).

        A shard another pass wrote or dropped between the load and its stamp (another replica's pass over one
        runtime saving: one replica keeps its own passes apart) is loaded again with every other, since only the
        records merged from the shards stamped are safe to act on; STAMP_ATTEMPTS attempts in all. A shard that says
        a later generation than ``resource`` means ``resource`` was read before a change another pass already acts
        on: nothing is stamped back (``_refuse_if_read_behind``; a generation never reached is stamped over). Those,
        and any other refused stamp, are RecordsError; a failed load is the KubeError it was. Either way no runtime
        has been visited, and the shards stamped before the failure stay so: they only make passes over one runtime
        read the SyncResource live. A shard first created after the load is not stamped; the pass's save merges into
        it and writes the generation then, unless the pass has nothing to record there: a shard created by a pass
        whose read was behind then says the earlier generation until the next pass over every runtime that writes
        it (a cache trusted for it must still hold that earlier generation, i.e. lag behind the change)."""
        for attempt in range(1, STAMP_ATTEMPTS + 1):
            loaded = await self.load(resource)
            try:
                return await self._stamp(resource, loaded)
            except _ShardChanged as exc:
                if attempt == STAMP_ATTEMPTS:
                    raise RecordsError(f"shards kept changing while being stamped: {exc}") from exc
                log.info("a shard changed before it was stamped; loading the records again", extra={"error": str(exc)})
                await asyncio.sleep(random.uniform(*_RESTAMP_PAUSE_SECONDS))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _stamp(self, resource: dict[str, Any], loaded: Loaded) -> Loaded:
        generation = _generation(resource["metadata"].get("generation"))
        if generation is None:
            return loaded
        said = {shard: Content.of(obj).generation for shard, obj in loaded.shards.items()}
        ahead = {shard: g for shard, g in said.items() if g is not None and g > generation}
        if ahead:
            await self._refuse_if_read_behind(resource, generation, ahead)
        shards = dict(loaded.shards)
        for shard, obj in loaded.shards.items():
            if said[shard] == generation:
                continue
            path = crds.SYNC_RECORD.object_path(obj["metadata"]["namespace"], obj["metadata"]["name"])
            change = {"metadata": {"resourceVersion": _version(obj)}, "spec": {GENERATION_FIELD: generation}}
            try:
                shards[shard] = await kube.merge_patch(self._kcp, path, change)
            except (kube.ConflictError, kube.NotFoundError) as exc:
                raise _ShardChanged(f"shard {shard}: {exc}") from exc
            except kube.KubeError as exc:
                raise RecordsError(f"shard {shard} not stamped with generation {generation}: {exc}") from exc
        return dataclasses.replace(loaded, shards=shards)

    async def _refuse_if_read_behind(self, resource: dict[str, Any], generation: int, ahead: dict[int, int]) -> None:
        """RecordsError when shards say later generations than ``resource`` because it was read before a change
        another pass already acts on (the next attempt reads it again). A generation the SyncResource, read now, has
        not reached was never acted on (generations only grow): such a shard was written by hand or by a tool, and
        it is stamped over with a warning, as damaged shards are ignored, rather than blocking every pass for good."""
        metadata = resource["metadata"]
        path = crds.SYNC_RESOURCE.object_path(metadata["namespace"], metadata["name"])
        try:
            live = await kube.get_or_none(self._kcp, path)
        except kube.KubeError as exc:
            raise RecordsError(f"generation {generation} was read, shards say later ones ({ahead}): {exc}") from exc
        if (
            live is None
            or live["metadata"].get("uid") != metadata.get("uid")
            or _generation(live["metadata"].get("generation")) != generation
        ):
            raise RecordsError(
                f"generation {generation} was read, but shards say later ones were acted on ({ahead}): "
                "the SyncResource is read again on the next attempt"
            )
        log.warning(
            "shards say generations their SyncResource never had (edited by hand or by a tool): stamping them over",
            extra={
                "sync_resource": f"{metadata['namespace']}/{metadata['name']}",
                "generation": generation,
                "shards": ahead,
            },
        )

    async def save(
        self,
        resource: dict[str, Any],
        loaded: Loaded,
        records: Iterable[model.AppliedRef],
        states: States | None = None,
        errors: dict[str, str] | None = None,
        *,
        visited: Set[str],
    ) -> int:
        """Write every shard whose records or states changed, drop those left empty; RecordsError if any could not be.
        The number of records stored after, including what other passes saved before ours.

        ``visited``: the runtimes this pass reconciled. Every write is conditional on the shard as loaded; when
        another pass wrote it meanwhile (a pass over another runtime of the same shard), the shard
        is merged three ways and written again: this pass's records, states and errors for the runtimes it
        visited, plus records the other added there meanwhile (a forgotten record is an object never released;
        one too many only costs a release that finds nothing), and the other's for every runtime else.
        Every shard is tried even when one fails, so one refused write does not cost the others' records.
        """
        wanted = by_shard(records)
        states_by_shard: dict[int, States] = {}
        for runtime, statuses in (states or {}).items():
            states_by_shard.setdefault(shard_of(runtime), {})[runtime] = statuses
        errors_by_shard: dict[int, dict[str, str]] = {}
        for runtime, message in (errors or {}).items():
            errors_by_shard.setdefault(shard_of(runtime), {})[runtime] = message[:_STORED_MESSAGE]
        failures: list[str] = []
        stored = 0
        generation = _generation(resource["metadata"].get("generation"))
        for shard in sorted(set(wanted) | set(states_by_shard) | set(errors_by_shard) | set(loaded.shards)):
            ours = Content(
                _dump(wanted.get(shard, [])),
                _dump_states(states_by_shard.get(shard, {})),
                errors_by_shard.get(shard, {}),
                generation,
            )
            try:
                stored += await self._settle(resource, shard, loaded.shards.get(shard), ours, visited)
            except (kube.KubeError, RecordsError) as exc:
                failures.append(f"shard {shard}: {exc}")
        if failures:
            raise RecordsError(f"records not saved: {'; '.join(failures[:3])}")
        return stored

    async def _settle(
        self, resource: dict[str, Any], shard: int, base: dict[str, Any] | None, ours: "Content", visited: Set[str]
    ) -> int:
        """One shard written (or dropped, when empty) as of ``base``, merged with a concurrent write and tried again
        when there was one; how many records it holds after."""
        metadata = resource["metadata"]
        path = crds.SYNC_RECORD.object_path(
            metadata["namespace"], record_name(metadata["name"], metadata["uid"], shard)
        )
        if base is not None:
            # A pass whose read of the SyncResource is behind another's acts on its runtimes all the same (the next
            # pass puts them right); the shard keeps saying the later generation, or a cache holding the earlier one
            # would be trusted.
            ours = dataclasses.replace(ours, generation=_later(ours.generation, Content.of(base).generation))
        for _ in range(_SAVE_ATTEMPTS):
            if base is not None and Content.of(base) == ours:
                return len(ours.applied)
            try:
                if ours.empty():
                    if base is not None:
                        await self._drop(base)
                    return 0
                await self._write(resource, shard, ours, version=None if base is None else _version(base))
                return len(ours.applied)
            except (kube.ConflictError, kube.NotFoundError):
                current = await kube.get_or_none(self._kcp, path)
                ours = merged(Content.of(base) if base else Content.none(), ours, Content.of(current), visited)
                base = current
        raise RecordsError(f"shard {shard} kept changing while it was being saved")

    async def _write(self, resource: dict[str, Any], shard: int, content: "Content", *, version: str | None) -> None:
        """The shard as ``content``: created (version None), or replaced as of ``version`` (409 if it changed)."""
        metadata = resource["metadata"]
        size = len(json.dumps(content.applied))
        if size > MAX_SHARD_BYTES:
            raise RecordsError(f"{size} bytes in one shard (limit {MAX_SHARD_BYTES}): too many items x runtimes")
        seen: dict[str, Any] = {"states": content.states, "errors": content.errors}
        acted_on = {} if content.generation is None else {GENERATION_FIELD: content.generation}
        if size + len(json.dumps(seen)) > MAX_SHARD_BYTES:
            log.warning("item states left out of a full shard", extra={"shard": shard, "bytes": size})
            seen = {}  # records first: a shard without states only makes the next pass cover every runtime
        name = record_name(metadata["name"], metadata["uid"], shard)
        body = {
            "apiVersion": crds.SYNC_RECORD.api_version,
            "kind": "SyncRecord",
            "metadata": {
                "name": name,
                "namespace": metadata["namespace"],
                "labels": {wire.RECORDS_OF_LABEL: metadata["uid"]},
                "finalizers": [FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": crds.SYNC_RESOURCE.api_version,
                        "kind": "SyncResource",
                        "name": metadata["name"],
                        "uid": metadata["uid"],
                    }
                ],
                **({"resourceVersion": version} if version is not None else {}),
            },
            "spec": {
                "syncResource": metadata["name"],
                "shard": shard,
                **acted_on,
                "applied": content.applied,
                **seen,
            },
        }
        collection = crds.SYNC_RECORD.path(metadata["namespace"])
        if version is None:
            await kube.request(self._kcp, "POST", collection, body=body)
        else:
            await kube.request(self._kcp, "PUT", f"{collection}/{name}", body=body)

    async def _drop(self, record: dict[str, Any]) -> None:
        """A shard with nothing left: our finalizer off, then the object, each as of the version before it (a
        record written in between by another pass is not deleted with it)."""
        path = crds.SYNC_RECORD.object_path(record["metadata"]["namespace"], record["metadata"]["name"])
        unfinalized = await kube.merge_patch(
            self._kcp, path, {"metadata": {"finalizers": None, "resourceVersion": _version(record)}}
        )
        await kube.delete(
            self._kcp,
            path,
            preconditions=kube.Preconditions(uid=record["metadata"]["uid"], resource_version=_version(unfinalized)),
        )


STAMP_ATTEMPTS = 3
"""Loads and stamps before a pass gives up for its backoff: a conflict means another replica's pass over one runtime
saved in between (during a hand-over of shards), which takes a moment; three in a row mean a shard written all the
time."""
_RESTAMP_PAUSE_SECONDS = (0.01, 0.05)
"""Between two attempts, spread so that two passes stamping the same shards do not meet again at once."""
_SAVE_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True)
class Content:
    """A shard's content as stored: records, and the states and errors of its runtimes' last passes."""

    applied: list[dict[str, Any]]
    states: dict[str, list[list[str]]]
    errors: dict[str, str]
    generation: int | None = None
    """The SyncResource generation the pass that wrote it acted on (a pass on a new generation writes it again)."""

    @classmethod
    def of(cls, record: dict[str, Any] | None) -> "Content":
        spec = (record or {}).get("spec") or {}
        return cls(
            spec.get("applied") or [],
            spec.get("states") or {},
            spec.get("errors") or {},
            _generation(spec.get(GENERATION_FIELD)),
        )

    @classmethod
    def none(cls) -> "Content":
        return cls([], {}, {})

    def empty(self) -> bool:
        """Nothing worth a shard (the generation alone is not: without a shard a pass reads the SyncResource live)."""
        return not (self.applied or self.states or self.errors)


def merged(base: Content, ours: Content, theirs: Content, visited: Set[str]) -> Content:
    """Our pass's content over another's that was written since we read ``base``: ours for the runtimes we
    visited, with any records the other added there meanwhile; theirs for every other runtime. The later of the
    two generations acted on: a cache that holds the earlier one is behind."""
    before = {_entry_key(entry) for entry in base.applied}
    kept = [e for e in theirs.applied if e.get("runtime") not in visited or _entry_key(e) not in before]
    applied = {_entry_key(e): e for e in [*kept, *(e for e in ours.applied if e.get("runtime") in visited)]}
    return Content(
        sorted(applied.values(), key=lambda e: (e.get("runtime", ""), e.get("item", ""), e.get("name", ""))),
        dict(sorted({**_others(theirs.states, visited), **_visited(ours.states, visited)}.items())),
        {**_others(theirs.errors, visited), **_visited(ours.errors, visited)},
        _later(ours.generation, theirs.generation),
    )


V = TypeVar("V")


def _others(by_runtime: dict[str, V], visited: Set[str]) -> dict[str, V]:
    return {runtime: value for runtime, value in by_runtime.items() if runtime not in visited}


def _visited(by_runtime: dict[str, V], visited: Set[str]) -> dict[str, V]:
    return {runtime: value for runtime, value in by_runtime.items() if runtime in visited}


def _entry_key(entry: dict[str, Any]) -> str:
    return json.dumps(entry, sort_keys=True)


def _later(one: int | None, other: int | None) -> int | None:
    return max((g for g in (one, other) if g is not None), default=None)


def _generation(value: Any) -> int | None:
    """A generation as stored (an integer), None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _version(record: dict[str, Any]) -> str:
    return str(record["metadata"]["resourceVersion"])
