"""The listener against a real NATS JetStream: what gets in, what is refused, and why."""

import asyncio
import datetime
import functools
import gzip
import hashlib
import json
import ssl
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pydantic
import pytest
from cryptography import x509
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from clients import bus, kube
from contract import cloudevents, events, ids, wire
from devenv import landscape as landscape_mod
from devenv import nats as nats_mod
from listener import server
from pki import kubeconfigs, pki
from reconciler import crds

from ..conftest import ARCHIVE, connect_raw
from ..waiting import eventually
from .conftest import ConfigFactory, Pki, make_event, post, wait_ready

pytestmark = pytest.mark.integration

STREAM = bus.StreamSettings().name


async def stored_copies(nats_client: Nats, event: events.ChangeEvent) -> int:
    """How many messages of the stream carry this event's id (tests share the stream)."""
    consumer = await nats_client.jetstream().pull_subscribe(event.subject, stream=STREAM)
    copies = 0
    try:
        while True:
            try:
                batch = await consumer.fetch(256, timeout=0.5)
            except TimeoutError:  # nats-py also raises a bare one when the 408 beats its deadline
                return copies
            copies += sum(1 for m in batch if (m.headers or {}).get(bus.MSG_ID_HEADER) == event.id)
    finally:
        await consumer.unsubscribe()


async def test_event_posted_three_times_is_stored_once(
    listener: server.Bound, runtime_pki: Pki, nats_client: Nats
) -> None:
    """Retries of the same event all get 202; JetStream keeps one message."""
    event = make_event(uid="three-times")
    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
    replies = [await post(listener.events_url, context, events.encode(event)) for _ in range(3)]
    assert [r.status for r in replies] == [202, 202, 202]
    assert [r.body["duplicate"] for r in replies] == [False, True, True]
    assert {r.body["event_id"] for r in replies} == {event.id}
    assert await stored_copies(nats_client, event) == 1


async def test_certificate_of_another_runtime_is_forbidden(
    listener: server.Bound, runtime_pki: Pki, nats_client: Nats
) -> None:
    """skr-2's certificate cannot post skr-1's event: 403 and nothing published."""
    event = make_event("skr-1", uid="impersonation")
    reply = await post(
        listener.events_url, runtime_pki.client_context(runtime_pki.runtime_cert("skr-2")), events.encode(event)
    )
    assert reply.status == 403
    assert "runtime skr-2 cannot send events of runtime skr-1" in reply.body["error"]
    assert await stored_copies(nats_client, event) == 0


@pytest.mark.parametrize(
    "client_cert",
    [
        pytest.param(lambda p: pki.runtime_client_cert(pki.create_ca("rogue-ca"), "skr-1"), id="foreign-ca"),
        pytest.param(
            lambda p: p.runtime_cert(
                "skr-1",
                lifetime=datetime.timedelta(hours=1),
                not_before=datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2),
            ),
            id="expired",
        ),
        pytest.param(lambda p: None, id="no-certificate"),
    ],
)
async def test_untrusted_certificates_fail_the_handshake(
    listener: server.Bound, runtime_pki: Pki, nats_client: Nats, client_cert: object
) -> None:
    """Foreign-CA, expired or missing client certificates never get a request through."""
    event = make_event(uid=f"untrusted-{id(client_cert)}")
    context = runtime_pki.client_context(client_cert(runtime_pki))  # type: ignore[operator]
    with pytest.raises(aiohttp.ClientError):
        await post(listener.events_url, context, events.encode(event))
    assert await stored_copies(nats_client, event) == 0


