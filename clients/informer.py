"""Following a resource: list, then watch from the list's resourceVersion, forever.

Bookmarks advance the resourceVersion without reaching the handler; a watch the server ends
(timeout) resumes where it was; 410 Gone relists; other API errors back off with jitter and
relist. Only ``stop`` (which abandons a watch in progress) or cancellation ends it.
"""

import asyncio
import logging
from typing import Any, Protocol

from kubernetes_asyncio import client

from clients import kube
from kit import aio

log = logging.getLogger(__name__)


class Handler(Protocol):
    async def listed(self, items: list[dict[str, Any]]) -> None:
        """The full current set, after every (re)list."""

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED from the watch."""


async def follow(
    api: client.ApiClient,
    gvr: kube.Gvr,
    *,
    namespace: str | None,
    label_selector: str | None,
    handler: Handler,
    stop: asyncio.Event,
    watch_timeout_seconds: int = 300,
) -> None:
    async def forever() -> None:
        backoff = aio.Backoff(initial=0.2, maximum=10)
        while True:
            await _list_then_watch(backoff)

    async def _list_then_watch(backoff: aio.Backoff) -> None:
        try:
            items, resource_version = await kube.list_objects(
                api, gvr, namespace=namespace, label_selector=label_selector
            )
            await handler.listed(items)
            backoff.reset()
            while True:
                async for kind, obj in kube.watch_objects(
                    api,
                    gvr,
                    namespace=namespace,
                    label_selector=label_selector,
                    resource_version=resource_version,
                    timeout_seconds=watch_timeout_seconds,
                ):
                    resource_version = obj["metadata"]["resourceVersion"]
                    if kind != "BOOKMARK":
                        await handler.changed(kind, obj)
        except kube.ResourceVersionExpired:
            log.info("watch expired (410), relisting", extra={"resource": gvr.resource})
        except kube.KubeAPIError as exc:
            delay = backoff.delay()
            log.warning(
                "apiserver error, backing off",
                extra={"resource": gvr.resource, "error": str(exc), "retry_in": round(delay, 2)},
            )
            await asyncio.sleep(delay)

    await aio.run_until(stop, forever())
