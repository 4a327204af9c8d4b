"""The upstream runtime-watcher's request (POST /v2/<component>/event), replayed from recordings
against the real listener and NATS JetStream: what gets in, what it becomes, what is refused."""

import dataclasses
import hashlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pydantic
import pytest
from nats.aio.client import Client as Nats
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from clients import bus
from contract import events
from devenv import landscape as landscape_mod
from listener import server, settings, upstream
from pki import pki

from .conftest import ConfigFactory, Pki, Reply, wait_ready

integration = pytest.mark.integration

STREAM = bus.StreamSettings().name
RECORDED = Path(__file__).parent / "recorded" / "upstream"
SCENARIOS = sorted(path.stem for path in RECORDED.glob("*.json"))
COMPONENT = "lifecycle-manager"
MODULE = "cloud-manager"
COMPONENTS = {COMPONENT: MODULE}


@dataclasses.dataclass(frozen=True)
class Recorded:
    """One request the upstream skr-webhook sent (see recorded/upstream/README.md)."""

    path: str
    headers: dict[str, str]
    body: bytes
    upstream_parsed: dict[str, Any]
    """What upstream's own listener library read from it (runtime-id from a certificate of skr-1)."""

    @classmethod
    def load(cls, scenario: str) -> "Recorded":
        document = json.loads((RECORDED / f"{scenario}.json").read_text())
        return cls(
            path=document["path"],
            headers=document["headers"],
            body=document["body"].encode(),
            upstream_parsed=document["upstream_listener_parsed"],
        )

    def with_fields(self, **fields: Any) -> bytes:
        """The recorded body with top-level keys added or replaced."""
        return json.dumps({**json.loads(self.body), **fields}).encode()


KYMA = Recorded.load("kyma-spec-updated")


_REPLAYED_HEADERS = ("Content-Type", "User-Agent")
"""Of the recorded headers, those a client chooses (Content-Length, Accept-Encoding are aiohttp's own)."""


async def replay(
    url: str,
    context: ssl.SSLContext | None,
    request: Recorded,
    *,
    path: str | None = None,
    body: bytes | AsyncIterator[bytes] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """Send a recorded request as the upstream webhook did (its path, Content-Type, User-Agent, body),
    or with the path, body or headers given instead."""
    sent: dict[str, str] = {name: request.headers[name] for name in _REPLAYED_HEADERS if name in request.headers}
    sent.update(headers or {})
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}{path or request.path}",
            data=request.body if body is None else body,
            ssl=context if context is not None else False,
            headers=sent,
        ) as response,
    ):
        return Reply(response.status, await response.json(content_type=None), dict(response.headers))


async def stored(nats_client: Nats, *, subject: str, event_id: str) -> list[events.ChangeEvent]:
    """The stream's messages on ``subject`` with this event id, decoded (tests share the stream)."""
    consumer = await nats_client.jetstream().pull_subscribe(subject, stream=STREAM)
    found: list[events.ChangeEvent] = []
    try:
        while True:
            try:
                batch = await consumer.fetch(256, timeout=0.5)
            except TimeoutError:  # nats-py also raises a bare one when the 408 beats its deadline
                return found
            found += [events.decode(m.data) for m in batch if (m.headers or {}).get(bus.MSG_ID_HEADER) == event_id]
    finally:
        await consumer.unsubscribe()


def subject(runtime: str, module: str = MODULE) -> str:
    return f"kyma.events.{module}.{runtime}"


