"""Runtime certificates: delivered, renewed when due or after a CA rotation, honoured by the listener."""

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from certs import rotation, runtimes, stores
from clients import kube
from contract import events, wire
from devenv import landscape as landscape_mod
from devenv import net
from listener import server, settings
from pki import authority, identity, kubeconfigs, pki

from ..listener.conftest import make_event, post, wait_ready
from ..waiting import eventually
from .conftest import runtime_id_of

pytestmark = pytest.mark.integration


HOURLY = rotation.RotationSettings(certificate_lifetime=datetime.timedelta(hours=1))
"""One-hour certificates: short enough to tell a renewal, long enough not to be due within a test."""


async def _fresh_store(tmp_path: Path) -> stores.Store:
    store = stores.DirectoryStore(tmp_path / "ca")
    await store.write(authority.Authority.create("ca").to_files())
    return store


async def runtime_certificate(api: kube.ApiClient) -> pki.KeyPair:
    secret = await kube.request(
        api, "GET", kube.SECRETS.object_path(rotation.RUNTIME_SECRET_NAMESPACE, rotation.RUNTIME_SECRET_NAME)
    )
    return pki.KeyPair.from_pem(
        cert_pem=base64.b64decode(secret["data"]["tls.crt"]), key_pem=base64.b64decode(secret["data"]["tls.key"])
    )


