"""One API client per runtime, built from its kubeconfig Secret in KCP, cached, rebuilt on change.

The Secret is the module kubeconfig ``kyma-certs`` mints (``<module>-kubeconfig-<runtime>`` in
kyma-sync-kubeconfigs): the reconcilers never see a runtime's master kubeconfig. It is read from
the manager's cache of those Secrets, so building a client costs no request to KCP. A semaphore
per runtime bounds how many writes go to one apiserver at once.

A client unused for ``idle_seconds`` is retired, so KCP's memory follows activity, not the fleet:
an idle runtime costs its cached Secret and Kyma, not a client with its TLS context and connection
pool (a resync builds it again, once per pass). ``run`` looks for them while nothing uses any client
(a quiet landscape), each use looks too. A retired client is closed once the linger has passed
since its last use (a reconcile that took it then may still be using it), not since it was retired:
an idle client had been unused for the idle time already.
"""

import asyncio
import base64
import dataclasses
import logging
import time
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
        linger_seconds: float = 300,
        idle_seconds: float = 120,
    ) -> None:
        self._secrets = secrets
        self._linger = linger_seconds
        self._idle = idle_seconds
        self._idle_checked = time.monotonic()
        self._module = module
        self._namespace = namespace
        self._per_runtime = per_runtime
        self._handles: dict[str, RuntimeHandle] = {}
        self._building: dict[str, asyncio.Lock] = {}
        self._retired: list[tuple[float, kube.ApiClient]] = []
        """(when it may be closed, the client) of clients no longer handed out."""

    def secret_name(self, runtime: str) -> str:
        return wire.module_kubeconfig_secret(self._module, runtime)

    @property
    def cached(self) -> int:
        """Clients held now (retired ones not counted)."""
        return len(self._handles)

    @property
    def retired(self) -> int:
        """Clients no longer handed out but still open, waiting for the linger after their last use."""
        return len(self._retired)

    async def run(self, *, stop: asyncio.Event) -> None:
        """Retire idle clients and close the lingering ones until ``stop``, whether or not any client is used."""
        while not await aio.sleep_unless(stop, self._idle / 10):
            self._retire_idle()
            await self._close_retired()

    async def get(self, runtime: str) -> RuntimeHandle:
        self._retire_idle()
        await self._close_retired()
        handle = self._handles.get(runtime)
        if handle is None:
            async with self._building.setdefault(runtime, asyncio.Lock()):
                handle = self._handles.get(runtime)
                if handle is None:
                    handle = self._handles[runtime] = await self._build(runtime)
                self._building.pop(runtime, None)
        handle.used_at = time.monotonic()
        return handle

    def _retire_idle(self) -> None:
        """Retire clients unused for the idle time (looked at most every tenth of it: a scan is O(runtimes))."""
        now = time.monotonic()
        if now - self._idle_checked < self._idle / 10:
            return
        self._idle_checked = now
        for runtime in [r for r, handle in self._handles.items() if now - handle.used_at > self._idle]:
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

        The old client is closed once it has lingered longer than any reconcile may still use it.
        """
        handle = self._handles.get(runtime)
        if handle is None or (secret_version is not None and handle.secret_version == secret_version):
            return False
        del self._handles[runtime]
        self._retired.append((handle.used_at + self._linger, handle.objects.api))
        return True

    async def _close_retired(self, *, everything: bool = False) -> None:
        now = time.monotonic()
        closing = [api for closable_at, api in self._retired if everything or closable_at <= now]
        self._retired = [] if everything else [(at, api) for at, api in self._retired if at > now]
        for api in closing:
            try:
                await api.close()
            except Exception:  # a client that fails to close must not stop the sweep, nor the others' closing
                log.exception("closing a runtime client failed")

    async def close(self) -> None:
        for runtime in list(self._handles):
            self.invalidate(runtime)
        await self._close_retired(everything=True)
