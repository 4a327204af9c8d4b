"""Consuming change events from JetStream: one durable pull consumer per module.

What happens to a message is decided in one place, ``settlement``: ACK when the reconciles it
triggered succeeded (or it concerns nothing of ours), NAK with the work queue's own retry delay
when they failed, TERM for a terminal failure (invalid input waits for a new trigger), and
DEAD_LETTER once an event has been delivered ``max_deliveries`` times, or cannot be an event
at all: it is published to ``kyma.deadletter.<module>.<runtime>`` with the reason, counted,
and terminated, so one event that never succeeds cannot hold a slot forever.

Messages are handled each on their own (no batch waits for its slowest member), at most
``max_in_flight`` at once; while a handler works its message's ack timer is kept alive, so a
long reconcile is never mistaken for a lost one. Each message gets a consumer span continuing
the trace from its headers. On stop no new message is fetched, and those in flight are settled
before the connection closes (the work queue answers them within its grace period).
"""

import asyncio
import dataclasses
import datetime
import enum
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Gauge

from clients import bus
from contract import errors as contract_errors
from contract import events, subjects, wire
from kit import aio
from observability import tracing
from reconciler import workqueue

log = logging.getLogger(__name__)
tracer = trace.get_tracer("kyma.reconciler")

_REFUSED_RETRY_SECONDS = 60.0
"""A refused durable is tried again this often: a permission granted by a server reload takes effect unaided."""


class Action(enum.StrEnum):
    ACK = "ack"
    NAK = "nak"
    TERM = "term"
    DEAD_LETTER = "dead_letter"


@dataclasses.dataclass(frozen=True)
class Settlement:
    action: Action
    delay: float = 0.0
    reason: str = ""


Handler = Callable[[events.ChangeEvent], Awaitable[workqueue.Result | None]]


@dataclasses.dataclass(frozen=True)
class ConsumerSettings:
    servers: tuple[str, ...]
    subject: str
    durable: str
    stream: str
    credentials: bus.Credentials = dataclasses.field(default_factory=bus.Credentials)
    max_deliveries: int = 8
    ack_wait_seconds: float = 30
    max_in_flight: int = 256
    batch: int = 64
    nak_delay_initial: float = 0.5
    nak_delay_max: float = 300
    backlog_report_seconds: float = 15
    """How often the durable's backlog and the stream's fill are read for the metrics."""
    inactive_threshold_seconds: float | None = None
    """NATS deletes the durable after this long unused (a sharded replica's: one scaled away must not hold events)."""


