"""Reconciling one SyncResource: KCP-declared objects kept in one runtime or a group of runtimes.

Safety first, in controller-runtime's and Argo CD's manner:
- Ownership: everything applied carries an owner marker (``<SyncResource uid>/<item>``). An
  object is created only when absent (a POST, which never takes over a same-named object);
  an existing object without our marker is left alone ("exists, not managed") unless the item's
  adoption policy allows taking it over; one with another SyncResource's marker is a Conflict.
- Deleting reads the live object first, deletes only with our marker, and sends the uid and
  resourceVersion it saw as preconditions, so a recreated or changed object is never hit.
- Failure keeps state: an item whose apply fails keeps its record and its live object; only
  records confirmed out of the desired set are released (``sync_plan``).
- Tenancy: SyncBindings decide which runtimes and kinds a namespace may target (``tenancy``);
  refusals are a per-item Forbidden state and a Kubernetes Event.
- Its records (``reconciler.records``: SyncRecords beside it) say what it may have put where; deleting the
  SyncResource releases all of it before the finalizer goes. A runtime whose Kyma is gone
  (deprovisioned) is dropped from the record, so deletion always finishes.
"""

import asyncio
import contextvars
import copy
import dataclasses
import datetime
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import pydantic
from prometheus_client import CollectorRegistry, Counter, Gauge

from clients import informer, kube, managed_fields, objects
from contract import wire
from kit import aio
from reconciler import crds, diff, kinds, model, records, runtime_clients, settings, sync_plan, tenancy, workqueue
from reconciler.shared import Shared

log = logging.getLogger(__name__)

FINALIZER = "operator.kyma-project.io/sync-resource"
_WAIT_FOR_DELETION = 2.0
GONE = "gone: "
"""How an item whose object is gone for good says so (Delete, UpdateAndDelete): it is orphaned, to be removed."""
_EVENTS_PER_RECONCILE = 10
_BUSY_RETRY = 1.0
"""When a pass of the same SyncResource that excludes this one runs, a key comes back after this long (doubling
while busy)."""
_MAKE_WAY_SECONDS = 65.0
"""Longer than the queue lets a key that keeps asking to come back wait (a minute): a pass turned away finds the
way made when it comes back, however often it was turned away before."""
_MESSAGE_LIMIT = 512
_SUMMARY_KEYS = ("summary", "detailsOmitted", "itemCount", "runtimeCount", "ready")
_RETRIED_ALONE_SHARE = 0.1
_RETRIED_ALONE_AT_LEAST = 16
_FAN_OUT_SHARE = 0.8
"""Of the reconcile's time limit, what may pass before the runtimes are cut short: the rest is for saving the
records, then the status, then Events (the queue cancels a reconcile at its limit, and with it any unsaved record;
Events are the first to go)."""
_FAN_OUT_ENDS: contextvars.ContextVar[float] = contextvars.ContextVar("fan_out_ends")
"""When the running pass's runtimes are cut short (loop time), counted from the pass's start."""
_NOTEWORTHY = (model.State.FORBIDDEN, model.State.CONFLICT, model.State.WARNING, model.State.ERROR)


@dataclasses.dataclass(frozen=True)
class Key:
    """A SyncResource, or (``runtime`` set) its work in one runtime: a drift event or a change of that runtime's
    Kyma concerns it alone, so a group over thousands of runtimes is not reconciled everywhere for it."""

    namespace: str
    name: str
    runtime: str | None = None
    status_only: bool = False
    """Sum the status up from the states its passes saved, visiting no runtime (after passes over one runtime,
    which do not write the status: several run at once)."""

    @property
    def whole(self) -> "Key":
        return Key(self.namespace, self.name)

    def __str__(self) -> str:
        return (
            f"{self.namespace}/{self.name}"
            + (f"@{self.runtime}" if self.runtime else "")
            + ("#status" if self.status_only else "")
        )


@dataclasses.dataclass
class _Passes:
    """The passes of one SyncResource running now: several over single runtimes together, or one alone."""

    single: int = 0
    alone: bool = False
    alone_wanted_at: float | None = None
    """When a pass that must run alone was last turned away: passes over single runtimes make way for it until it
    entered (a steady stream of drift events would starve it otherwise), or for a while if it never comes back."""

    def enter(self, *, alone: bool, now: float) -> bool:
        if alone:
            if self.alone or self.single:
                self.alone_wanted_at = now
                return False
            self.alone, self.alone_wanted_at = True, None
            return True
        making_way = self.alone_wanted_at is not None and now - self.alone_wanted_at < _MAKE_WAY_SECONDS
        if self.alone or making_way:
            return False
        self.single += 1
        return True

    def leave(self, *, alone: bool) -> None:
        if alone:
            self.alone = False
        else:
            self.single -= 1

    def idle(self) -> bool:
        return not self.alone and not self.single


@dataclasses.dataclass(frozen=True)
class Owner:
    """The SyncResource being reconciled, as its objects name it."""

    key: Key
    uid: str

    def marker(self, item: str) -> str:
        return f"{self.uid}/{item}"

    def owns(self, obj: dict[str, Any]) -> bool:
        return marker_uid(obj) == self.uid


def marker_uid(obj: dict[str, Any]) -> str | None:
    marker = ((obj.get("metadata") or {}).get("annotations") or {}).get(wire.OWNER_ANNOTATION)
    return str(marker).partition("/")[0] if marker else None


@dataclasses.dataclass(frozen=True)
class ItemOutcome:
    status: model.ItemStatus
    resolved: objects.Ref | None = None
    """The object the item names, as stored (None when it could not be resolved)."""
    record: bool = False
    """Whether the object may now exist because of us (so it is recorded)."""


Journal = dict[sync_plan.ObjectIdentity, model.AppliedRef]
"""Records of objects about to be written in one runtime, kept even when its reconcile is cut short."""


@dataclasses.dataclass(frozen=True)
class Resolved:
    """An item's object as the runtime stores it, and where that is for the tenancy policy."""

    ref: objects.Ref
    destination: tenancy.Destination


@dataclasses.dataclass
class RuntimeOutcome:
    items: list[model.ItemStatus]
    applied: list[model.AppliedRef]
    error: str | None = None
    actions: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(item, what was done: Created, Updated, Adopted, Deleted, Released), for the SyncResource's Events."""


def _synced(resource: dict[str, Any]) -> Any:
    """The generation the last pass over every runtime applied."""
    return (resource.get("status") or {}).get("syncedGeneration")


def _marks_missing(resource: dict[str, Any]) -> dict[str, Any]:
    """The metadata changes that give the SyncResource our finalizer and, for one runtime, the kyma-name label."""
    metadata = resource["metadata"]
    changes: dict[str, Any] = {}
    if FINALIZER not in (metadata.get("finalizers") or []):
        changes["finalizers"] = [*(metadata.get("finalizers") or []), FINALIZER]
    kyma = (resource.get("spec") or {}).get("kyma")
    wanted = kyma if isinstance(kyma, str) else None  # a group SyncResource carries no kyma-name label
    if (metadata.get("labels") or {}).get(wire.KYMA_NAME_LABEL) != wanted:
        changes["labels"] = {wire.KYMA_NAME_LABEL: wanted}
    return changes


def _applied_everywhere(resource: dict[str, Any]) -> bool:
    """Whether the last pass over every runtime applied this generation and moved the records out of the status:
    passes over one runtime wait for that."""
    return _synced(resource) == resource["metadata"].get("generation") and not model.applied_refs(
        resource.get("status")
    )


def _settled(resource: dict[str, Any]) -> bool:
    """Whether a pass over one runtime can go ahead on this copy without writing the SyncResource first: not being
    deleted, marked, applied everywhere."""
    return (
        not resource["metadata"].get("deletionTimestamp")
        and not _marks_missing(resource)
        and _applied_everywhere(resource)
    )


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _ref(record: model.AppliedRef) -> objects.Ref:
    return objects.Ref(record.api_version, record.kind, record.namespace, record.name)


CONTROLLER_NAME = "sync_resources"


