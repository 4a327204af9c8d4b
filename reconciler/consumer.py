"""Consuming change events from JetStream with a durable pull consumer.

Outcomes are decided in one place: the handler returns ACK (done), NAK (try again later, with a
backoff that grows with the delivery count) or TERM (never redeliver: a poison message). An
undecodable message is TERM; a handler that raises is NAK. Each message gets a consumer span
continuing the trace from its headers. The connection is retried until NATS is there.
"""

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable

import nats.errors
from nats.aio.msg import Msg
from nats.js import api as js_api
from opentelemetry import trace

from clients import bus
from contract import errors as contract_errors
from contract import events
from kit import aio
from observability import tracing

log = logging.getLogger(__name__)
tracer = trace.get_tracer("kyma.reconciler")


class Outcome(enum.StrEnum):
    ACK = "ack"
    NAK = "nak"
    TERM = "term"


Handler = Callable[[events.ChangeEvent], Awaitable[Outcome]]


@dataclasses.dataclass(frozen=True)
class ConsumerSettings:
    servers: tuple[str, ...]
    subject: str
    durable: str
    stream: str = "KYMA_EVENTS"
    batch: int = 64
    ack_wait_seconds: float = 60
    max_deliver: int = -1
    nak_delay_initial: float = 0.5
    nak_delay_max: float = 30


def nak_delay(deliveries: int, settings: ConsumerSettings) -> float:
    return float(min(settings.nak_delay_max, settings.nak_delay_initial * 2 ** max(0, deliveries - 1)))


async def _settle(message: Msg, handler: Handler, settings: ConsumerSettings) -> Outcome:
    headers = message.headers or {}
    with tracer.start_as_current_span(
        f"consume {message.subject}", context=tracing.extract(headers), kind=trace.SpanKind.CONSUMER
    ) as span:
        try:
            event = events.decode(message.data)
        except contract_errors.ContractError as exc:
            log.error("undecodable event, dropping", extra={"subject": message.subject, "error": str(exc)})
            await message.term()
            return Outcome.TERM
        span.set_attributes({"kyma.event_id": event.id, "kyma.runtime": event.runtime})
        try:
            outcome = await handler(event)
        except Exception as exc:  # the guard: a failing handler is retried, not fatal
            log.exception("event handler failed", extra={"event_id": event.id})
            span.record_exception(exc)
            outcome = Outcome.NAK
        if outcome == Outcome.ACK:
            await message.ack()
        elif outcome == Outcome.TERM:
            await message.term()
        else:
            await message.nak(delay=nak_delay(message.metadata.num_delivered or 1, settings))
        span.set_attribute("kyma.outcome", outcome.value)
        return outcome


async def consume(settings: ConsumerSettings, handler: Handler, *, stop: asyncio.Event) -> None:
    backoff = aio.Backoff(initial=0.5)
    while True:
        connection = await bus.connect_retrying(
            list(settings.servers), name=f"kyma-reconciler-{settings.durable}", stop=stop
        )
        if connection is None:
            return
        try:
            js = connection.jetstream()
            subscription = await js.pull_subscribe(
                settings.subject,
                durable=settings.durable,
                stream=settings.stream,
                config=js_api.ConsumerConfig(
                    ack_policy=js_api.AckPolicy.EXPLICIT,
                    ack_wait=settings.ack_wait_seconds,
                    max_deliver=settings.max_deliver,
                    max_ack_pending=settings.batch * 4,
                ),
            )
            backoff.reset()
            while not stop.is_set():
                try:
                    messages = await subscription.fetch(settings.batch, timeout=1)
                except nats.errors.TimeoutError:
                    continue
                await asyncio.gather(*(_settle(m, handler, settings) for m in messages))
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            log.warning("consumer interrupted, reconnecting", extra={"durable": settings.durable, "error": repr(exc)})
            await aio.sleep_unless(stop, backoff.delay())
        finally:
            await connection.close()