class ConsumerMetrics:
    """What the consumers report: events settled, dead letters, and durables NATS refuses us (with why)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.refusals: dict[str, str] = {}
        """Durable -> why NATS refuses it to our identity (a configuration error; readiness shows it)."""
        self._refused = Gauge(
            "kyma_reconciler_consumer_refused",
            "1 while NATS refuses this durable to the reconciler's identity (a permission to grant)",
            ["durable"],
            registry=registry,
        )
        self.messages = Counter(
            "kyma_reconciler_events",
            "Events settled, by module and action (ack, nak, term, dead_letter)",
            ["module", "action"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "kyma_reconciler_dead_letters",
            "Events sent to the dead-letter subject, by module",
            ["module"],
            registry=registry,
        )

        self.pending = Gauge(
            "kyma_reconciler_consumer_pending_messages",
            "Events of the durable's subjects not yet delivered to it (its backlog)",
            ["durable"],
            registry=registry,
        )
        self.ack_pending = Gauge(
            "kyma_reconciler_consumer_ack_pending_messages",
            "Events delivered to the durable and not yet settled",
            ["durable"],
            registry=registry,
        )
        self.stream_messages = Gauge(
            "kyma_eventbus_stream_messages", "Messages kept in the stream", ["stream"], registry=registry
        )
        self.stream_bytes = Gauge(
            "kyma_eventbus_stream_bytes", "Bytes kept in the stream", ["stream"], registry=registry
        )
        self.stream_max_bytes = Gauge(
            "kyma_eventbus_stream_max_bytes",
            "The stream's byte limit (-1: none); at it the listener answers 503",
            ["stream"],
            registry=registry,
        )

    def refused(self, durable: str, reason: str) -> None:
        self.refusals[durable] = reason
        self._refused.labels(durable).set(1)

    def subscribed(self, durable: str) -> None:
        self.refusals.pop(durable, None)
        self._refused.labels(durable).set(0)


OBSERVED_AT_ALLOWANCE = datetime.timedelta(seconds=30)
"""How much earlier than its storing an event may say it was observed (delivery retries, clock skew)."""


def with_trusted_observed_at(event: events.ChangeEvent, *, stored_at: datetime.datetime) -> events.ChangeEvent:
    """The event with ``observed_at`` held to [stored - allowance, stored] by KCP's clock.

    ``observed_at`` comes from the runtime: a skewed clock, or a tenant dating its events in the past,
    must not move the landscape-wide change-to-applied latency (and its alert).
    """
    trusted = min(max(event.observed_at, stored_at - OBSERVED_AT_ALLOWANCE), stored_at)
    return event if trusted == event.observed_at else event.model_copy(update={"observed_at": trusted})


def nak_delay(deliveries: int, settings: ConsumerSettings) -> float:
    return float(min(settings.nak_delay_max, settings.nak_delay_initial * 2 ** min(max(0, deliveries - 1), 32)))


def settlement(result: workqueue.Result | None, *, deliveries: int, settings: ConsumerSettings) -> Settlement:
    """The one mapping from a handler's outcome to what happens to the message."""
    if result is None or result.ok:
        return Settlement(Action.ACK)
    if result.terminal:
        return Settlement(Action.TERM, reason=result.error or "")
    if deliveries >= settings.max_deliveries:
        return Settlement(Action.DEAD_LETTER, reason=f"failed {deliveries} times, last: {result.error}")
    delay = result.requeue_after if result.requeue_after else nak_delay(deliveries, settings)
    return Settlement(Action.NAK, delay=delay, reason=result.error or "")


async def _with_heartbeat(
    delivery: bus.Delivery, work: Awaitable[workqueue.Result | None], *, every: float
) -> workqueue.Result | None:
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            try:
                await delivery.in_progress()
            except bus.BusUnavailableError:
                pass  # redelivered later if the connection is really gone
    finally:
        task.cancel()


async def _outcome(
    delivery: bus.Delivery, handler: Handler, settings: ConsumerSettings, span: trace.Span
) -> Settlement:
    if delivery.deliveries > settings.max_deliveries:
        return Settlement(Action.DEAD_LETTER, reason=f"delivered {delivery.deliveries} times without being settled")
    try:
        event = events.decode(delivery.data)
    except contract_errors.ContractError as exc:
        return Settlement(Action.DEAD_LETTER, reason=f"not a change event: {exc}")
    if event.subject != delivery.subject:
        return Settlement(
            Action.DEAD_LETTER, reason=f"published on {delivery.subject}, but the event is for {event.subject}"
        )
    span.set_attributes({"kyma.event_id": event.id, "kyma.runtime": event.runtime})
    event = with_trusted_observed_at(event, stored_at=delivery.stored_at)
    try:
        result = await _with_heartbeat(delivery, handler(event), every=settings.ack_wait_seconds / 3)
    except Exception as exc:  # the guard: a failing handler is retried, not fatal
        log.exception("event handler failed", extra={"event_id": event.id})
        span.record_exception(exc)
        result = workqueue.Result.failed(repr(exc))
    return settlement(result, deliveries=delivery.deliveries, settings=settings)


