"""The watcher's client TLS context follows certificate renewals on disk; its connection to the listener is kept
for as long as it is configured to be."""

import datetime
import os
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from contract import events, ids
from pki import pki
from watcher import config, delivery, metrics

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
