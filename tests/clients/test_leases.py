"""Leases as candidates see them: expiry timed on the candidate's own clock, never by the holder's renewTime."""

import asyncio
import datetime
import logging
import uuid

import pytest

from clients import kube, leases

pytestmark = pytest.mark.integration


async def _held_by_a_skewed_clock(api: kube.ApiClient, name: str, *, duration: int) -> None:
    """A lease renewed by a holder whose clock is an hour behind: its renewTime is an hour old when written."""
    behind = leases.micro_time(leases.now() - datetime.timedelta(hours=1))
    await kube.request(
        api,
        "POST",
        leases.LEASES.path("default"),
        body={
            "apiVersion": leases.LEASES.api_version,
            "kind": "Lease",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"holderIdentity": "skewed", "leaseDurationSeconds": duration, "renewTime": behind},
        },
    )


async def test_a_live_holder_whose_clock_is_behind_keeps_its_lease(skr_api: kube.ApiClient) -> None:
    """Two watcher pods on nodes whose clocks differ by an hour: the follower must not take the leader's lease for
    its old-looking renewTime (two senders at once); it takes it only once the lease went unchanged for its
    duration as timed on the follower's own clock."""
    name = f"lease-{uuid.uuid4().hex[:6]}"
    await _held_by_a_skewed_clock(skr_api, name, duration=2)
    follower = leases.Lease(skr_api, "default", name, identity="follower", duration_seconds=2)
    try:
        assert not await follower.try_acquire(), "a lease just seen changing is held, whatever its renewTime says"
        await asyncio.sleep(2.5)
        assert await follower.try_acquire(), "unchanged for its duration on our clock: the holder is gone"
    finally:
        await kube.delete(skr_api, leases.LEASES.object_path("default", name))


async def test_a_lease_whose_namespace_does_not_exist_is_an_error_said_once(
    skr_api: kube.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A reconciler replica configured with a Lease namespace that does not exist held no shard, stayed ready and
    said nothing. Creating its lease there is an error, logged once however often it is tried, until it works."""
    namespace = f"no-such-{uuid.uuid4().hex[:6]}"
    lease = leases.Lease(skr_api, namespace, "candidate", identity="me", duration_seconds=10)
    caplog.set_level(logging.ERROR, logger="clients.leases")
    assert not await lease.take(None)
    assert not await lease.take(None)
    said = [r for r in caplog.records if r.name == "clients.leases" and r.levelno == logging.ERROR]
    assert [(r.getMessage(), getattr(r, "namespace", None)) for r in said] == [
        ("cannot create the lease: its namespace does not exist", namespace)
    ]
    assert lease.namespace_missing
    await kube.ensure_namespace(skr_api, namespace)
    try:
        assert await lease.take(None)
        assert not lease.namespace_missing
    finally:
        await kube.delete(skr_api, f"/api/v1/namespaces/{namespace}")
