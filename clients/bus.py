"""NATS JetStream: the connection, the streams' definitions, publishing and pull consumers.

The one module that imports nats-py; everything above it sees ``Bus``, ``PullConsumer`` and
``Delivery`` and our errors. One stream captures every event subject. Its duplicate window is
what turns at-least-once delivery from the watchers into effectively-once messages: a publish
carrying a Nats-Msg-Id already seen within the window is acknowledged as a duplicate and not
stored again.

    BusError
     ├── BusUnavailableError   NATS unreachable, reconnecting, or no answer in time (retry later)
     │    ├── NoStreamError    nothing listens on the subject: the stream is missing
     │    └── StreamFullError  the stream is at its byte or message limit (back off; nothing is dropped)
     └── BusRefusedError       NATS refused the identity or the permission (a configuration error)

Every connection authenticates (an nkey seed file) and verifies the server's TLS certificate when
``Credentials`` say so; its request inbox is the identity's own prefix, because each identity may
subscribe only to its own replies.
"""

import asyncio
import dataclasses
import datetime
import logging
import ssl
from collections.abc import Awaitable
from pathlib import Path
from typing import Literal, Self

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js import errors as js_errors
from pydantic import BaseModel, ConfigDict, Field, model_validator

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


class StreamFullError(BusUnavailableError):
    """The stream is at its limit and refuses new messages (discard new): the sender must back off."""


class BusRefusedError(BusError):
    """NATS refused the connection or an operation: wrong credentials or missing permission."""


_NATS_ERRORS = (nats.errors.Error, asyncio.TimeoutError, OSError)
_STORE_LIMIT = 10077
"""JetStream's err_code for "maximum bytes/messages exceeded" with discard new."""