class SyncResourceReconciler:
    def __init__(
        self,
        shared: Shared,
        config: settings.SyncResourcesSettings,
        *,
        resources: informer.Informer,
        bindings: informer.Informer,
        secrets: Mapping[str, informer.Informer] | None = None,
        retry: Callable[[Iterable[Key]], None],
    ) -> None:
        self._shared = shared
        self._retry = retry
        """Brings keys back on their own backoff: a group's runtimes that failed in a pass over all of them."""
        self._secrets = dict(secrets or {})
        self._kcp = shared.kcp
        self._config = config
        self._fan_out_seconds = config.reconcile_timeout_seconds * _FAN_OUT_SHARE
        self._resources = resources
        self._bindings = bindings
        self._restricted = [kinds.GroupKind.parse(entry) for entry in config.restricted_kinds]
        self._orphans = OrphanCount(shared.registry)
        self._runtime_errors = shared.queue_metrics.runtime_errors.labels
        self._records = records.RecordStore(shared.kcp)
        self._reads = Counter(
            "kyma_reconciler_sync_resource_reads",
            "SyncResources read for a pass: from the informer's cache (passes over one runtime whose records say the"
            " cache is current) or from the apiserver",
            ["source"],
            registry=shared.registry,
        )
        self._conflicts = shared.queue_metrics.write_conflicts.labels(CONTROLLER_NAME)
        self._passes: dict[Key, _Passes] = {}
        self._finished: set[Key] = set()
        """SyncResources found gone: their pass gate is dropped once no pass runs."""

    async def reconcile(self, key: Key) -> workqueue.Result:
        # Every pass of a SyncResource runs in the replica that owns it (its runtime's owner for a SyncResource for
        # one runtime, the singleton shard's holder for a group): here, passes over different single runtimes run
        # together (each visits its own runtime; their records merge), a pass over all runtimes, a status sum or the
        # finalizer runs alone. A pass never waits: waiting would eat into its own time limit.
        passes = self._passes.setdefault(key.whole, _Passes())
        now = asyncio.get_running_loop().time()
        if not passes.enter(alone=key.runtime is None, now=now):
            return workqueue.Result(requeue_after=_BUSY_RETRY)
        fan_out_ends = _FAN_OUT_ENDS.set(now + self._fan_out_seconds)
        try:
            return await self._reconcile(key)
        except (kube.KubeError, records.RecordsError) as exc:  # KCP failed us (or changed under us): retry, backing off
            return workqueue.Result.failed(f"{key}: {exc}")
        finally:
            _FAN_OUT_ENDS.reset(fan_out_ends)
            passes.leave(alone=key.runtime is None)
            if key.whole in self._finished and passes.idle():
                self._finished.discard(key.whole)
                self._passes.pop(key.whole, None)

    async def _reconcile(self, key: Key) -> workqueue.Result:
        resource, shard = await self._read(key)
        if resource is None:
            self._orphans.count(key.whole, 0)
            self._finished.add(key.whole)
            return workqueue.Result()
        kyma = (resource.get("spec") or {}).get("kyma")
        if not self._shared.ownership.owns(kyma if isinstance(kyma, str) else None):
            return workqueue.Result()  # the cache that routed the key was behind the object: its owner reconciles it
        owner = Owner(key.whole, resource["metadata"]["uid"])
        if resource["metadata"].get("deletionTimestamp"):
            if key != key.whole:
                return workqueue.Result()  # the pass over all runtimes releases everything
            return await self._finalize(owner, resource)
        if key.runtime is not None and not _applied_everywhere(resource):
            # A new generation (or records still in the status): the pass over every runtime comes first.
            return workqueue.Result(requeue_after=_WAIT_FOR_DELETION)
        resource = await self._mark(key.whole, resource)
        # A pass over one runtime writes no status (its copy may be the cache's): the pass over every runtime that
        # a new generation or a SyncBinding change brings does.
        writes_status = key.runtime is None
        try:
            spec = model.Spec.model_validate(resource.get("spec") or {})
        except pydantic.ValidationError as exc:
            message = f"invalid spec: {_short(exc)}"
            if writes_status:
                await self._write_status(resource, state=model.State.ERROR, message=message, items=[])
            return workqueue.Result.refused(message)
        policy = tenancy.policy_for(key.namespace, self._binding_specs(), protected=self._config.protected_namespaces)
        if not policy.bindings:
            message = f"no SyncBinding covers namespace {key.namespace}: nothing is synced"
            if writes_status:
                await self._write_status(resource, state=model.State.FORBIDDEN, message=message, items=[])
            return workqueue.Result()
        if key.status_only:
            loaded = await self._records.load(resource)  # unreadable states count as none until a pass saves them
            placements = self._placements(spec, policy, {a.runtime for a in loaded.records})
            await self._sum_up(resource, spec, placements, loaded.states, loaded.errors, synced=_synced(resource))
            return workqueue.Result()
        if key.runtime is not None:
            if shard is None:
                shard = await self._records.load(resource, runtime=key.runtime)
            return await self._pass_over_one(owner, resource, spec, policy, key.runtime, shard)
        return await self._pass_over_all(owner, resource, spec, policy)

    async def _read(self, key: Key) -> tuple[dict[str, Any] | None, records.Loaded | None]:
        """The SyncResource, and for a pass over one runtime the shard it read on the way (None: not read yet).

        Passes over one runtime are most passes (each drift event is one), and they do not write the SyncResource:
        such a pass takes it from the informer's cache when the runtime's shard, read live, says the last pass
        that wrote it acted on the generation the cache holds (a pass over every runtime stamps the shards before
        it acts), so the cache is not behind any pass that acted. The cache may still be behind a change no pass
        has acted on yet; acting on it is what the pass would have done had it run a moment earlier, and the
        change's own pass over every runtime follows. Anything else (no shard, a shard from a later generation or
        being deleted, a deletion, marks or a sync still missing in the cache) reads it live, as the other passes
        always do.
        """
        if key.runtime is not None and not key.status_only:
            cached = self._resources.get(key.name, key.namespace)
            if cached is not None and _settled(cached):
                shard = await self._records.load(cached, runtime=key.runtime)
                if shard.acted_on == cached["metadata"].get("generation"):
                    self._reads.labels("cache").inc()
                    return copy.deepcopy(cached), shard  # the informer's own object: never to be changed
                log.debug(
                    "SyncResource cache behind its records: read live",
                    extra={"key": str(key), "cached": cached["metadata"].get("generation"), "acted": shard.acted_on},
                )
        self._reads.labels("apiserver").inc()
        return await kube.get_or_none(self._kcp, crds.SYNC_RESOURCE.object_path(key.namespace, key.name)), None

    def _placements(
        self, spec: model.Spec, policy: tenancy.Policy, recorded: set[str], *, only: str | None = None
    ) -> dict[str, sync_plan.Placement]:
        """Where every runtime stands (``only``: where that one does, without looking at the others). A SyncResource
        for one runtime places only that one and those it recorded: the others' labels cannot change where it
        stands, and looking them all up made each of 10,000 such SyncResources' status passes cost a pass over
        the fleet."""
        if only is not None:
            recorded &= {only}
            candidates = {only}
        elif spec.kyma is not None:
            candidates = {spec.kyma, *recorded}
        else:
            kymas = {r: self._shared.labels_of(r) for r in self._shared.runtimes()}
            return sync_plan.place(spec, kymas=kymas, recorded=recorded, policy=policy)
        kymas = {r: self._shared.labels_of(r) for r in candidates if self._shared.kyma(r) is not None}
        return sync_plan.place(spec, kymas=kymas, recorded=recorded, policy=policy)

    async def _pass_over_one(
        self,
        owner: Owner,
        resource: dict[str, Any],
        spec: model.Spec,
        policy: tenancy.Policy,
        runtime: str,
        loaded: records.Loaded,
    ) -> workqueue.Result:
        """One runtime reconciled, reading (``loaded``) and writing only its SyncRecord shard; the status is summed
        up by a ``status_only`` pass that the changed SyncRecord triggers."""
        placements = self._placements(spec, policy, {a.runtime for a in loaded.records}, only=runtime)
        outcome_of = await self._visit(owner, spec, policy, placements, loaded.records)
        self._count_failures(resource, outcome_of)
        mine = outcome_of.get(runtime) or RuntimeOutcome([], [])
        states = {r: s for r, s in loaded.states.items() if r != runtime} | (
            {runtime: mine.items} if mine.items else {}
        )
        run_errors = {r: e for r, e in loaded.errors.items() if r != runtime} | (
            {runtime: mine.error} if mine.error else {}
        )
        await self._records.save(
            resource,
            loaded,
            [*(r for r in loaded.records if r.runtime != runtime), *mine.applied],
            states,
            run_errors,
            visited={runtime},
        )
        await self._announce_actions(resource, outcome_of)
        state = model.State.ERROR if mine.error else sync_plan.overall(i.state for i in mine.items)
        return self._result(owner.key, state, mine.error or f"failing in {runtime}", dry_run=spec.dry_run)

    async def _visit(
        self,
        owner: Owner,
        spec: model.Spec,
        policy: tenancy.Policy,
        placements: dict[str, sync_plan.Placement],
        applied: list[model.AppliedRef],
    ) -> dict[str, RuntimeOutcome]:
        """Every placed runtime reconciled (bounded, each within its time limit)."""
        parsed = model.parse_items(spec)
        return await self._fan_out(
            owner,
            applied,
            {
                runtime: functools.partial(self._place, owner, spec, parsed, policy, runtime, placement)
                for runtime, placement in placements.items()
            },
            failed_items=lambda runtime: [] if placements[runtime] != sync_plan.Placement.SYNC else spec.items,
        )

    async def _pass_over_all(
        self, owner: Owner, resource: dict[str, Any], spec: model.Spec, policy: tenancy.Policy
    ) -> workqueue.Result:
        loaded = await self._records.load_stamped(resource)
        generation = resource["metadata"].get("generation")
        if _synced(resource) != generation or loaded.legacy:
            resource = await self._write_status(
                resource, state=model.State.PROCESSING, message=f"applying generation {generation}", items=[]
            )
        placements = self._placements(spec, policy, {a.runtime for a in loaded.records})
        outcome_of = await self._visit(owner, spec, policy, placements, loaded.records)
        self._count_failures(resource, outcome_of)
        states = {r: o.items for r, o in outcome_of.items() if o.items}
        run_errors = {r: o.error for r, o in outcome_of.items() if o.error}
        await self._records.save(
            resource,
            loaded,
            [ref for o in outcome_of.values() for ref in o.applied],
            states,
            run_errors,
            visited=set(outcome_of),
        )
        state, message = await self._sum_up(
            resource,
            spec,
            placements,
            states,
            run_errors,
            synced=generation,  # a pass over one runtime may rely on the others' saved states now
            records_moved=loaded.legacy,
        )
        await self._announce_actions(resource, outcome_of)
        failing = _failing(outcome_of)
        if spec.kyma is None and _retried_alone(failing, runtimes=len(outcome_of)):
            # Only the failing runtimes come back, each on its own backoff: one bad runtime among 10,000 must not
            # make the pass over all of them run again and again. Their passes save their states, and the status
            # sum those saves trigger says how they stand. The others' state decides this key's result (one still
            # waiting for an object to go comes back for it).
            self._retry(dataclasses.replace(owner.key, runtime=runtime) for runtime in failing)
            state = sync_plan.overall(i.state for r, o in outcome_of.items() if r not in failing for i in o.items)
        return self._result(owner.key, state, message, dry_run=spec.dry_run)

    async def _sum_up(
        self,
        resource: dict[str, Any],
        spec: model.Spec,
        placements: dict[str, sync_plan.Placement],
        states: records.States,
        run_errors: dict[str, str],
        *,
        synced: Any,
        records_moved: bool = False,
    ) -> tuple[model.State, str]:
        """The status from every runtime's states and errors (as just seen or as saved); the overall state and
        message. ``synced``: the generation the last pass over every runtime applied."""
        items = [status for entries in states.values() for status in entries]
        kyma_missing = spec.kyma is not None and self._shared.kyma(spec.kyma) is None
        if spec.kyma is not None and kyma_missing:
            items += [
                _status(item, spec.kyma, model.State.ERROR, f"no Kyma {spec.kyma!r} in KCP") for item in spec.items
            ]
        errors = sorted(
            set(run_errors) | {r for r, entries in states.items() if any(s.state == model.State.ERROR for s in entries)}
        )
        state = model.State.ERROR if errors else sync_plan.overall(i.state for i in items)
        counts = {p: sum(1 for v in placements.values() if v == p) for p in sync_plan.Placement}
        message = (
            ("dry run, nothing written: " if spec.dry_run else "")
            + f"{counts[sync_plan.Placement.SYNC]} runtime(s), {len(spec.items)} item(s)"
            + (
                f"; {counts[sync_plan.Placement.FORBIDDEN]} runtime(s) not admitted by a SyncBinding"
                if counts[sync_plan.Placement.FORBIDDEN]
                else ""
            )
            + (f"; failing: {', '.join(errors)}" if errors else "")
        )
        orphaned = [i.name for i in spec.items] if kyma_missing else sync_plan.orphaned(items, gone=GONE)
        self._orphans.count(Key(resource["metadata"]["namespace"], resource["metadata"]["name"]), len(orphaned))
        await self._write_status(
            resource,
            state=state,
            message=message,
            items=items,
            orphaned=orphaned,
            records_moved=records_moved,
            summary={
                "itemCount": len(spec.items),
                "runtimeCount": counts[sync_plan.Placement.SYNC],
                "ready": f"{sum(1 for i in items if i.state == model.State.READY)}/{len(items)}",
                # The generation the last pass over every runtime applied: until it is the current one, a
                # pass over one runtime cannot rely on the others' saved states.
                "syncedGeneration": synced,
            },
        )
        return state, message

    def _result(self, key: Key, state: model.State, message: str, *, dry_run: bool) -> workqueue.Result:
        if state == model.State.ERROR:
            return workqueue.Result.failed(f"{key}: {message}")
        if state in (model.State.DELETING, model.State.PROCESSING) and not dry_run:
            return workqueue.Result(requeue_after=_WAIT_FOR_DELETION)
        return workqueue.Result()

    def _binding_specs(self) -> list[tenancy.BindingSpec]:
        specs = []
        for binding in self._bindings:
            try:
                specs.append(tenancy.BindingSpec.model_validate(binding.get("spec") or {}))
            except pydantic.ValidationError as exc:
                log.warning(
                    "ignoring an invalid SyncBinding",
                    extra={"binding": binding["metadata"]["name"], "error": _short(exc)},
                )
        return specs

    async def _place(
        self,
        owner: Owner,
        spec: model.Spec,
        parsed: list[model.Item | model.Unparsable],
        policy: tenancy.Policy,
        runtime: str,
        placement: sync_plan.Placement,
        previously: list[model.AppliedRef],
        journal: "Journal",
    ) -> RuntimeOutcome:
        """What to do in one runtime, by its placement; ``journal`` gets each record before its object is written."""
        if placement == sync_plan.Placement.SYNC:
            return await self._sync_runtime(owner, parsed, policy, runtime, previously, journal, dry_run=spec.dry_run)
        if placement == sync_plan.Placement.FORBIDDEN:
            reason = f"no SyncBinding lets namespace {owner.key.namespace} target runtime {runtime}"
            return RuntimeOutcome([_status(i, runtime, model.State.FORBIDDEN, reason) for i in spec.items], previously)
        if spec.dry_run:
            return RuntimeOutcome(_would_release(previously, "the runtime left the target"), previously)
        return await self._leave(
            owner,
            runtime,
            previously,
            still_wanted=lambda kyma: sync_plan.selects(
                spec, runtime, (kyma.get("metadata") or {}).get("labels") or {}
            ),
        )

    async def _fan_out(
        self,
        owner: Owner,
        applied: list[model.AppliedRef],
        work: dict[str, Callable[[list[model.AppliedRef], "Journal"], Awaitable[RuntimeOutcome]]],
        *,
        failed_items: Callable[[str], Iterable[model.ItemSpec]],
    ) -> dict[str, RuntimeOutcome]:
        """Each runtime's work, ``max_concurrent_runtimes`` at a time, each within ``runtime_timeout_seconds`` and
        all within most of the reconcile's own time limit. Work cut short or failing unexpectedly in one runtime
        still yields its records (what it had before, and what it journaled before writing), so nothing that may
        exist is forgotten, and the other runtimes go on."""
        semaphore = asyncio.Semaphore(self._config.max_concurrent_runtimes)
        journals: dict[str, Journal] = {runtime: {} for runtime in work}
        recorded: dict[str, list[model.AppliedRef]] = {}
        for record in applied:  # grouped once: a pass over 10,000 runtimes must not scan every record for each
            recorded.setdefault(record.runtime, []).append(record)
        previously = {runtime: recorded.get(runtime, []) for runtime in work}
        done: dict[str, RuntimeOutcome] = {}

        def cut_short(runtime: str, why: str) -> RuntimeOutcome:
            kept = {_identity(r): r for r in (*previously[runtime], *journals[runtime].values())}
            statuses = [_status(i, runtime, model.State.ERROR, why) for i in failed_items(runtime)]
            return RuntimeOutcome(statuses, list(kept.values()), why)

        async def bounded(runtime: str) -> None:
            async with semaphore:
                try:
                    async with asyncio.timeout(self._config.runtime_timeout_seconds):
                        done[runtime] = await work[runtime](previously[runtime], journals[runtime])
                except TimeoutError:
                    why = f"runtime {runtime} did not finish within {self._config.runtime_timeout_seconds:g}s"
                    done[runtime] = cut_short(runtime, why)
                except Exception as exc:  # one runtime's surprise (a malformed answer) must not cost the others
                    log.exception("syncing a runtime failed", extra={"key": str(owner.key), "runtime": runtime})
                    done[runtime] = cut_short(runtime, f"runtime {runtime} failed unexpectedly: {exc!r}"[:500])

        budget = self._fan_out_seconds
        try:
            async with asyncio.timeout_at(_FAN_OUT_ENDS.get()):
                await aio.all_of(bounded(runtime) for runtime in work)
        except TimeoutError:
            log.warning("runtimes not reached in time", extra={"key": str(owner.key), "budget_seconds": budget})
        return {
            runtime: done.get(runtime)
            or cut_short(runtime, f"runtime {runtime} not reached within {budget:g}s of the pass")
            for runtime in work
        }

    def _count_failures(self, resource: dict[str, Any], outcome_of: dict[str, RuntimeOutcome]) -> None:
        """Per runtime failing in a group's pass (a failing pass of a SyncResource for one runtime is counted by the
        queue, which knows its runtime)."""
        if isinstance((resource.get("spec") or {}).get("kyma"), str):
            return
        for runtime in _failing(outcome_of):
            self._runtime_errors(CONTROLLER_NAME, runtime).inc()

    async def _release_runtime(
        self, owner: Owner, runtime: str, previously: list[model.AppliedRef], journal: "Journal"
    ) -> RuntimeOutcome:
        """Everything recorded in ``runtime`` released (the SyncResource is being deleted); nothing is written."""
        return await self._leave(owner, runtime, previously)

    async def _leave(
        self,
        owner: Owner,
        runtime: str,
        previously: list[model.AppliedRef],
        *,
        still_wanted: Callable[[dict[str, Any]], bool] | None = None,
    ) -> RuntimeOutcome:
        """Release what we own in a runtime we are leaving, once KCP confirms we are; drop it if the runtime is gone."""
        try:
            kyma = await kube.get_or_none(self._kcp, crds.KYMA.object_path(self._shared.config.kyma_namespace, runtime))
        except kube.KubeError as exc:
            return RuntimeOutcome([], previously, f"cannot read Kyma {runtime}: {exc}")
        if kyma is None:
            log.info("runtime deprovisioned, dropping its records", extra={"key": str(owner.key), "runtime": runtime})
            return RuntimeOutcome([], [])
        if still_wanted is not None and still_wanted(kyma):
            return RuntimeOutcome([], previously)  # the cache was behind; the next reconcile syncs it
        try:
            async with self._shared.clients.use(runtime) as handle:
                kept, errors, actions = await self._release_all(handle, owner, previously)
        except runtime_clients.RuntimeUnavailableError as exc:
            return RuntimeOutcome([], previously, str(exc))
        return RuntimeOutcome([], kept, errors[0] if errors else None, actions)

    async def _sync_runtime(
        self,
        owner: Owner,
        items: Iterable[model.Item | model.Unparsable],
        policy: tenancy.Policy,
        runtime: str,
        previously: list[model.AppliedRef],
        journal: "Journal",
        *,
        dry_run: bool = False,
    ) -> RuntimeOutcome:
        """Sync ``items`` into one runtime; ``journal`` gets each object's record before it is written.

        A dry run writes nothing: each item says what would change, and so does each record that would
        be released; the records stay as they are.
        """
        items = list(items)
        try:
            async with self._shared.clients.use(runtime) as handle:
                return await self._sync_with(
                    handle,
                    owner=owner,
                    items=items,
                    policy=policy,
                    runtime=runtime,
                    previously=previously,
                    journal=journal,
                    dry_run=dry_run,
                )
        except runtime_clients.RuntimeUnavailableError as exc:
            return RuntimeOutcome(
                [_status(i, runtime, model.State.ERROR, f"runtime unavailable: {exc}") for i in items],
                previously,
                str(exc),
            )

    async def _sync_with(
        self,
        handle: runtime_clients.RuntimeHandle,
        *,
        owner: Owner,
        items: list[model.Item | model.Unparsable],
        policy: tenancy.Policy,
        runtime: str,
        previously: list[model.AppliedRef],
        journal: "Journal",
        dry_run: bool,
    ) -> RuntimeOutcome:
        """``_sync_runtime`` with the runtime's client taken."""
        labels = self._shared.labels_of(runtime)

        async def one(item: model.Item | model.Unparsable) -> ItemOutcome | Resolved:
            if isinstance(item, model.Unparsable):
                return ItemOutcome(_status(item, runtime, model.State.ERROR, item.error))
            async with handle.limit:
                return await self._resolve(handle.objects, item, runtime)

        claimed: dict[sync_plan.ObjectIdentity, str] = {}
        actions: list[tuple[str, str]] = []
        roles: set[tuple[str, str]] = set()
        """Roles this pass has made (or found) ours, so far: the only ones its RoleBindings may bind."""

        async def act(item: model.Item | model.Unparsable, resolution: ItemOutcome | Resolved) -> ItemOutcome:
            if isinstance(resolution, ItemOutcome):
                return resolution
            assert isinstance(item, model.Item)
            ref = resolution.ref
            if not item.status_only:  # setting another's status claims nothing
                first = claimed.setdefault(_identity_of(ref), item.name)
                if first != item.name:
                    message = f"names the same object as item {first} ({ref}): not synced"
                    return ItemOutcome(_status(item, runtime, model.State.ERROR, message), ref)
            destination = dataclasses.replace(resolution.destination, sibling_roles=frozenset(roles))

            def journaled() -> None:
                journal.setdefault(_identity_of(ref), _record(runtime, item, ref))

            def did(action: str) -> None:
                actions.append((item.name, action))

            async with handle.limit:
                return await self._item(
                    handle.objects,
                    owner,
                    item,
                    Resolved(ref, destination),
                    policy,
                    runtime,
                    labels,
                    Writes(before=journaled, after=did),
                    dry_run=dry_run,
                )

        # Namespaces, then CRDs (waited for until served), then the rest; deletions the other way round.
        outcome_of: dict[str, ItemOutcome] = {}
        for phase in sorted({_phase(item) for item in items}):
            batch = [item for item in items if _phase(item) == phase]
            resolutions = await aio.all_of(one(item) for item in batch)
            acted = await aio.all_of(act(item, r) for item, r in zip(batch, resolutions, strict=True))
            outcome_of.update((item.name, outcome) for item, outcome in zip(batch, acted, strict=True))
            if phase == _Phase.ROLES:
                roles.update(
                    (o.resolved.namespace or "default", o.resolved.name)
                    for o in acted
                    if o.resolved is not None and (o.record or (dry_run and _would_be_ours(o.status)))
                )
            if phase == _Phase.CRDS:
                await _served(handle.objects, [o.resolved for o in acted if o.record and o.resolved is not None])
        outcomes = [outcome_of[item.name] for item in items]
        wanted: set[sync_plan.ObjectIdentity] = set()
        unresolved: set[str] = set()
        recorded: dict[sync_plan.ObjectIdentity, model.AppliedRef] = {}
        for item, outcome in zip(items, outcomes, strict=True):
            if outcome.resolved is None or not isinstance(item, model.Item):
                unresolved.add(item.name)
                continue
            ref = outcome.resolved
            identity = _identity_of(ref)
            if _may_write(item):
                wanted.add(identity)  # a Delete item's object is released like any unwanted one
            if outcome.record:
                recorded[identity] = _record(runtime, item, ref)
        for record in previously:
            identity = _identity(record)
            if identity in wanted or record.item in unresolved:
                recorded.setdefault(identity, record)  # still wanted, even if not written now: kept
        stale = sync_plan.stale(previously, wanted=wanted, unresolved_items=unresolved)
        if dry_run:
            statuses = [o.status for o in outcomes] + _would_release(stale, "no item wants it")
            failing = next((s.message for s in statuses if s.state == model.State.ERROR), None)
            return RuntimeOutcome(sorted(statuses, key=lambda s: s.name), previously, failing)
        still_held, errors, released = await self._release_all(handle, owner, stale)
        for record in still_held:
            recorded.setdefault(_identity(record), record)
        failing = next((o.status.message for o in outcomes if o.status.state == model.State.ERROR), None)
        return RuntimeOutcome(
            sorted((o.status for o in outcomes), key=lambda s: s.name),
            list(recorded.values()),
            failing or (errors[0] if errors else None),
            [*actions, *released],
        )

    async def _resolve(
        self, cluster: objects.ClusterObjects, item: model.Item, runtime: str
    ) -> "ItemOutcome | Resolved":
        """Where the item's object lives in this runtime, or why it cannot be synced (restricted, unknown kind)."""
        try:
            resource = await cluster.resource(item.api_version, item.kind)
            ref = await cluster.normalise(objects.Ref.of(item.resource))
        except objects.UnknownKindError as exc:
            return ItemOutcome(_status(item, runtime, model.State.ERROR, str(exc)))
        except kube.KubeError as exc:
            return ItemOutcome(_status(item, runtime, model.State.ERROR, _describe(exc)))
        names = (resource.gvr.resource, resource.singular)
        restricted = next((r for r in self._restricted if r.matches(item.group, item.kind, *names)), None)
        if restricted is not None and item.secret_ref is None:  # a Secret may be created from a real Secret
            message = f"{item.kind} is a restricted kind ({restricted}) and is never synced nor deleted"
            return ItemOutcome(_status(item, runtime, model.State.WARNING, message), ref)
        return Resolved(ref, tenancy.Destination(ref.namespace, names))

    async def _item(
        self,
        cluster: objects.ClusterObjects,
        owner: Owner,
        item: model.Item,
        resolved: "Resolved",
        policy: tenancy.Policy,
        runtime: str,
        labels: dict[str, str],
        writes: "Writes",
        *,
        dry_run: bool,
    ) -> ItemOutcome:
        ref = resolved.ref
        refusal = policy.refusal(item, resolved.destination, labels=labels)
        if refusal is not None:
            return ItemOutcome(_status(item, runtime, model.State.FORBIDDEN, refusal), ref)
        act = Acting(
            cluster=cluster,
            owner=owner,
            takeover=Takeover(
                allowed=policy.allows_adoption(item, resolved.destination, labels=labels),
                privileged_allowed=policy.allows_privileged(item, resolved.destination, labels=labels),
            ),
            writes=writes,
            dry_run=dry_run,
        )
        try:
            state, message, record = await self._act_on_conflict_again(item, ref, act)
            return ItemOutcome(_status(item, runtime, state, message), ref, record)
        except SecretSourceError as exc:
            return ItemOutcome(_status(item, runtime, model.State.ERROR, str(exc)), ref)
        except _LostCreate:
            # Never recorded: the object is someone else's (nor may a RoleBinding of ours bind it, were it a Role).
            message = "created by someone else meanwhile, each time it was read absent; checking again"
            return ItemOutcome(_status(item, runtime, model.State.ERROR, message), ref, record=False)
        except kube.KubeError as exc:
            # The write may or may not have happened: record it, the marker decides later.
            return ItemOutcome(
                _status(item, runtime, model.State.ERROR, _describe(exc)),
                ref,
                record=_may_write(item),
            )

    async def _act_on_conflict_again(
        self, item: model.Item, ref: objects.Ref, act: "Acting"
    ) -> tuple[model.State, str, bool]:
        """The item's state, message and whether its object may exist because of us. Every write is conditional on
        the object as read; one refused because another writer changed the object in between (a user, another
        controller, the very drift being reset) is read and decided again at once (``kube.on_conflict_again``), its
        checks made again on what is read, rather than failing the runtime's pass to its backoff. A conflict on each
        attempt fails the item as any refused write does (a lost create unrecorded: the object is someone else's)."""

        return await kube.on_conflict_again(lambda: self._act(item, ref, act), retried=lambda _: self._conflicts.inc())

    async def _act(self, item: model.Item, ref: objects.Ref, act: "Acting") -> tuple[model.State, str, bool]:
        if item.status_only:
            state, message = await self._set_status_only(item, ref, act)
            return state, message, False
        if item.strategy == model.Strategy.DELETE:
            state, message = await self._delete_item(item, ref, act)
            return state, message, False
        return await self._apply_item(item, ref, act)

    async def _apply_item(self, item: model.Item, ref: objects.Ref, act: "Acting") -> tuple[model.State, str, bool]:
        """(state, message, whether the object is ours now); ``act.writes`` hears of each write, before and after.

        A dry run asks the apiserver (dryRun=All) what the write would give and reports the difference.
        """
        body = _marked(item, act.owner)
        if item.secret_ref is not None:
            body.update(self._secret_content(act.owner.key.namespace, item.secret_ref.name, body))
            refused = _privileged(body, item, act)  # the type comes from the referenced Secret
            if refused is not None:
                return model.State.FORBIDDEN, refused, False
        live = await act.cluster.get(ref)
        updating_only = item.strategy == model.Strategy.UPDATE_AND_DELETE
        if live is None and updating_only:
            return model.State.READY, f"{GONE}nothing to update (UpdateAndDelete never creates); remove the item", False
        if live is None and act.dry_run:
            await act.cluster.apply(body, dry_run=True)  # the apiserver's validation and admission, nothing stored
            return model.State.PROCESSING, "would create", False
        if live is None:
            act.writes.before()
            try:
                created = await act.cluster.create(body)
            except kube.ConflictError as exc:
                raise _LostCreate(exc.status, exc.reason) from exc  # someone else's: read and decided again
            act.writes.after("Created")
            await self._apply_status(act, item, ref, as_of=created)
            return model.State.READY, "", True
        if live["metadata"].get("deletionTimestamp"):
            if updating_only:
                return model.State.DELETING, "being deleted: no longer updated; Ready once gone", act.owner.owns(live)
            return (
                model.State.PROCESSING,
                "the object is being deleted; it is created again once gone",
                act.owner.owns(live),
            )
        holder = marker_uid(live)
        if holder is not None and holder != act.owner.uid:
            source = (live["metadata"].get("annotations") or {}).get(wire.SOURCE_ANNOTATION, holder)
            return model.State.CONFLICT, f"managed by SyncResource {source}", False
        if holder is None:
            refusal = _adoption_refusal(item, live, takeover=act.takeover)
            if refusal is not None:
                return model.State.WARNING, f"{refusal}: left alone", False
        if holder is not None and item.strategy == model.Strategy.CREATE_AND_IGNORE:
            return model.State.READY, "", True
        # Ignored fields take their live values; then our marks again (an ignored /metadata/annotations must not
        # unmark the object), and what is sent is classified as sent.
        body = _mark(item.keeping_live(body, live), item, act.owner)
        refused = _privileged(body, item, act)
        if refused is not None:
            return model.State.FORBIDDEN, f"{refused} (with the live values of its ignored fields)", False
        if holder is not None and not act.dry_run:
            live = await act.cluster.with_create_handed_over(live)  # what the item no longer sets goes too
        body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        if act.dry_run:
            changes = diff.changed_paths(live, await act.cluster.apply(body, dry_run=True))
            # The real pass first hands an earlier create's leftovers to our apply, which this apply does not show.
            leftovers = act.cluster.unwanted_once_handed_over(live, body) if holder is not None else []
            if not changes and not leftovers:
                return model.State.READY, "in sync", False
            verb = "would adopt and change" if holder is None else "would change"
            said = [f"{verb} {', '.join(changes)}"] if changes else []
            if leftovers:
                said.append(
                    "what an earlier create set and the item leaves out would go (defaulted again where the "
                    f"apiserver defaults it): {', '.join(leftovers[:10])}"
                )
            return model.State.PROCESSING, "; ".join(said), False
        act.writes.before()
        result = await act.cluster.apply(body)
        if diff.changed_paths(live, result):  # drift reset or a new generation, not bookkeeping (managedFields)
            act.writes.after("Adopted" if holder is None else "Updated")
        await self._apply_status(act, item, ref, as_of=result)
        return model.State.READY, "adopted" if holder is None else "", True

    def _secret_content(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """The data (and type, unless the item sets one) of the KCP Secret a secretRef names."""
        source = self._secrets.get(namespace)
        if source is None:
            raise SecretSourceError(
                f"secretRef is not enabled for namespace {namespace} (sync_resources.secret_namespaces)"
            )
        secret = source.get(name, namespace)
        if secret is None:
            raise SecretSourceError(
                f"no Secret {name} in {namespace} labelled {wire.SOURCE_SECRET_SELECTOR} (the label opts it in)"
            )
        return {"data": dict(secret.get("data") or {}), "type": body.get("type") or secret.get("type") or "Opaque"}

    async def _set_status_only(self, item: model.Item, ref: objects.Ref, act: "Acting") -> tuple[model.State, str]:
        """A status-only item: the status of an object someone else creates, set while it exists."""
        live = await act.cluster.get(ref)
        if live is None:
            if item.strategy == model.Strategy.UPDATE_AND_DELETE:
                return model.State.READY, f"{GONE}no status to set; remove the item"
            return model.State.WARNING, "does not exist (yet): its status is set once it does"
        if live["metadata"].get("deletionTimestamp"):
            return model.State.DELETING, "being deleted: its status is no longer set"
        holder = marker_uid(live)
        if holder is not None and holder != act.owner.uid:
            return model.State.CONFLICT, "managed by another SyncResource: its status is not set"
        if (live["metadata"].get("labels") or {}).get(wire.SYNCED_LABEL) is not None and holder is None:
            return model.State.WARNING, "written by another kyma-sync controller: its status is not set"
        if holder is None and not act.takeover.allowed:
            # Setting another controller's status takes those fields from it: as much a takeover as adopting.
            return model.State.WARNING, "not created by kyma-sync, and no SyncBinding allows adoption (allowAdoption)"
        if act.dry_run:
            current = live.get("status") or {}
            differs = any(current.get(key) != value for key, value in (item.status or {}).items())
            return (model.State.PROCESSING, "would set its status") if differs else (model.State.READY, "in sync")
        await self._apply_status(act, item, ref, as_of=live)
        return model.State.READY, ""

    async def _apply_status(self, act: "Acting", item: model.Item, ref: objects.Ref, *, as_of: dict[str, Any]) -> None:
        """The item's status, written only to the object as judged (``as_of``: its resourceVersion is the write's
        precondition). An object of ours changed meanwhile (the same uid, our marker: a controller adding a finalizer
        or its own status) takes the status as it is now; one replaced, gone or not ours is a conflict, and the item
        is read and judged again (``_act_on_conflict_again``)."""
        if item.status is None:
            return
        for attempt in range(1, kube.CONFLICT_ATTEMPTS + 1):
            identity = {
                "name": ref.name,
                **({"namespace": ref.namespace} if ref.namespace else {}),
                "resourceVersion": as_of["metadata"]["resourceVersion"],
            }
            try:
                await act.cluster.apply(
                    {"apiVersion": ref.api_version, "kind": ref.kind, "metadata": identity, "status": item.status},
                    subresource="status",
                )
                return
            except (kube.ConflictError, kube.NotFoundError) as exc:
                current = await act.cluster.get(ref)
                # Still the object judged (not deleted and created again), and ours.
                same = current is not None and current["metadata"]["uid"] == as_of["metadata"]["uid"]
                if current is None or not same or not act.owner.owns(current) or attempt == kube.CONFLICT_ATTEMPTS:
                    raise kube.ConflictError(409, f"its status not written: {exc.reason}") from exc
                self._conflicts.inc()
                as_of = current

    async def _delete_item(self, item: model.Item, ref: objects.Ref, act: "Acting") -> tuple[model.State, str]:
        live = await act.cluster.get(ref)
        if live is None:
            return model.State.READY, f"{GONE}nothing to delete; the item can be removed"
        holder = marker_uid(live)
        if holder is not None and holder != act.owner.uid:
            return model.State.CONFLICT, "managed by another SyncResource: not deleted"
        if holder is None:
            refusal = _adoption_refusal(item, live, takeover=act.takeover)
            if refusal is not None:
                return model.State.WARNING, f"{refusal}: not deleted"
        if act.dry_run:
            return model.State.PROCESSING, "would delete"
        if not live["metadata"].get("deletionTimestamp"):
            await act.cluster.delete(ref, preconditions=_as_seen(live))
            act.writes.after("Deleted")
            if await act.cluster.get(ref) is None:
                return model.State.READY, "deleted"
        return model.State.DELETING, "waiting until the object is gone"

    async def _release_all(
        self, handle: runtime_clients.RuntimeHandle, owner: Owner, records: list[model.AppliedRef]
    ) -> tuple[list[model.AppliedRef], list[str], list[tuple[str, str]]]:
        """Delete what we own of ``records``; (records still to release, errors, (item, action) done)."""
        kept: list[model.AppliedRef] = []
        errors: list[str] = []
        actions: list[tuple[str, str]] = []
        for record in records:
            try:
                async with handle.limit:
                    action = await self._release(handle.objects, owner, record)
            except kube.KubeError as exc:
                errors.append(f"{_ref(record)}: {_describe(exc)}")
                kept.append(record)
                continue
            if action is not None:
                actions.append((record.item, action))
        return kept, errors, actions

    async def _release(self, cluster: objects.ClusterObjects, owner: Owner, record: model.AppliedRef) -> str | None:
        """Delete (or, for Orphan, unmark) one recorded object if it is still ours; what was done, if anything."""
        ref = _ref(record)
        try:
            live = await cluster.get(ref)
        except objects.UnknownKindError:
            return None
        if live is None:
            return None
        if not owner.owns(live):
            log.warning(
                "recorded object is not ours any more, left in place",
                extra={"key": str(owner.key), "runtime": record.runtime, "object": str(ref)},
            )
            return None
        if live["metadata"].get("deletionTimestamp"):
            return None
        if record.delete_policy == model.DeletePolicy.ORPHAN:
            await cluster.merge_patch(ref, _unmarking(live))
            log.info(
                "released object from management without deleting it (deletePolicy Orphan)",
                extra={"key": str(owner.key), "runtime": record.runtime, "object": str(ref)},
            )
            return "Released"
        await cluster.delete(ref, preconditions=_as_seen(live))
        log.info(
            "deleted object no longer wanted",
            extra={"key": str(owner.key), "runtime": record.runtime, "object": str(ref)},
        )
        return "Deleted"

    async def _finalize(self, owner: Owner, resource: dict[str, Any]) -> workqueue.Result:
        loaded = await self._records.load_stamped(resource)  # a deletion is a generation of its own
        applied = loaded.records
        outcome_of = await self._fan_out(
            owner,
            applied,
            {
                runtime: functools.partial(self._release_runtime, owner, runtime)
                for runtime in {a.runtime for a in applied}
            },
            failed_items=lambda runtime: [],
        )
        self._count_failures(resource, outcome_of)
        outcomes = list(outcome_of.values())
        remaining = [ref for outcome in outcomes for ref in outcome.applied]
        # What a pass over one runtime, started before the deletion, recorded meanwhile counts as well.
        left = await self._records.save(resource, loaded, remaining, visited=set(outcome_of))
        await self._announce_actions(resource, outcome_of)
        if left:
            errors = [o.error for o in outcomes if o.error]
            message = f"{left} object(s) still to delete" + (f": {errors[0]}" if errors else "")
            await self._write_status(
                resource, state=model.State.DELETING, message=message, items=[], records_moved=loaded.legacy
            )
            return workqueue.Result.failed(message) if errors else workqueue.Result(requeue_after=_WAIT_FOR_DELETION)
        await self._patch_metadata(
            owner.key,
            resource,
            {"finalizers": [f for f in resource["metadata"].get("finalizers") or [] if f != FINALIZER]},
        )
        self._finished.add(owner.key)
        return workqueue.Result()

    async def _mark(self, key: Key, resource: dict[str, Any]) -> dict[str, Any]:
        """Our finalizer, and for a single-runtime SyncResource the kyma-name label; the object after."""
        changes = _marks_missing(resource)
        return await self._patch_metadata(key, resource, changes) if changes else resource

    async def _patch_metadata(self, key: Key, resource: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        """Change metadata as of the version read (a concurrent change makes this retry, not overwrite)."""
        return await kube.merge_patch(
            self._kcp,
            crds.SYNC_RESOURCE.object_path(key.namespace, key.name),
            {"metadata": {**changes, "resourceVersion": resource["metadata"]["resourceVersion"]}},
        )

    async def _write_status(
        self,
        resource: dict[str, Any],
        *,
        state: model.State,
        message: str,
        items: list[model.ItemStatus],
        orphaned: list[str] | None = None,
        summary: dict[str, Any] | None = None,
        records_moved: bool = False,
    ) -> dict[str, Any]:
        """Write status only when it says something new (its own watch event would loop otherwise); the object after.

        ``summary``: itemCount, runtimeCount and ready (the printer columns), when known. ``records_moved``: the
        records an earlier version kept in ``status.applied`` are saved as SyncRecords now, so that copy goes.
        """
        old = resource.get("status") or {}
        metadata = resource["metadata"]
        generation = metadata.get("generation")
        ready = "True" if state == model.State.READY else "False"
        previous: dict[str, Any] = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {})
        condition = {
            "type": "Ready",
            "status": ready,
            "reason": state.value,
            "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": previous.get("lastTransitionTime") if previous.get("status") == ready else _now(),
        }
        shown, counted = sync_plan.status_items(items, runtimes=(summary or {}).get("runtimeCount", 0))
        conditions = [condition]
        if orphaned is not None:
            conditions.append(
                {
                    "type": "Orphaned",
                    "status": "True" if orphaned else "False",
                    "reason": "ItemsGone" if orphaned else "NoneGone",
                    "message": f"items whose objects are gone for good (remove them): {_few(orphaned)}"
                    if orphaned
                    else "",
                    "observedGeneration": generation,
                }
            )
        status = {
            "state": state.value,
            "observedGeneration": generation,
            "conditions": conditions,
            "items": shown,
            **counted,
            **(summary or {}),
        }
        dropped = [
            k for k in (*_SUMMARY_KEYS, *(("applied",) if records_moved else ())) if k in old and k not in status
        ]
        if not dropped and all(old.get(k) == v for k, v in status.items()):
            return resource
        await self._announce(resource, old, status)
        status["lastOperation"] = {"operation": message, "lastUpdateTime": _now()}
        status.update(dict.fromkeys(dropped))  # a merge patch removes a key only when told to
        try:
            return await kube.merge_patch(
                self._kcp,
                crds.SYNC_RESOURCE.object_path(metadata["namespace"], metadata["name"], subresource="status"),
                {"status": status},
            )
        except kube.NotFoundError:
            return resource

    async def _announce(self, resource: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> None:
        """A Kubernetes Event for each refusal, conflict or failure that is new since the last status."""
        before = {(i["runtime"], i["name"]): (i["state"], i.get("message", "")) for i in old.get("items") or []}
        fresh: dict[tuple[str, str, str], list[str]] = {}
        for entry in new["items"]:
            state, text = entry["state"], entry.get("message", "")
            if state in _NOTEWORTHY and before.get((entry["runtime"], entry["name"])) != (state, text):
                fresh.setdefault((entry["name"], state, text), []).append(entry["runtime"])
        notes = [
            (state, f"item {name}: {text} (runtimes: {_few(runtimes)})")
            for (name, state, text), runtimes in fresh.items()
        ]
        if new["state"] != old.get("state") and new["state"] in _NOTEWORTHY and not notes:
            notes.append((new["state"], new["conditions"][0]["message"]))
        for state, text in notes[:_EVENTS_PER_RECONCILE]:
            await self._event(resource, "Normal" if state == model.State.READY else "Warning", state, text)

    async def _announce_actions(self, resource: dict[str, Any], outcomes: dict[str, RuntimeOutcome]) -> None:
        """A Normal Event per item and action taken (Created, Updated, Adopted, Deleted, Released), runtimes named."""
        done: dict[tuple[str, str], list[str]] = {}
        for runtime, outcome in sorted(outcomes.items()):
            for item, action in outcome.actions:
                done.setdefault((action, item), []).append(runtime)
        for (action, item), runtimes in list(done.items())[:_EVENTS_PER_RECONCILE]:
            await self._event(resource, "Normal", action, f"item {item}: {action.lower()} (runtimes: {_few(runtimes)})")

    async def _event(self, resource: dict[str, Any], type_: str, reason: str, message: str) -> None:
        await self._shared.events.record(resource, type_=type_, reason=reason, message=message)


def _retried_alone(failing: list[str], *, runtimes: int) -> bool:
    """Whether a group's runtimes that failed in its pass over all ``runtimes`` are retried one by one: up to a tenth
    of them (or 16). Beyond that the pass over all is retried: each single pass reads its SyncResource and its
    runtime's SyncRecord shard, so a failure everywhere (a missing Secret) is cheaper retried as one pass than as
    thousands."""
    return 0 < len(failing) <= max(_RETRIED_ALONE_AT_LEAST, runtimes * _RETRIED_ALONE_SHARE)


def _failing(outcome_of: dict[str, RuntimeOutcome]) -> list[str]:
    """The runtimes whose work failed as a whole or in an item."""
    return [r for r, o in outcome_of.items() if o.error or any(i.state == model.State.ERROR for i in o.items)]


def _record(runtime: str, item: model.Item, ref: objects.Ref) -> model.AppliedRef:
    return model.AppliedRef(
        runtime=runtime,
        item=item.name,
        apiVersion=ref.api_version,
        kind=ref.kind,
        namespace=ref.namespace,
        name=ref.name,
        deletePolicy=model.DeletePolicy.ORPHAN if item.delete_policy == model.DeletePolicy.ORPHAN else None,
    )


def _unmarking(live: dict[str, Any]) -> dict[str, Any]:
    """A merge patch that removes our marks and hands what we own to ``wire.RELEASED_FIELD_MANAGER`` (adopted again
    later, an apply of ours would otherwise remove what the first item set), valid only for the version seen (a
    changed object makes it fail)."""
    entries = live["metadata"].get("managedFields") or []
    return {
        "metadata": {
            "resourceVersion": live["metadata"]["resourceVersion"],
            "labels": {wire.SYNCED_LABEL: None},
            "annotations": {wire.OWNER_ANNOTATION: None, wire.SOURCE_ANNOTATION: None},
            "managedFields": managed_fields.released(
                entries, wire.RECONCILER_FIELD_MANAGER, wire.RELEASED_FIELD_MANAGER
            ),
        }
    }


def _identity_of(ref: objects.Ref) -> sync_plan.ObjectIdentity:
    return sync_plan.identity(ref.api_version, ref.kind, ref.namespace, ref.name)


def _identity(record: model.AppliedRef) -> sync_plan.ObjectIdentity:
    return _identity_of(_ref(record))


class _Phase(enum.IntEnum):
    NAMESPACES = 0
    CRDS = 1
    ROLES = 2
    """Before the rest, so a RoleBinding is admitted only to a Role this pass made ours."""
    OBJECTS = 3
    DELETED_OBJECTS = 4
    DELETED_ROLES = 5
    DELETED_CRDS = 6
    DELETED_NAMESPACES = 7


_CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")


def _phase(item: model.Item | model.Unparsable) -> _Phase:
    if isinstance(item, model.Unparsable):
        return _Phase.OBJECTS
    ranks = {("", "Namespace"): _Phase.NAMESPACES, _CRD: _Phase.CRDS, (tenancy.RBAC, "Role"): _Phase.ROLES}
    rank = ranks.get((item.group, item.kind), _Phase.OBJECTS)
    return _Phase(_Phase.DELETED_NAMESPACES - rank) if item.strategy == model.Strategy.DELETE else rank


def _would_be_ours(status: model.ItemStatus) -> bool:
    """In a dry run: the item would create the object, or it is ours and in sync or would change."""
    return status.message == "would create" or (
        status.state in (model.State.READY, model.State.PROCESSING)
        and not status.message.startswith(("would adopt", "exists"))
    )


async def _served(cluster: objects.ClusterObjects, definitions: list[objects.Ref], timeout: float = 10) -> None:
    """Wait (a little) until the CRDs just written are established, so their objects can follow in this pass."""
    deadline = asyncio.get_running_loop().time() + timeout
    for ref in definitions:
        while asyncio.get_running_loop().time() < deadline:
            crd = await cluster.get(ref)
            conditions = ((crd or {}).get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            await asyncio.sleep(0.2)


def _would_release(held: Iterable[model.AppliedRef], why: str) -> list[model.ItemStatus]:
    """What a dry run says of records a real pass would release."""
    return [
        model.ItemStatus(
            name=r.item, runtime=r.runtime, state=model.State.PROCESSING, message=f"would release {_ref(r)} ({why})"
        )
        for r in held
    ]


def _may_write(item: model.Item) -> bool:
    """Whether syncing the item may create or change the object itself (so it is recorded and kept)."""
    return item.strategy != model.Strategy.DELETE and not item.status_only


def _status(
    item: model.Item | model.Unparsable | model.ItemSpec, runtime: str, state: model.State, message: str = ""
) -> model.ItemStatus:
    # Messages quote apiservers and webhooks a runtime controls: bounded, so the status stays within its size.
    short = message if len(message) <= _MESSAGE_LIMIT else f"{message[: _MESSAGE_LIMIT - 1]}…"
    return model.ItemStatus(name=item.name, runtime=runtime, state=state, message=short)


class SecretSourceError(Exception):
    """The Secret a secretRef names cannot be used (not enabled, absent, or not opted in)."""


class OrphanCount:
    """``kyma_reconciler_orphaned_items{namespace}``: items module managers can remove, per KCP namespace."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._gauge = Gauge(
            "kyma_reconciler_orphaned_items",
            "SyncResource items whose object is gone for good or whose runtime no longer exists, by KCP namespace",
            ["namespace"],
            registry=registry,
        )
        self._by_key: dict[Key, int] = {}

    def count(self, key: Key, orphaned: int) -> None:
        if orphaned:
            self._by_key[key] = orphaned
        else:
            self._by_key.pop(key, None)
        self._gauge.labels(key.namespace).set(sum(n for k, n in self._by_key.items() if k.namespace == key.namespace))


class _LostCreate(kube.ConflictError):
    """Our create refused because an object of that name appeared after it was read absent (409): not ours."""


@dataclasses.dataclass(frozen=True)
class Writes:
    """Who hears of an item's writes: ``before`` journals its record, ``after`` notes what was done (for Events)."""

    before: Callable[[], None]
    after: Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Acting:
    """What acting on one item in one runtime needs besides the item: the runtime, whose marker, what may be
    taken over, who hears of writes, and whether this is a dry run."""

    cluster: objects.ClusterObjects
    owner: Owner
    takeover: "Takeover"
    writes: Writes
    dry_run: bool


@dataclasses.dataclass(frozen=True)
class Takeover:
    """What the SyncBindings let an item do with an existing object that carries no owner marker."""

    allowed: bool
    """A binding admitting the item sets allowAdoption."""
    privileged_allowed: bool
    """A binding admitting the item sets allowPrivileged (checked against the live object, not the item's body)."""


def _adoption_refusal(item: model.Item, live: dict[str, Any], *, takeover: Takeover) -> str | None:
    """Why an existing object without an owner marker may not be taken over (or deleted) by ``item``, or None.

    The live object is classified too: a server-side apply keeps the fields others own, so a harmless
    body adopting a privileged object (a hostPID DaemonSet) would run the tenant's changes privileged.
    """
    if ((live["metadata"].get("labels") or {}).get(wire.SYNCED_LABEL)) is not None:
        return "exists, written by another kyma-sync controller"
    if item.secret_ref is not None:
        return "exists, and a Secret is never taken over"
    if item.adoption != model.Adoption.IF_UNMANAGED:
        return "exists, not managed by kyma-sync (adoption: IfUnmanaged would take it over)"
    if not takeover.allowed:
        return "exists, not managed by kyma-sync, and no SyncBinding allows adoption (allowAdoption)"
    if not takeover.privileged_allowed:
        reason = tenancy.privileged_reason(live, group=item.group, kind=item.kind)
        if reason:
            return f"exists and is privileged ({reason}), which no SyncBinding here allows"
    return None


def _privileged(body: dict[str, Any], item: model.Item, act: "Acting") -> str | None:
    """Why ``body`` — as it will be sent — may not be written here, or None."""
    if act.takeover.privileged_allowed:
        return None
    reason = tenancy.privileged_reason(body, group=item.group, kind=item.kind)
    return None if reason is None else f"privileged: {reason}"


def _marked(item: model.Item, owner: Owner) -> dict[str, Any]:
    return _mark(copy.deepcopy(item.resource), item, owner)


def _mark(body: dict[str, Any], item: model.Item, owner: Owner) -> dict[str, Any]:
    """``body`` with our label and owner marker (in place), without server-set identity."""
    metadata = body.setdefault("metadata", {})
    metadata.setdefault("labels", {})[wire.SYNCED_LABEL] = wire.SYNCED_VALUE
    metadata.setdefault("annotations", {}).update(
        {
            wire.OWNER_ANNOTATION: owner.marker(item.name),
            wire.SOURCE_ANNOTATION: str(owner.key),
        }
    )
    metadata.pop("resourceVersion", None)
    metadata.pop("uid", None)
    return body


def _as_seen(live: dict[str, Any]) -> kube.Preconditions:
    return kube.Preconditions(uid=live["metadata"]["uid"], resource_version=live["metadata"]["resourceVersion"])


def _describe(exc: kube.KubeError) -> str:
    return f"runtime unreachable: {exc.reason}" if isinstance(exc, kube.UnreachableError) else str(exc)


def _short(exc: pydantic.ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])


def _few(names: list[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
