"""Where a SyncResource's record of what it applied where lives: SyncRecords, sharded by runtime.

A group SyncResource over 10,000 runtimes with 10 items has 100,000 records, far more than one
object (or its status) may hold. They live in SyncRecord objects next to the SyncResource (same
namespace, owned by it, labelled with its uid), each holding the records of the runtimes that
hash to its shard, so one object stays small and a reconcile rewrites only the shards that
changed. Records are read from the apiserver at the start of every reconcile, never from a cache:
a record missed because a cache was behind would be an object never released.

A SyncResource written before SyncRecords existed keeps its records in ``status.applied``; they
are read from there until the first save moves them.
"""

import dataclasses
import hashlib
from collections.abc import Iterable
from typing import Any

from clients import kube
from contract import wire
from reconciler import crds, model

SHARDS = 64


def shard_of(runtime: str) -> int:
    """The shard of a runtime's records: stable across processes (not Python's salted hash)."""
    return int.from_bytes(hashlib.sha256(runtime.encode()).digest()[:4], "big") % SHARDS


def record_name(resource_name: str, uid: str, shard: int) -> str:
    """A SyncRecord's name: readable, unique per SyncResource incarnation, within the 253-character limit."""
    return f"{resource_name[:230]}-{uid[:8]}-{shard:02d}"


def by_shard(records: Iterable[model.AppliedRef]) -> dict[int, list[model.AppliedRef]]:
    shards: dict[int, list[model.AppliedRef]] = {}
    for record in records:
        shards.setdefault(shard_of(record.runtime), []).append(record)
    return {shard: sorted(entries, key=lambda r: (r.runtime, r.item, r.name)) for shard, entries in shards.items()}


def _dump(records: list[model.AppliedRef]) -> list[dict[str, Any]]:
    return [r.model_dump(by_alias=True, exclude_none=True) for r in records]


@dataclasses.dataclass
class Loaded:
    """The records as read, and the shards they came from (to rewrite only what changed)."""

    records: list[model.AppliedRef]
    shards: dict[int, dict[str, Any]]
    """Shard -> the SyncRecord object as read."""
    legacy: bool
    """The records came from ``status.applied`` (to be moved on the next save)."""


class RecordStore:
    def __init__(self, kcp: kube.ApiClient) -> None:
        self._kcp = kcp

    async def load(self, resource: dict[str, Any]) -> Loaded:
        metadata = resource["metadata"]
        listing, _ = await kube.list_objects(
            self._kcp,
            crds.SYNC_RECORD,
            namespace=metadata["namespace"],
            label_selector=f"{wire.RECORDS_OF_LABEL}={metadata['uid']}",
        )
        if not listing:
            legacy = model.applied_refs(resource.get("status"))
            return Loaded(legacy, {}, legacy=bool(legacy))
        shards = {int(obj["spec"]["shard"]): obj for obj in listing}
        records = [
            model.AppliedRef.model_validate(entry) for obj in listing for entry in obj["spec"].get("applied") or []
        ]
        return Loaded(records, shards, legacy=False)

    async def save(self, resource: dict[str, Any], loaded: Loaded, records: Iterable[model.AppliedRef]) -> None:
        """Write the shards whose records changed, delete those left empty; the SyncResource owns them all."""
        metadata = resource["metadata"]
        wanted = by_shard(records)
        for shard, entries in wanted.items():
            current = loaded.shards.get(shard)
            if current is not None and current["spec"].get("applied") == _dump(entries):
                continue
            await kube.create_or_replace(
                self._kcp,
                crds.SYNC_RECORD.path(metadata["namespace"]),
                {
                    "apiVersion": crds.SYNC_RECORD.api_version,
                    "kind": "SyncRecord",
                    "metadata": {
                        "name": record_name(metadata["name"], metadata["uid"], shard),
                        "namespace": metadata["namespace"],
                        "labels": {wire.RECORDS_OF_LABEL: metadata["uid"]},
                        "ownerReferences": [
                            {
                                "apiVersion": crds.SYNC_RESOURCE.api_version,
                                "kind": "SyncResource",
                                "name": metadata["name"],
                                "uid": metadata["uid"],
                            }
                        ],
                    },
                    "spec": {"syncResource": metadata["name"], "shard": shard, "applied": _dump(entries)},
                },
            )
        for shard, current in loaded.shards.items():
            if shard not in wanted:
                await kube.delete(
                    self._kcp,
                    crds.SYNC_RECORD.object_path(metadata["namespace"], current["metadata"]["name"]),
                    preconditions=kube.Preconditions(uid=current["metadata"]["uid"]),
                )
