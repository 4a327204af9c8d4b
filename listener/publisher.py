"""The listener's side of JetStream: one connection, kept up for the process's lifetime."""

import asyncio
import logging

from clients import bus
from listener import settings

log = logging.getLogger(__name__)


class JetStreamPublisher:
    """Connects as the listener's identity (retrying until NATS is there), publishes with dedup ids."""

    def __init__(self, config: settings.NatsSettings) -> None:
        self._config = config
        self._bus: bus.Bus | None = None

    @property
    def ready(self) -> bool:
        return self._bus is not None and self._bus.is_connected

    async def run(self, *, stop: asyncio.Event) -> None:
        while True:
            connection = await bus.connect_retrying(
                list(self._config.servers), name="kyma-listener", stop=stop, credentials=self._config.credentials
            )
            if connection is None:
                return
            try:
                self._bus = connection
                log.info("connected to NATS", extra={"servers": self._config.servers})
                await stop.wait()
            finally:
                self._bus = None
                await connection.close()

    async def publish(self, *, subject: str, payload: bytes, msg_id: str, headers: dict[str, str]) -> bus.PublishResult:
        """Publish and wait for JetStream's ack. The listener creates no streams (it may not): a missing
        stream is NoStreamError, answered with 503 until an admin runs ``kyma-eventbus ensure-streams``."""
        connection = self._bus
        if connection is None:
            raise bus.BusUnavailableError("not connected to NATS")
        return await connection.publish(
            subject=subject,
            payload=payload,
            msg_id=msg_id,
            headers=headers,
            timeout=self._config.publish_timeout_seconds,
        )
