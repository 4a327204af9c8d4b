"""Reconciler fixtures: KCP with Kyma CRs and kubeconfig Secrets for the SKRs, a running controller."""

import asyncio
import contextlib
import dataclasses
import datetime
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from certs import stores
from clients import kube
from contract import wire
from devenv import landscape as landscape_mod
from listener import server
from listener import settings as listener_settings
from pki import authority, kubeconfigs
from reconciler import cli, crds, manager, settings
from watcher import agent as agent_mod

from ..conftest import connect_raw
from ..listener.conftest import wait_ready
from ..waiting import eventually

MODULE = "kyma-sync"


async def ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        await client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as exc:
        if exc.status != 409:
            raise


async def register_runtime(
    kcp: client.ApiClient,
    name: str,
    kubeconfig: dict[str, Any],
    labels: dict[str, str],
    *,
    namespace: str = wire.KCP_NAMESPACE,
    kubeconfig_secret: bool = True,
) -> None:
    """A Kyma CR (in ``namespace``) and, unless told otherwise, the reconciler's kubeconfig Secret for one runtime."""
    if kubeconfig_secret:
        await kube.ensure_namespace(kcp, wire.KUBECONFIG_NAMESPACE)
        await stores.write_secret(
            kcp,
            namespace=wire.KUBECONFIG_NAMESPACE,
            name=wire.module_kubeconfig_secret(MODULE, name),
            data={wire.KUBECONFIG_KEY: kubeconfigs.dump(kubeconfig).encode()},
            labels={wire.RUNTIME_LABEL: name, wire.MODULE_LABEL: MODULE},
        )
    kyma = {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"channel": "regular"},
    }
    path = crds.KYMA.path(namespace)
    try:
        await kube.request(kcp, "POST", path, body=kyma)
    except kube.ConflictError:
        await kube.request(
            kcp,
            "PATCH",
            f"{path}/{name}",
            body={"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )


async def bind(kcp: client.ApiClient, namespace: str, **spec: Any) -> None:
    """A SyncBinding letting ``namespace`` sync to every runtime (narrowed by ``spec``)."""
    await kube.create_or_replace(
        kcp,
        crds.SYNC_BINDING.path(),
        {
            "apiVersion": crds.SYNC_BINDING.api_version,
            "kind": "SyncBinding",
            "metadata": {"name": f"test-{namespace}"},
            "spec": {"namespaces": [namespace], "runtimeSelector": {}, **spec},
        },
    )


async def as_created_before_the_hand_over(api: client.ApiClient, path: str) -> None:
    """The object at ``path`` as an earlier kyma-sync's create left it: what our field manager set owned by the
    create's Update entry beside the Apply entry of the passes since, so that no apply of ours removes what it
    leaves out."""

    def ours(entry: dict[str, Any], operation: str) -> bool:
        return (entry["manager"], entry["operation"], entry.get("subresource")) == (
            wire.RECONCILER_FIELD_MANAGER,
            operation,
            None,
        )

    entries = (await kube.request(api, "GET", path))["metadata"]["managedFields"]
    [applied] = [e for e in entries if ours(e, "Apply")]
    assert not any(ours(e, "Update") for e in entries), "a create's Update entry is there already"
    patched = await kube.merge_patch(
        api, path, {"metadata": {"managedFields": [*entries, {**applied, "operation": "Update"}]}}
    )
    created = [e["fieldsV1"] for e in patched["metadata"]["managedFields"] if ours(e, "Update")]
    assert created == [applied["fieldsV1"]], "the create's Update entry is in place"


async def label_kyma(kcp: client.ApiClient, name: str, labels: dict[str, str | None]) -> None:
    await kube.request(
        kcp,
        "PATCH",
        f"{crds.KYMA.path(wire.KCP_NAMESPACE)}/{name}",
        body={"metadata": {"labels": labels}},
        content_type="application/merge-patch+json",
    )


@dataclasses.dataclass
class Kcp:
    api: client.ApiClient
    namespace: str
    """This test's namespace for SyncResources."""
    runtime_namespace: str
    """This test's namespace in every SKR."""
    skrs: dict[str, client.ApiClient]
    kubeconfigs: dict[str, dict[str, Any]]
    """Admin kubeconfig of every SKR."""

    def path(self, name: str = "") -> str:
        return f"{crds.SYNC_RESOURCE.path(self.namespace)}" + (f"/{name}" if name else "")

    async def create(self, name: str, spec: dict[str, Any]) -> None:
        await kube.request(
            self.api,
            "POST",
            self.path(),
            body={
                "apiVersion": "operator.kyma-project.io/v1alpha1",
                "kind": "SyncResource",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": spec,
            },
        )

    async def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        await kube.request(
            self.api, "PATCH", self.path(name), body={"spec": spec}, content_type="application/merge-patch+json"
        )

    async def get(self, name: str) -> dict[str, Any] | None:
        try:
            return await kube.request(self.api, "GET", self.path(name))
        except kube.NotFoundError:
            return None

    async def applied(self, name: str) -> list[dict[str, Any]]:
        """The SyncResource's records (from its SyncRecords): what it may have put where."""
        resource = await self.get(name)
        if resource is None:
            return []
        for _ in range(50):  # a CRD (re)installed moments ago answers 429 while its storage initialises
            try:
                records, _ = await kube.list_objects(
                    self.api,
                    crds.SYNC_RECORD,
                    namespace=self.namespace,
                    label_selector=f"{wire.RECORDS_OF_LABEL}={resource['metadata']['uid']}",
                )
            except kube.ThrottledError:
                await asyncio.sleep(0.1)
                continue
            return [entry for record in records for entry in record["spec"].get("applied") or []]
        raise AssertionError("SyncRecords could not be listed")

    async def state(self, name: str) -> str | None:
        resource = await self.get(name)
        return ((resource or {}).get("status") or {}).get("state")

    def configmap(
        self, name: str, data: dict[str, str], strategy: str = "CreateAndSync", item: str | None = None
    ) -> dict[str, Any]:
        return {
            "name": item or name,
            "strategy": strategy,
            "resource": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": self.runtime_namespace},
                "data": data,
            },
        }

    async def configmap_in(self, runtime: str, name: str) -> dict[str, Any] | None:
        try:
            return await kube.request(
                self.skrs[runtime], "GET", f"/api/v1/namespaces/{self.runtime_namespace}/configmaps/{name}"
            )
        except kube.NotFoundError:
            return None


@pytest.fixture
async def kcp(landscape: landscape_mod.Landscape, kcp_api: client.ApiClient) -> AsyncIterator[Kcp]:
    await ensure_namespace(kcp_api, wire.KCP_NAMESPACE)
    await crds.install(kcp_api, crds.kcp_crds())
    await crds.install_if_absent(kcp_api, crds.lifecycle_manager_crds())
    suffix = uuid.uuid4().hex[:6]
    namespace, runtime_namespace = f"sr-{suffix}", f"synced-{suffix}"
    await ensure_namespace(kcp_api, namespace)
    await bind(kcp_api, namespace)
    async with contextlib.AsyncExitStack() as stack:
        skrs = {}
        for name, cluster in landscape.runtimes.items():
            await register_runtime(kcp_api, name, cluster.admin_kubeconfig(), {})
            skrs[name] = await stack.enter_async_context(await kube.api_client(cluster.admin_kubeconfig()))
            await ensure_namespace(skrs[name], runtime_namespace)
        yield Kcp(
            api=kcp_api,
            namespace=namespace,
            runtime_namespace=runtime_namespace,
            skrs=skrs,
            kubeconfigs={name: cluster.admin_kubeconfig() for name, cluster in landscape.runtimes.items()},
        )


@pytest.fixture
def run_controller(
    landscape: landscape_mod.Landscape, kcp: Kcp
) -> Callable[..., "contextlib.AbstractAsyncContextManager[manager.Manager]"]:
    """Start the reconcilers on this test's KCP namespace; by default only the SyncResource controller.

    With NATS they connect as the admin (the test's durables have random names), and their durables
    are deleted afterwards: a durable left behind would keep holding events of the shared stream.
    """

    @contextlib.asynccontextmanager
    async def start(
        *, resync_seconds: float = 300, nats_servers: tuple[str, ...] = (), **sections: Any
    ) -> AsyncIterator[manager.Manager]:
        config = settings.ReconcilerSettings.model_validate(
            {
                "nats": {
                    "servers": nats_servers,
                    "credentials": landscape.nats.credentials(),  # admin: the test's durables have random names
                    "durable_prefix": f"test-{uuid.uuid4().hex[:6]}",
                },
                "module_templates": {"enabled": False},
                "kyma": {"enabled": False},
                **sections,
                "sync_resources": {
                    "namespace": kcp.namespace,
                    "resync_seconds": resync_seconds,
                    **sections.get("sync_resources", {}),
                },
            }
        )
        running = cli.build_manager(config, kcp=kcp.api, registry=CollectorRegistry())
        stop = asyncio.Event()
        task = asyncio.create_task(running.run(stop=stop))
        try:
            yield running
        finally:
            stop.set()
            await task
            if nats_servers:
                await delete_durables(landscape, prefix=config.nats.durable_prefix)

    return start


async def delete_durables(landscape: landscape_mod.Landscape, *, prefix: str) -> None:
    connection = await connect_raw(landscape.nats)
    try:
        js = connection.jetstream()
        for info in await js.consumers_info(wire.STREAM_NAME):
            if info.name.startswith(f"{prefix}-"):
                await js.delete_consumer(wire.STREAM_NAME, info.name)
    finally:
        await connection.close()


def _write(directory: Path, name: str, data: bytes) -> str:
    (directory / name).write_bytes(data)
    return str(directory / name)


@dataclasses.dataclass
class Pipeline:
    """A real listener on the landscape's NATS and a real watcher agent in skr-1."""

    listener: server.Bound
    watcher: agent_mod.Agent


@pytest.fixture
def pipeline(
    landscape: landscape_mod.Landscape, kcp: Kcp, tmp_path: Path
) -> Callable[..., "contextlib.AbstractAsyncContextManager[Pipeline]"]:
    @contextlib.asynccontextmanager
    async def start(
        watches: list[dict[str, Any]], modules: list[str], **watcher_settings: Any
    ) -> AsyncIterator[Pipeline]:
        ca = authority.Authority.create("kyma-sync-ca")
        hour = datetime.timedelta(hours=1)
        serving, client_cert = ca.issue_server(["127.0.0.1"], lifetime=hour), ca.issue_runtime("skr-1", lifetime=hour)
        bundle = _write(tmp_path, "bundle.crt", ca.to_files()[authority.BUNDLE])
        listener_config = listener_settings.ListenerSettings.model_validate(
            {
                "host": "127.0.0.1",
                "port": 0,
                "management_port": 0,
                "modules": modules,
                "tls": {
                    "cert_file": _write(tmp_path, "srv.crt", serving.cert_pem),
                    "key_file": _write(tmp_path, "srv.key", serving.key_pem),
                },
                "trust": {"client_ca_file": bundle},
                "nats": {"servers": [landscape.nats.url], "credentials": landscape.nats.credentials("listener")},
                "default_runtime_modules": modules,
            }
        )
        async with server.serving(listener_config, registry=CollectorRegistry()) as bound:
            await wait_ready(bound)
            watcher_config = tmp_path / "watcher.yaml"
            watcher_config.write_text(
                yaml.safe_dump(
                    {
                        "runtime": "skr-1",
                        "listeners": [{"url": bound.events_url}],
                        "tls": {
                            "cert_file": _write(tmp_path, "c.crt", client_cert.cert_pem),
                            "key_file": _write(tmp_path, "c.key", client_cert.key_pem),
                            "ca_file": bundle,
                        },
                        "watches": watches,
                        "lease": {"namespace": kcp.runtime_namespace},
                        "checkpoint": {"namespace": kcp.runtime_namespace},
                        "management_port": 0,
                        **watcher_settings,
                    }
                )
            )
            watcher = agent_mod.Agent(
                config_path=watcher_config, api=kcp.skrs["skr-1"], identity="w", registry=CollectorRegistry()
            )
            stop = asyncio.Event()
            watching = asyncio.create_task(watcher.run(stop=stop))
            try:
                await eventually(lambda: _is(watcher.leading), what="watcher leading")
                yield Pipeline(listener=bound, watcher=watcher)
            finally:
                stop.set()
                await watching

    return start


async def _is(value: bool) -> bool:
    return value
