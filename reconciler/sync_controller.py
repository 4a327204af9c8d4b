"""The SyncResource controller: what triggers a reconcile of which SyncResource.

Triggers, each naming SyncResource keys:
- a SyncResource's spec or deletion in KCP (not its own status writes);
- a SyncBinding change: every SyncResource of the namespaces it covers;
- a runtime changed (Kyma CR labels decide group membership; its client was rebuilt);
- a watcher event about an object in a runtime: the SyncResources that KCP's own records say
  applied it there, or whose items name it — never a claim in the event body, which anyone
  who can edit the object in the runtime controls;
- a SyncRecord whose saved states changed: the SyncResource's status sum (``status_only``);
- the periodic resync of everything, spread with jitter.

Sharded, every key of a SyncResource for one runtime belongs to that runtime's owner, every key
of a group SyncResource to the singleton shard's holder: all passes of one SyncResource run in
one replica.
"""

import collections
import dataclasses
from collections.abc import Iterable
from typing import Any

import pydantic

from clients import informer, kube
from contract import events, wire
from reconciler import controller, crds, model, records, settings, sync_resources, workqueue
from reconciler.shared import Shared

Key = sync_resources.Key
_Placed = tuple[str, str, str, str, str]
"""(runtime, group, kind, namespace or "", name) of an object a SyncResource applied."""
_STATUS_DELAY = 2.0
"""After a SyncRecord's states changed, the status is summed up this much later: a burst of passes over single
runtimes makes one status write, not one each."""
_Named = tuple[str | None, str, str, str]
"""(runtime, group, kind, name) of an object an item names: the runtime is the SyncResource's ``spec.kyma``, None for
a group (whose selector is matched when an event comes). Keyed by runtime, an event about an object that the
SyncResources of thousands of runtimes name costs a lookup, not a look at each of them."""


def _key(obj: dict[str, Any]) -> Key:
    return Key(obj["metadata"]["namespace"], obj["metadata"]["name"])


