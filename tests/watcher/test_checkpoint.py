"""The checkpoint holds 50,000 objects in a real apiserver, writes only what changed, and reads the former layout."""

import json
import uuid
from typing import Any

from clients import kube
from contract import events, ids
from watcher import checkpoint, config

from .conftest import Runtime


def _event(uid: str, n: int, change: events.ChangeType = events.ChangeType.MODIFIED) -> events.ChangeEvent:
    return events.ChangeEvent.create(
        runtime=ids.RuntimeId("skr-1"),
        module=ids.ModuleName("kyma-sync"),
        target=events.WatchedObject(
            group="", version="v1", resource="configmaps", kind="ConfigMap", namespace="team-a", name=f"cm-{n}", uid=uid
        ),
        resource_version=str(100_000 + n),
        change_type=change,
        body=None if change == events.ChangeType.DELETED else {},
    )


def _settings(runtime: Runtime) -> config.CheckpointSettings:
    return config.CheckpointSettings(namespace=runtime.namespace, config_map="cp")


async def test_fifty_thousand_objects_round_trip_through_the_apiserver(runtime: Runtime) -> None:
    """One ConfigMap (1 MiB) held ~6,000 entries: 50,000 are written as shards and read back whole."""
    state = checkpoint.Checkpoint()
    uids = [str(uuid.uuid4()) for _ in range(50_000)]
    for n, uid in enumerate(uids):
        state.record("v1/configmaps", _event(uid, n))
    assert len(state.to_json()) > 1_048_576, "more than one ConfigMap could hold"
    store = checkpoint.CheckpointStore(runtime.api, _settings(runtime))
    await store.save(state)
    assert not state.dirty
    loaded = await checkpoint.CheckpointStore(runtime.api, _settings(runtime)).load()
    assert loaded.of_watch("v1/configmaps") == state.of_watch("v1/configmaps")
    assert loaded.resource_version("v1/configmaps", uids[49_999]) == str(149_999)


async def test_a_change_rewrites_only_its_shard(runtime: Runtime) -> None:
    store = checkpoint.CheckpointStore(runtime.api, _settings(runtime))
    state = checkpoint.Checkpoint()
    for n in range(200):
        state.record("v1/configmaps", _event(str(uuid.uuid4()), n))
    await store.save(state)
    uid = next(iter(state.of_watch("v1/configmaps")))
    state.record("v1/configmaps", _event(uid, 0, events.ChangeType.DELETED))
    assert state.dirty_shards == {checkpoint.shard_of(uid)}
    before = {c["metadata"]["name"]: c["metadata"]["resourceVersion"] for c in await _shards(runtime)}
    await store.save(state)
    after = {c["metadata"]["name"]: c["metadata"]["resourceVersion"] for c in await _shards(runtime)}
    assert {name for name in after if after[name] != before.get(name)} == {f"cp-{checkpoint.shard_of(uid):02d}"}
    assert uid not in (await store.load()).of_watch("v1/configmaps")


async def test_a_checkpoint_of_the_former_single_configmap_is_read_then_emptied(runtime: Runtime) -> None:
    """An upgraded watcher neither loses nor resends what the old layout recorded, and reads it only once."""
    old = checkpoint.Checkpoint()
    for n in range(50):
        old.record("v1/configmaps", _event(str(uuid.uuid4()), n))
    await kube.request(
        runtime.api,
        "POST",
        kube.CONFIGMAPS.path(runtime.namespace),
        body={"metadata": {"name": "cp"}, "data": {"checkpoint.json": old.to_json()}},
    )
    store = checkpoint.CheckpointStore(runtime.api, _settings(runtime))
    migrated = await store.load()
    assert migrated.of_watch("v1/configmaps") == old.of_watch("v1/configmaps")
    await store.save(migrated)
    legacy = await kube.request(runtime.api, "GET", kube.CONFIGMAPS.object_path(runtime.namespace, "cp"))
    assert json.loads(legacy["data"]["checkpoint.json"]) == {}
    uid = next(iter(old.of_watch("v1/configmaps")))
    migrated.record("v1/configmaps", _event(uid, 0, events.ChangeType.DELETED))
    await store.save(migrated)
    again = await checkpoint.CheckpointStore(runtime.api, _settings(runtime)).load()
    assert uid not in again.of_watch("v1/configmaps") and len(again.of_watch("v1/configmaps")) == 49


async def _shards(runtime: Runtime) -> list[dict[str, Any]]:
    found, _ = await kube.list_objects(
        runtime.api, kube.CONFIGMAPS, namespace=runtime.namespace, label_selector=f"{checkpoint.SHARD_LABEL}=cp"
    )
    return found
