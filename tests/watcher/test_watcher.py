"""The watcher against a real SKR apiserver: exactly the expected events reach the listener."""

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from clients import kube
from contract import events, watch_sets
from devenv import net

from ..waiting import eventually
from .conftest import MODULE, Runtime, resource_version

pytestmark = pytest.mark.integration


async def test_create_update_delete_produce_exactly_these_events(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """ADDED, MODIFIED, DELETED for a watched object, in order; nothing for an unlabelled one."""
    async with start_agent(runtime.write_config(runtime.config())) as running:
        await running.wait_synced()
        mark = running.seen()
        created = await runtime.create("cm-a", {"k": "1"})
        await runtime.create("unwatched", {"k": "1"}, labelled=False)
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("cm-a")) == 1)
        updated = await runtime.update("cm-a", {"k": "2"})
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("cm-a")) == 2)
        await runtime.delete("cm-a")
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("cm-a")) == 3)
        await running.settled(seen=mark + 3)
    changes = runtime.listener.of("cm-a")
    assert [kind for kind, _ in changes] == ["ADDED", "MODIFIED", "DELETED"]
    assert changes[0][1] == resource_version(created)
    assert changes[1][1] == resource_version(updated)
    assert runtime.listener.of("unwatched") == []
    assert all(e.module == MODULE and e.runtime == "skr-1" for e in runtime.listener.received)
    added = runtime.listener.received[0]
    assert added.body is not None and added.body["data"] == {"k": "1"}
    assert "managedFields" not in added.body["metadata"]


async def test_reconciler_writes_and_ignored_fields_produce_no_events(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """A write by the ignored field manager and an annotation-only change are noise; a user edit is not."""
    async with start_agent(runtime.write_config(runtime.config())) as running:
        await running.wait_synced()
        await runtime.create("cm-b", {"k": "1"})
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("cm-b")) == 1)
        mark = running.seen()
        await runtime.update("cm-b", {"k": "by-reconciler"}, manager="kyma-sync-reconciler")
        await runtime.patch("cm-b", {"metadata": {"annotations": {"touched": "yes"}}})
        await running.settled(seen=mark + 2)
        assert [kind for kind, _ in runtime.listener.of("cm-b")] == ["ADDED"]
        user_edit = await runtime.update("cm-b", {"k": "by-user"})
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("cm-b")) == 2)
        noise = running.agent.metrics.registry.get_sample_value
        assert noise("kyma_watcher_events_noise_total", {"reason": "ignored_field_manager"}) == 1
        assert noise("kyma_watcher_events_noise_total", {"reason": "ignored_fields_only"}) == 1
    assert runtime.listener.of("cm-b")[-1] == ("MODIFIED", resource_version(user_edit))


async def test_restart_resumes_without_losing_changes_made_while_down(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """Changes made while no watcher ran arrive as RESYNC/DELETED after a restart; unchanged objects are not resent."""
    config = runtime.write_config(runtime.config())
    async with start_agent(config) as running:
        await running.wait_synced()
        for name in ("keep", "change", "remove"):
            await runtime.create(name, {"k": "1"})
        await runtime.listener.wait_for(lambda: len(runtime.listener.received) == 3)
    changed = await runtime.update("change", {"k": "2"})
    await runtime.delete("remove")
    added = await runtime.create("new", {"k": "1"})
    runtime.listener.received.clear()
    async with start_agent(config) as running:
        await running.wait_synced()
        await runtime.listener.wait_for(lambda: len(runtime.listener.received) >= 3)
        await running.settled(seen=3)  # change, new, remove: "keep" is unchanged and must not be seen
    assert runtime.listener.of("change") == [("RESYNC", resource_version(changed))]
    assert runtime.listener.of("new") == [("RESYNC", resource_version(added))]
    assert [kind for kind, _ in runtime.listener.of("remove")] == ["DELETED"]
    assert runtime.listener.of("keep") == []


async def test_noise_after_a_refused_change_does_not_checkpoint_it_as_delivered(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """A change the listener refused (422) is owed: an ignored-fields-only edit after it must not move the
    checkpoint to its version, or the relist after a restart would take the refused change as delivered."""
    config = runtime.write_config(runtime.config())
    runtime.listener.unknown_objects.add("refused")
    async with start_agent(config) as running:
        await running.wait_synced()
        created = await runtime.create("refused", {"k": "1"})
        await runtime.listener.wait_for(lambda: len(runtime.listener.rejected) == 1)
        mark = running.seen()
        await runtime.patch("refused", {"metadata": {"annotations": {"touched": "yes"}}})
        await running.settled(seen=mark + 1)
        noise = running.agent.metrics.registry.get_sample_value
        assert noise("kyma_watcher_events_noise_total", {"reason": "ignored_fields_only"}) == 1
    assert runtime.listener.rejected[0].resource_version == resource_version(created)
    runtime.listener.unknown_objects.clear()
    async with start_agent(config) as running:
        await running.wait_synced()
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("refused")) == 1)
    assert [kind for kind, _ in runtime.listener.of("refused")] == ["RESYNC"]


