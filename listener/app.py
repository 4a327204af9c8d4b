"""The HTTP surface: POST /v1/events on the mTLS port; health, readiness, metrics on another.

Probes and Prometheus cannot present runtime certificates, so they get a plain-HTTP management
port of their own and the event port stays client-certificate-only. The event port also takes
the upstream runtime-watcher's POST /v2/<component>/event (``listener.upstream``) during a
migration: both routes pass the same checks and publish through the same path.
"""

import asyncio
import dataclasses
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import pydantic
from aiohttp import hdrs, web
from opentelemetry import trace
from prometheus_client import Counter

from clients import bus
from contract import cloudevents, events, ids, wire
from contract import errors as contract_errors
from kit import ratelimit
from listener import errors, identities, metrics, peer, refusals, settings, trust, upstream
from listener import publisher as publisher_mod
from observability import tracing

log = logging.getLogger(__name__)
tracer = trace.get_tracer("kyma.listener")

_READ_CHUNK = 64 * 1024


@dataclasses.dataclass
class ListenerState:
    settings: settings.ListenerSettings
    identities: identities.Identities
    trust: trust.CachedTrust
    limiter: ratelimit.RateLimiter
    metrics: metrics.ListenerMetrics
    publisher: publisher_mod.JetStreamPublisher
    refusal_log: refusals.RefusalLog = dataclasses.field(default_factory=refusals.RefusalLog)
    draining: bool = False
    in_flight: int = 0
    idle: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set whenever no request is in flight (what a drain waits for)."""


STATE = web.AppKey("state", ListenerState)


async def _read_limited(request: web.Request, limit: int) -> bytes:
    """The body, refusing (413) as soon as it passes ``limit`` — an oversize body is never read whole."""
    length = request.content_length
    if length is not None and length > limit:
        raise errors.PayloadTooLarge(f"body of {length} bytes is over {limit} bytes")
    if length and hdrs.CONTENT_ENCODING not in request.headers:
        # One read where the length is the body's: the chunk loop below was 5 % of a listener's time per event.
        # A packed body (aiohttp unpacks it; Content-Length is the packed size) and an empty one take the loop.
        return await request.content.readexactly(length)
    body = bytearray()
    async for chunk in request.content.iter_chunked(_READ_CHUNK):
        body += chunk
        if len(body) > limit:
            raise errors.PayloadTooLarge(f"body is over {limit} bytes")
    return bytes(body)


async def _admit(request: web.Request, state: ListenerState, span: trace.Span) -> ids.RuntimeId:
    """The checks before a body is read: not draining, the client certificate's runtime, its rate, JSON."""
    if state.draining:
        raise errors.Unavailable("listener is shutting down", retry_after=1)
    identity = state.trust.runtime_of(peer.client_certificate_der(request, state.settings.proxy))
    request[CLIENT] = f"certificate {identity}"
    runtime = state.identities.runtime(identity)
    request[CLIENT] = f"runtime {runtime}" if runtime == identity else f"runtime {runtime} (certificate {identity})"
    span.set_attribute("kyma.runtime", runtime)
    wait = state.limiter.acquire(runtime)
    if wait:
        raise errors.RateLimited(f"runtime {runtime} is over its event rate", retry_after=wait)
    if request.content_type != "application/json":
        raise errors.UnsupportedMedia(f"Content-Type must be application/json, not {request.content_type}")
    return runtime


async def _publish(
    state: ListenerState, span: trace.Span, *, runtime: ids.RuntimeId, event: events.ChangeEvent, payload: bytes
) -> bus.PublishResult:
    """Publish a validated event sent with ``runtime``'s certificate, waiting for JetStream's ack."""
    if event.runtime != runtime:
        raise errors.Forbidden(f"the certificate of runtime {runtime} cannot send events of runtime {event.runtime}")
    if event.module not in state.settings.modules:
        raise errors.UnknownModule(f"unknown module {event.module!r}")
    if not state.settings.may_report(runtime, event.module):
        raise errors.ModuleNotAllowed(f"runtime {runtime} may not report events of module {event.module}")
    span.set_attributes({"kyma.module": event.module, "kyma.event_id": event.id})
    headers = cloudevents.headers(event)
    tracing.inject(headers)
    started = asyncio.get_running_loop().time()
    try:
        result = await state.publisher.publish(
            subject=event.subject,
            payload=payload,
            msg_id=event.id,
            headers=headers,
        )
    except bus.StreamFullError as exc:
        log.warning("event stream full, refusing events", extra={"error": str(exc)})
        raise errors.StreamFull(
            f"the event stream is full: {exc}", retry_after=state.settings.nats.stream_full_retry_seconds
        ) from exc
    except bus.NoStreamError as exc:
        log.error(
            "no stream captures events: an admin must run kyma-eventbus ensure-streams", extra={"error": str(exc)}
        )
        raise errors.Unavailable(f"event bus unavailable: {exc}", retry_after=5) from exc
    except bus.BusUnavailableError as exc:
        raise errors.Unavailable(f"event bus unavailable: {exc}", retry_after=2) from exc
    state.metrics.publish_seconds.observe(asyncio.get_running_loop().time() - started)
    state.metrics.published.labels(event.module, str(result.duplicate).lower()).inc()
    return result


def _published(event: events.ChangeEvent, result: bus.PublishResult, *, status: int) -> web.Response:
    return web.json_response(
        {"event_id": event.id, "duplicate": result.duplicate, "sequence": result.sequence}, status=status
    )


