"""The watcher's client TLS context follows certificate renewals on disk; its connection to the listener is kept
for as long as it is configured to be, and one the listener closes under a request is no failure."""

import asyncio
import datetime
import logging
import os
import time
from pathlib import Path
from typing import Literal

import pytest
from prometheus_client import CollectorRegistry

from contract import events, ids
from pki import pki
from watcher import config, delivery, metrics

from ..factories import configmap_event
from .conftest import Runtime


def write(tmp_path: Path, pair: pki.KeyPair, ca: pki.KeyPair, *, mtime: int) -> None:
    for name, data in {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": ca.cert_pem}.items():
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, ns=(mtime, mtime))


def test_renewed_certificate_files_give_a_new_context(tmp_path: Path) -> None:
    """Unchanged files reuse the context; renewed files (as kubelet writes a Secret) rebuild it."""
    ca = pki.create_ca("ca")
    write(tmp_path, pki.runtime_client_cert(ca, "skr-1"), ca, mtime=1_000_000_000)
    tls = delivery.ClientTls(
        config.TlsSettings(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key", ca_file=tmp_path / "ca.crt")
    )
    first, new = tls.context()
    assert new
    assert tls.context() == (first, False)
    write(tmp_path, pki.runtime_client_cert(ca, "skr-1", lifetime=datetime.timedelta(days=1)), ca, mtime=2_000_000_000)
    second, renewed = tls.context()
    assert renewed and second is not first


@pytest.mark.integration
@pytest.mark.parametrize(("keepalive", "connections"), [(None, 2), (60, 1)], ids=["default", "60s"])
async def test_the_listener_connection_is_kept_for_keepalive_seconds(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, keepalive: float | None, connections: int
) -> None:
    """Two heartbeats 16 s apart go out on one connection when keepalive_seconds is 60, on two with the default
    (aiohttp's 15 s). aiohttp's clock is moved on rather than slept on."""
    skipped = 0.0
    monkeypatch.setattr("aiohttp.connector.monotonic", lambda: time.monotonic() + skipped)
    settings = {} if keepalive is None else {"keepalive_seconds": keepalive}
    sender = delivery.Delivery(
        config.WatcherConfig.model_validate(runtime.config(delivery=settings)),
        metrics.WatcherMetrics(CollectorRegistry()),
    )
    beat = events.Heartbeat(runtime=ids.runtime_id("skr-1"), sent_at=datetime.datetime.now(datetime.UTC), queue_depth=0)
    try:
        assert await sender.heartbeat(beat)
        skipped += 16
        assert await sender.heartbeat(beat)
    finally:
        await sender.close()
    assert len(set(runtime.listener.heartbeat_peers)) == connections, runtime.listener.heartbeat_peers


@pytest.mark.integration
@pytest.mark.parametrize("closing", ["close", "reset"])
async def test_a_kept_alive_connection_the_listener_closes_under_an_event_is_not_a_failure(
    runtime: Runtime, caplog: pytest.LogCaptureFixture, closing: Literal["close", "reset"]
) -> None:
    """The listener closes a kept-alive connection just as the next event goes out on it (its idle time ran out,
    or an ingress recycled it): the event is sent again at once on a new connection. Not a retry after backoff,
    not a warning, not a fail-over to the other listener; without this every such close cost a backoff pause."""
    runtime.listener.closes_reused = closing
    settings = runtime.config()
    settings["listeners"].append({"url": "https://127.0.0.1:9"})  # the other listener: never to be tried here
    registry = CollectorRegistry()
    sender = delivery.Delivery(config.WatcherConfig.model_validate(settings), metrics.WatcherMetrics(registry))
    stop = asyncio.Event()
    first, second = configmap_event("kyma-sync"), configmap_event("kyma-sync")
    try:
        for event in (first, second):
            outcome = await sender.deliver(event, events.encode(event), stop=stop, superseded=lambda: False)
            assert outcome == delivery.Outcome.DELIVERED
    finally:
        await sender.close()
    assert runtime.listener.closed_reused == 1, "the second event went out on the first one's connection"
    assert [e.id for e in runtime.listener.received] == [first.id, second.id]
    assert registry.get_sample_value("kyma_watcher_delivery_retries_total") == 0
    assert registry.get_sample_value("kyma_watcher_delivery_resent_total") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "watcher.delivery"]
