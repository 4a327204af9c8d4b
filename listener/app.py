"""The HTTP surface: POST /v1/events on the mTLS port; health, readiness, metrics on another.

Probes and Prometheus cannot present runtime certificates, so they get a plain-HTTP management
port of their own and the event port stays client-certificate-only.
"""

import asyncio
import dataclasses
import logging
import math
from collections.abc import AsyncIterator

from aiohttp import web
from opentelemetry import trace

from clients import bus
from contract import errors as contract_errors
from contract import events, wire
from listener import errors, metrics, peer, ratelimit, settings, trust
from listener import publisher as publisher_mod
from observability import tracing

log = logging.getLogger(__name__)
tracer = trace.get_tracer("kyma.listener")

_READ_CHUNK = 64 * 1024


@dataclasses.dataclass
class ListenerState:
    settings: settings.ListenerSettings
    trust: trust.CachedTrust
    limiter: ratelimit.RateLimiter
    metrics: metrics.ListenerMetrics
    publisher: publisher_mod.JetStreamPublisher
    draining: bool = False
    in_flight: int = 0
    idle: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set whenever no request is in flight (what a drain waits for)."""


STATE = web.AppKey("state", ListenerState)


async def _read_limited(request: web.Request, limit: int) -> bytes:
    """The body, refusing (413) as soon as it passes ``limit`` — an oversize body is never read whole."""
    if request.content_length is not None and request.content_length > limit:
        raise errors.PayloadTooLarge(f"body of {request.content_length} bytes is over {limit} bytes")
    body = bytearray()
    async for chunk in request.content.iter_chunked(_READ_CHUNK):
        body += chunk
        if len(body) > limit:
            raise errors.PayloadTooLarge(f"body is over {limit} bytes")
    return bytes(body)


async def _accept(request: web.Request, state: ListenerState, span: trace.Span) -> web.Response:
    if state.draining:
        raise errors.Unavailable("listener is shutting down", retry_after=1)
    runtime = state.trust.runtime_of(peer.client_certificate_der(request, state.settings.proxy))
    span.set_attribute("kyma.runtime", runtime)
    wait = state.limiter.acquire(runtime)
    if wait:
        raise errors.RateLimited(f"runtime {runtime} is over its event rate", retry_after=wait)
    if request.content_type != "application/json":
        raise errors.UnsupportedMedia(f"Content-Type must be application/json, not {request.content_type}")
    body = await _read_limited(request, events.MAX_EVENT_BYTES)
    try:
        event = events.decode(body)
    except contract_errors.EventTooLargeError as exc:
        raise errors.PayloadTooLarge(str(exc)) from exc
    except contract_errors.InvalidEventError as exc:
        raise errors.BadRequest(str(exc)) from exc
    if event.runtime != runtime:
        raise errors.Forbidden(f"the certificate of runtime {runtime} cannot send events of runtime {event.runtime}")
    if event.module not in state.settings.modules:
        raise errors.UnknownModule(f"unknown module {event.module!r}")
    if not state.settings.may_report(runtime, event.module):
        raise errors.ModuleNotAllowed(f"runtime {runtime} may not report events of module {event.module}")
    span.set_attributes({"kyma.module": event.module, "kyma.event_id": event.id})
    headers: dict[str, str] = {}
    tracing.inject(headers)
    started = asyncio.get_running_loop().time()
    try:
        result = await state.publisher.publish(
            subject=event.subject,
            payload=body,
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
    return web.json_response(
        {"event_id": event.id, "duplicate": result.duplicate, "sequence": result.sequence},
        status=202,
    )


def _rejection(rejected: errors.Rejected) -> web.Response:
    headers = {}
    if rejected.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(rejected.retry_after)))
    return web.json_response({"error": rejected.reason}, status=rejected.status, headers=headers)


async def post_event(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.in_flight += 1
    state.idle.clear()
    state.metrics.in_flight.inc()
    try:
        with tracer.start_as_current_span(
            f"POST {wire.EVENTS_PATH}",
            context=tracing.extract(request.headers),
            kind=trace.SpanKind.SERVER,
        ) as span:
            try:
                response = await _accept(request, state, span)
            except errors.Rejected as rejected:
                span.set_attribute("http.response.status_code", rejected.status)
                state.metrics.requests.labels(rejected.outcome).inc()
                if rejected.status >= 500:
                    log.warning("event refused", extra={"status": rejected.status, "reason": rejected.reason})
                return _rejection(rejected)
            span.set_attribute("http.response.status_code", response.status)
            state.metrics.requests.labels("accepted").inc()
            return response
    finally:
        state.in_flight -= 1
        if not state.in_flight:
            state.idle.set()
        state.metrics.in_flight.dec()


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
    app.cleanup_ctx.append(_publisher_lifecycle)
    return app


def readiness(state: ListenerState) -> str | None:
    if state.draining:
        return "draining"
    if not state.publisher.ready:
        return "not connected to NATS"
    return None
