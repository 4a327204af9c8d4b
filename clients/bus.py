"""NATS JetStream: the connection, the streams' definitions, publishing and pull consumers.

The one module that imports nats-py; everything above it sees ``Bus``, ``PullConsumer`` and
``Delivery`` and our errors. One stream captures every event subject. Its duplicate window is
what turns at-least-once delivery from the watchers into effectively-once messages: a publish
carrying a Nats-Msg-Id already seen within the window is acknowledged as a duplicate and not
stored again.

    BusError
     └── BusUnavailableError   NATS unreachable, reconnecting, or no answer in time (retry later)
          └── NoStreamError    nothing listens on the subject: the stream is missing
"""

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable
from typing import Literal

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js import errors as js_errors
from pydantic import BaseModel, ConfigDict, Field

from contract import subjects, wire
from kit import aio

MSG_ID_HEADER = "Nats-Msg-Id"

log = logging.getLogger(__name__)


class BusError(RuntimeError):
    """A failure talking to NATS."""


class BusUnavailableError(BusError):
    """NATS cannot take the message now; the sender should retry."""


class NoStreamError(BusUnavailableError):
    """No stream captures the subject (e.g. a NATS server that lost its store)."""


_NATS_ERRORS = (nats.errors.Error, asyncio.TimeoutError, OSError)