async def test_revoked_certificate_is_refused_after_crl_reload(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki, nats_client: Nats
) -> None:
    """A certificate listed in a CRL published at run time gets 403 'revoked'; others still pass."""
    crl_file = runtime_pki.directory / "runtime.crl"
    crl_file.write_bytes(pki.crl_pem(pki.build_crl(runtime_pki.runtime_ca, [])))
    config = listener_config(landscape.nats)
    config = config.model_copy(update={"trust": config.trust.model_copy(update={"crl_file": crl_file})})
    doomed, healthy = runtime_pki.runtime_cert("skr-1"), runtime_pki.runtime_cert("skr-1")
    async with server.serving(config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        before = await post(
            bound.events_url, runtime_pki.client_context(doomed), events.encode(make_event(uid="rev-0"))
        )
        assert before.status == 202
        crl_file.write_bytes(pki.crl_pem(pki.build_crl(runtime_pki.runtime_ca, [doomed.certificate.serial_number])))
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            reply = await post(
                bound.events_url, runtime_pki.client_context(doomed), events.encode(make_event(uid="rev-1"))
            )
            if reply.status == 403 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)
        assert reply.status == 403 and "revoked" in reply.body["error"]
        still = await post(
            bound.events_url, runtime_pki.client_context(healthy), events.encode(make_event(uid="rev-2"))
        )
        assert still.status == 202


async def test_non_runtime_certificate_is_forbidden(listener: server.Bound, runtime_pki: Pki) -> None:
    """A certificate of the runtime CA that is not in the runtimes organisation is refused."""
    operator = pki.issue(runtime_pki.runtime_ca, common_name="skr-1", organizations=["operators"], client=True)
    reply = await post(listener.events_url, runtime_pki.client_context(operator), events.encode(make_event()))
    assert reply.status == 403 and "kyma-runtimes" in reply.body["error"]


@pytest.mark.parametrize(
    ("body", "content_type", "status", "complaint"),
    [
        pytest.param(b"{not json", "application/json", 400, "invalid change event", id="malformed-json"),
        pytest.param(b"", "application/json", 400, "invalid change event", id="empty"),
        pytest.param(b'{"event_id": "x"}', "application/json", 400, "runtime: Field required", id="schema-invalid"),
        pytest.param(b"x" * (events.MAX_EVENT_BYTES + 1), "application/json", 413, "over 1000000 bytes", id="oversize"),
        pytest.param(b"{}", "text/plain", 415, "application/json", id="wrong-content-type"),
    ],
)
async def test_bad_input_is_refused_with_a_clear_message(
    listener: server.Bound, runtime_pki: Pki, body: bytes, content_type: str, status: int, complaint: str
) -> None:
    """Malformed, invalid, oversize and non-JSON bodies get 4xx with the reason; nothing is published."""
    reply = await post(
        listener.events_url,
        runtime_pki.client_context(runtime_pki.runtime_cert("skr-1")),
        body,
        headers={"Content-Type": content_type},
    )
    assert reply.status == status
    assert complaint in reply.body["error"]


async def test_a_compressed_event_is_accepted_and_a_compressed_oversize_body_refused(
    listener: server.Bound, runtime_pki: Pki, nats_client: Nats
) -> None:
    """aiohttp unpacks a gzip body: Content-Length is the packed size, so the limit holds for what is unpacked
    (2 MB of spaces packs into a few KiB) and a valid packed event is published as sent, unpacked."""
    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
    event = make_event(uid="gzipped")
    packed = await post(
        listener.events_url, context, gzip.compress(events.encode(event)), headers={"Content-Encoding": "gzip"}
    )
    assert packed.status == 202, packed.body
    assert packed.body["event_id"] == event.id
    assert (await stored_message(nats_client, event)).data == events.encode(event)
    bomb = gzip.compress(b" " * 2 * events.MAX_EVENT_BYTES)
    assert len(bomb) < 10 * 1024
    refused = await post(listener.events_url, context, bomb, headers={"Content-Encoding": "gzip"})
    assert refused.status == 413, refused.body


async def test_oversize_chunked_body_is_cut_off(listener: server.Bound, runtime_pki: Pki) -> None:
    """A chunked body without Content-Length is refused once it passes the limit."""

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b" " * 64 * 1024

    reply = await post(listener.events_url, runtime_pki.client_context(runtime_pki.runtime_cert("skr-1")), endless())
    assert reply.status == 413


