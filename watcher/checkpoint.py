"""The last delivered resourceVersion of every reported object, kept in a runtime ConfigMap.

After a restart or a leader change, a relist is compared with it: only objects whose
resourceVersion differs are reported (as RESYNC), and objects that disappeared are reported as
DELETED. Nothing changed while no watcher ran is lost, and nothing unchanged is resent.
"""

import json
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from clients import kube
from contract import events
from watcher import config

log = logging.getLogger(__name__)

_DATA_KEY = "checkpoint.json"


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    resource_version: str
    kind: str
    namespace: str | None
    name: str


class Checkpoint:
    def __init__(self, entries: dict[str, dict[str, Entry]] | None = None) -> None:
        self._entries = entries or {}
        self.dirty = False

    def of_watch(self, watch_key: str) -> dict[str, Entry]:
        return dict(self._entries.get(watch_key, {}))

    def resource_version(self, watch_key: str, uid: str) -> str | None:
        entry = self._entries.get(watch_key, {}).get(uid)
        return entry.resource_version if entry else None

    def record(self, watch_key: str, event: events.ChangeEvent) -> None:
        known = self._entries.setdefault(watch_key, {})
        if event.change_type == events.ChangeType.DELETED:
            self.dirty |= known.pop(event.target.uid, None) is not None
            return
        entry = Entry(
            resource_version=event.resource_version,
            kind=event.target.kind,
            namespace=event.target.namespace,
            name=event.target.name,
        )
        if known.get(event.target.uid) != entry:
            known[event.target.uid] = entry
            self.dirty = True

    def to_json(self) -> str:
        return json.dumps(
            {key: {uid: e.model_dump() for uid, e in objs.items()} for key, objs in self._entries.items()},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, data: str) -> "Checkpoint":
        document: dict[str, dict[str, Any]] = json.loads(data)
        return cls({key: {uid: Entry.model_validate(e) for uid, e in objs.items()} for key, objs in document.items()})


class CheckpointStore:
    """Reads and writes the checkpoint ConfigMap."""

    def __init__(self, api: kube.ApiClient, settings: config.CheckpointSettings) -> None:
        self._api = api
        self._settings = settings
        self._path = kube.CONFIGMAPS.object_path(settings.namespace, settings.config_map)

    async def load(self) -> Checkpoint:
        config_map = await kube.get_or_none(self._api, self._path)
        if config_map is None:
            return Checkpoint()
        try:
            return Checkpoint.from_json((config_map.get("data") or {}).get(_DATA_KEY, "{}"))
        except (ValueError, ValidationError) as exc:
            log.error("checkpoint unreadable, starting from a full resync", extra={"error": str(exc)})
            return Checkpoint()

    async def save(self, checkpoint: Checkpoint) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self._settings.config_map, "namespace": self._settings.namespace},
            "data": {_DATA_KEY: checkpoint.to_json()},
        }
        # Cleared before the write: a change recorded while it is in progress marks it dirty again.
        checkpoint.dirty = False
        # Replaced first and unconditionally: only the leader writes it, every few seconds, so the
        # steady state is one request; it is created only the first time.
        try:
            try:
                await kube.request(self._api, "PUT", self._path, body=body)
            except kube.NotFoundError:
                await kube.request(self._api, "POST", kube.CONFIGMAPS.path(self._settings.namespace), body=body)
        except kube.KubeError:
            checkpoint.dirty = True
            raise