class StreamSettings(BaseModel):
    """A JetStream stream: the one place its retention is defined."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default=wire.STREAM_NAME, pattern=r"^[A-Za-z0-9_-]+$")
    subjects: tuple[str, ...] = (subjects.STREAM_SUBJECTS,)
    retention: Literal["limits", "interest", "workqueue"] = Field(
        default="interest", description="interest: an event is removed once every durable consumer acked it"
    )
    max_age_seconds: float = Field(default=24 * 3600, gt=0, description="no event is kept longer, acked or not")
    max_bytes: int = Field(default=1 << 30, ge=-1, description="size limit (-1: none)")
    discard: Literal["old", "new"] = Field(
        default="new", description="at the limit: new = refuse publishes (backpressure), old = drop the oldest"
    )
    duplicate_window_seconds: float = Field(
        default=wire.DEDUP_WINDOW_SECONDS, gt=0, description="how long a Nats-Msg-Id is remembered for dedup"
    )
    replicas: int = Field(default=1, ge=1, le=5, description="copies in a NATS cluster")

    @model_validator(mode="after")
    def _window_within_age(self) -> Self:
        if self.duplicate_window_seconds > self.max_age_seconds:
            raise ValueError("duplicate_window_seconds cannot be longer than max_age_seconds")
        return self

    def config(self) -> js_api.StreamConfig:
        return js_api.StreamConfig(
            name=self.name,
            subjects=list(self.subjects),
            retention=js_api.RetentionPolicy(self.retention),
            max_age=self.max_age_seconds,
            max_bytes=self.max_bytes,
            discard=js_api.DiscardPolicy(self.discard),
            duplicate_window=self.duplicate_window_seconds,
            num_replicas=self.replicas,
            storage=js_api.StorageType.FILE,
        )


EVENTS = StreamSettings()
"""Change events: kept only until every durable consumer acked them, never beyond a day, at most 1 GiB."""

DEAD_LETTERS = StreamSettings(
    name=wire.DEAD_LETTER_STREAM_NAME,
    subjects=(subjects.DEAD_LETTER_SUBJECTS,),
    retention="limits",
    max_age_seconds=14 * 24 * 3600,
    max_bytes=1 << 30,
    discard="old",
)
"""Events no consumer could handle, kept for people to inspect (limits retention: nobody acks them)."""


class Credentials(BaseModel):
    """How a component proves who it is to NATS, and how it knows the server is ours."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nkey_seed_file: Path | None = Field(default=None, description="the identity's nkey seed (a .nk file)")
    ca_file: Path | None = Field(default=None, description="CA bundle that signed the NATS server's certificate")
    inbox_prefix: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="request inbox; the identity may subscribe to <prefix>.> only",
    )

    def tls(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None


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
    inactive_threshold_seconds: float | None = None
    """NATS deletes the durable after this long without a consumer (None: never)."""


class Delivery:
    """One message from a pull consumer, settled exactly once by the caller."""

    def __init__(self, message: Msg) -> None:
        self._message = message
        self.subject = message.subject
        self.data = message.data
        self.headers: dict[str, str] = dict(message.headers or {})
        self.deliveries = int(message.metadata.num_delivered or 1)
        self.stored_at: datetime.datetime = message.metadata.timestamp
        """When the stream stored it, by the NATS server's clock."""

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


@dataclasses.dataclass(frozen=True)
class Backlog:
    pending: int
    """Messages of the consumer's subjects not yet delivered to it."""
    ack_pending: int
    """Delivered, not yet settled."""


@dataclasses.dataclass(frozen=True)
class StreamUsage:
    messages: int
    bytes: int
    max_bytes: int
    """-1: unlimited."""
    leader: str | None = None
    """The server leading the stream (clustered streams only)."""
    followers: tuple[str, ...] = ()
    """Its replicas on the other servers (clustered streams only)."""


class PullConsumer:
    def __init__(self, subscription: JetStreamContext.PullSubscription) -> None:
        self._subscription = subscription

    async def backlog(self) -> Backlog:
        try:
            info = await self._subscription.consumer_info()
        except _NATS_ERRORS as exc:
            raise BusUnavailableError(f"consumer info failed: {exc!r}") from exc
        return Backlog(pending=info.num_pending or 0, ack_pending=info.num_ack_pending or 0)

    async def fetch(self, batch: int, *, timeout: float) -> list[Delivery]:
        """Up to ``batch`` messages; none when nothing came within ``timeout``."""
        try:
            return [Delivery(m) for m in await self._subscription.fetch(batch, timeout=timeout)]
        except TimeoutError:
            # nats.errors.TimeoutError, and the bare one nats-py raises when the server's answer (a 408 once the
            # pull expired) came after the fetch's own deadline, as on a busy loop: the server is there, nothing
            # came in time. Not an outage (that would close the connection under the work in flight).
            return []
        except _NATS_ERRORS as exc:
            raise BusUnavailableError(f"fetch failed: {exc!r}") from exc


class _ConnectionLog:
    """nats-py's connection callbacks as one log line each, quiet about the disconnect our own close causes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closing = False
        self.violations: list[str] = []
        """The server's permission violations, newest last (it reports them only to this callback)."""

    async def error(self, error: Exception) -> None:
        if "permissions violation" in str(error).lower():
            self.violations = [*self.violations[-9:], str(error)]
            log.error("NATS refused an operation", extra={"connection": self.name, "error": str(error)})
            return
        # nats-py would log every failed reconnect attempt with a traceback; one line is enough.
        log.warning("NATS connection problem", extra={"connection": self.name, "error": repr(error)})

    def violation_about(self, token: str) -> str | None:
        """The latest violation on a subject with ``token`` as one of its dot-separated parts."""
        return next(
            (v for v in reversed(self.violations) if f".{token}." in v or f'.{token}"' in v or f".{token}'" in v),
            None,
        )

    async def disconnected(self) -> None:
        if not self.closing:
            log.warning("disconnected from NATS, reconnecting", extra={"connection": self.name})

    async def reconnected(self) -> None:
        log.info("reconnected to NATS", extra={"connection": self.name})


def connect_options(
    servers: list[str], *, name: str, credentials: Credentials, events: _ConnectionLog | None = None
) -> dict[str, object]:
    """nats.connect's arguments for an identity."""
    events = events or _ConnectionLog(name)
    options: dict[str, object] = {
        "servers": servers,
        "name": name,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "connect_timeout": 2,
        "error_cb": events.error,
        "disconnected_cb": events.disconnected,
        "reconnected_cb": events.reconnected,
    }
    if credentials.nkey_seed_file is not None:
        options["nkeys_seed"] = str(credentials.nkey_seed_file)
    if credentials.inbox_prefix is not None:
        options["inbox_prefix"] = credentials.inbox_prefix
    context = credentials.tls()
    if context is not None:
        options["tls"] = context
    return options


class Bus:
    """One connection to NATS, reconnecting forever once made."""

    def __init__(self, connection: Client, events: _ConnectionLog) -> None:
        self._connection = connection
        self._events = events
        self._js = connection.jetstream()

    @classmethod
    async def connect(cls, servers: list[str], *, name: str, credentials: Credentials | None = None) -> "Bus":
        """Connect, then reconnect forever: an outage after start-up is waited out, not fatal."""
        events = _ConnectionLog(name)
        options = connect_options(servers, name=name, credentials=credentials or Credentials(), events=events)
        try:
            return cls(await nats.connect(**options), events)  # type: ignore[arg-type]
        except nats.errors.Error as exc:
            if "authoriz" in str(exc).lower() or "authenticat" in str(exc).lower():
                raise BusRefusedError(f"NATS at {', '.join(servers)} refused {name}: {exc}") from exc
            raise BusUnavailableError(f"cannot connect to NATS at {', '.join(servers)}: {exc}") from exc
        except (TimeoutError, OSError) as exc:
            raise BusUnavailableError(f"cannot connect to NATS at {', '.join(servers)}: {exc}") from exc

    @property
    def is_connected(self) -> bool:
        return bool(self._connection.is_connected)

    async def close(self) -> None:
        self._events.closing = True
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

    def refusal_about(self, token: str) -> str | None:
        """Why NATS last refused this identity something on a subject with ``token`` among its parts, if it did."""
        return self._events.violation_about(token)

    async def stream_usage(self, name: str) -> StreamUsage:
        try:
            info = await self._js.stream_info(name)
        except _NATS_ERRORS as exc:
            raise BusUnavailableError(f"stream info of {name} failed: {exc!r}") from exc
        cluster = info.cluster
        return StreamUsage(
            messages=info.state.messages,
            bytes=info.state.bytes,
            max_bytes=info.config.max_bytes or -1,
            leader=cluster.leader if cluster else None,
            followers=tuple(str(peer.name) for peer in (cluster.replicas or [])) if cluster else (),
        )

    async def publish(
        self, *, subject: str, payload: bytes, msg_id: str, headers: dict[str, str], timeout: float
    ) -> PublishResult:
        """Publish and wait for JetStream's ack; the message id makes a retry harmless."""
        try:
            ack = await self._js.publish(subject, payload, timeout=timeout, headers={**headers, MSG_ID_HEADER: msg_id})
        except nats.errors.NoRespondersError as exc:
            raise NoStreamError(f"no stream captures {subject}") from exc
        except js_errors.APIError as exc:
            if exc.err_code == _STORE_LIMIT or "maximum" in (exc.description or ""):
                raise StreamFullError(f"the stream refuses {subject}: {exc.description}") from exc
            raise BusUnavailableError(f"JetStream refused {subject}: {exc!r}") from exc
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
                    inactive_threshold=settings.inactive_threshold_seconds,
                ),
            )
        except _NATS_ERRORS as exc:
            violation = self._events.violation_about(settings.durable)
            if violation is not None:
                raise BusRefusedError(
                    f"this identity may not use durable {settings.durable} on {settings.filter_subject}: {violation}"
                ) from exc
            raise BusUnavailableError(f"cannot subscribe {settings.durable}: {exc!r}") from exc
        return PullConsumer(subscription)


async def connect_retrying(
    servers: list[str], *, name: str, stop: asyncio.Event, credentials: Credentials | None = None
) -> Bus | None:
    """Connect, retrying with backoff while NATS is not there yet (or refuses us); None if ``stop`` came first."""
    backoff = aio.Backoff(initial=0.5, maximum=30)
    while not stop.is_set():
        try:
            return await Bus.connect(servers, name=name, credentials=credentials)
        except BusError as exc:
            delay = backoff.delay()
            log.warning("NATS not reachable, retrying", extra={"error": str(exc), "retry_in": round(delay, 2)})
            await aio.sleep_unless(stop, delay)
    return None