@pytest.fixture
async def upstream_listener(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory
) -> AsyncIterator[server.Bound]:
    config = listener_config(landscape.nats, upstream_components=COMPONENTS)
    async with server.serving(config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        yield bound


def _mtls(runtime_pki: Pki, runtime: str = "skr-1") -> ssl.SSLContext:
    return runtime_pki.client_context(runtime_pki.runtime_cert(runtime))


@integration
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_a_recorded_upstream_request_is_published_as_a_reference_only_event(
    upstream_listener: server.Bound, runtime_pki: Pki, nats_client: Nats, scenario: str
) -> None:
    """200 as upstream expects; on kyma.events.<module>.<runtime> a valid reference-only event naming the
    object upstream's own listener reads out of the same request, of the runtime of the certificate."""
    request = Recorded.load(scenario)
    reply = await replay(upstream_listener.events_url, _mtls(runtime_pki), request)
    assert reply.status == 200, reply.body
    assert reply.body["duplicate"] is False
    [event] = await stored(nats_client, subject=subject("skr-1"), event_id=reply.body["event_id"])
    watched, gvk = request.upstream_parsed["watched"], request.upstream_parsed["watched-gvk"]
    assert event.runtime == request.upstream_parsed["runtime-id"] == "skr-1"
    assert event.module == MODULE
    assert (event.target.group, event.target.version, event.target.kind) == (gvk["group"], gvk["version"], gvk["kind"])
    assert (event.target.namespace or "", event.target.name) == (watched["Namespace"], watched["Name"])
    assert event.target.resource == {"kyma": "kymas", "namespace": "namespaces"}[gvk["kind"].lower()]
    assert event.reference_only and event.body is None
    assert event.change_type == events.ChangeType.RESYNC
    assert event.target.uid.startswith(upstream.STAND_IN_PREFIX)
    assert event.resource_version.startswith(upstream.STAND_IN_PREFIX)


@integration
async def test_the_runtime_is_the_client_certificates_whatever_the_body_says(
    upstream_listener: server.Bound, runtime_pki: Pki, nats_client: Nats
) -> None:
    """Upstream's body carries no runtime; keys claiming one are ignored and the certificate (skr-2) decides."""
    claiming = KYMA.with_fields(**{"runtime-id": "skr-1", "runtime": "skr-1", "SkrMeta": {"RuntimeId": "skr-1"}})
    reply = await replay(upstream_listener.events_url, _mtls(runtime_pki, "skr-2"), KYMA, body=claiming)
    assert reply.status == 200, reply.body
    [event] = await stored(nats_client, subject=subject("skr-2"), event_id=reply.body["event_id"])
    assert event.runtime == "skr-2"
    assert await stored(nats_client, subject=subject("skr-1"), event_id=reply.body["event_id"]) == []


def _istio_xfcc(pem: bytes) -> str:
    """X-Forwarded-Client-Cert as an Istio gateway (Envoy) writes it: Cert percent-encoded the way Envoy's
    urlEncodedPemEncodedPeerCertificate does, which upstream's listener also reads."""
    encoded = pem.decode()
    for char, escape in (("\n", "%0A"), (" ", "%20"), ("+", "%2B"), ("/", "%2F"), ("=", "%3D")):
        encoded = encoded.replace(char, escape)
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.decode())).hexdigest()
    return f'By=spiffe://cluster.local/ns/kcp-system/sa/klm;Hash={digest};Cert="{encoded}";URI='