class SyncResourceController(controller.Controller[Key]):
    def __init__(self, shared: Shared, config: settings.SyncResourcesSettings, *, events_module: str) -> None:
        super().__init__(shared, config, name=sync_resources.CONTROLLER_NAME)
        self.modules = frozenset({events_module})
        self.resources = self.own(informer.Informer(shared.kcp, crds.SYNC_RESOURCE, namespace=config.namespace))
        self.bindings = self.own(informer.Informer(shared.kcp, crds.SYNC_BINDING))
        # Only opted-in Secrets, only in the namespaces allowed to reference them (the chart grants just those).
        self.secrets = {
            namespace: self.own(
                informer.Informer(
                    shared.kcp, kube.SECRETS, namespace=namespace, label_selector=wire.SOURCE_SECRET_SELECTOR
                )
            )
            for namespace in config.secret_namespaces
        }
        self.reconciler = sync_resources.SyncResourceReconciler(
            shared,
            config,
            resources=self.resources,
            bindings=self.bindings,
            secrets=self.secrets,
            retry=self.queue.retry,
        )
        # Where each SyncResource put what, from its SyncRecords (routing only: the reconciler reads them live).
        self.records = self.own(informer.Informer(shared.kcp, crds.SYNC_RECORD, namespace=config.namespace))
        self._placed: dict[_Placed, set[Key]] = collections.defaultdict(set)
        self._placed_by_record: dict[tuple[str, str], tuple[Key, list[_Placed]]] = {}
        self._runtimes_placed: dict[Key, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self._named: dict[_Named, set[Key]] = collections.defaultdict(set)
        self._named_by_key: dict[Key, list[_Named]] = {}
        self._parsed: dict[Key, tuple[tuple[Any, Any], list[model.Item]]] = {}
        self.resources.subscribe(self._resource_changed)
        self.records.subscribe(self._records_changed)
        self.bindings.subscribe(self._binding_changed)
        for source in self.secrets.values():
            source.subscribe(self._secret_changed)

    async def reconcile(self, key: Key) -> workqueue.Result:
        return await self.reconciler.reconcile(key)

    def admits(self, key: Key) -> bool:
        """Sharded, a SyncResource this replica's cache does not hold (yet) is nobody's here: its owner is unknown,
        and the cache's ADDED queues its key anyway."""
        if self.shared.ownership.shards is not None and self.resources.get(key.name, key.namespace) is None:
            return False
        return super().admits(key)

    def runtime_of(self, key: Key) -> str | None:
        """Every pass of a SyncResource runs in one replica (so that none visits a runtime another pass is visiting):
        a SyncResource for one runtime is that runtime's owner's (10,000 of those must not all land on one replica;
        ``spec.kyma`` is immutable, so it never moves), a group is the singleton shard's."""
        kyma = ((self.resources.get(key.name, key.namespace) or {}).get("spec") or {}).get("kyma")
        return kyma if isinstance(kyma, str) else None

    def all_keys(self) -> Iterable[Key]:
        return [_key(obj) for obj in self.resources]

    def keys_for_runtime(self, change: controller.RuntimeChange) -> Iterable[Key]:
        """SyncResources that select the runtime now, or put something there or reported on it before."""
        if change.content_only:
            return []  # a Kyma's status or spec says nothing about which objects belong in the runtime
        runtime = change.runtime
        return [
            dataclasses.replace(_key(obj), runtime=runtime)
            for obj in self.resources
            if self._targets(_key(obj), runtime)
            or self._runtimes_placed.get(_key(obj), collections.Counter())[runtime] > 0
            or any(entry.get("runtime") == runtime for entry in _reported(obj))
        ]

    def keys_for_event(self, event: events.ChangeEvent) -> Iterable[Key]:
        target = event.target
        placed = self._placed.get(
            (event.runtime, target.group, target.kind, target.namespace or "", target.name), set()
        )
        mine = self._named.get((event.runtime, target.group, target.kind, target.name), set())
        groups = self._named.get((None, target.group, target.kind, target.name), set())
        found = placed | mine | {k for k in groups if self._targets(k, event.runtime)}
        return sorted((dataclasses.replace(k, runtime=event.runtime) for k in found), key=str)

    def _targets(self, key: Key, runtime: str) -> bool:
        resource = self.resources.get(key.name, key.namespace)
        spec = (resource or {}).get("spec") or {}
        if "kyma" in spec:
            return bool(spec["kyma"] == runtime)
        selector = (spec.get("target") or {}).get("selector")
        try:
            return selector is not None and model.LabelSelector.model_validate(selector).matches(
                self.shared.labels_of(runtime)
            )
        except ValueError:
            return False

    def _resource_changed(self, change: informer.Change) -> None:
        key = _key(change.current)
        self._unindex(key)
        if change.new is None:
            self._parsed.pop(key, None)
            return
        self._index(key, change.new)
        old_meta = (change.old or {}).get("metadata") or {}
        new_meta = change.new["metadata"]
        if (
            change.old is None
            or old_meta.get("generation") != new_meta.get("generation")
            or new_meta.get("deletionTimestamp")
        ):
            self.queue.add_all([key])

    def _binding_changed(self, change: informer.Change) -> None:
        namespaces = {
            ns
            for obj in (change.old, change.new)
            if obj is not None
            for ns in (obj.get("spec") or {}).get("namespaces") or []
        }
        self.queue.add_all(k for k in self.all_keys() if k.namespace in namespaces)

    def _secret_changed(self, change: informer.Change) -> None:
        """A referenced Secret changed: the SyncResources of its namespace that take data from it apply again."""
        namespace, name = change.current["metadata"]["namespace"], change.current["metadata"]["name"]
        self.queue.add_all(
            _key(obj)
            for obj in self.resources
            if obj["metadata"]["namespace"] == namespace
            and any(item.secret_ref is not None and item.secret_ref.name == name for item in self._items(obj))
        )

    def _records_changed(self, change: informer.Change) -> None:
        """Index a SyncRecord's entries (an event about one of them reaches its SyncResource); new saved states
        queue the SyncResource's status sum."""
        record = (change.current["metadata"]["namespace"], change.current["metadata"]["name"])
        previous = self._placed_by_record.pop(record, None)
        if previous is not None:
            old_key, old_entries = previous
            for entry in old_entries:
                self._placed[entry].discard(old_key)
                if not self._placed[entry]:
                    del self._placed[entry]
                self._runtimes_placed[old_key][entry[0]] -= 1
        if change.new is None:
            return
        key = Key(record[0], str((change.new.get("spec") or {}).get("syncResource", "")))
        if _seen(change.old) != _seen(change.new):  # a pass saved new states: the status sums them up
            self.queue.add_later([dataclasses.replace(key, status_only=True)], delay=_STATUS_DELAY)
        entries = [
            (a.runtime, a.api_version.rpartition("/")[0], a.kind, a.namespace or "", a.name)
            for a in _applied_or_none(change.new)
        ]
        for entry in entries:
            self._placed[entry].add(key)
            self._runtimes_placed[key][entry[0]] += 1
        self._placed_by_record[record] = (key, entries)

    def _items(self, obj: dict[str, Any]) -> list[model.Item]:
        """The SyncResource's parsed items, parsed once per generation (status writes do not parse again)."""
        version = (obj["metadata"].get("uid"), obj["metadata"].get("generation"))
        key = _key(obj)
        cached = self._parsed.get(key)
        if cached is None or cached[0] != version:
            cached = self._parsed[key] = (version, _parsed_items(obj))
        return cached[1]

    def _index(self, key: Key, obj: dict[str, Any]) -> None:
        kyma = (obj.get("spec") or {}).get("kyma")
        runtime = kyma if isinstance(kyma, str) else None
        named = [(runtime, item.group, item.kind, item.object_name) for item in self._items(obj)]
        for name in named:
            self._named[name].add(key)
        self._named_by_key[key] = named

    def _unindex(self, key: Key) -> None:
        for name in self._named_by_key.pop(key, []):
            self._named[name].discard(key)
            if not self._named[name]:
                del self._named[name]


def _seen(record: dict[str, Any] | None) -> tuple[Any, Any]:
    spec = (record or {}).get("spec") or {}
    return spec.get("states"), spec.get("errors")


def _applied_or_none(record: dict[str, Any]) -> list[model.AppliedRef]:
    try:
        return records.applied_of(record)
    except ValueError:
        return []


def _reported(obj: dict[str, Any]) -> list[dict[str, Any]]:
    entries = (obj.get("status") or {}).get("items") or []
    return [entry for entry in entries if isinstance(entry, dict)]


def _parsed_items(obj: dict[str, Any]) -> list[model.Item]:
    """The items that parse (those that do not name nothing an event could be about)."""
    try:
        spec = model.Spec.model_validate(obj.get("spec") or {})
    except pydantic.ValidationError:
        return []
    return [item for item in model.parse_items(spec) if isinstance(item, model.Item)]
