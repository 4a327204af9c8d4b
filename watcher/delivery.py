"""Posting events to the listener over mTLS: at-least-once, bounded backoff, endpoint failover.

Outcomes by answer:
- 202: delivered.
- 400, 413, 415, 422: the listener refuses the event itself; retrying cannot help, so it is
  counted and logged as rejected (a bug or misconfiguration to look at), not retried — and not
  checkpointed, so the next relist (a restart after the fix) sends it again.
- 401/403, 429, 503, other 5xx, timeouts, connection errors: retried with backoff until
  delivered (429/503 honour Retry-After). A certificate being renewed turns a 403 into a 202.
- Connection errors and 5xx also switch to the other configured endpoint. A kept-alive
  connection closed by the listener as a request went out on it is not one: the request is sent
  again at once (``kyma_watcher_delivery_resent``).
"""

import asyncio
import enum
import logging
import ssl
from collections.abc import Callable

import aiohttp
from opentelemetry import trace

from contract import events, wire
from kit import aio
from observability import tracing
from watcher import config, metrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer("kyma.watcher")

_PERMANENT = frozenset({400, 413, 415, 422})


class Outcome(enum.StrEnum):
    DELIVERED = "delivered"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    STOPPED = "stopped"


class ClientTls:
    """The client SSL context, rebuilt when the certificate files are renewed on disk."""

    def __init__(self, settings: config.TlsSettings) -> None:
        self._settings = settings
        self._stamp: tuple[int, ...] = ()
        self._context: ssl.SSLContext | None = None

    def _files_stamp(self) -> tuple[int, ...]:
        files = (self._settings.cert_file, self._settings.key_file, self._settings.ca_file)
        return tuple(f.stat().st_mtime_ns for f in files)

    def context(self) -> tuple[ssl.SSLContext, bool]:
        """The current context, and whether it is new since the last call."""
        stamp = self._files_stamp()
        if self._context is not None and stamp == self._stamp:
            return self._context, False
        context = ssl.create_default_context(cafile=str(self._settings.ca_file))
        context.load_cert_chain(self._settings.cert_file, self._settings.key_file)
        self._context, self._stamp = context, stamp
        return context, True


class Delivery:
    def __init__(self, settings: config.WatcherConfig, watcher_metrics: metrics.WatcherMetrics) -> None:
        self._endpoints = [f"{e.url.rstrip('/')}{wire.EVENTS_PATH}" for e in settings.listeners]
        self._heartbeat_endpoints = [f"{e.url.rstrip('/')}{wire.HEARTBEAT_PATH}" for e in settings.listeners]
        self._active = 0
        self._settings = settings.delivery
        self._tls = ClientTls(settings.tls)
        self._metrics = watcher_metrics
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _current_session(self) -> aiohttp.ClientSession:
        context, renewed = self._tls.context()
        if renewed or self._session is None:
            await self.close()
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    ssl=context, limit=self._settings.senders, keepalive_timeout=self._settings.keepalive_seconds
                ),
                timeout=aiohttp.ClientTimeout(total=self._settings.request_timeout_seconds),
            )
        return self._session

    async def deliver(
        self,
        event: events.ChangeEvent,
        payload: bytes,
        *,
        stop: asyncio.Event,
        superseded: Callable[[], bool],
    ) -> Outcome:
        """Send until delivered, refused as invalid, replaced by a newer change, or stopped."""
        backoff = aio.Backoff(
            initial=self._settings.backoff_initial_seconds, maximum=self._settings.backoff_max_seconds
        )
        while not stop.is_set():
            wait = await self._attempt(event, payload)
            if wait is None:
                return Outcome.DELIVERED
            if wait < 0:
                return Outcome.REJECTED
            if superseded():
                return Outcome.SUPERSEDED
            self._metrics.retries.inc()
            pause = min(max(wait, backoff.delay()), self._settings.backoff_max_seconds)
            if await aio.sleep_unless(stop, pause):
                break
        return Outcome.STOPPED

    async def _attempt(self, event: events.ChangeEvent, payload: bytes) -> float | None:
        """None when delivered; -1 when refused for good; else the least wait before a retry."""
        url = self._endpoints[self._active]
        headers = {"Content-Type": "application/json"}
        parent = tracing.extract({"traceparent": event.trace.traceparent}) if event.trace else None
        with tracer.start_as_current_span("POST listener", context=parent, kind=trace.SpanKind.CLIENT) as span:
            span.set_attributes({"kyma.event_id": event.id, "url.full": url})
            tracing.inject(headers)
            answer = await self._post(url, payload, headers)
            if answer is None:
                return 0.0
            status, reason, retry_after = answer
            span.set_attribute("http.response.status_code", status)
        if status == 202:
            return None
        if status in _PERMANENT:
            log.error(
                "listener refused event",
                extra={"status": status, "reason": reason, "event_id": event.id, "object": event.target.name},
            )
            self._metrics.rejected.labels(str(status)).inc()
            return -1.0
        log.warning("listener asked to retry", extra={"status": status, "reason": reason, "url": url})
        if status >= 500 and status != 503:
            self._fail_over()
        return float(retry_after) if retry_after.isdigit() else 0.0

    async def _post(self, url: str, payload: bytes, headers: dict[str, str]) -> tuple[int, str, str] | None:
        """(status, reason, Retry-After) of one POST; None when the listener could not be reached (then the
        other endpoint is tried next).

        A kept-alive connection the listener (or an ingress) closes as a request goes out on it ends in
        ServerDisconnectedError, or a reset: their idle times differ, or the close and the request crossed. That is
        no sign of an unreachable listener, so the request is sent once more at once, on another connection,
        before it counts as a failure (an event sent twice is published once: its id is the JetStream message id).
        A connection that could not be opened is not sent again: nothing went out."""
        try:
            try:
                return await self._send(url, payload, headers)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if isinstance(exc, aiohttp.ClientConnectorError):
                    raise
                self._metrics.resent.inc()
                log.debug("listener closed the connection under a request: sent again", extra={"url": url})
                return await self._send(url, payload, headers)
        except (TimeoutError, aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            log.warning("listener unreachable", extra={"url": url, "error": repr(exc)})
            self._fail_over()
            return None

    async def _send(self, url: str, payload: bytes, headers: dict[str, str]) -> tuple[int, str, str]:
        session = await self._current_session()
        async with session.post(url, data=payload, headers=headers) as response:
            return response.status, (await response.text())[:500], response.headers.get("Retry-After", "")

    async def heartbeat(self, heartbeat: events.Heartbeat) -> bool:
        """One heartbeat, not retried after a failure (the next one follows); True if the listener took it."""
        url = self._heartbeat_endpoints[self._active]
        answer = await self._post(url, heartbeat.model_dump_json().encode(), {"Content-Type": "application/json"})
        if answer is None:
            return False
        status, reason, _ = answer
        if status != 204:
            log.warning("heartbeat refused", extra={"url": url, "status": status, "reason": reason})
            return False
        return True

    def _fail_over(self) -> None:
        self._active = (self._active + 1) % len(self._endpoints)
