"""Following a resource: list, then watch from the list's resourceVersion, forever.

Bookmarks advance the resourceVersion without reaching the handler; a watch the server ends
(timeout) resumes where it was; 410 Gone relists; other API errors back off with jitter and
relist. Only ``stop`` (which abandons a watch in progress) or cancellation ends it.

``Informer`` keeps what it follows in a cache (controller-runtime's informer + cache), without managedFields: a
controller reads the cache, subscribes to its changes as triggers, and waits for ``synced``
before deciding anything, because before the first list an absent entry means "not seen
yet", never "does not exist". A relist reports what vanished meanwhile as DELETED.
"""

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol

from clients import kube
from kit import aio

log = logging.getLogger(__name__)


class Handler(Protocol):
    async def listed(self, items: list[dict[str, Any]]) -> None:
        """The full current set, after every (re)list."""

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED from the watch."""


async def follow(
    api: kube.ApiClient,
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
        except kube.ExpiredError:
            log.info("watch expired (410), relisting", extra={"resource": gvr.resource})
        except kube.KubeError as exc:
            delay = backoff.delay()
            log.warning(
                "apiserver error, backing off",
                extra={"resource": gvr.resource, "error": str(exc), "retry_in": round(delay, 2)},
            )
            await asyncio.sleep(delay)

    await aio.run_until(stop, forever())


ObjectKey = tuple[str, str]
"""(namespace or "", name)"""


def key_of(obj: dict[str, Any]) -> ObjectKey:
    metadata = obj["metadata"]
    return metadata.get("namespace") or "", metadata["name"]


@dataclasses.dataclass(frozen=True)
class Change:
    kind: Literal["ADDED", "MODIFIED", "DELETED"]
    old: dict[str, Any] | None
    """The object as cached before (None when new)."""
    new: dict[str, Any] | None
    """The object now (None when deleted)."""

    @property
    def current(self) -> dict[str, Any]:
        obj = self.new if self.new is not None else self.old
        assert obj is not None
        return obj


Listener = Callable[[Change], None]


def _without_bookkeeping(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without metadata.managedFields, as controller-runtime's caches keep objects
    (TransformStripManagedFields): the apiserver's record of who set which field is often the larger part of a
    small object, and KCP caches a Kyma, a kubeconfig Secret and a SyncResource per runtime. Nothing reads them
    from a cache; a write never carries them back (an update without managedFields leaves them as they are)."""
    obj["metadata"].pop("managedFields", None)
    return obj


class Informer:
    """One resource followed into a cache of objects by (namespace, name)."""

    def __init__(
        self, api: kube.ApiClient, gvr: kube.Gvr, *, namespace: str | None = None, label_selector: str | None = None
    ) -> None:
        self.gvr = gvr
        self._api = api
        self._namespace = namespace
        self._label_selector = label_selector
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._listeners: list[Listener] = []
        self.synced = asyncio.Event()
        """Set once the first list is in the cache; from then on an absent entry means "does not exist"."""

    def describe(self) -> str:
        scope = f" in {self._namespace}" if self._namespace else ""
        return f"{self.gvr.resource}{scope}"

    def subscribe(self, listener: Listener) -> None:
        """``listener`` hears every change after it is in the cache (it must not block)."""
        self._listeners.append(listener)

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self._objects.get((namespace or "", name))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._objects.values()))

    def __len__(self) -> int:
        return len(self._objects)

    async def run(self, *, stop: asyncio.Event) -> None:
        await follow(
            self._api, self.gvr, namespace=self._namespace, label_selector=self._label_selector, handler=self, stop=stop
        )

    async def listed(self, items: list[dict[str, Any]]) -> None:
        fresh = {key_of(obj): _without_bookkeeping(obj) for obj in items}
        changes = [Change("DELETED", old, None) for key, old in self._objects.items() if key not in fresh]
        for key, obj in fresh.items():
            old = self._objects.get(key)
            if old is None:
                changes.append(Change("ADDED", None, obj))
            elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                changes.append(Change("MODIFIED", old, obj))
        self._objects = fresh
        self.synced.set()
        self._notify(changes)

    async def changed(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        old = self._objects.get(key)
        if kind == "DELETED":
            self._objects.pop(key, None)
            self._notify([Change("DELETED", old or _without_bookkeeping(obj), None)])
            return
        self._objects[key] = obj = _without_bookkeeping(obj)
        self._notify([Change("ADDED" if old is None else "MODIFIED", old, obj)])

    def _notify(self, changes: list[Change]) -> None:
        for change in changes:
            for listener in self._listeners:
                try:
                    listener(change)
                except Exception:  # one object a listener cannot digest must not stop the informer
                    log.exception("informer listener failed", extra={"resource": self.describe()})
