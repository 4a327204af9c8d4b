"""Serving the listener: TLS context, both HTTP sites, certificate reloads, graceful drain."""

import asyncio
import contextlib
import dataclasses
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from clients import informer, kube
from contract import wire
from kit import aio, ratelimit
from listener import app, identities, metrics, publisher, settings, trust
from observability import endpoints
from observability import metrics as observability_metrics

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Bound:
    """Where a running listener can be reached."""

    events_url: str
    management_url: str


def server_ssl_context(tls: settings.ServerTlsSettings, trust_config: settings.TrustSettings) -> ssl.SSLContext:
    """The event port's TLS: client certificates required (the runtime's identity), TLS 1.2 or later, no tickets."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(tls.cert_file, tls.key_file)
    context.load_verify_locations(cafile=trust_config.client_ca_file)
    # No session tickets, TLS 1.3 (num_tickets) nor 1.2 (OP_NO_TICKET): watchers connect through asyncio, which
    # offers a client no way to resume a session, so a ticket is never used, and OpenSSL 3.0 makes each one by
    # copying the session through DER, decoding the client's certificate again: 19 % of a listener's CPU where
    # every event comes on a new connection (py-spy). Both are needed: OP_NO_TICKET alone makes TLS 1.3 send
    # tickets kept in the server's cache. (A TLS 1.2 client can still resume by session id: CPython keeps
    # OpenSSL's server cache on.)
    context.num_tickets = 0
    context.options |= ssl.OP_NO_TICKET
    return context


def _load_trust(config: settings.TrustSettings) -> trust.TrustStore:
    return trust.TrustStore.load(ca_file=config.client_ca_file, crl_file=config.crl_file)


def _mtimes(paths: list[Path]) -> tuple[float, ...]:
    return tuple(path.stat().st_mtime_ns if path.exists() else 0 for path in paths)


async def _reload_files(
    *,
    config: settings.ListenerSettings,
    state: app.ListenerState,
    ssl_context: ssl.SSLContext | None,
    stop: asyncio.Event,
) -> None:
    """Pick up renewed certificates, CA bundles and CRLs without a restart."""
    watched = [config.trust.client_ca_file] + ([config.trust.crl_file] if config.trust.crl_file else [])
    if config.tls is not None:
        watched += [config.tls.cert_file, config.tls.key_file]
    seen = _mtimes(watched)
    while not await aio.sleep_unless(stop, config.trust.reload_interval_seconds):
        current = _mtimes(watched)
        if current == seen:
            continue
        try:
            state.trust.replace(_load_trust(config.trust))
            if ssl_context is not None and config.tls is not None:
                ssl_context.load_cert_chain(config.tls.cert_file, config.tls.key_file)
                ssl_context.load_verify_locations(cafile=config.trust.client_ca_file)
        except (OSError, ValueError, ssl.SSLError) as exc:
            log.error("reloading certificates failed; keeping the previous ones", extra={"error": str(exc)})
            continue
        seen = current
        log.info("reloaded certificates, CA bundle and CRL")


async def _drain(state: app.ListenerState, *, grace: float) -> None:
    """Refuse new requests (503, so watchers retry elsewhere) and let those in flight finish.

    aiohttp's own shutdown stops reading request bodies, so a request still uploading would be
    cut off; draining happens before it, while the sockets are still fully served.
    """
    state.draining = True
    if state.in_flight:
        await aio.sleep_unless(state.idle, grace)
    if state.in_flight:
        log.warning("grace period over, cutting off requests", extra={"in_flight": state.in_flight})


def _url(runner: web.AppRunner, scheme: str) -> str:
    host, port = runner.addresses[0][:2]
    return f"{scheme}://{host}:{port}"


@contextlib.asynccontextmanager
async def serving(
    config: settings.ListenerSettings, *, registry: CollectorRegistry | None = None
) -> AsyncIterator[Bound]:
    """Run the listener for the duration of the ``async with``; on exit drain and stop."""
    async with contextlib.AsyncExitStack() as stack:
        mapping = await stack.enter_async_context(_identities(config.identity))
        yield await stack.enter_async_context(_serving(config, mapping, registry=registry))


@contextlib.asynccontextmanager
async def _identities(config: settings.IdentitySettings) -> AsyncIterator[identities.Identities]:
    """The certificate-identity mapping; in runtime-id mode with its Kyma cache running."""
    if config.source == "kyma-name":
        yield identities.ByKymaName()
        return
    async with await kube.client_from(config.kcp_kubeconfig) as kcp:
        kymas = informer.Informer(
            kcp, kube.KYMAS, namespace=config.kyma_namespace, label_selector=wire.RUNTIME_ID_LABEL
        )
        mapping = identities.ByRuntimeId(kymas)
        stop = asyncio.Event()
        following = asyncio.create_task(kymas.run(stop=stop), name="listener-kymas")
        try:
            yield mapping
        finally:
            stop.set()
            await following


@contextlib.asynccontextmanager
async def _serving(
    config: settings.ListenerSettings, mapping: identities.Identities, *, registry: CollectorRegistry | None
) -> AsyncIterator[Bound]:
    ssl_context = server_ssl_context(config.tls, config.trust) if config.tls else None
    state = app.ListenerState(
        identities=mapping,
        settings=config,
        trust=trust.CachedTrust(_load_trust(config.trust)),
        limiter=ratelimit.RateLimiter(rate=config.rate_limit.events_per_second, burst=config.rate_limit.burst),
        metrics=metrics.ListenerMetrics(registry or observability_metrics.component_registry()),
        publisher=publisher.JetStreamPublisher(config.nats),
    )
    events_runner = web.AppRunner(
        app.build_event_app(state),
        shutdown_timeout=config.shutdown_grace_seconds,
        keepalive_timeout=config.keepalive_seconds,
        access_log=None,
    )
    management_runner = web.AppRunner(
        endpoints.management_app(state.metrics.registry, lambda: app.readiness(state)), access_log=None
    )
    await events_runner.setup()
    events_server = events_runner.server
    assert events_server is not None
    state.metrics.connections.set_function(lambda: len(events_server.connections))
    await management_runner.setup()
    stop_reloading = asyncio.Event()
    reloading = asyncio.create_task(
        _reload_files(config=config, state=state, ssl_context=ssl_context, stop=stop_reloading),
        name="listener-reload",
    )
    try:
        await web.TCPSite(events_runner, config.host, config.port, ssl_context=ssl_context, reuse_port=True).start()
        await web.TCPSite(management_runner, config.host, config.management_port).start()
        bound = Bound(
            events_url=_url(events_runner, "https" if ssl_context else "http"),
            management_url=_url(management_runner, "http"),
        )
        log.info("listener serving", extra={"events": bound.events_url, "management": bound.management_url})
        yield bound
    finally:
        await _drain(state, grace=config.shutdown_grace_seconds)
        stop_reloading.set()
        await reloading
        await events_runner.cleanup()
        await management_runner.cleanup()
        log.info("listener stopped")


async def run(config: settings.ListenerSettings, *, stop: asyncio.Event) -> None:
    async with serving(config):
        await stop.wait()
