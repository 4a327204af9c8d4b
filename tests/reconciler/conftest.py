"""Reconciler fixtures: KCP with Kyma CRs and kubeconfig Secrets for the SKRs, a running controller."""

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from certs import kubeconfigs, runtimes, stores
from clients import kube
from devenv import landscape as landscape_mod
from reconciler import crds, sync_controller

MODULE = "kyma-sync"


async def ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        await client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as exc:
        if exc.status != 409:
            raise


async def register_runtime(kcp: client.ApiClient, name: str, kubeconfig: dict[str, Any], labels: dict[str, str]) -> None:
    """A Kyma CR and the reconciler's kubeconfig Secret for one runtime."""
    await stores.write_secret(
        client.CoreV1Api(kcp), namespace=runtimes.KCP_NAMESPACE, name=runtimes.module_secret_name(MODULE, name),
        data={runtimes.KUBECONFIG_KEY: kubeconfigs.dump(kubeconfig).encode()},
        labels={runtimes.RUNTIME_LABEL: name, runtimes.MODULE_LABEL: MODULE},
    )
    kyma = {"apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Kyma",
            "metadata": {"name": name, "namespace": runtimes.KCP_NAMESPACE, "labels": labels}, "spec": {"channel": "regular"}}
    path = crds.KYMA.path(runtimes.KCP_NAMESPACE)
    try:
        await kube.request(kcp, "POST", path, body=kyma)
    except kube.ConflictError:
        await kube.request(kcp, "PATCH", f"{path}/{name}", body={"metadata": {"labels": labels}}, content_type="application/merge-patch+json")


async def label_kyma(kcp: client.ApiClient, name: str, labels: dict[str, str | None]) -> None:
    await kube.request(
        kcp, "PATCH", f"{crds.KYMA.path(runtimes.KCP_NAMESPACE)}/{name}",
        body={"metadata": {"labels": labels}}, content_type="application/merge-patch+json",
    )


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float = 30, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


@dataclasses.dataclass
class Kcp:
    api: client.ApiClient
    namespace: str
    """This test's namespace for SyncResources."""
    runtime_namespace: str
    """This test's namespace in every SKR."""
    skrs: dict[str, client.ApiClient]

    def path(self, name: str = "") -> str:
        return f"{crds.SYNC_RESOURCE.path(self.namespace)}" + (f"/{name}" if name else "")

    async def create(self, name: str, spec: dict[str, Any]) -> None:
        await kube.request(self.api, "POST", self.path(), body={
            "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "SyncResource",
            "metadata": {"name": name, "namespace": self.namespace}, "spec": spec,
        })

    async def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        await kube.request(self.api, "PATCH", self.path(name), body={"spec": spec}, content_type="application/merge-patch+json")

    async def get(self, name: str) -> dict[str, Any] | None:
        try:
            return await kube.request(self.api, "GET", self.path(name))
        except kube.NotFoundError:
            return None

    async def state(self, name: str) -> str | None:
        resource = await self.get(name)
        return ((resource or {}).get("status") or {}).get("state")

    def configmap(self, name: str, data: dict[str, str], strategy: str = "CreateAndSync", item: str | None = None) -> dict[str, Any]:
        return {"name": item or name, "strategy": strategy, "resource": {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.runtime_namespace}, "data": data}}

    async def configmap_in(self, runtime: str, name: str) -> dict[str, Any] | None:
        try:
            return await kube.request(self.skrs[runtime], "GET", f"/api/v1/namespaces/{self.runtime_namespace}/configmaps/{name}")
        except kube.NotFoundError:
            return None


@pytest.fixture
async def kcp(landscape: landscape_mod.Landscape, kcp_api: client.ApiClient) -> AsyncIterator[Kcp]:
    await ensure_namespace(kcp_api, runtimes.KCP_NAMESPACE)
    await crds.install(kcp_api, [crds.sync_resource_crd(), crds.kyma_crd()])
    suffix = uuid.uuid4().hex[:6]
    namespace, runtime_namespace = f"sr-{suffix}", f"synced-{suffix}"
    await ensure_namespace(kcp_api, namespace)
    async with contextlib.AsyncExitStack() as stack:
        skrs = {}
        for name, cluster in landscape.runtimes.items():
            await register_runtime(kcp_api, name, cluster.admin_kubeconfig(), {})
            skrs[name] = await stack.enter_async_context(await kube.api_client(cluster.admin_kubeconfig()))
            await ensure_namespace(skrs[name], runtime_namespace)
        yield Kcp(api=kcp_api, namespace=namespace, runtime_namespace=runtime_namespace, skrs=skrs)


@pytest.fixture
def run_controller(kcp: Kcp) -> Callable[..., "contextlib.AbstractAsyncContextManager[sync_controller.SyncResourceController]"]:
    @contextlib.asynccontextmanager
    async def start(**settings: Any) -> AsyncIterator[sync_controller.SyncResourceController]:
        controller = sync_controller.SyncResourceController(
            kcp=kcp.api,
            settings=sync_controller.ControllerSettings(namespace=kcp.namespace, **settings),
            registry=CollectorRegistry(),
        )
        stop = asyncio.Event()
        task = asyncio.create_task(controller.run(stop=stop))
        try:
            yield controller
        finally:
            stop.set()
            await task

    return start
