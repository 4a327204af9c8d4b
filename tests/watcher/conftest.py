"""Watcher fixtures: a recording mTLS listener, a runtime namespace, agents to start and stop, an apiserver of a
test's own."""

import asyncio
import contextlib
import dataclasses
import shutil
import socket
import ssl
import struct
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from clients import kube
from contract import events, wire
from devenv import kube as kube_mod
from devenv import net, testbin
from pki import pki
from watcher import agent as agent_mod

SELECTOR_LABEL = "kyma-project.io/watched"
MODULE = "test-module"


@contextlib.asynccontextmanager
async def own_apiserver(
    binaries: testbin.Binaries, workdir: Path, name: str
) -> AsyncIterator[tuple[kube_mod.KubeCluster, kube.ApiClient]]:
    """An etcd and apiserver only this test uses (to stop, or to fill), and an admin client of it; both processes
    stopped and etcd's data removed afterwards (pytest keeps the last runs' tmp_path)."""
    cluster = kube_mod.KubeCluster(name=name, workdir=workdir / name, binaries=binaries)
    try:
        cluster.start()
        await asyncio.get_running_loop().run_in_executor(None, cluster.wait_ready)
        async with await kube.api_client(cluster.admin_kubeconfig()) as api:
            yield cluster, api
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir / "etcd", ignore_errors=True)


