"""The last delivered resourceVersion of every reported object, kept in runtime ConfigMaps.

After a restart or a leader change, a relist is compared with it: only objects whose
resourceVersion differs are reported (as RESYNC), and objects that disappeared are reported as
DELETED. Nothing changed while no watcher ran is lost, and nothing unchanged is resent.

Sharded by uid over ``SHARDS`` ConfigMaps ``<config_map>-<nn>`` (labelled with the checkpoint's
name, read back with one list): a single ConfigMap holds at most 1 MiB, about 6,000 entries, and a
runtime may watch 50,000 objects or more. At ~170 bytes an entry, 32 shards hold ~190,000 objects
under the limit; only shards that changed are written, so a steady trickle of changes costs one
small write per interval, not a rewrite of everything. A checkpoint of the former single-ConfigMap
layout is read once and emptied after the first complete sharded save.
"""

import hashlib
import json
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from clients import kube
from contract import events
from watcher import config

log = logging.getLogger(__name__)

_DATA_KEY = "checkpoint.json"
SHARDS = 32
SHARD_LABEL = "kyma-project.io/watcher-checkpoint"
MAX_SHARD_BYTES = 900_000
"""Below the 1 MiB object limit, with room for metadata."""

Entries = dict[str, dict[str, "Entry"]]
"""watch key -> uid -> entry."""


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    resource_version: str
    kind: str
    namespace: str | None
    name: str


def shard_of(uid: str) -> int:
    return int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) % SHARDS


class Checkpoint:
    def __init__(self, entries: Entries | None = None) -> None:
        self._shards: list[Entries] = [{} for _ in range(SHARDS)]
        self.dirty_shards: set[int] = set()
        self._owed: set[tuple[str, str]] = set()
        for watch_key, objects in (entries or {}).items():
            for uid, entry in objects.items():
                self._shards[shard_of(uid)].setdefault(watch_key, {})[uid] = entry

    @property
    def dirty(self) -> bool:
        return bool(self.dirty_shards)

    def of_watch(self, watch_key: str) -> dict[str, Entry]:
        return {uid: entry for shard in self._shards for uid, entry in shard.get(watch_key, {}).items()}

    def resource_version(self, watch_key: str, uid: str) -> str | None:
        entry = self._shards[shard_of(uid)].get(watch_key, {}).get(uid)
        return entry.resource_version if entry else None

    def owe(self, watch_key: str, event: events.ChangeEvent) -> None:
        """A change of this object was not delivered (refused): until one is, noise must not move it on."""
        self._owed.add((watch_key, event.target.uid))

    def record_noise(self, watch_key: str, event: events.ChangeEvent) -> None:
        """Move past a change nobody needs, unless an undelivered change of the object would be skipped with it.

        Owed changes are kept in memory only: the entry stays at the last delivered version, so the relist
        after a restart sees the object as changed and sends it again.
        """
        if (watch_key, event.target.uid) not in self._owed:
            self.record(watch_key, event)

    def record(self, watch_key: str, event: events.ChangeEvent) -> None:
        """``event`` was delivered."""
        self._owed.discard((watch_key, event.target.uid))
        shard = shard_of(event.target.uid)
        known = self._shards[shard].setdefault(watch_key, {})
        if event.change_type == events.ChangeType.DELETED:
            if known.pop(event.target.uid, None) is not None:
                self.dirty_shards.add(shard)
            return
        entry = Entry(
            resource_version=event.resource_version,
            kind=event.target.kind,
            namespace=event.target.namespace,
            name=event.target.name,
        )
        if known.get(event.target.uid) != entry:
            known[event.target.uid] = entry
            self.dirty_shards.add(shard)

    def shard_json(self, shard: int) -> str:
        return _to_json(self._shards[shard])

    def to_json(self) -> str:
        """Every entry in one document (the former layout; for tests and debugging)."""
        merged: Entries = {}
        for shard in self._shards:
            for watch_key, objects in shard.items():
                merged.setdefault(watch_key, {}).update(objects)
        return _to_json(merged)

    @classmethod
    def from_json(cls, *documents: str) -> "Checkpoint":
        merged: Entries = {}
        for data in documents:
            parsed: dict[str, dict[str, Any]] = json.loads(data)
            for watch_key, objects in parsed.items():
                merged.setdefault(watch_key, {}).update({uid: Entry.model_validate(e) for uid, e in objects.items()})
        return cls(merged)


def _to_json(entries: Entries) -> str:
    return json.dumps(
        {key: {uid: e.model_dump() for uid, e in objs.items()} for key, objs in entries.items() if objs},
        sort_keys=True,
        separators=(",", ":"),
    )


class CheckpointStore:
    """Reads and writes the checkpoint's shard ConfigMaps."""

    def __init__(self, api: kube.ApiClient, settings: config.CheckpointSettings) -> None:
        self._api = api
        self._settings = settings
        self._legacy = kube.CONFIGMAPS.object_path(settings.namespace, settings.config_map)
        self._legacy_pending = False

    def _shard_name(self, shard: int) -> str:
        return f"{self._settings.config_map}-{shard:02d}"

    async def load(self) -> Checkpoint:
        shards, _ = await kube.list_objects(
            self._api,
            kube.CONFIGMAPS,
            namespace=self._settings.namespace,
            label_selector=f"{SHARD_LABEL}={self._settings.config_map}",
        )
        legacy = await kube.get_or_none(self._api, self._legacy)
        documents = [(c.get("data") or {}).get(_DATA_KEY, "{}") for c in shards]
        if legacy is not None and (legacy_data := (legacy.get("data") or {}).get(_DATA_KEY, "{}")) != "{}":
            documents.append(legacy_data)
            self._legacy_pending = True
        try:
            loaded = Checkpoint.from_json(*documents)
        except (ValueError, ValidationError) as exc:
            log.error("checkpoint unreadable, starting from a full resync", extra={"error": str(exc)})
            return Checkpoint()
        if self._legacy_pending:
            loaded.dirty_shards.update(range(SHARDS))  # written out whole once, then the old ConfigMap is emptied
        return loaded

    async def save(self, checkpoint: Checkpoint) -> None:
        # Taken before the writes: a change recorded while they are in progress marks its shard dirty again.
        pending, checkpoint.dirty_shards = checkpoint.dirty_shards, set()
        try:
            for shard in sorted(pending):
                data = checkpoint.shard_json(shard)
                if len(data) > MAX_SHARD_BYTES:
                    log.error(
                        "checkpoint shard over its size limit, not saved: too many watched objects",
                        extra={"shard": shard, "bytes": len(data), "limit": MAX_SHARD_BYTES},
                    )
                    continue
                await self._write(self._shard_name(shard), data, labels={SHARD_LABEL: self._settings.config_map})
                pending.discard(shard)
            if self._legacy_pending and not pending:
                await self._write(self._settings.config_map, "{}", labels={})
                self._legacy_pending = False
        finally:
            checkpoint.dirty_shards |= pending

    async def _write(self, name: str, data: str, *, labels: dict[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self._settings.namespace, "labels": labels},
            "data": {_DATA_KEY: data},
        }
        # Replaced first and unconditionally: only the leader writes, so the steady state is one request.
        path = kube.CONFIGMAPS.object_path(self._settings.namespace, name)
        try:
            await kube.request(self._api, "PUT", path, body=body)
        except kube.NotFoundError:
            await kube.request(self._api, "POST", kube.CONFIGMAPS.path(self._settings.namespace), body=body)