@integration
async def test_behind_an_istio_gateway_the_forwarded_certificate_identifies_the_runtime(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki, nats_client: Nats
) -> None:
    """Upstream's deployment: Istio terminates mTLS and forwards the certificate in X-Forwarded-Client-Cert.
    Believed from a trusted proxy (the runtime is its CN); without the header 401; a foreign CA's 403."""
    config = listener_config(
        landscape.nats,
        tls=None,
        proxy={"enabled": True, "trusted_proxies": ["127.0.0.1/32"]},
        upstream_components=COMPONENTS,
    )
    rogue = pki.runtime_client_cert(pki.create_ca("rogue-ca"), "skr-1").cert_pem
    async with server.serving(config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        skr_2 = _istio_xfcc(runtime_pki.runtime_cert("skr-2").cert_pem)
        accepted = await replay(bound.events_url, None, KYMA, headers={"X-Forwarded-Client-Cert": skr_2})
        missing = await replay(bound.events_url, None, KYMA)
        foreign = await replay(bound.events_url, None, KYMA, headers={"X-Forwarded-Client-Cert": _istio_xfcc(rogue)})
    assert accepted.status == 200, accepted.body
    [event] = await stored(nats_client, subject=subject("skr-2"), event_id=accepted.body["event_id"])
    assert event.runtime == "skr-2"
    assert missing.status == 401 and "X-Forwarded-Client-Cert" in missing.body["error"]
    assert foreign.status == 403


@integration
async def test_without_a_client_certificate_nothing_gets_through(
    upstream_listener: server.Bound, runtime_pki: Pki
) -> None:
    """Direct mode: the request that a runtime's certificate gets accepted fails the handshake without one."""
    assert (await replay(upstream_listener.events_url, _mtls(runtime_pki), KYMA)).status == 200
    with pytest.raises(aiohttp.ClientError):
        await replay(upstream_listener.events_url, runtime_pki.client_context(None), KYMA)


@integration
async def test_a_component_not_mapped_to_a_module_is_404(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki
) -> None:
    """Only components in upstream_components are taken, and none by default; refusals are counted."""
    registry = CollectorRegistry()
    mapped = listener_config(landscape.nats, upstream_components=COMPONENTS)
    async with server.serving(mapped, registry=registry) as bound:
        await wait_ready(bound)
        other = await replay(bound.events_url, _mtls(runtime_pki), KYMA, path="/v2/compass-manager/event")
    async with server.serving(listener_config(landscape.nats), registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        unconfigured = await replay(bound.events_url, _mtls(runtime_pki), KYMA)
    assert other.status == 404 and "'compass-manager' is not mapped" in other.body["error"]
    assert unconfigured.status == 404 and f"{COMPONENT!r} is not mapped" in unconfigured.body["error"]
    assert registry.get_sample_value("kyma_listener_requests_total", {"outcome": "unknown_component"}) == 1


_GVK = {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"}


@integration
@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        pytest.param(b"{not json", "invalid upstream watch event", id="malformed-json"),
        pytest.param(b"[]", "<root>: Input should be an object", id="not-an-object"),
        pytest.param({"watchedGvk": _GVK}, "watched: Field required", id="no-watched"),
        pytest.param(
            {"watched": {"Namespace": "kyma-system"}, "watchedGvk": _GVK}, "watched.name: Field required", id="no-name"
        ),
        pytest.param(
            {"watched": {"Name": "default"}, "watchedGvk": {"group": "g", "version": "v1"}},
            "watchedGvk.kind: Field required",
            id="no-kind",
        ),
        pytest.param({"watched": {"Name": "default"}}, "watchedGvk: Field required", id="no-gvk"),
        pytest.param(
            {"watched": {"Name": ""}, "watchedGvk": _GVK}, "watched.name: String should match", id="empty-name"
        ),
        pytest.param(
            {"watched": {"Namespace": "Kyma_System", "Name": "default"}, "watchedGvk": _GVK},
            "watched.namespace: String should match",
            id="invalid-namespace",
        ),
        pytest.param(
            {"watched": {"Name": "default"}, "watchedGvk": {**_GVK, "version": ""}},
            "watchedGvk.version: String should have at least 1 character",
            id="empty-version",
        ),
        pytest.param(
            {"watched": {"Name": "default"}, "watchedGvk": {**_GVK, "group": "a\r\nce-source: /runtimes/victim"}},
            "watchedGvk.group: String should match",
            id="header-smuggled-in-the-group",
        ),
        pytest.param(
            {"watched": {"Name": "default"}, "watchedGvk": {**_GVK, "kind": "Kyma\r\nNats-Msg-Id: x"}},
            "watchedGvk.kind: String should match",
            id="header-smuggled-in-the-kind",
        ),
    ],
)
async def test_a_body_without_a_usable_object_is_400_naming_the_field(
    upstream_listener: server.Bound, runtime_pki: Pki, body: bytes | Any, complaint: str
) -> None:
    """Go's decoder would fill missing fields with "" and upstream would enqueue that; here the object must be named."""
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await replay(upstream_listener.events_url, _mtls(runtime_pki), KYMA, body=payload)
    assert reply.status == 400
    assert complaint in reply.body["error"]


@integration
async def test_a_body_over_upstreams_16_kib_is_413_even_chunked(
    upstream_listener: server.Bound, runtime_pki: Pki
) -> None:
    """Upstream's own limit (16384 bytes) applies, with or without Content-Length; the body is never read whole."""
    padded = KYMA.with_fields(owner={"name": "x" * upstream.MAX_BODY_BYTES})

    async def chunked() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b" " * 1024

    declared = await replay(upstream_listener.events_url, _mtls(runtime_pki), KYMA, body=padded)
    streamed = await replay(upstream_listener.events_url, _mtls(runtime_pki), KYMA, body=chunked())
    assert declared.status == 413 and "16384" in declared.body["error"]
    assert streamed.status == 413


@integration
async def test_a_body_that_is_not_json_is_415(upstream_listener: server.Bound, runtime_pki: Pki) -> None:
    reply = await replay(upstream_listener.events_url, _mtls(runtime_pki), KYMA, headers={"Content-Type": "text/plain"})
    assert reply.status == 415


@integration
async def test_a_runtime_may_report_only_its_modules_through_the_upstream_endpoint_too(
    landscape: landscape_mod.Landscape, listener_config: ConfigFactory, runtime_pki: Pki
) -> None:
    """The component's module is subject to the per-runtime allow-list: skr-2 does not run cloud-manager (422)."""
    config = listener_config(
        landscape.nats,
        modules=["kyma-sync", MODULE],
        runtime_modules={"skr-1": ["kyma-sync", MODULE]},
        default_runtime_modules=["kyma-sync"],
        upstream_components=COMPONENTS,
    )
    async with server.serving(config, registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        allowed = await replay(bound.events_url, _mtls(runtime_pki, "skr-1"), KYMA)
        injected = await replay(bound.events_url, _mtls(runtime_pki, "skr-2"), KYMA)
    assert allowed.status == 200
    assert injected.status == 422 and f"may not report events of module {MODULE}" in injected.body["error"]


@integration
async def test_two_identical_requests_are_two_events(
    upstream_listener: server.Bound, runtime_pki: Pki, nats_client: Nats
) -> None:
    """Create, update and delete of one object send byte-identical requests, so identical requests are not
    collapsed in the duplicate window: each is an event of its own (a retry costs one idempotent reconcile)."""
    bodies = {Recorded.load(name).body for name in ("kyma-created", "kyma-spec-updated", "kyma-deleted")}
    assert len(bodies) == 1
    first, second = [await replay(upstream_listener.events_url, _mtls(runtime_pki), KYMA) for _ in range(2)]
    assert first.status == second.status == 200
    assert first.body["event_id"] != second.body["event_id"]
    assert not first.body["duplicate"] and not second.body["duplicate"]
    for reply in (first, second):
        assert len(await stored(nats_client, subject=subject("skr-1"), event_id=reply.body["event_id"])) == 1


@integration
async def test_the_trace_context_of_the_request_reaches_the_event_and_the_message(
    upstream_listener: server.Bound, runtime_pki: Pki, nats_client: Nats, spans: InMemorySpanExporter
) -> None:
    """As on /v1/events: the request's traceparent parents the listener span; the event carries its context."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    reply = await replay(
        upstream_listener.events_url,
        _mtls(runtime_pki),
        KYMA,
        headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
    )
    assert reply.status == 200
    [span] = [s for s in spans.get_finished_spans() if s.name == f"POST {upstream.PATH}"]
    assert span.attributes is not None and span.attributes["kyma.upstream_component"] == COMPONENT
    [event] = await stored(nats_client, subject=subject("skr-1"), event_id=reply.body["event_id"])
    assert event.trace is not None and event.trace.traceparent.split("-")[1] == trace_id


# Pure: the translation and the setting, without a landscape.


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("Kyma", "kymas"),
        ("ModuleTemplate", "moduletemplates"),
        ("Namespace", "namespaces"),
        ("NetworkPolicy", "networkpolicies"),
        ("Ingress", "ingresses"),
        ("Endpoints", "endpoints"),
    ],
)
def test_the_resource_is_guessed_from_the_kind_as_apimachinery_does(kind: str, resource: str) -> None:
    assert upstream.guess_resource(kind) == resource


def test_keys_are_matched_as_gos_decoder_matches_them() -> None:
    """Case-insensitively, the last of equal keys winning, unknown keys ignored."""
    watch = upstream.decode(
        b'{"WATCHED": {"name": "first", "NAME": "last"}, "watchedgvk": {"Version": "v1", "KIND": "Pod"}, "x": 1}'
    )
    assert (watch.watched.name, watch.watched.namespace) == ("last", "")
    assert (watch.watched_gvk.group, watch.watched_gvk.version, watch.watched_gvk.kind) == ("", "v1", "Pod")


def test_upstream_components_must_name_known_modules(tmp_path: Path) -> None:
    document = {
        "modules": ["kyma-sync"],
        "tls": {"cert_file": tmp_path / "tls.crt", "key_file": tmp_path / "tls.key"},
        "trust": {"client_ca_file": tmp_path / "ca.crt"},
        "nats": {"servers": ["nats://127.0.0.1:4222"]},
    }
    assert settings.ListenerSettings.model_validate(document).upstream_components == {}
    mapped = settings.ListenerSettings.model_validate({**document, "upstream_components": {COMPONENT: "kyma-sync"}})
    assert mapped.upstream_components == {COMPONENT: "kyma-sync"}
    with pytest.raises(pydantic.ValidationError, match="upstream_components name modules not in modules"):
        settings.ListenerSettings.model_validate({**document, "upstream_components": {COMPONENT: "cloud-manager"}})
    with pytest.raises(pydantic.ValidationError, match="not a DNS label"):
        settings.ListenerSettings.model_validate(
            {**document, "upstream_components": {"Lifecycle_Manager": "kyma-sync"}}
        )
