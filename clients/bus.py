"""NATS JetStream: connection and the event stream's definition.

One stream captures every event subject. Its duplicate window is what turns at-least-once
delivery from the watchers into effectively-once messages: a publish carrying a Nats-Msg-Id
already seen within the window is acknowledged as a duplicate and not stored again.
"""

import dataclasses

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js import errors as js_errors

from contract import subjects


@dataclasses.dataclass(frozen=True)
class StreamSettings:
    name: str = "KYMA_EVENTS"
    subjects: tuple[str, ...] = (subjects.STREAM_SUBJECTS,)
    max_age_seconds: float = 7 * 24 * 3600
    duplicate_window_seconds: float = 15 * 60
    replicas: int = 1
    retention: js_api.RetentionPolicy = js_api.RetentionPolicy.LIMITS

    def config(self) -> js_api.StreamConfig:
        return js_api.StreamConfig(
            name=self.name,
            subjects=list(self.subjects),
            retention=self.retention,
            max_age=self.max_age_seconds,
            duplicate_window=self.duplicate_window_seconds,
            num_replicas=self.replicas,
            storage=js_api.StorageType.FILE,
        )


async def connect(servers: list[str], *, name: str) -> Client:
    """Connect, reconnecting forever: a NATS outage is waited out, not fatal."""
    return await nats.connect(
        servers=servers,
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=2,
    )


async def ensure_stream(js: JetStreamContext, settings: StreamSettings) -> js_api.StreamInfo:
    """Create the stream, or bring an existing one to the configured settings."""
    try:
        await js.stream_info(settings.name)
    except js_errors.NotFoundError:
        return await js.add_stream(settings.config())
    return await js.update_stream(settings.config())
