"""Listener fixtures: a runtime PKI on disk, settings, a running listener, an mTLS client."""

import asyncio
import dataclasses
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from contract import events, ids, wire
from devenv import landscape as landscape_mod
from devenv import nats as nats_mod
from listener import server, settings
from pki import pki

MODULES = ("cloud-manager", "btp-operator")


@dataclasses.dataclass
class Pki:
    directory: Path
    runtime_ca: pki.KeyPair
    server_ca: pki.KeyPair

    def write(self, name: str, pair: pki.KeyPair) -> tuple[Path, Path]:
        cert, key = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        return cert, key

    def client_context(self, pair: pki.KeyPair | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.server_ca.cert_pem.decode())
        if pair is not None:
            cert, key = self.write(f"client-{pair.certificate.serial_number}", pair)
            context.load_cert_chain(cert, key)
        return context

    def runtime_cert(self, runtime: str, **kwargs: Any) -> pki.KeyPair:
        return pki.runtime_client_cert(self.runtime_ca, runtime, **kwargs)


@pytest.fixture
def runtime_pki(tmp_path: Path) -> Pki:
    directory = tmp_path / "pki"
    directory.mkdir()
    made = Pki(directory=directory, runtime_ca=pki.create_ca("runtime-ca"), server_ca=pki.create_ca("kcp-ingress-ca"))
    made.write("server", pki.loopback_server_cert(made.server_ca, common_name="listener"))
    (directory / "runtime-ca.crt").write_bytes(made.runtime_ca.cert_pem)
    return made


ConfigFactory = Callable[..., settings.ListenerSettings]


@pytest.fixture
def listener_config(runtime_pki: Pki) -> ConfigFactory:
    def make(nats_server: nats_mod.NatsServer, **overrides: Any) -> settings.ListenerSettings:
        document: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": 0,
            "management_port": 0,
            "modules": list(MODULES),
            "tls": {
                "cert_file": runtime_pki.directory / "server.crt",
                "key_file": runtime_pki.directory / "server.key",
            },
            "trust": {"client_ca_file": runtime_pki.directory / "runtime-ca.crt", "reload_interval_seconds": 0.2},
            "nats": {
                "servers": [nats_server.url],
                "credentials": nats_server.credentials("listener"),
                "publish_timeout_seconds": 1.0,
            },
            "default_runtime_modules": list(MODULES),
            "shutdown_grace_seconds": 5,
        }
        document.update(overrides)
        return settings.ListenerSettings.model_validate(document)

    return make


@pytest.fixture
async def listener(landscape: landscape_mod.Landscape, listener_config: ConfigFactory) -> AsyncIterator[server.Bound]:
    async with server.serving(listener_config(landscape.nats), registry=CollectorRegistry()) as bound:
        await wait_ready(bound)
        yield bound


async def wait_ready(bound: server.Bound, *, timeout: float = 15) -> None:
    async with aiohttp.ClientSession() as session:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            async with session.get(f"{bound.management_url}/readyz") as response:
                if response.status == 200:
                    return
            await asyncio.sleep(0.05)
    raise AssertionError("listener did not become ready")


def make_event(
    runtime: str = "skr-1", *, module: str = "cloud-manager", rv: str = "1", uid: str = "uid-1"
) -> events.ChangeEvent:
    return events.ChangeEvent.create(
        runtime=ids.runtime_id(runtime),
        module=ids.module_name(module),
        target=events.WatchedObject(
            group="cloud-resources.kyma-project.io",
            version="v1beta1",
            resource="vpcpeerings",
            kind="VpcPeering",
            namespace="default",
            name="peer",
            uid=uid,
        ),
        resource_version=rv,
        change_type=events.ChangeType.ADDED,
        body={"spec": {"remote": "vpc-1"}},
    )


@dataclasses.dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


async def post(
    url: str,
    context: ssl.SSLContext | None,
    data: bytes | Any,
    *,
    headers: dict[str, str] | None = None,
    path: str = wire.EVENTS_PATH,
) -> Reply:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}{path}",
            data=data,
            ssl=context if context is not None else False,
            headers={"Content-Type": "application/json", **(headers or {})},
        ) as response,
    ):
        body = await response.json(content_type=None)
        return Reply(response.status, body, dict(response.headers))