@dataclasses.dataclass
class RecordingListener:
    """Stands in for the listener at the HTTP boundary: checks the client certificate, records events."""

    url: str = ""
    received: list[events.ChangeEvent] = dataclasses.field(default_factory=list)
    heartbeats: list[events.Heartbeat] = dataclasses.field(default_factory=list)
    available: bool = True
    refused_while_down: int = 0
    unknown_objects: set[str] = dataclasses.field(default_factory=set)
    """Events about these object names are refused as invalid (422), as the listener refuses an unknown module."""
    rejected: list[events.ChangeEvent] = dataclasses.field(default_factory=list)
    heartbeat_peers: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    """The client address of each heartbeat: one port is one connection."""
    closes_reused: Literal["", "close", "reset"] = ""
    """An event arriving on a connection that carried one before is not answered: the connection is closed (or
    reset), as when a listener's idle timeout and the watcher's next request cross."""
    closed_reused: int = 0
    event_peers: set[tuple[str, int]] = dataclasses.field(default_factory=set)

    async def handle(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        peer = request.transport.get_extra_info("peername")[:2]
        if self.closes_reused and peer in self.event_peers:
            self.closed_reused += 1
            if self.closes_reused == "reset":  # an RST instead of a FIN
                linger = struct.pack("ii", 1, 0)
                request.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            request.transport.close()
            return web.Response(status=503)  # never reaches the closed connection
        self.event_peers.add(peer)
        if not self.available:
            self.refused_while_down += 1
            return web.json_response({"error": "down"}, status=503, headers={"Retry-After": "1"})
        event = events.decode(await request.read())
        if event.target.name in self.unknown_objects:
            self.rejected.append(event)
            return web.json_response({"error": "unknown"}, status=422)
        self.received.append(event)
        return web.json_response({"ok": True}, status=202)

    async def heartbeat(self, request: web.Request) -> web.Response:
        self.heartbeats.append(events.Heartbeat.model_validate_json(await request.read()))
        assert request.transport is not None
        self.heartbeat_peers.append(request.transport.get_extra_info("peername")[:2])
        return web.Response(status=204)

    def of(self, name: str) -> list[tuple[str, str]]:
        return [(e.change_type.value, e.resource_version) for e in self.received if e.target.name == name]

    async def wait_for(self, check: Callable[[], bool], *, timeout: float = 20) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out; received: {[(e.change_type, e.target.name) for e in self.received]}")
            await asyncio.sleep(0.05)


@dataclasses.dataclass
class Runtime:
    """One test's slice of the SKR: its own namespace (objects, lease, checkpoint) and credentials."""

    namespace: str
    directory: Path
    api: kube.ApiClient
    listener: RecordingListener
    tls: dict[str, str]

    def config(self, **overrides: Any) -> dict[str, Any]:
        document: dict[str, Any] = {
            "runtime": "skr-1",
            "listeners": [{"url": self.listener.url}],
            "tls": self.tls,
            "watches": [
                {
                    "version": "v1",
                    "resource": "configmaps",
                    "namespaces": [self.namespace],
                    "label_selector": f"{SELECTOR_LABEL}=true",
                    "module": MODULE,
                    "ignore_fields": ["metadata.annotations"],
                }
            ],
            "delivery": {"backoff_initial_seconds": 0.05, "backoff_max_seconds": 0.5},
            "lease": {"namespace": self.namespace, "duration_seconds": 3, "renew_interval_seconds": 1},
            "checkpoint": {"namespace": self.namespace, "interval_seconds": 0.2},
            "management_port": 0,
        }
        document.update(overrides)
        return document

    def write_config(self, document: dict[str, Any], name: str = "watcher.yaml") -> Path:
        path = self.directory / name
        path.write_text(yaml.safe_dump(document))
        return path

    async def create(self, name: str, data: dict[str, str], *, labelled: bool = True) -> dict[str, Any]:
        labels = {SELECTOR_LABEL: "true"} if labelled else {}
        return await kube.request(
            self.api,
            "POST",
            kube.CONFIGMAPS.path(self.namespace),
            query=[("fieldManager", "kubectl")],
            body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": data},
        )

    async def patch(self, name: str, patch: dict[str, Any], *, manager: str = "kubectl") -> dict[str, Any]:
        return await kube.merge_patch(
            self.api, kube.CONFIGMAPS.object_path(self.namespace, name), patch, field_manager=manager
        )

    async def update(self, name: str, data: dict[str, str], *, manager: str = "kubectl") -> dict[str, Any]:
        return await self.patch(name, {"data": data}, manager=manager)

    async def delete(self, name: str) -> None:
        assert await kube.delete(self.api, kube.CONFIGMAPS.object_path(self.namespace, name))


def resource_version(obj: dict[str, Any]) -> str:
    version: str = obj["metadata"]["resourceVersion"]
    return version


@dataclasses.dataclass
class RunningAgent:
    agent: agent_mod.Agent
    stop: asyncio.Event
    task: asyncio.Task[None]

    def relists(self) -> float:
        return self.agent.metrics.registry.get_sample_value("kyma_watcher_relists_total") or 0.0

    async def wait_synced(self, *, sources: int = 1, timeout: float = 20) -> None:
        """Until this agent leads and has listed every watched resource once."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not (self.agent.leading and self.relists() >= sources):
            assert asyncio.get_running_loop().time() < deadline, "agent did not sync"
            await asyncio.sleep(0.05)

    def seen(self) -> float:
        return self.agent.metrics.registry.get_sample_value("kyma_watcher_events_seen_total", {"module": MODULE}) or 0.0

    async def settled(self, *, seen: float, timeout: float = 20) -> None:
        """Until this agent has observed ``seen`` changes in all and nothing is pending or in flight.

        A watch delivers in order, so once the count is reached every change made before has been
        observed; with the queue empty, each was either delivered or dropped: nothing more will come.
        """
        deadline = asyncio.get_running_loop().time() + timeout
        depth = self.agent.metrics.registry.get_sample_value
        while self.seen() < seen or (depth("kyma_watcher_queue_depth") or 0) > 0:
            assert asyncio.get_running_loop().time() < deadline, f"agent did not settle (seen {self.seen()} of {seen})"
            await asyncio.sleep(0.05)

    async def shutdown(self) -> None:
        """A clean stop: the checkpoint is saved and the lease released."""
        self.stop.set()
        await self.task

    async def crash(self) -> None:
        """A kill: nothing is saved or released."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@pytest.fixture
async def recording_listener(tmp_path: Path) -> AsyncIterator[tuple[RecordingListener, pki.KeyPair, Path]]:
    """A listener-shaped HTTPS endpoint requiring runtime client certs; yields it, the runtime CA, the server CA file."""
    runtime_ca, server_ca = pki.create_ca("runtime-ca"), pki.create_ca("ingress-ca")
    serving = pki.loopback_server_cert(server_ca, common_name="listener")
    for name, data in {
        "server.crt": serving.cert_pem,
        "server.key": serving.key_pem,
        "runtime-ca.crt": runtime_ca.cert_pem,
        "ingress-ca.crt": server_ca.cert_pem,
    }.items():
        (tmp_path / name).write_bytes(data)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.load_verify_locations(tmp_path / "runtime-ca.crt")
    recorder = RecordingListener()
    app = web.Application()
    app.router.add_post(wire.EVENTS_PATH, recorder.handle)
    app.router.add_post(wire.HEARTBEAT_PATH, recorder.heartbeat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = net.free_port()
    await web.TCPSite(runner, net.LOOPBACK, port, ssl_context=context).start()
    recorder.url = f"https://{net.LOOPBACK}:{port}"
    yield recorder, runtime_ca, tmp_path / "ingress-ca.crt"
    await runner.cleanup()


@pytest.fixture
async def runtime(
    skr_api: kube.ApiClient,
    recording_listener: tuple[RecordingListener, pki.KeyPair, Path],
    tmp_path: Path,
) -> Runtime:
    listener, runtime_ca, server_ca_file = recording_listener
    cert = pki.runtime_client_cert(runtime_ca, "skr-1")
    (tmp_path / "client.crt").write_bytes(cert.cert_pem)
    (tmp_path / "client.key").write_bytes(cert.key_pem)
    namespace = f"w-{uuid.uuid4().hex[:8]}"
    await kube.ensure_namespace(skr_api, namespace)
    return Runtime(
        namespace=namespace,
        directory=tmp_path,
        api=skr_api,
        listener=listener,
        tls={
            "cert_file": str(tmp_path / "client.crt"),
            "key_file": str(tmp_path / "client.key"),
            "ca_file": str(server_ca_file),
        },
    )


@pytest.fixture
def start_agent(runtime: Runtime) -> Callable[[Path, str], Any]:
    @contextlib.asynccontextmanager
    async def start(config_path: Path, identity: str = "watcher-0") -> AsyncIterator[RunningAgent]:
        agent = agent_mod.Agent(
            config_path=config_path, api=runtime.api, identity=identity, registry=CollectorRegistry()
        )
        stop = asyncio.Event()
        running = RunningAgent(agent, stop, asyncio.create_task(agent.run(stop=stop)))
        try:
            yield running
        finally:
            if not running.task.done():
                await running.shutdown()

    return start
