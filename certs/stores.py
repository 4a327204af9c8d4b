"""Where the CA lives: a directory (local use) or a Secret in a protected KCP namespace."""

import base64
import os
import tempfile
from pathlib import Path
from typing import Protocol

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from certs import authority
from clients import kube

_FILES = (authority.CA_CERT, authority.CA_KEY, authority.BUNDLE, authority.CRL, authority.STATE)
_PRIVATE = (authority.CA_KEY, authority.STATE)


class Store(Protocol):
    async def read(self) -> dict[str, bytes]: ...

    async def write(self, files: dict[str, bytes]) -> None: ...

    def describe(self) -> str: ...


class DirectoryStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def describe(self) -> str:
        return str(self.directory)

    async def read(self) -> dict[str, bytes]:
        return {name: (self.directory / name).read_bytes() for name in _FILES if (self.directory / name).exists()}

    async def write(self, files: dict[str, bytes]) -> None:
        """Each file replaced atomically; keys readable by the owner only."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=f".{name}.")
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.chmod(temporary, 0o600 if name in _PRIVATE else 0o644)
            os.replace(temporary, self.directory / name)


class SecretStore:
    def __init__(self, api: client.ApiClient, *, namespace: str, name: str) -> None:
        self._core = client.CoreV1Api(api)
        self._namespace = namespace
        self._name = name

    def describe(self) -> str:
        return f"Secret {self._namespace}/{self._name}"

    async def read(self) -> dict[str, bytes]:
        try:
            secret = await self._core.read_namespaced_secret(self._name, self._namespace)
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise kube.translate(exc) from exc
        return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}

    async def write(self, files: dict[str, bytes]) -> None:
        await write_secret(self._core, namespace=self._namespace, name=self._name, data=files)


async def write_secret(
    core: client.CoreV1Api,
    *,
    namespace: str,
    name: str,
    data: dict[str, bytes],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    secret_type: str = "Opaque",
) -> None:
    """Create or replace a Secret with exactly ``data``."""
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=labels, annotations=annotations),
        type=secret_type,
        data={key: base64.b64encode(value).decode() for key, value in data.items()},
    )
    try:
        try:
            await core.replace_namespaced_secret(name, namespace, body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            await core.create_namespaced_secret(namespace, body)
    except ApiException as exc:
        raise kube.translate(exc) from exc