async def test_follower_takes_over_when_the_leader_dies(runtime: Runtime, start_agent: Callable[..., Any]) -> None:
    """Two pods: one sends; when it is killed the other leads within a few seconds and nothing is lost."""
    config = runtime.write_config(runtime.config())
    async with start_agent(config, "pod-a") as first, start_agent(config, "pod-b") as second:
        await runtime.listener.wait_for(lambda: first.agent.leading or second.agent.leading)
        leader, follower = (first, second) if first.agent.leading else (second, first)
        await leader.wait_synced()
        await asyncio.sleep(0.5)
        assert not follower.agent.leading
        await runtime.create("before", {"k": "1"})
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("before")) == 1)
        await asyncio.sleep(0.5)
        await leader.crash()
        killed_at = asyncio.get_running_loop().time()
        during = await runtime.create("during-failover", {"k": "1"})
        await runtime.listener.wait_for(lambda: follower.agent.leading, timeout=15)
        took_over = asyncio.get_running_loop().time() - killed_at
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("during-failover")) >= 1)
    assert took_over < 6, f"takeover took {took_over:.1f}s"
    assert runtime.listener.of("during-failover")[-1][1] == resource_version(during)
    assert len(runtime.listener.of("before")) >= 1


async def test_listener_down_for_a_while_then_every_distinct_change_arrives(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """With the listener answering 503, changes queue up; once it is back, the latest version of each object arrives."""
    async with start_agent(runtime.write_config(runtime.config())) as running:
        await running.wait_synced()
        runtime.listener.available = False
        mark = running.seen()
        latest: dict[str, str] = {}
        for n in range(20):
            latest[f"obj-{n}"] = resource_version(await runtime.create(f"obj-{n}", {"k": "1"}))
        for n in range(0, 20, 2):
            latest[f"obj-{n}"] = resource_version(await runtime.update(f"obj-{n}", {"k": "2"}))
        await runtime.listener.wait_for(lambda: runtime.listener.refused_while_down > 0 and running.seen() >= mark + 30)
        runtime.listener.available = True
        await runtime.listener.wait_for(
            lambda: all(runtime.listener.of(n) and runtime.listener.of(n)[-1][1] == rv for n, rv in latest.items())
        )
    assert {e.target.name for e in runtime.listener.received} == set(latest)


async def test_second_endpoint_is_used_when_the_first_is_unreachable(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """A dead primary listener address fails over to the second one."""
    dead = f"https://{net.LOOPBACK}:{net.free_port()}"
    config = runtime.config(listeners=[{"url": dead}, {"url": runtime.listener.url}])
    async with start_agent(runtime.write_config(config)) as running:
        await running.wait_synced()
        await runtime.create("via-second", {"k": "1"})
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("via-second")) == 1)


async def test_oversize_object_is_reported_as_a_reference(runtime: Runtime, start_agent: Callable[..., Any]) -> None:
    """An object whose event would pass 1 MB arrives as a reference-only event, not dropped."""
    async with start_agent(runtime.write_config(runtime.config())) as running:
        await running.wait_synced()
        await runtime.create("huge", {"blob": "x" * (events.MAX_EVENT_BYTES + 10_000)})
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("huge")) == 1)
    [event] = [e for e in runtime.listener.received if e.target.name == "huge"]
    assert event.reference_only and event.body is None


