"""NATS JetStream: connection, the event stream's definition, and publishing.

One stream captures every event subject. Its duplicate window is what turns at-least-once
delivery from the watchers into effectively-once messages: a publish carrying a Nats-Msg-Id
already seen within the window is acknowledged as a duplicate and not stored again.

    BusError
     └── BusUnavailableError   NATS unreachable, reconnecting, or no ack in time (retry later)
          └── NoStreamError    nothing listens on the subject: the stream is missing
"""

import asyncio
import dataclasses
import logging
from typing import Literal

import nats
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js import errors as js_errors
from pydantic import BaseModel, ConfigDict, Field

from contract import subjects
from kit import aio

MSG_ID_HEADER = "Nats-Msg-Id"

log = logging.getLogger(__name__)


class BusError(RuntimeError):
    """A failure talking to NATS."""


class BusUnavailableError(BusError):
    """NATS cannot take the message now; the sender should retry."""


class NoStreamError(BusUnavailableError):
    """No stream captures the subject (e.g. a NATS server that lost its store)."""


class StreamSettings(BaseModel):
    """The JetStream stream holding all change events."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="KYMA_EVENTS", pattern=r"^[A-Za-z0-9_-]+$")
    subjects: tuple[str, ...] = (subjects.STREAM_SUBJECTS,)
    max_age_seconds: float = Field(default=7 * 24 * 3600, gt=0, description="how long events are kept")
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
            duplicate_window=self.duplicate_window_seconds,
            num_replicas=self.replicas,
            storage=js_api.StorageType.FILE,
        )


@dataclasses.dataclass(frozen=True)
class PublishResult:
    stream: str
    sequence: int
    duplicate: bool


async def _log_error(error: Exception) -> None:
    # nats-py would log every failed reconnect attempt with a traceback; one line is enough.
    log.warning("NATS connection problem", extra={"error": repr(error)})


async def _log_disconnected() -> None:
    log.warning("disconnected from NATS, reconnecting")


async def _log_reconnected() -> None:
    log.info("reconnected to NATS")


async def connect(servers: list[str], *, name: str) -> Client:
    """Connect, then reconnect forever: an outage after start-up is waited out, not fatal."""
    try:
        return await nats.connect(
            servers=servers,
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            connect_timeout=2,
            error_cb=_log_error,
            disconnected_cb=_log_disconnected,
            reconnected_cb=_log_reconnected,
        )
    except (nats.errors.Error, OSError, asyncio.TimeoutError) as exc:
        raise BusUnavailableError(f"cannot connect to NATS at {', '.join(servers)}: {exc}") from exc


async def connect_retrying(servers: list[str], *, name: str, stop: asyncio.Event) -> Client | None:
    """Connect, retrying with backoff while NATS is not there yet; None if ``stop`` came first."""
    backoff = aio.Backoff(initial=0.5)
    while not stop.is_set():
        try:
            return await connect(servers, name=name)
        except BusUnavailableError as exc:
            delay = backoff.delay()
            log.warning("NATS not reachable, retrying", extra={"error": str(exc), "retry_in": round(delay, 2)})
            await aio.sleep_unless(stop, delay)
    return None


async def ensure_stream(js: JetStreamContext, settings: StreamSettings) -> js_api.StreamInfo:
    """Create the stream, or bring an existing one to the configured settings."""
    try:
        try:
            await js.stream_info(settings.name)
        except js_errors.NotFoundError:
            return await js.add_stream(settings.config())
        return await js.update_stream(settings.config())
    except (nats.errors.Error, asyncio.TimeoutError) as exc:
        raise BusUnavailableError(f"cannot create/update stream {settings.name}: {exc}") from exc


async def publish(
    js: JetStreamContext,
    *,
    subject: str,
    payload: bytes,
    msg_id: str,
    headers: dict[str, str],
    timeout: float,
) -> PublishResult:
    """Publish and wait for JetStream's ack; the message id makes a retry harmless."""
    try:
        ack = await js.publish(
            subject, payload, timeout=timeout, headers={**headers, MSG_ID_HEADER: msg_id}
        )
    except nats.errors.NoRespondersError as exc:
        raise NoStreamError(f"no stream captures {subject}") from exc
    except (nats.errors.Error, asyncio.TimeoutError) as exc:
        raise BusUnavailableError(f"no JetStream ack for {subject}: {exc!r}") from exc
    return PublishResult(stream=ack.stream, sequence=ack.seq, duplicate=bool(ack.duplicate))
