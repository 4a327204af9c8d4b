"""One API client per runtime, built from its kubeconfig Secret in KCP, cached, rebuilt on change.

The Secret is the module kubeconfig ``kyma-certs`` mints (``<module>-kubeconfig-<runtime>`` in
kyma-sync-kubeconfigs): the reconcilers never see a runtime's master kubeconfig. It is read from
the manager's cache of those Secrets, so building a client costs no request to KCP. A semaphore
per runtime bounds how many writes go to one apiserver at once.

A client is taken with ``use``, which counts who is using it. One nobody has used for
``idle_seconds`` is retired, so KCP's memory follows activity, not the fleet: an idle runtime costs
its cached Secret and Kyma, not a client with its TLS context and connection pool (a resync builds
it again, once per pass). ``run`` looks for them while nothing uses any client (a quiet landscape),
each use looks too. A retired client (idle, or replaced after its Secret changed) is closed by the
next sweep once its last user is done. It used to stay open for the longest reconcile timeout after
its last use, in case a reconcile still held it: after a resync pass over 10,000 runtimes, thousands of clients
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


@dataclasses.dataclass(eq=False)  # one client is one handle: kept in a set by identity
class RuntimeHandle:
    objects: objects.ClusterObjects
    limit: asyncio.Semaphore
    secret_version: str
    used_at: float = dataclasses.field(default_factory=time.monotonic)
    """When it was last taken or given back."""
    users: int = 0
    """Reconciles using it now: a retired client is closed only when none is."""
    prepared: set[str] = dataclasses.field(default_factory=set)
    """What was ensured in the runtime (CRDs, namespaces), shared with the clients built after it for the same
    kubeconfig (see ``RuntimeClients.unprepared``)."""


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
        self._retired: set[RuntimeHandle] = set()
        """Clients no longer handed out, open while a reconcile still uses them."""
        self._prepared: dict[str, tuple[str, set[str]]] = {}
        """Per runtime, the kubeconfig Secret's resourceVersion and what was ensured through it. It outlives an
        idle client: a resync pass every 5 minutes builds every runtime's client again, and each would otherwise
        ensure its namespace and CRDs again (a GET of each CRD, a POST of the namespace). A few hundred bytes
        per runtime."""

    def secret_name(self, runtime: str) -> str:
        return wire.module_kubeconfig_secret(self._module, runtime)

    @property
    def cached(self) -> int:
        """Clients held now (retired ones not counted)."""
        return len(self._handles)

    @property
    def retired(self) -> int:
        """Clients retired but not closed yet: in use, or waiting for the next sweep."""
        return len(self._retired)

    async def run(self, *, stop: asyncio.Event) -> None:
        """Retire idle clients and close retired ones nobody uses until ``stop``, whether or not any client is used.

        Closing happens here only, not in a reconcile's ``use``: a reconcile is cancelled at its timeout or a
        shard's hand-over, and must not be the one closing thousands of clients after a resync pass.
        """
        while not await aio.sleep_unless(stop, self._idle / 10):
            self._retire_idle()
            await self._close_retired()

    @contextlib.asynccontextmanager
    async def use(self, runtime: str) -> AsyncIterator[RuntimeHandle]:
        """The runtime's client, built on first use; counted as in use until the block is left.

        Raises RuntimeUnavailableError when the runtime has no usable kubeconfig Secret.
        """
        self._retire_idle()
        handle = self._handles.get(runtime)
        if handle is not None and handle.secret_version != self._secret_version(runtime):
            # Built from a Secret that changed while it was being built (the change found no client to drop).
            self._retire(runtime)
            handle = None
        if handle is None:
            async with self._building.setdefault(runtime, asyncio.Lock()):
                handle = self._handles.get(runtime)
                if handle is None:
                    built = await self._build(runtime)
                    # Another caller may have built one meanwhile (the lock is dropped once built, and the
                    # client retired): the first one stays, this one is closed, not lost.
                    handle = self._handles.setdefault(runtime, built)
                    if handle is not built:
                        self._retired.add(built)
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
            self._retire(runtime)

    def _retire(self, runtime: str) -> None:
        """Hand the runtime's client out no more; the sweep closes it once nobody uses it."""
        self._retired.add(self._handles.pop(runtime))

    def _secret(self, runtime: str) -> dict[str, Any] | None:
        return self._secrets.get(self.secret_name(runtime), self._namespace)

    def _secret_version(self, runtime: str) -> str | None:
        secret = self._secret(runtime)
        return None if secret is None else str(secret["metadata"]["resourceVersion"])

    async def _build(self, runtime: str) -> RuntimeHandle:
        secret = self._secret(runtime)
        if secret is None:
            raise RuntimeUnavailableError(f"no kubeconfig Secret {self._namespace}/{self.secret_name(runtime)}")
        try:
            document = kube.parse_kubeconfig(base64.b64decode(secret["data"][wire.KUBECONFIG_KEY]))
            api = await kube.api_client(document)
        except (KeyError, ValueError, TypeError, yaml.YAMLError) as exc:
            raise RuntimeUnavailableError(f"kubeconfig Secret of {runtime} is unusable: {exc}") from exc
        version = secret["metadata"]["resourceVersion"]
        prepared = self._prepared.get(runtime)
        if prepared is None or prepared[0] != version:
            prepared = self._prepared[runtime] = (version, set())
        return RuntimeHandle(
            objects=objects.ClusterObjects(api, field_manager=wire.RECONCILER_FIELD_MANAGER),
            limit=asyncio.Semaphore(self._per_runtime),
            secret_version=version,
            prepared=prepared[1],
        )

    def invalidate(self, runtime: str, *, secret_version: str | None = None) -> bool:
        """Drop the runtime's client if its Secret changed (or unconditionally: the Secret is gone), and what was
        prepared through the old kubeconfig (it may name another cluster now); True if a client was dropped.

        The old client is closed by the next sweep once no reconcile uses it.
        """
        prepared = self._prepared.get(runtime)
        if prepared is not None and prepared[0] != secret_version:
            del self._prepared[runtime]
        handle = self._handles.get(runtime)
        if handle is None or (secret_version is not None and handle.secret_version == secret_version):
            return False
        self._retire(runtime)
        return True

    def unprepared(self, runtime: str) -> None:
        """Ensure the runtime's namespaces and CRDs again on its next reconcile: this one failed, maybe because a
        user deleted one of them."""
        prepared = self._prepared.get(runtime)
        if prepared is not None:
            prepared[1].clear()

    async def _close_retired(self, *, everything: bool = False) -> None:
        for handle in [handle for handle in self._retired if everything or not handle.users]:
            try:
                await handle.objects.api.close()
            except Exception:  # a client that fails to close must not stop the sweep, nor the others' closing
                log.exception("closing a runtime client failed")
            # Only now: a sweep cancelled mid-way leaves the rest to the next one (or to close()).
            self._retired.discard(handle)

    async def close(self) -> None:
        for runtime in list(self._handles):
            self.invalidate(runtime)
        await self._close_retired(everything=True)
