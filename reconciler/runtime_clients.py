"""One API client per runtime, built from its kubeconfig Secret in KCP, cached, rebuilt on change.

The Secret is the module kubeconfig ``kyma-certs`` mints (``<module>-kubeconfig-<runtime>`` in
kyma-sync-kubeconfigs): the reconcilers never see a runtime's master kubeconfig. It is read from
the manager's cache of those Secrets, so building a client costs no request to KCP. A semaphore
per runtime bounds how many writes go to one apiserver at once.

A client is taken with ``use``, which counts who is using it. One nobody has used for
``idle_seconds`` is retired, so KCP's memory follows activity, not the fleet: an idle runtime costs
its cached Secret and Kyma, not a client with its TLS context and connection pool (a resync builds
it again, once per pass). ``run`` looks for them while nothing uses any client (a quiet landscape),
each use looks too. A retired client (idle, or replaced after its Secret changed) is closed as soon
as its last user is done. It used to stay open for the longest reconcile timeout after its last use,
in case a reconcile still held it: after a resync pass over 10,000 runtimes, thousands of clients
nobody used were open for five minutes (4,536 in the 10,000-runtime benchmark's idle reading).
"""

import asyncio
import base64
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import yaml

from clients import informer, kube, objects
from contract import wire
from kit import aio

log = logging.getLogger(__name__)


class RuntimeUnavailableError(RuntimeError):
    """No usable kubeconfig for the runtime."""


@dataclasses.dataclass
class RuntimeHandle:
    objects: objects.ClusterObjects
    limit: asyncio.Semaphore
    secret_version: str
    used_at: float = dataclasses.field(default_factory=time.monotonic)
    """When it was last taken or given back."""
    users: int = 0
    """Reconciles using it now: a retired client is closed only when none is."""
    prepared: set[str] = dataclasses.field(default_factory=set)
    """What was ensured once for this client (CRDs, namespaces); a new client starts afresh."""


class RuntimeClients:
    def __init__(
        self,
        secrets: informer.Informer,
        *,
        module: str,
        namespace: str,
        per_runtime: int = 8,
        idle_seconds: float = 120,
    ) -> None:
        self._secrets = secrets
        self._idle = idle_seconds
        self._idle_checked = time.monotonic()
        self._module = module
        self._namespace = namespace
        self._per_runtime = per_runtime
        self._handles: dict[str, RuntimeHandle] = {}
        self._building: dict[str, asyncio.Lock] = {}
        self._retired: list[RuntimeHandle] = []
        """Clients no longer handed out, open while a reconcile still uses them."""

    def secret_name(self, runtime: str) -> str:
        return wire.module_kubeconfig_secret(self._module, runtime)

    @property
    def cached(self) -> int:
        """Clients held now (retired ones not counted)."""
        return len(self._handles)

    @property
    def retired(self) -> int:
        """Clients no longer handed out but still open: a reconcile is still using them."""
        return len(self._retired)

    async def run(self, *, stop: asyncio.Event) -> None:
        """Retire idle clients and close retired ones nobody uses until ``stop``, whether or not any client is used."""
        while not await aio.sleep_unless(stop, self._idle / 10):
            self._retire_idle()
            await self._close_retired()

    @contextlib.asynccontextmanager
    async def use(self, runtime: str) -> AsyncIterator[RuntimeHandle]:
        """The runtime's client, built on first use; counted as in use until the block is left.

        Raises RuntimeUnavailableError when the runtime has no usable kubeconfig Secret.
        """
        self._retire_idle()
        await self._close_retired()
        handle = self._handles.get(runtime)
        if handle is None:
            async with self._building.setdefault(runtime, asyncio.Lock()):
                handle = self._handles.get(runtime)
                if handle is None:
                    handle = self._handles[runtime] = await self._build(runtime)
                self._building.pop(runtime, None)
        handle.users += 1
        handle.used_at = time.monotonic()
        try:
            yield handle
        finally:
            handle.users -= 1
            handle.used_at = time.monotonic()

    def _retire_idle(self) -> None:
        """Retire clients nobody has used for the idle time (looked at most every tenth of it: a scan is
        O(runtimes)). One in use is not idle, however long its reconcile takes."""
        now = time.monotonic()
        if now - self._idle_checked < self._idle / 10:
            return
        self._idle_checked = now
        idle = [r for r, handle in self._handles.items() if not handle.users and now - handle.used_at > self._idle]
        for runtime in idle:
            self.invalidate(runtime)

    async def _build(self, runtime: str) -> RuntimeHandle:
        secret = self._secrets.get(self.secret_name(runtime), self._namespace)
        if secret is None:
            raise RuntimeUnavailableError(f"no kubeconfig Secret {self._namespace}/{self.secret_name(runtime)}")
        try:
            document: Any = yaml.safe_load(base64.b64decode(secret["data"][wire.KUBECONFIG_KEY]))
            api = await kube.api_client(document)
        except (KeyError, ValueError, TypeError, yaml.YAMLError) as exc:
            raise RuntimeUnavailableError(f"kubeconfig Secret of {runtime} is unusable: {exc}") from exc
        return RuntimeHandle(
            objects=objects.ClusterObjects(api, field_manager=wire.RECONCILER_FIELD_MANAGER),
            limit=asyncio.Semaphore(self._per_runtime),
            secret_version=secret["metadata"]["resourceVersion"],
        )

    def invalidate(self, runtime: str, *, secret_version: str | None = None) -> bool:
        """Drop the runtime's client if its Secret changed (or unconditionally); True if dropped.

        The old client is closed once no reconcile uses it: at the next sweep or use of any client.
        """
        handle = self._handles.get(runtime)
        if handle is None or (secret_version is not None and handle.secret_version == secret_version):
            return False
        del self._handles[runtime]
        self._retired.append(handle)
        return True

    async def _close_retired(self, *, everything: bool = False) -> None:
        closing = [handle for handle in self._retired if everything or not handle.users]
        self._retired = [] if everything else [handle for handle in self._retired if handle.users]
        for handle in closing:
            try:
                await handle.objects.api.close()
            except Exception:  # a client that fails to close must not stop the sweep, nor the others' closing
                log.exception("closing a runtime client failed")

    async def close(self) -> None:
        for runtime in list(self._handles):
            self.invalidate(runtime)
        await self._close_retired(everything=True)