class StreamSettings(BaseModel):
    """A JetStream stream."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default=wire.STREAM_NAME, pattern=r"^[A-Za-z0-9_-]+$")
    subjects: tuple[str, ...] = (subjects.STREAM_SUBJECTS,)
    max_age_seconds: float = Field(default=7 * 24 * 3600, gt=0, description="how long events are kept")
    max_bytes: int = Field(default=-1, ge=-1, description="size limit of the stream (-1: none)")
    duplicate_window_seconds: float = Field(
        default=15 * 60, gt=0, description="how long a Nats-Msg-Id is remembered for dedup"
    )
    replicas: int = Field(default=1, ge=1, le=5, description="copies in a NATS cluster")
    retention: Literal["limits", "interest", "workqueue"] = "limits"

    def config(self) -> js_api.StreamConfig:
        return js_api.StreamConfig(
            name=self.name,
            subjects=list(self.subjects),
            retention=js_api.RetentionPolicy(self.retention),
            max_age=self.max_age_seconds,
            max_bytes=self.max_bytes,
            duplicate_window=self.duplicate_window_seconds,
            num_replicas=self.replicas,
            storage=js_api.StorageType.FILE,
        )


DEAD_LETTERS = StreamSettings(
    name=wire.DEAD_LETTER_STREAM_NAME,
    subjects=(subjects.DEAD_LETTER_SUBJECTS,),
    max_age_seconds=14 * 24 * 3600,
    max_bytes=1 << 30,
    duplicate_window_seconds=120,
)
"""Events no consumer could handle, kept for people to inspect (limits retention: nobody acks them)."""


@dataclasses.dataclass(frozen=True)
class PublishResult:
    stream: str
    sequence: int
    duplicate: bool


@dataclasses.dataclass(frozen=True)
class ConsumerSettings:
    stream: str
    durable: str
    filter_subject: str
    ack_wait_seconds: float
    max_ack_pending: int


class Delivery:
    """One message from a pull consumer, settled exactly once by the caller."""

    def __init__(self, message: Msg) -> None:
        self._message = message
        self.subject = message.subject
        self.data = message.data
        self.headers: dict[str, str] = dict(message.headers or {})
        self.deliveries = int(message.metadata.num_delivered or 1)

    async def ack(self) -> None:
        await _settled(self._message.ack())

    async def nak(self, *, delay: float) -> None:
        await _settled(self._message.nak(delay=delay))

    async def term(self) -> None:
        await _settled(self._message.term())

    async def in_progress(self) -> None:
        """Reset the ack timer: still working on it."""
        await _settled(self._message.in_progress())


async def _settled(call: Awaitable[None]) -> None:
    try:
        await call
    except _NATS_ERRORS as exc:
        # The message will be redelivered after ack_wait; nothing else to do.
        raise BusUnavailableError(f"could not settle the message: {exc!r}") from exc


class PullConsumer:
    def __init__(self, subscription: JetStreamContext.PullSubscription) -> None:
        self._subscription = subscription

    async def fetch(self, batch: int, *, timeout: float) -> list[Delivery]:
        """Up to ``batch`` messages; none when nothing came within ``timeout``."""
        try:
            return [Delivery(m) for m in await self._subscription.fetch(batch, timeout=timeout)]
        except nats.errors.TimeoutError:
            return []
        except _NATS_ERRORS as exc:
            raise BusUnavailableError(f"fetch failed: {exc!r}") from exc


async def _log_error(error: Exception) -> None:
    # nats-py would log every failed reconnect attempt with a traceback; one line is enough.
    log.warning("NATS connection problem", extra={"error": repr(error)})


async def _log_disconnected() -> None:
    log.warning("disconnected from NATS, reconnecting")


async def _log_reconnected() -> None:
    log.info("reconnected to NATS")


class Bus:
    """One connection to NATS, reconnecting forever once made."""

    def __init__(self, connection: Client) -> None:
        self._connection = connection
        self._js = connection.jetstream()

    @classmethod
    async def connect(cls, servers: list[str], *, name: str) -> "Bus":
        """Connect, then reconnect forever: an outage after start-up is waited out, not fatal."""
        try:
            return cls(
                await nats.connect(
                    servers=servers,
                    name=name,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.5,
                    connect_timeout=2,
                    error_cb=_log_error,
                    disconnected_cb=_log_disconnected,
                    reconnected_cb=_log_reconnected,
                )
            )
        except _NATS_ERRORS as exc:
            raise BusUnavailableError(f"cannot connect to NATS at {', '.join(servers)}: {exc}") from exc

    @property
    def is_connected(self) -> bool:
        return bool(self._connection.is_connected)

    async def close(self) -> None:
        await self._connection.close()

    async def ensure_stream(self, settings: StreamSettings) -> None:
        """Create the stream, or bring an existing one to the configured settings."""
        try:
            try:
                await self._js.stream_info(settings.name)
            except js_errors.NotFoundError:
                await self._js.add_stream(settings.config())
                return
            await self._js.update_stream(settings.config())
        except _NATS_ERRORS as exc:
            raise BusUnavailableError(f"cannot create/update stream {settings.name}: {exc}") from exc

    async def publish(
        self, *, subject: str, payload: bytes, msg_id: str, headers: dict[str, str], timeout: float
    ) -> PublishResult:
        """Publish and wait for JetStream's ack; the message id makes a retry harmless."""
        try:
            ack = await self._js.publish(subject, payload, timeout=timeout, headers={**headers, MSG_ID_HEADER: msg_id})
        except nats.errors.NoRespondersError as exc:
            raise NoStreamError(f"no stream captures {subject}") from exc
        except _NATS_ERRORS as exc:
            raise BusUnavailableError(f"no JetStream ack for {subject}: {exc!r}") from exc
        return PublishResult(stream=ack.stream, sequence=ack.seq, duplicate=bool(ack.duplicate))

    async def pull_consumer(self, settings: ConsumerSettings) -> PullConsumer:
        """The durable pull consumer, created with ``settings`` when it does not exist yet."""
        try:
            subscription = await self._js.pull_subscribe(
                settings.filter_subject,
                durable=settings.durable,
                stream=settings.stream,
                config=js_api.ConsumerConfig(
                    ack_policy=js_api.AckPolicy.EXPLICIT,
                    ack_wait=settings.ack_wait_seconds,
                    max_deliver=-1,
                    max_ack_pending=settings.max_ack_pending,
                ),
            )
        except _NATS_ERRORS as exc:
            raise BusUnavailableError(f"cannot subscribe {settings.durable}: {exc!r}") from exc
        return PullConsumer(subscription)


async def connect_retrying(servers: list[str], *, name: str, stop: asyncio.Event) -> Bus | None:
    """Connect, retrying with backoff while NATS is not there yet; None if ``stop`` came first."""
    backoff = aio.Backoff(initial=0.5)
    while not stop.is_set():
        try:
            return await Bus.connect(servers, name=name)
        except BusUnavailableError as exc:
            delay = backoff.delay()
            log.warning("NATS not reachable, retrying", extra={"error": str(exc), "retry_in": round(delay, 2)})
            await aio.sleep_unless(stop, delay)
    return None