async def _accept(request: web.Request, state: ListenerState, span: trace.Span) -> web.Response:
    runtime = await _admit(request, state, span)
    body = await _read_limited(request, events.MAX_EVENT_BYTES)
    try:
        event = events.decode(body)
    except contract_errors.EventTooLargeError as exc:
        raise errors.PayloadTooLarge(str(exc)) from exc
    except contract_errors.InvalidEventError as exc:
        raise errors.BadRequest(str(exc)) from exc
    return _published(event, await _publish(state, span, runtime=runtime, event=event, payload=body), status=202)


async def _accept_upstream(request: web.Request, state: ListenerState, span: trace.Span) -> web.Response:
    """The upstream runtime-watcher's request, as a reference-only event; upstream expects 200."""
    runtime = await _admit(request, state, span)
    component = request.match_info["component"]
    span.set_attribute("kyma.upstream_component", component)
    module = state.settings.upstream_components.get(component)
    if module is None:
        raise errors.UnknownComponent(
            f"upstream component {component!r} is not mapped to a module (upstream_components)"
        )
    body = await _read_limited(request, upstream.MAX_BODY_BYTES)
    try:
        event = upstream.to_change_event(
            upstream.decode(body),
            runtime=runtime,
            module=ids.ModuleName(module),
            received_at=datetime.now(UTC),
            trace=_current_trace(),
        )
    except upstream.UpstreamEventError as exc:
        raise errors.BadRequest(str(exc)) from exc
    result = await _publish(state, span, runtime=runtime, event=event, payload=events.encode(event))
    return _published(event, result, status=200)


async def _accept_heartbeat(request: web.Request, state: ListenerState, span: trace.Span) -> web.Response:
    """A watcher saying it is alive: the time is kept per runtime for the watcher-silent alert."""
    runtime = await _admit(request, state, span)
    try:
        beat = events.Heartbeat.model_validate_json(await _read_limited(request, events.MAX_HEARTBEAT_BYTES))
    except pydantic.ValidationError as exc:
        raise errors.BadRequest(f"invalid heartbeat: {exc.errors(include_url=False)}") from exc
    if beat.runtime != runtime:
        raise errors.Forbidden(f"the certificate of runtime {runtime} cannot send heartbeats of runtime {beat.runtime}")
    state.metrics.heartbeat.labels(runtime).set_to_current_time()
    state.metrics.watcher_queue_depth.labels(runtime).set(beat.queue_depth)
    return web.Response(status=204)


def _current_trace() -> events.TraceContext | None:
    """The listener span's context: the event is born here, as a watcher's is born in its change span."""
    carrier: dict[str, str] = {}
    tracing.inject(carrier)
    return events.TraceContext(traceparent=carrier["traceparent"]) if "traceparent" in carrier else None


def _rejection(rejected: errors.Rejected) -> web.Response:
    headers = {}
    if rejected.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(rejected.retry_after)))
    return web.json_response({"error": rejected.reason}, status=rejected.status, headers=headers)


CLIENT = web.RequestKey("client", str)


def _client(request: web.Request) -> str:
    """Who was refused: the runtime once its certificate was read, else the peer's address."""
    return request.get(CLIENT) or f"address {request.remote}"


Accept = Callable[[web.Request, ListenerState, trace.Span], Awaitable[web.Response]]


def _event_route(
    route: str, accept: Accept, *, counted: Callable[[metrics.ListenerMetrics], Counter] = lambda m: m.requests
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler around ``accept``: in-flight accounting (what a drain waits for), the server span
    continuing the caller's trace, refusals as ``{"error": ...}`` with their status, outcome metrics."""

    async def handle(request: web.Request) -> web.Response:
        state = request.app[STATE]
        state.in_flight += 1
        state.idle.clear()
        state.metrics.in_flight.inc()
        try:
            with tracing.server_span(tracer, f"POST {route}", request.headers) as span:
                try:
                    response = await accept(request, state, span)
                except errors.Rejected as rejected:
                    span.set_attribute("http.response.status_code", rejected.status)
                    counted(state.metrics).labels(rejected.outcome).inc()
                    state.refusal_log.report(rejected, route=route, client=_client(request))
                    return _rejection(rejected)
                span.set_attribute("http.response.status_code", response.status)
                counted(state.metrics).labels("accepted").inc()
                return response
        finally:
            state.in_flight -= 1
            if not state.in_flight:
                state.idle.set()
            state.metrics.in_flight.dec()

    return handle


post_event = _event_route(wire.EVENTS_PATH, _accept)
post_upstream_event = _event_route(upstream.PATH, _accept_upstream)
post_heartbeat = _event_route(wire.HEARTBEAT_PATH, _accept_heartbeat, counted=lambda m: m.heartbeats)


async def _publisher_lifecycle(app: web.Application) -> AsyncIterator[None]:
    stop = asyncio.Event()
    connection = asyncio.create_task(app[STATE].publisher.run(stop=stop), name="nats-publisher")
    yield
    stop.set()
    await connection


def build_event_app(state: ListenerState) -> web.Application:
    app = web.Application(client_max_size=events.MAX_EVENT_BYTES + 1)
    app[STATE] = state
    app.router.add_post(wire.EVENTS_PATH, post_event)
    app.router.add_post(upstream.PATH, post_upstream_event)
    app.router.add_post(wire.HEARTBEAT_PATH, post_heartbeat)
    app.cleanup_ctx.append(_publisher_lifecycle)
    return app


def readiness(state: ListenerState) -> str | None:
    if state.draining:
        return "draining"
    if not state.publisher.ready:
        return "not connected to NATS"
    return state.identities.unready()