async def test_rotation_delivers_then_renews_only_what_is_due(
    kcp_api: kube.ApiClient, skr_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """First pass writes every runtime's Secret; a second renews nothing; after a CA rotation all are re-issued."""
    store = await _fresh_store(tmp_path)
    settings_ = HOURLY
    told: list[str] = []
    first = await rotation.rotate_once(
        kcp=kcp_api, store=store, settings=settings_, progress=lambda report: told.append(report.progress())
    )
    assert sorted(first.certificates) == sorted(registered_runtimes) and not first.failures
    total = len(registered_runtimes)
    assert told[-1] == f"{total}/{total} runtimes checked: {total} certificate(s) and 0 kubeconfig(s) renewed, 0 failed"
    issued = await runtime_certificate(skr_api)
    second = await rotation.rotate_once(kcp=kcp_api, store=store, settings=settings_)
    assert second.certificates == []
    ca = authority.Authority.from_files(await store.read())
    ca.rotate(overlap=datetime.timedelta(hours=1))
    await store.write(ca.to_files())
    third = await rotation.rotate_once(kcp=kcp_api, store=store, settings=settings_)
    assert sorted(third.certificates) == sorted(registered_runtimes)
    renewed = await runtime_certificate(skr_api)
    assert ca.is_current_issuer(renewed.certificate) and not ca.is_current_issuer(issued.certificate)


async def test_listener_accepts_a_renewed_certificate_and_refuses_an_expired_one(
    landscape: landscape_mod.Landscape, tmp_path: Path
) -> None:
    """An expired certificate fails the handshake; a renewed one works, also across a CA rotation."""
    ca = authority.Authority.create("ca")
    store = stores.DirectoryStore(tmp_path / "ca")
    await store.write(ca.to_files())
    serving = ca.issue_server(["127.0.0.1"], lifetime=datetime.timedelta(hours=1))
    (tmp_path / "srv.crt").write_bytes(serving.cert_pem)
    (tmp_path / "srv.key").write_bytes(serving.key_pem)
    config = settings.ListenerSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": 0,
            "management_port": 0,
            "modules": ["cloud-manager"],
            "tls": {"cert_file": tmp_path / "srv.crt", "key_file": tmp_path / "srv.key"},
            "trust": {
                "client_ca_file": store.directory / authority.BUNDLE,
                "crl_file": store.directory / authority.CRL,
                "reload_interval_seconds": 0.2,
            },
            "nats": {"servers": [landscape.nats.url], "credentials": landscape.nats.credentials("listener")},
            "default_runtime_modules": ["cloud-manager"],
        }
    )

    def context(pair: pki.KeyPair) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=ca.to_files()[authority.BUNDLE].decode())
        (tmp_path / "c.crt").write_bytes(pair.cert_pem)
        (tmp_path / "c.key").write_bytes(pair.key_pem)
        ctx.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
        return ctx

    async with server.serving(config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
        expired = pki.runtime_client_cert(
            ca.current, "skr-1", lifetime=datetime.timedelta(minutes=30), not_before=an_hour_ago
        )
        with pytest.raises(aiohttp.ClientError):
            await post(bound.events_url, context(expired), events.encode(make_event(uid="expired")))
        renewed = ca.issue_runtime("skr-1", lifetime=datetime.timedelta(hours=1))
        assert (await post(bound.events_url, context(renewed), events.encode(make_event(uid="renewed")))).status == 202

        ca.rotate(overlap=datetime.timedelta(hours=1))
        await store.write(ca.to_files())
        from_new_ca = ca.issue_runtime("skr-1", lifetime=datetime.timedelta(hours=1))
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            try:
                reply = await post(bound.events_url, context(from_new_ca), events.encode(make_event(uid="new-ca")))
                break
            except aiohttp.ClientError:
                assert asyncio.get_running_loop().time() < deadline, "new CA never trusted"
                await asyncio.sleep(0.2)
        assert reply.status == 202
        assert (await post(bound.events_url, context(renewed), events.encode(make_event(uid="old-ca")))).status == 202


async def test_the_rotation_loop_reports_passes_renewals_and_failures_as_metrics(
    kcp_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """What the rotation-failing and rotation-late alerts read: passes by outcome, the last good pass, renewals."""
    store = await _fresh_store(tmp_path)
    async with rotating(kcp_api, store, interval=3600) as metrics:
        sample = metrics.registry.get_sample_value
        await eventually(lambda: bool(sample("kyma_certs_rotation_passes_total", {"outcome": "ok"})), what="a pass")
    assert sample("kyma_certs_renewed_total", {"kind": "certificate"}) == len(registered_runtimes)
    assert sample("kyma_certs_rotation_runtimes") == len(registered_runtimes)
    assert (sample("kyma_certs_rotation_last_success_timestamp_seconds") or 0) > 0
    assert sample("kyma_certs_rotation_runtime_failures_total") == 0
    assert (sample("kyma_certs_rotation_last_pass_timestamp_seconds") or 0) > 0
    expiry = sample("kyma_certs_certificate_earliest_expiry_timestamp_seconds") or 0
    assert 0 < expiry - datetime.datetime.now(datetime.UTC).timestamp() <= 3600, "the one-hour certificates issued"


@contextlib.asynccontextmanager
async def rotating(
    kcp: kube.ApiClient, store: stores.Store, *, interval: float
) -> AsyncIterator[rotation.RotationMetrics]:
    """The rotation loop running (one-hour certificates), and its metrics; stopped and awaited on exit."""
    metrics = rotation.RotationMetrics(CollectorRegistry())
    stop = asyncio.Event()
    loop = asyncio.create_task(
        rotation.run(
            kcp=kcp,
            store=store,
            settings=HOURLY,
            interval=interval,
            stop=stop,
            metrics=metrics,
        )
    )
    try:
        yield metrics
    finally:
        stop.set()
        await loop


async def _master_secret(kcp: kube.ApiClient, *, name: str, runtime: str, kubeconfig: dict[str, Any]) -> None:
    """A master kubeconfig Secret as infrastructure-manager keeps it: any name, found by its kyma-name label."""
    await stores.write_secret(
        kcp,
        namespace=wire.KCP_NAMESPACE,
        name=name,
        data={wire.KUBECONFIG_KEY: kubeconfigs.dump(kubeconfig).encode()},
        labels={wire.KYMA_NAME_LABEL: runtime, wire.RUNTIME_ID_LABEL: runtime_id_of(runtime)},
    )


async def test_a_master_kubeconfig_rotated_by_another_component_is_used_without_a_restart(
    landscape: landscape_mod.Landscape, kcp_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """Seed 002: the Secret is rewritten by someone else; the running loop fails on the old one, then uses the new."""
    store = await _fresh_store(tmp_path)
    stale = kubeconfigs.build(
        cluster="gone",
        server=f"https://127.0.0.1:{net.free_port()}",
        ca_pem=pki.create_ca("gone").cert_pem,
        user="x",
        token="revoked",
    )
    secret = "kubeconfig-7f3c-runtime-id"  # not kubeconfig-<kyma name>: the label finds it
    await _master_secret(kcp_api, name=secret, runtime="skr-rotated", kubeconfig=stale)
    try:
        async with rotating(kcp_api, store, interval=0.2) as metrics:
            sample = metrics.registry.get_sample_value
            await eventually(
                lambda: bool(sample("kyma_certs_rotation_passes_total", {"outcome": "error"})), what="failing"
            )
            assert not sample("kyma_certs_rotation_passes_total", {"outcome": "ok"})
            fresh = next(iter(landscape.runtimes.values())).admin_kubeconfig()
            await _master_secret(kcp_api, name=secret, runtime="skr-rotated", kubeconfig=fresh)
            await eventually(
                lambda: bool(sample("kyma_certs_rotation_passes_total", {"outcome": "ok"})), what="recovered"
            )
            assert (sample("kyma_certs_rotation_last_pass_timestamp_seconds") or 0) > 0, "failing passes count too"
    finally:
        await kube.request(kcp_api, "DELETE", kube.SECRETS.object_path(wire.KCP_NAMESPACE, secret))
    assert (sample("kyma_certs_rotation_last_success_timestamp_seconds") or 0) > 0


async def test_the_runtime_id_can_be_the_certificate_identity_and_switching_to_it_renews(
    kcp_api: kube.ApiClient, skr_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """Upstream lifecycle-manager's identity (the Kyma's kyma-project.io/runtime-id) or ours (the Kyma name); a
    master kubeconfig Secret whose own runtime-id label disagrees with its Kyma fails that runtime."""
    store = await _fresh_store(tmp_path)
    by_name = HOURLY
    await rotation.rotate_once(kcp=kcp_api, store=store, settings=by_name)
    skr = identity.runtime_of((await runtime_certificate(skr_api)).certificate)
    assert skr in registered_runtimes
    by_id = dataclasses.replace(by_name, identity=runtimes.Identity.RUNTIME_ID)
    switched = await rotation.rotate_once(kcp=kcp_api, store=store, settings=by_id)
    assert sorted(switched.certificates) == sorted(registered_runtimes), "a changed identity renews every certificate"
    assert identity.runtime_of((await runtime_certificate(skr_api)).certificate) == runtime_id_of(skr)
    again = await rotation.rotate_once(kcp=kcp_api, store=store, settings=by_id)
    assert again.certificates == [] and not again.failures
    stale = wire.master_kubeconfig_secret(skr)
    await kube.merge_patch(
        kcp_api,
        kube.SECRETS.object_path(wire.KCP_NAMESPACE, stale),
        {"metadata": {"labels": {wire.RUNTIME_ID_LABEL: "id-of-another-runtime"}}},
    )
    disagreeing = await rotation.rotate_once(kcp=kcp_api, store=store, settings=by_id)
    assert list(disagreeing.failures) == [skr] and "id-of-another-runtime" in disagreeing.failures[skr]


async def test_two_master_secrets_for_one_runtime_fail_that_runtime_only(
    landscape: landscape_mod.Landscape, kcp_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """Which of two kubeconfigs is the runtime's is not ours to guess: that runtime fails, the others rotate."""
    store = await _fresh_store(tmp_path)
    kubeconfig = next(iter(landscape.runtimes.values())).admin_kubeconfig()
    twins = ["kubeconfig-twin-a", "kubeconfig-twin-b"]
    for name in twins:
        await _master_secret(kcp_api, name=name, runtime="skr-twin", kubeconfig=kubeconfig)
    try:
        report = await rotation.rotate_once(
            kcp=kcp_api,
            store=store,
            settings=HOURLY,
        )
    finally:
        for name in twins:
            await kube.request(kcp_api, "DELETE", kube.SECRETS.object_path(wire.KCP_NAMESPACE, name))
    assert list(report.failures) == ["skr-twin"] and "2 master kubeconfig Secrets" in report.failures["skr-twin"]
    assert sorted(report.certificates) == sorted(registered_runtimes)


async def test_an_unreadable_master_kubeconfig_fails_its_runtime_without_quoting_it(
    kcp_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """YAML errors quote the offending line; of a kubeconfig that line may be a token: only where it broke is told."""
    store = await _fresh_store(tmp_path)
    await stores.write_secret(
        kcp_api,
        namespace=wire.KCP_NAMESPACE,
        name="kubeconfig-broken",
        data={wire.KUBECONFIG_KEY: b"users:\n- token: SUPERSECRETTOKEN: : [\n"},
        labels={wire.KYMA_NAME_LABEL: "skr-broken"},
    )
    try:
        report = await rotation.rotate_once(
            kcp=kcp_api,
            store=store,
            settings=HOURLY,
        )
    finally:
        await kube.request(kcp_api, "DELETE", kube.SECRETS.object_path(wire.KCP_NAMESPACE, "kubeconfig-broken"))
    assert "valid YAML at line 2" in report.failures["skr-broken"]
    assert "SUPERSECRETTOKEN" not in json.dumps(dataclasses.asdict(report), default=str)


async def test_a_hanging_runtime_costs_its_own_slot_only(
    kcp_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """An apiserver that accepts connections and never answers fails its runtime after the per-runtime limit;
    the others are rotated meanwhile (bounded concurrency, not one after the other)."""

    done = asyncio.Event()
    handlers: list[asyncio.Task[None]] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]  # a handler always runs in a task
        await reader.read(1024)
        await done.wait()
        writer.close()

    hanging = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = hanging.sockets[0].getsockname()[1]
    silent = kubeconfigs.build(
        cluster="silent", server=f"https://127.0.0.1:{port}", ca_pem=pki.create_ca("x").cert_pem, user="x", token="x"
    )
    await _master_secret(kcp_api, name="kubeconfig-silent", runtime="skr-silent", kubeconfig=silent)
    try:
        settings_ = dataclasses.replace(HOURLY, concurrency=4, runtime_timeout_seconds=1.0)
        report = await rotation.rotate_once(kcp=kcp_api, store=await _fresh_store(tmp_path), settings=settings_)
    finally:
        done.set()
        hanging.close()
        await asyncio.gather(*handlers, return_exceptions=True)
        await kube.request(kcp_api, "DELETE", kube.SECRETS.object_path(wire.KCP_NAMESPACE, "kubeconfig-silent"))
    assert list(report.failures) == ["skr-silent"] and "within 1s" in report.failures["skr-silent"]
    assert sorted(report.certificates) == sorted(registered_runtimes)


async def test_trust_and_the_listener_certificate_are_kept_and_a_revoked_runtime_is_reissued(
    kcp_api: kube.ApiClient, skr_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """The pass publishes the listener's trust bundle and CRL and its serving certificate, rewriting nothing
    unchanged; a revoked runtime certificate is replaced, and its serial stays in the republished CRL."""
    store = await _fresh_store(tmp_path)
    trust, tls = ("kcp-system", "kyma-sync-trust-test"), ("kcp-system", "kyma-listener-tls-test")
    keeping = dataclasses.replace(HOURLY, trust_secret=trust, listener_tls=(*tls, ("listener.kcp.example.com",)))
    first = await rotation.rotate_once(kcp=kcp_api, store=store, settings=keeping)
    assert first.trust_published and first.listener_certificate
    versions = [await _version(kcp_api, *trust), await _version(kcp_api, *tls)]
    second = await rotation.rotate_once(kcp=kcp_api, store=store, settings=keeping)
    assert not second.trust_published and not second.listener_certificate and not second.certificates
    assert [await _version(kcp_api, *trust), await _version(kcp_api, *tls)] == versions
    revoked = await runtime_certificate(skr_api)
    ca = authority.Authority.from_files(await store.read())
    ca.revoke(revoked.certificate)
    await store.write(ca.to_files())
    third = await rotation.rotate_once(kcp=kcp_api, store=store, settings=keeping)
    assert third.trust_published
    skr = identity.runtime_of(revoked.certificate)
    assert skr in third.certificates, "a revoked certificate is replaced"
    published = await kube.request(kcp_api, "GET", kube.SECRETS.object_path(*trust))
    crl_pems = base64.b64decode(published["data"]["crl.pem"])
    serials = {entry.serial_number for crl in _crls(crl_pems) for entry in crl}
    assert revoked.certificate.serial_number in serials, "the revocation survives the re-issue"
    renewed = await runtime_certificate(skr_api)
    assert renewed.certificate.serial_number not in serials


async def _version(api: kube.ApiClient, namespace: str, name: str) -> str:
    return str(
        (await kube.request(api, "GET", kube.SECRETS.object_path(namespace, name)))["metadata"]["resourceVersion"]
    )


def _crls(pems: bytes) -> list[x509.CertificateRevocationList]:
    marker = b"-----BEGIN X509 CRL-----"
    return [x509.load_pem_x509_crl(marker + chunk) for chunk in pems.split(marker) if chunk.strip()]


async def test_a_trust_secret_out_of_reach_fails_alone(
    kcp_api: kube.ApiClient, registered_runtimes: list[str], tmp_path: Path
) -> None:
    """Publishing the listener's trust into a namespace that does not exist is a failure of its own: every
    runtime's certificate is still renewed in that pass."""
    unreachable = dataclasses.replace(HOURLY, trust_secret=("no-such-namespace", "kyma-sync-trust"))
    report = await rotation.rotate_once(kcp=kcp_api, store=await _fresh_store(tmp_path), settings=unreachable)
    assert list(report.failures) == ["trust:no-such-namespace/kyma-sync-trust"]
    assert sorted(report.certificates) == sorted(registered_runtimes)
