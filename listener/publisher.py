"""The listener's side of JetStream: one connection, kept up for the process's lifetime."""

import asyncio
import logging

from clients import bus
from kit import aio
from listener import settings

log = logging.getLogger(__name__)


class JetStreamPublisher:
    """Connects (retrying until NATS is there), ensures the streams, publishes with dedup ids."""

    def __init__(self, config: settings.NatsSettings) -> None:
        self._config = config
        self._bus: bus.Bus | None = None

    @property
    def ready(self) -> bool:
        return self._bus is not None and self._bus.is_connected

    async def run(self, *, stop: asyncio.Event) -> None:
        while True:
            connection = await bus.connect_retrying(list(self._config.servers), name="kyma-listener", stop=stop)
            if connection is None:
                return
            try:
                if await self._ensure_streams_until_done(connection, stop=stop):
                    self._bus = connection
                    log.info("connected to NATS", extra={"servers": self._config.servers})
                    await stop.wait()
            finally:
                self._bus = None
                await connection.close()

    async def _ensure_streams_until_done(self, connection: bus.Bus, *, stop: asyncio.Event) -> bool:
        while not stop.is_set():
            try:
                await self._ensure_streams(connection)
                return True
            except bus.BusUnavailableError as exc:
                log.warning("stream not ready, retrying", extra={"error": str(exc)})
                await aio.sleep_unless(stop, 1.0)
        return False

    async def _ensure_streams(self, connection: bus.Bus) -> None:
        await connection.ensure_stream(self._config.stream)
        await connection.ensure_stream(bus.DEAD_LETTERS)

    async def publish(self, *, subject: str, payload: bytes, msg_id: str, headers: dict[str, str]) -> bus.PublishResult:
        connection = self._bus
        if connection is None:
            raise bus.BusUnavailableError("not connected to NATS")
        timeout = self._config.publish_timeout_seconds
        try:
            return await connection.publish(
                subject=subject, payload=payload, msg_id=msg_id, headers=headers, timeout=timeout
            )
        except bus.NoStreamError:
            # A NATS server that came back without its store: recreate the streams once, retry.
            log.warning("stream missing, recreating", extra={"stream": self._config.stream.name})
            await self._ensure_streams(connection)
            return await connection.publish(
                subject=subject, payload=payload, msg_id=msg_id, headers=headers, timeout=timeout
            )
