"""The listener's side of JetStream: one connection, kept up for the process's lifetime."""

import asyncio
import logging
from nats.aio.client import Client
from nats.js import JetStreamContext

from clients import bus
from kit import aio
from listener import settings

log = logging.getLogger(__name__)


class JetStreamPublisher:
    """Connects (retrying until NATS is there), ensures the stream, publishes with dedup ids."""

    def __init__(self, config: settings.NatsSettings) -> None:
        self._config = config
        self._connection: Client | None = None
        self._js: JetStreamContext | None = None

    @property
    def ready(self) -> bool:
        return self._js is not None and self._connection is not None and self._connection.is_connected

    async def run(self, *, stop: asyncio.Event) -> None:
        while True:
            connection = await bus.connect_retrying(list(self._config.servers), name="kyma-listener", stop=stop)
            if connection is None:
                return
            try:
                await self._ensure_stream_until_done(connection.jetstream(), stop=stop)
                self._connection = connection
                log.info("connected to NATS", extra={"servers": self._config.servers})
                await stop.wait()
            finally:
                self._js = None
                self._connection = None
                await connection.close()

    async def _ensure_stream_until_done(self, js: JetStreamContext, *, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await bus.ensure_stream(js, self._config.stream)
                self._js = js
                return
            except bus.BusUnavailableError as exc:
                log.warning("stream not ready, retrying", extra={"error": str(exc)})
                await aio.sleep_unless(stop, 1.0)

    async def publish(
        self, *, subject: str, payload: bytes, msg_id: str, headers: dict[str, str]
    ) -> bus.PublishResult:
        js = self._js
        if js is None:
            raise bus.BusUnavailableError("not connected to NATS")
        try:
            return await self._publish(js, subject=subject, payload=payload, msg_id=msg_id, headers=headers)
        except bus.NoStreamError:
            # A NATS server that came back without its store: recreate the stream once, retry.
            log.warning("stream missing, recreating", extra={"stream": self._config.stream.name})
            await bus.ensure_stream(js, self._config.stream)
            return await self._publish(js, subject=subject, payload=payload, msg_id=msg_id, headers=headers)

    async def _publish(
        self, js: JetStreamContext, *, subject: str, payload: bytes, msg_id: str, headers: dict[str, str]
    ) -> bus.PublishResult:
        return await bus.publish(
            js,
            subject=subject,
            payload=payload,
            msg_id=msg_id,
            headers=headers,
            timeout=self._config.publish_timeout_seconds,
        )

