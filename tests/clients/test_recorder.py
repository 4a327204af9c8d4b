"""Kubernetes Events within their budgets, written into a real apiserver."""

import uuid
from typing import Any

import pytest

from clients import kube, recorder

from ..clock import Clock

pytestmark = pytest.mark.integration


async def _configmap(api: kube.ApiClient) -> dict[str, Any]:
    created = await kube.request(
        api,
        "POST",
        kube.CONFIGMAPS.path("default"),
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"involved-{uuid.uuid4().hex[:8]}"}},
    )
    return {"apiVersion": "v1", "kind": "ConfigMap"} | created


async def _events_about(api: kube.ApiClient, involved: dict[str, Any]) -> int:
    listing = await kube.request(
        api,
        "GET",
        kube.EVENTS.path("default"),
        query=[("fieldSelector", f"involvedObject.uid={involved['metadata']['uid']}")],
    )
    return len(listing["items"])


async def test_an_object_gets_a_burst_then_one_every_five_minutes(skr_api: kube.ApiClient) -> None:
    clock, dropped = Clock(5000.0), list[str]()
    events = recorder.EventRecorder(
        skr_api, component="test", per_second=1000, burst=1000, dropped=dropped.append, clock=clock
    )
    noisy, quiet = await _configmap(skr_api), await _configmap(skr_api)
    written = [await events.record(noisy, type_="Normal", reason="Updated", message=f"n {n}") for n in range(30)]
    assert written == [True] * recorder.PER_OBJECT_BURST + [False] * (30 - recorder.PER_OBJECT_BURST)
    assert dropped == ["Updated"] * (30 - recorder.PER_OBJECT_BURST)
    assert await events.record(quiet, type_="Warning", reason="Conflict", message="its own budget")
    clock.now += recorder.PER_OBJECT_EVERY_SECONDS
    assert await events.record(noisy, type_="Normal", reason="Updated", message="five minutes later")
    assert not await events.record(noisy, type_="Normal", reason="Updated", message="but only one")
    assert await _events_about(skr_api, noisy) == recorder.PER_OBJECT_BURST + 1
    assert await _events_about(skr_api, quiet) == 1


async def test_the_process_budget_bounds_events_about_many_objects(skr_api: kube.ApiClient) -> None:
    clock, dropped = Clock(5000.0), list[str]()
    events = recorder.EventRecorder(
        skr_api, component="test", per_second=1, burst=3, dropped=dropped.append, clock=clock
    )
    objects = [await _configmap(skr_api) for _ in range(5)]
    written = [await events.record(o, type_="Normal", reason="Created", message="x") for o in objects]
    assert written == [True, True, True, False, False]
    clock.now += 1
    assert await events.record(objects[4], type_="Normal", reason="Created", message="a second later")
    assert [await _events_about(skr_api, o) for o in objects] == [1, 1, 1, 0, 1]
    assert dropped == ["Created", "Created"]


async def test_a_storm_of_normal_events_leaves_the_warnings_their_budget(skr_api: kube.ApiClient) -> None:
    """Repairs use up the Normal budgets (the object's and the process'); a refusal still gets its Warning, and
    Events dropped for one budget take nothing from the other."""
    clock, dropped = Clock(5000.0), list[str]()
    events = recorder.EventRecorder(
        skr_api, component="test", per_second=1, burst=recorder.PER_OBJECT_BURST, dropped=dropped.append, clock=clock
    )
    involved, other = await _configmap(skr_api), await _configmap(skr_api)
    for n in range(30):
        await events.record(involved, type_="Normal", reason="Updated", message=f"repair {n}")
    assert not await events.record(other, type_="Normal", reason="Updated", message="the process' budget is spent")
    assert await events.record(involved, type_="Warning", reason="Conflict", message="still heard")
    assert await events.record(other, type_="Warning", reason="Forbidden", message="still heard")
    clock.now += 1
    assert await events.record(other, type_="Normal", reason="Updated", message="its object's budget was untouched")
    assert dropped == ["Updated"] * (30 - recorder.PER_OBJECT_BURST + 1)