async def _settle(
    delivery: bus.Delivery, handler: Handler, connection: bus.Bus, settings: ConsumerSettings, metrics: ConsumerMetrics
) -> None:
    module = delivery.subject.split(".")[-2] if delivery.subject.count(".") >= 3 else "unknown"
    with tracer.start_as_current_span(
        f"consume {delivery.subject}", context=tracing.extract(delivery.headers), kind=trace.SpanKind.CONSUMER
    ) as span:
        decided = await _outcome(delivery, handler, settings, span)
        try:
            if decided.action == Action.DEAD_LETTER:
                decided = await _dead_letter(delivery, decided, connection, settings)
            if decided.action == Action.ACK:
                await delivery.ack()
            elif decided.action in (Action.TERM, Action.DEAD_LETTER):
                await delivery.term()
            else:
                await delivery.nak(delay=decided.delay)
        except bus.BusUnavailableError as exc:
            log.warning("could not settle an event; it will be redelivered", extra={"error": str(exc)})
        span.set_attribute("kyma.outcome", decided.action.value)
        metrics.messages.labels(module, decided.action.value).inc()
        if decided.action == Action.DEAD_LETTER:
            metrics.dead_letters.labels(module).inc()


async def _dead_letter(
    delivery: bus.Delivery, decided: Settlement, connection: bus.Bus, settings: ConsumerSettings
) -> Settlement:
    """Publish to the dead-letter subject; if even that fails, keep the message (nak) rather than lose it."""
    subject = subjects.dead_letter_subject(delivery.subject)
    log.error(
        "event sent to the dead-letter subject",
        extra={"subject": delivery.subject, "dead_letter_subject": subject, "reason": decided.reason},
    )
    try:
        await connection.publish(
            subject=subject,
            payload=delivery.data,
            msg_id=f"{delivery.headers.get(bus.MSG_ID_HEADER, '')}-{settings.durable}",
            headers={
                wire.DEAD_LETTER_REASON_HEADER: decided.reason[:1024],
                wire.ORIGINAL_SUBJECT_HEADER: delivery.subject,
                wire.DELIVERIES_HEADER: str(delivery.deliveries),
            },
            timeout=5,
        )
    except bus.BusUnavailableError as exc:
        log.error("dead-letter publish failed, keeping the event", extra={"error": str(exc)})
        return Settlement(Action.NAK, delay=nak_delay(delivery.deliveries, settings), reason=decided.reason)
    return decided


async def consume(
    settings: ConsumerSettings, handler: Handler, *, metrics: ConsumerMetrics, stop: asyncio.Event
) -> None:
    backoff = aio.Backoff(initial=0.5)
    # One set across reconnects: work still running when the connection broke must not hold up the next
    # connection (its settlement fails and NATS redelivers it), yet it still counts against max_in_flight.
    in_flight = _InFlight()
    try:
        while not stop.is_set():
            connection = await bus.connect_retrying(
                list(settings.servers),
                name=f"kyma-reconciler-{settings.durable}",
                stop=stop,
                credentials=settings.credentials,
            )
            if connection is None:
                return
            try:
                pull = await connection.pull_consumer(
                    bus.ConsumerSettings(
                        stream=settings.stream,
                        durable=settings.durable,
                        filter_subject=settings.subject,
                        ack_wait_seconds=settings.ack_wait_seconds,
                        max_ack_pending=settings.max_in_flight,
                        inactive_threshold_seconds=settings.inactive_threshold_seconds,
                    )
                )
                backoff.reset()
                metrics.subscribed(settings.durable)
                reporting = asyncio.create_task(_report_backlog(connection, pull, settings, metrics, stop))
                try:
                    await _pull(connection, pull, settings, handler, metrics, in_flight, stop=stop)
                finally:
                    reporting.cancel()
                    await asyncio.gather(reporting, return_exceptions=True)
            except bus.BusRefusedError as exc:
                # Configuration, not an outage: the other modules' consumers and the controllers go on.
                log.error(
                    "NATS refuses this durable to our identity; grant it (kyma-eventbus) — retrying in a minute",
                    extra={"durable": settings.durable, "error": str(exc)},
                )
                metrics.refused(settings.durable, str(exc))
                await aio.sleep_unless(stop, _REFUSED_RETRY_SECONDS)
            except bus.BusUnavailableError as exc:
                log.warning(
                    "consumer interrupted, reconnecting", extra={"durable": settings.durable, "error": str(exc)}
                )
                await aio.sleep_unless(stop, backoff.delay())
            finally:
                if stop.is_set() and in_flight.tasks:
                    await asyncio.gather(*in_flight.tasks, return_exceptions=True)  # settle on a live connection
                await connection.close()
    finally:
        if in_flight.tasks:
            await asyncio.gather(*in_flight.tasks, return_exceptions=True)