async def test_unknown_module_is_unprocessable(listener: server.Bound, runtime_pki: Pki, nats_client: Nats) -> None:
    """An event routed to a module the listener does not know gets 422."""
    event = make_event(module="no-such-module")
    reply = await post(
        listener.events_url, runtime_pki.client_context(runtime_pki.runtime_cert("skr-1")), events.encode(event)
    )
    assert reply.status == 422 and "no-such-module" in reply.body["error"]


async def test_runtime_over_its_rate_gets_429(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki
) -> None:
    """Past its burst a runtime gets 429 with Retry-After; another runtime is unaffected."""
    config = listener_config(landscape.nats, rate_limit={"events_per_second": 0.5, "burst": 2})
    async with server.serving(config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        noisy = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
        statuses = [
            (await post(bound.events_url, noisy, events.encode(make_event(uid=f"rl-{n}")))).status for n in range(3)
        ]
        limited = await post(bound.events_url, noisy, events.encode(make_event(uid="rl-x")))
        quiet = await post(
            bound.events_url,
            runtime_pki.client_context(runtime_pki.runtime_cert("skr-2")),
            events.encode(make_event("skr-2", uid="rl-q")),
        )
    assert statuses == [202, 202, 429]
    assert limited.status == 429 and int(limited.headers["Retry-After"]) >= 1
    assert quiet.status == 202


async def test_nats_outage_gives_503_then_deliveries_resume(
    private_nats: nats_mod.NatsServer, listener_config: ConfigFactory, runtime_pki: Pki
) -> None:
    """NATS stopped mid-run: 503 with Retry-After; restarted: the retried event is accepted and stored."""
    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
    async with server.serving(listener_config(private_nats), registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        assert (await post(bound.events_url, context, events.encode(make_event(uid="before")))).status == 202
        private_nats.stop()
        during = make_event(uid="during")
        reply = await post(bound.events_url, context, events.encode(during))
        assert reply.status == 503 and int(reply.headers["Retry-After"]) >= 1
        private_nats.start()
        private_nats.wait_ready()
        deadline = asyncio.get_running_loop().time() + 20
        while (reply := await post(bound.events_url, context, events.encode(during))).status == 503:
            assert asyncio.get_running_loop().time() < deadline, "deliveries did not resume"
            await asyncio.sleep(0.2)
        assert reply.status == 202
    connection = await connect_raw(private_nats)
    try:
        info = await connection.jetstream().stream_info(STREAM, subjects_filter=during.subject)
        assert info.state.messages == 2
    finally:
        await connection.close()


async def test_trace_context_is_carried_into_nats_headers(
    listener: server.Bound, runtime_pki: Pki, nats_client: Nats, spans: InMemorySpanExporter
) -> None:
    """The request's traceparent parents the listener span, whose context goes into the NATS message."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    event = make_event(uid="traced")
    reply = await post(
        listener.events_url,
        runtime_pki.client_context(runtime_pki.runtime_cert("skr-1")),
        events.encode(event),
        headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
    )
    assert reply.status == 202
    [span] = [s for s in spans.get_finished_spans() if s.name == "POST /v1/events"]
    assert span.context is not None and format(span.context.trace_id, "032x") == trace_id
    assert span.attributes is not None and span.attributes["kyma.runtime"] == "skr-1"
    message = await stored_message(nats_client, event)
    assert message.headers is not None and message.headers["traceparent"].split("-")[1] == trace_id


async def stored_message(nats_client: Nats, event: events.ChangeEvent) -> Msg:
    """The one message of the stream carrying this event's id."""
    consumer = await nats_client.jetstream().pull_subscribe(event.subject, stream=STREAM)
    try:
        messages = await consumer.fetch(256, timeout=1)
    finally:
        await consumer.unsubscribe()
    [message] = [m for m in messages if (m.headers or {}).get(bus.MSG_ID_HEADER) == event.id]
    return message


def _xfcc(pem: bytes, *, subject: str | None = None, digest: str | None = None) -> str:
    """An X-Forwarded-Client-Cert element as Envoy/Istio write it (Cert URL-encoded and quoted)."""
    der = ssl.PEM_cert_to_DER_cert(pem.decode())
    subject = subject or x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return (
        f"By=spiffe://cluster.local/ns/kcp-system/sa/kyma-listener;Hash={digest or hashlib.sha256(der).hexdigest()};"
        f'Cert="{urllib.parse.quote(pem.decode())}";Subject="{subject}";URI='
    )


async def test_an_xfcc_header_with_more_than_one_element_is_refused(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki
) -> None:
    """With APPEND_FORWARD a client's own element comes first and may carry another runtime's (public)
    certificate: only a header the proxy replaced whole (SANITIZE_SET) is believed."""
    victim = runtime_pki.runtime_cert("skr-2").cert_pem
    attacker = runtime_pki.runtime_cert("skr-1").cert_pem
    appended = _xfcc(victim) + "," + _xfcc(attacker)
    config = listener_config(landscape.nats, tls=None, proxy={"enabled": True, "trusted_proxies": ["127.0.0.1/32"]})
    async with server.serving(config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        body = events.encode(make_event("skr-2", uid="appended"))
        reply = await post(bound.events_url, None, body, headers={"X-Forwarded-Client-Cert": appended})
    assert reply.status == 403 and "SANITIZE_SET" in reply.body["error"]


@pytest.mark.parametrize(
    "style",
    [
        pytest.param("nginx", id="nginx-escaped-pem"),
        pytest.param("envoy", id="envoy-xfcc"),
    ],
)
async def test_proxy_mode_trusts_forwarded_certificates_only_from_trusted_proxies(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki, style: str
) -> None:
    """Behind an ingress the forwarded certificate counts only from a trusted proxy, in nginx's and Envoy's forms."""
    pem = runtime_pki.runtime_cert("skr-1").cert_pem
    other = runtime_pki.runtime_cert("skr-2").cert_pem
    forwarded = {
        "nginx": urllib.parse.quote(pem.decode()),
        "envoy": _xfcc(pem),
    }[style]
    header = "X-Forwarded-Client-Cert"
    body = events.encode(make_event(uid=f"proxied-{style}"))
    trusted = listener_config(landscape.nats, tls=None, proxy={"enabled": True, "trusted_proxies": ["127.0.0.1/32"]})
    async with server.serving(trusted, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        assert bound.events_url.startswith("http://")
        accepted = await post(bound.events_url, None, body, headers={header: forwarded})
        missing = await post(bound.events_url, None, body)
        garbage = await post(bound.events_url, None, body, headers={header: "garbage"})
        wrong_hash = await post(bound.events_url, None, body, headers={header: _xfcc(pem, digest="ab" * 32)})
        wrong_subject = await post(
            bound.events_url, None, body, headers={header: _xfcc(other, subject="CN=skr-1,O=kyma-runtimes")}
        )
    assert accepted.status == 202
    assert missing.status == 401
    assert garbage.status == 403 and wrong_hash.status == 403 and wrong_subject.status == 403
    untrusted = listener_config(landscape.nats, tls=None, proxy={"enabled": True, "trusted_proxies": ["10.1.2.3/32"]})
    async with server.serving(untrusted, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        spoofed = await post(bound.events_url, None, body, headers={header: forwarded})
    assert spoofed.status == 403 and "trusted proxy" in spoofed.body["error"]


@pytest.mark.parametrize("network", ["10.0.0.0/8", "0.0.0.0/0", "192.168.0.0/16", "fd00::/8"])
def test_wide_trusted_proxy_networks_are_refused(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, network: str
) -> None:
    """A trusted network wider than /24 (IPv4) or /64 (IPv6) would let anyone in it claim any runtime."""
    with pytest.raises(pydantic.ValidationError, match="narrow"):
        listener_config(landscape.nats, tls=None, proxy={"enabled": True, "trusted_proxies": [network]})


async def test_shutdown_drains_in_flight_requests(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki, nats_client: Nats
) -> None:
    """A request in flight when shutdown begins still completes with 202."""
    event = make_event(uid="in-flight")
    payload = events.encode(event)
    body_started = asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        yield payload[:10]
        body_started.set()
        await asyncio.sleep(1.0)
        yield payload[10:]

    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
    async with server.serving(listener_config(landscape.nats), registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        in_flight = asyncio.create_task(post(bound.events_url, context, slow_body()))
        await body_started.wait()
        await asyncio.sleep(0.2)
    reply = await in_flight
    assert reply.status == 202
    assert await stored_copies(nats_client, event) == 1


async def test_two_listeners_side_by_side_store_an_event_once(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki, nats_client: Nats
) -> None:
    """Horizontal scaling: the same event through two listener processes is stored once."""
    event = make_event(uid="two-listeners")
    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
    async with (
        server.serving(listener_config(landscape.nats), registry=CollectorRegistry()) as first,
        server.serving(listener_config(landscape.nats), registry=CollectorRegistry()) as second,
    ):
        await wait_ready(first)
        await wait_ready(second)
        replies = [await post(b.events_url, context, events.encode(event)) for b in (first, second)]
    assert [r.status for r in replies] == [202, 202]
    assert [r.body["duplicate"] for r in replies] == [False, True]
    assert await stored_copies(nats_client, event) == 1


async def test_metrics_count_outcomes(listener: server.Bound, runtime_pki: Pki) -> None:
    """/metrics reports accepted and refused requests by outcome."""
    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
    await post(listener.events_url, context, events.encode(make_event(uid="metric")))
    await post(listener.events_url, context, b"{bad")
    async with aiohttp.ClientSession() as session, session.get(f"{listener.management_url}/metrics") as response:
        text = await response.text()
    assert 'kyma_listener_requests_total{outcome="accepted"} 1.0' in text
    assert 'kyma_listener_requests_total{outcome="invalid"} 1.0' in text


async def test_a_full_stream_is_backpressure_503_with_retry_after_then_recovers(
    private_nats: nats_mod.NatsServer, listener_config: ConfigFactory, runtime_pki: Pki
) -> None:
    """At the stream's byte limit the listener answers 503 + Retry-After (counted); once consumers catch up, 202 again."""
    admin = await bus.Bus.connect([private_nats.url], name="admin", credentials=private_nats.credentials())
    try:
        await admin.ensure_stream(bus.EVENTS.model_copy(update={"max_bytes": 8192}))
    finally:
        await admin.close()
    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
    registry = CollectorRegistry()
    async with server.serving(listener_config(private_nats), registry=registry) as bound:
        await wait_ready(bound)
        replies = [await post(bound.events_url, context, events.encode(make_event(uid=f"fill-{n}"))) for n in range(40)]
        statuses = [r.status for r in replies]
        assert 202 in statuses and 503 in statuses
        full = next(r for r in replies if r.status == 503)
        assert int(full.headers["Retry-After"]) >= 1 and "full" in full.body["error"]
        assert (registry.get_sample_value("kyma_listener_requests_total", {"outcome": "stream_full"}) or 0) >= 1
        raw = await connect_raw(private_nats)
        try:
            await raw.jetstream().delete_consumer(bus.EVENTS.name, ARCHIVE)  # the only interest: its events go
        finally:
            await raw.close()
        again = await post(bound.events_url, context, events.encode(make_event(uid="after-drain")))
    assert again.status == 202


async def test_a_runtime_may_report_only_its_modules(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki
) -> None:
    """skr-1 runs cloud-manager, skr-2 does not: skr-2's cloud-manager event is refused with 422, a status the
    watcher treats as final (a 403 would be retried forever, since a renewed certificate can cure a 403)."""
    config = listener_config(
        landscape.nats,
        modules=["kyma-sync", "cloud-manager"],
        runtime_modules={"skr-1": ["kyma-sync", "cloud-manager"]},
        default_runtime_modules=["kyma-sync"],
    )
    async with server.serving(config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        allowed = await post(
            bound.events_url,
            runtime_pki.client_context(runtime_pki.runtime_cert("skr-1")),
            events.encode(make_event(uid="ok", module="cloud-manager")),
        )
        injected = await post(
            bound.events_url,
            runtime_pki.client_context(runtime_pki.runtime_cert("skr-2")),
            events.encode(make_event(uid="injected", runtime="skr-2", module="cloud-manager")),
        )
    assert allowed.status == 202
    assert injected.status == 422 and "may not report" in injected.body["error"]


async def test_every_message_carries_cloudevents_attributes_and_the_body_unchanged(
    listener: server.Bound, runtime_pki: Pki, nats_client: Nats
) -> None:
    """A CloudEvents consumer reads ce-* headers (binary mode); our consumers read the same body as posted."""
    event = make_event(uid="cloudevent")
    body = events.encode(event)
    reply = await post(listener.events_url, runtime_pki.client_context(runtime_pki.runtime_cert("skr-1")), body)
    assert reply.status == 202
    message = await stored_message(nats_client, event)
    assert message.data == body
    assert message.headers is not None
    assert {k: v for k, v in message.headers.items() if k in cloudevents.HEADER_NAMES} == cloudevents.headers(event)
    assert message.headers["ce-source"] == "/runtimes/skr-1" and message.headers["ce-id"] == event.id


async def _metrics_text(bound: server.Bound) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{bound.management_url}/metrics") as response:
        return await response.text()


async def test_a_heartbeat_marks_the_runtime_alive_and_only_its_own(listener: server.Bound, runtime_pki: Pki) -> None:
    """What the watcher-silent alert reads: the last heartbeat per runtime, claimed by the runtime's own certificate."""
    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))

    def beat(runtime: str) -> bytes:
        return (
            events.Heartbeat(runtime=ids.RuntimeId(runtime), sent_at=datetime.datetime.now(datetime.UTC), queue_depth=0)
            .model_dump_json()
            .encode()
        )

    before = datetime.datetime.now(datetime.UTC).timestamp()
    accepted = await post(listener.events_url, context, beat("skr-1"), path=wire.HEARTBEAT_PATH)
    forged = await post(listener.events_url, context, beat("skr-2"), path=wire.HEARTBEAT_PATH)
    garbage = await post(listener.events_url, context, b'{"runtime": "skr-1"}', path=wire.HEARTBEAT_PATH)
    assert (accepted.status, forged.status, garbage.status) == (204, 403, 400)
    assert "skr-2" in forged.body["error"] and "heartbeat" in garbage.body["error"]
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in (await _metrics_text(listener)).splitlines()
        if line.startswith("kyma_listener_runtime_heartbeat_timestamp_seconds{")
    }
    assert list(samples) == ['kyma_listener_runtime_heartbeat_timestamp_seconds{runtime="skr-1"}']
    assert samples['kyma_listener_runtime_heartbeat_timestamp_seconds{runtime="skr-1"}'] >= before - 1
    text = await _metrics_text(listener)
    assert 'kyma_listener_heartbeats_total{outcome="accepted"} 1.0' in text
    assert 'kyma_listener_runtime_watcher_queue_depth{runtime="skr-1"} 0.0' in text
    assert 'kyma_listener_requests_total{outcome="accepted"}' not in text, "heartbeats are not counted as events"


async def test_with_runtime_id_identities_the_certificate_names_a_kyma_by_its_label(
    landscape: landscape_mod.Landscape,
    listener_config: ConfigFactory,
    runtime_pki: Pki,
    kcp_api: kube.ApiClient,
    tmp_path: Path,
) -> None:
    """Upstream's identity: CN = kyma-project.io/runtime-id; the events still name the runtime by its Kyma name."""
    kubeconfig = tmp_path / "kcp.yaml"
    kubeconfig.write_text(kubeconfigs.dump(landscape.kcp.admin_kubeconfig()))
    await kube.ensure_namespace(kcp_api, wire.KCP_NAMESPACE)
    await crds.install(kcp_api, [crds.kyma_crd()])
    kyma = f"kyma-{uuid.uuid4().hex[:6]}"
    runtime_id = str(uuid.uuid4())
    await kube.request(
        kcp_api,
        "POST",
        kube.KYMAS.path(wire.KCP_NAMESPACE),
        body={
            "apiVersion": kube.KYMAS.api_version,
            "kind": "Kyma",
            "metadata": {"name": kyma, "labels": {wire.RUNTIME_ID_LABEL: runtime_id}},
            "spec": {"channel": "regular"},
        },
    )
    config = listener_config(landscape.nats, identity={"source": "runtime-id", "kcp_kubeconfig": str(kubeconfig)})
    try:
        async with server.serving(config, registry=CollectorRegistry()) as bound:
            await wait_ready(bound)
            by_id = runtime_pki.client_context(runtime_pki.runtime_cert(runtime_id))
            named = await post(bound.events_url, by_id, events.encode(make_event(kyma, uid="by-id")))
            as_the_id = await post(bound.events_url, by_id, events.encode(make_event(runtime_id, uid="raw")))
            unknown = runtime_pki.client_context(runtime_pki.runtime_cert(str(uuid.uuid4())))
            stranger = await post(bound.events_url, unknown, events.encode(make_event(kyma, uid="stranger")))
    finally:
        await kube.request(kcp_api, "DELETE", kube.KYMAS.object_path(wire.KCP_NAMESPACE, kyma))
    assert named.status == 202, named.body
    assert as_the_id.status == 403 and kyma in as_the_id.body["error"]
    assert stranger.status == 403 and wire.RUNTIME_ID_LABEL in stranger.body["error"]


async def test_a_header_smuggled_in_an_event_field_is_refused(listener: server.Bound, runtime_pki: Pki) -> None:
    """Event fields become CloudEvents headers: CR/LF in one must be a 400, never a forged header."""
    body = json.loads(events.encode(make_event(uid="smuggler")))
    body["target"]["group"] = "cloud-resources.kyma-project.io\r\nce-source: /runtimes/skr-2"
    reply = await post(
        listener.events_url, runtime_pki.client_context(runtime_pki.runtime_cert("skr-1")), json.dumps(body).encode()
    )
    assert reply.status == 400 and "target.group" in reply.body["error"]


async def test_an_idle_watcher_connection_is_closed_after_the_keepalive(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki
) -> None:
    """Held connections follow activity, not the fleet: a kept-alive connection unused for keepalive_seconds is
    closed by the listener (the gauge shows it), and the client's next request simply connects again."""
    registry = CollectorRegistry()
    config = listener_config(landscape.nats, keepalive_seconds=0.5)
    async with server.serving(config, registry=registry) as bound:
        await wait_ready(bound)
        held = functools.partial(registry.get_sample_value, "kyma_listener_connections")
        connector = aiohttp.TCPConnector(ssl=runtime_pki.client_context(runtime_pki.runtime_cert("skr-1")))
        async with aiohttp.ClientSession(connector=connector) as session:
            for rv in ("1", "2"):
                async with session.post(
                    f"{bound.events_url}{wire.EVENTS_PATH}",
                    data=events.encode(make_event(rv=rv, uid=f"uid-keepalive-{uuid.uuid4().hex[:6]}")),
                    headers={"Content-Type": "application/json"},
                ) as response:
                    assert response.status == 202
                assert held() == 1, "kept alive while in use"
                await eventually(lambda: held() == 0, timeout=10, what="the idle connection closed")


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2], ids=lambda v: v.name)
async def test_the_listener_sends_no_session_tickets(
    listener: server.Bound, runtime_pki: Pki, version: ssl.TLSVersion
) -> None:
    """Watchers connect through asyncio, which offers no way to resume a TLS session, so a ticket is work for nothing
    (OpenSSL 3.0 copies the session through DER for each one). A client that read the whole answer holds no ticket,
    whichever TLS version it speaks."""
    context = runtime_pki.client_context(runtime_pki.runtime_cert("skr-1"))
    context.minimum_version = context.maximum_version = version
    url = urllib.parse.urlsplit(listener.events_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port, ssl=context)
    try:
        body = events.encode(make_event(uid=f"uid-tickets-{uuid.uuid4().hex[:6]}"))
        writer.write(
            f"POST {wire.EVENTS_PATH} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        answer = await reader.read()
        session = writer.get_extra_info("ssl_object").session
    finally:
        writer.close()
        await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
    assert session is not None and not session.has_ticket