async def test_paused_module_reports_nothing_until_unpaused_then_catches_up(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """Pausing by config reload stops reports; unpausing sends what changed meanwhile, without a restart."""
    config_path = runtime.write_config(runtime.config())
    async with start_agent(config_path) as running:
        await running.wait_synced()
        runtime.write_config(runtime.config(paused_modules=[MODULE]))
        await runtime.listener.wait_for(lambda: running.relists() >= 2)
        mark = running.seen()
        created = await runtime.create("while-paused", {"k": "1"})
        await running.settled(seen=mark + 1)
        assert runtime.listener.of("while-paused") == []
        runtime.write_config(runtime.config())
        await runtime.listener.wait_for(lambda: len(runtime.listener.of("while-paused")) == 1)
    assert runtime.listener.of("while-paused") == [("RESYNC", resource_version(created))]


async def test_the_active_watcher_heartbeats_while_it_leads(runtime: Runtime, start_agent: Callable[..., Any]) -> None:
    """KCP tells a broken watcher by its silence: the leader says it is alive every heartbeat_seconds, and stops when stopped."""
    document = runtime.config()
    document["delivery"] = {**document["delivery"], "heartbeat_seconds": 1}
    async with start_agent(runtime.write_config(document)) as running:
        await runtime.listener.wait_for(lambda: len(runtime.listener.heartbeats) >= 2, timeout=10)
        await running.shutdown()
    after_stop = len(runtime.listener.heartbeats)
    await asyncio.sleep(1.5)
    assert len(runtime.listener.heartbeats) == after_stop
    assert {beat.runtime for beat in runtime.listener.heartbeats} == {"skr-1"}


async def _management(agent: Any, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"{agent.management_url}{path}") as response:
        return response.status, await response.text()


async def test_readiness_is_real_and_the_configuration_is_shown(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """The leader is ready once its sources listed, a follower while it could take over; /config shows what runs,
    including KCP's watch set and its revision, which every event carries too."""
    watch_set = watch_sets.WatchSet.of(
        [
            watch_sets.CentralWatch(
                group="", version="v1", resource="secrets", label_selector="team=kcp", module="kyma-sync"
            )
        ]
    )
    await kube.request(
        runtime.api,
        "POST",
        kube.CONFIGMAPS.path(runtime.namespace),
        body={"metadata": {"name": "watch-set"}, "data": {watch_sets.DATA_KEY: watch_set.encode()}},
    )
    document = runtime.config(central={"namespace": runtime.namespace, "config_map": "watch-set"})
    path = runtime.write_config(document)
    async with start_agent(path, "one") as one, start_agent(path, "other") as other:
        await eventually(lambda: one.agent.leading or other.agent.leading, what="one of them leading")
        leader, follower = (one, other) if one.agent.leading else (other, one)
        await leader.wait_synced(sources=2)
        await eventually(lambda: _status_is(leader.agent, 200), what="the leader ready")
        await eventually(lambda: _status_is(follower.agent, 200), what="the follower ready to take over")
        assert not follower.agent.leading
        status, body = await _management(leader.agent, "/config")
        shown = json.loads(body)
        assert status == 200 and shown["watch_set_revision"] == watch_set.revision and shown["leading"] is True
        assert {w["resource"] for w in shown["settings"]["watches"]} == {"configmaps", "secrets"}
        assert "BEGIN" not in body, "paths to the key, never the key"
        await runtime.create("cm-revision", {"k": "v"})
        await runtime.listener.wait_for(lambda: bool(runtime.listener.of("cm-revision")))
        [event] = [e for e in runtime.listener.received if e.target.name == "cm-revision"]
        assert event.watch_set_revision == watch_set.revision, "events say which watch set they were seen under"


async def _status_is(agent: Any, status: int) -> bool:
    return (await _management(agent, "/readyz"))[0] == status


async def test_what_was_detected_before_a_configuration_change_is_delivered_before_the_switch(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """A change waiting on an unavailable listener is delivered by the old pipeline (as the ADDED it was), not
    dropped with it and found again by the new one's relist (a RESYNC)."""
    async with start_agent(runtime.write_config(runtime.config())) as running:
        await running.wait_synced()
        runtime.listener.available = False
        await runtime.create("cm-pending", {"k": "v"})
        await eventually(lambda: runtime.listener.refused_while_down > 0, what="the change waiting for the listener")
        changed = runtime.config()
        changed["paused_modules"] = ["some-other-module"]  # any change restarts the pipeline
        runtime.write_config(changed)
        await eventually(lambda: running.agent.settings.paused_modules == ("some-other-module",), what="reconfigured")
        runtime.listener.available = True
        await runtime.listener.wait_for(lambda: bool(runtime.listener.of("cm-pending")))
        await running.wait_synced(sources=2)  # the new pipeline listed too
    assert [kind for kind, _ in runtime.listener.of("cm-pending")] == ["ADDED"]


async def test_a_configuration_change_while_the_listener_is_down_restarts_and_loses_nothing(
    runtime: Runtime, start_agent: Callable[..., Any]
) -> None:
    """The drain gives up while the listener stays down; the pipeline still restarts (its senders were cancelled
    exactly when their stop came — Python 3.11's wait_for swallowed that and the watcher hung), and the waiting
    change arrives from the new pipeline's relist."""
    document = runtime.config()
    document["delivery"] = {**document["delivery"], "drain_seconds": 0.5}
    async with start_agent(runtime.write_config(document)) as running:
        await running.wait_synced()
        runtime.listener.available = False
        await runtime.create("cm-stuck", {"k": "v"})
        await eventually(lambda: runtime.listener.refused_while_down > 0, what="the change waiting for the listener")
        runtime.write_config({**document, "paused_modules": ["some-other-module"]})
        await running.wait_synced(sources=2)  # restarted: the new pipeline listed
        runtime.listener.available = True
        await runtime.listener.wait_for(lambda: bool(runtime.listener.of("cm-stuck")))
    assert [kind for kind, _ in runtime.listener.of("cm-stuck")] == ["RESYNC"]