async def _report_backlog(
    connection: bus.Bus,
    pull: bus.PullConsumer,
    settings: ConsumerSettings,
    metrics: ConsumerMetrics,
    stop: asyncio.Event,
) -> None:
    """The durable's backlog and the stream's fill, for dashboards and the stream-near-limit alert.

    Best effort on its own task: an identity without stream-info permission (granted by kyma-eventbus
    since this metric exists) only loses the stream gauges, never a delivery.
    """
    stream_info_allowed = True
    while not await aio.sleep_unless(stop, settings.backlog_report_seconds):
        try:
            backlog = await pull.backlog()
            metrics.pending.labels(settings.durable).set(backlog.pending)
            metrics.ack_pending.labels(settings.durable).set(backlog.ack_pending)
            if stream_info_allowed:
                usage = await connection.stream_usage(settings.stream)
                metrics.stream_messages.labels(settings.stream).set(usage.messages)
                metrics.stream_bytes.labels(settings.stream).set(usage.bytes)
                metrics.stream_max_bytes.labels(settings.stream).set(usage.max_bytes)
        except bus.BusUnavailableError as exc:
            refusal = connection.refusal_about("INFO")
            if stream_info_allowed and refusal is not None and f"STREAM.INFO.{settings.stream}" in refusal:
                stream_info_allowed = False  # asked once per connection: a configuration to fix, not an outage
                log.warning(
                    "NATS refuses the stream's info to the reconciler: regenerate the server configuration "
                    "(kyma-eventbus server-config) to grant it; until then the stream-fill gauges and the "
                    "stream-near-limit alert are blind",
                    extra={"durable": settings.durable, "stream": settings.stream, "error": refusal},
                )
            else:
                log.debug("backlog not reported", extra={"durable": settings.durable, "error": str(exc)})
        except Exception:  # the gauges are best effort; a surprise here must not go unseen, nor stop them
            log.exception("backlog report failed", extra={"durable": settings.durable})


async def _pull(
    connection: bus.Bus,
    pull: bus.PullConsumer,
    settings: ConsumerSettings,
    handler: Handler,
    metrics: ConsumerMetrics,
    in_flight: "_InFlight",
    *,
    stop: asyncio.Event,
) -> None:
    while not stop.is_set():
        free = settings.max_in_flight - len(in_flight.tasks)
        if free <= 0:
            await in_flight.one_settled(timeout=1)
            continue
        for delivery in await pull.fetch(min(settings.batch, free), timeout=1):
            in_flight.start(_settle(delivery, handler, connection, settings, metrics))


class _InFlight:
    """The settlements running, and word when one ends. (``asyncio.wait`` on all of them, at every end, cost
    O(max_in_flight) per event: 7 % of a saturated reconciler's CPU in py-spy.)"""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self._settled = asyncio.Event()

    def start(self, settling: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(settling)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._settled.set()

    async def one_settled(self, *, timeout: float) -> None:
        """Until a settlement ends after this call, or ``timeout``."""
        self._settled.clear()
        await aio.sleep_unless(self._settled, timeout)
