"""One API client per runtime, built from its kubeconfig Secret in KCP, cached, rebuilt on change.

The Secret is the module kubeconfig ``certs`` mints (``<module>-kubeconfig-<runtime>`` in
kyma-sync-kubeconfigs): the reconcilers never see a runtime's master kubeconfig. A semaphore per runtime
bounds how many writes go to one apiserver at once.
"""

import asyncio
import base64
import dataclasses
from typing import Any

import yaml
from kubernetes_asyncio import client

from certs import runtimes
from clients import kube
from reconciler import objects


class RuntimeUnavailableError(RuntimeError):
    """No usable kubeconfig for the runtime."""


@dataclasses.dataclass
class RuntimeHandle:
    objects: objects.ClusterObjects
    limit: asyncio.Semaphore
    secret_version: str
    prepared: set[str] = dataclasses.field(default_factory=set)
    """What was ensured once for this client (CRDs, namespaces); a new client starts afresh."""


class RuntimeClients:
    def __init__(
        self, kcp: client.ApiClient, *, module: str, namespace: str = runtimes.KUBECONFIG_NAMESPACE, per_runtime: int = 8
    ) -> None:
        self._kcp = kcp
        self._module = module
        self.namespace = namespace
        self._per_runtime = per_runtime
        self._handles: dict[str, RuntimeHandle] = {}
        self._building: dict[str, asyncio.Lock] = {}

    def secret_name(self, runtime: str) -> str:
        return runtimes.module_secret_name(self._module, runtime)

    async def get(self, runtime: str) -> RuntimeHandle:
        handle = self._handles.get(runtime)
        if handle is not None:
            return handle
        async with self._building.setdefault(runtime, asyncio.Lock()):
            handle = self._handles.get(runtime)
            if handle is None:
                handle = self._handles[runtime] = await self._build(runtime)
            return handle

    async def _build(self, runtime: str) -> RuntimeHandle:
        path = f"/api/v1/namespaces/{self.namespace}/secrets/{self.secret_name(runtime)}"
        try:
            secret = await kube.request(self._kcp, "GET", path)
        except kube.NotFoundError as exc:
            raise RuntimeUnavailableError(f"no kubeconfig Secret {self.namespace}/{self.secret_name(runtime)}") from exc
        try:
            document: Any = yaml.safe_load(base64.b64decode(secret["data"][runtimes.KUBECONFIG_KEY]))
            api = await kube.api_client(document)
        except (KeyError, ValueError, TypeError, yaml.YAMLError) as exc:
            raise RuntimeUnavailableError(f"kubeconfig Secret of {runtime} is unusable: {exc}") from exc
        return RuntimeHandle(
            objects=objects.ClusterObjects(api),
            limit=asyncio.Semaphore(self._per_runtime),
            secret_version=secret["metadata"]["resourceVersion"],
        )

    async def invalidate(self, runtime: str, *, secret_version: str | None = None) -> bool:
        """Drop the runtime's client if its Secret changed (or unconditionally); True if dropped."""
        handle = self._handles.get(runtime)
        if handle is None or (secret_version is not None and handle.secret_version == secret_version):
            return False
        del self._handles[runtime]
        await handle.objects.api.close()
        return True

    async def close(self) -> None:
        for runtime in list(self._handles):
            await self.invalidate(runtime)
