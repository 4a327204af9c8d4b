"""Where the CA lives: a directory (local use) or a Secret in a protected KCP namespace."""

import base64
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

from clients import kube
from pki import authority

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
    def __init__(self, api: kube.ApiClient, *, namespace: str, name: str) -> None:
        self._api = api
        self._namespace = namespace
        self._name = name

    def describe(self) -> str:
        return f"Secret {self._namespace}/{self._name}"

    async def read(self) -> dict[str, bytes]:
        secret = await kube.get_or_none(self._api, kube.SECRETS.object_path(self._namespace, self._name))
        if secret is None:
            return {}
        return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}

    async def write(self, files: dict[str, bytes]) -> None:
        await write_secret(self._api, namespace=self._namespace, name=self._name, data=files)


async def write_secret(
    api: kube.ApiClient,
    *,
    namespace: str,
    name: str,
    data: dict[str, bytes],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    secret_type: str = "Opaque",
) -> None:
    """Create or replace a Secret with exactly ``data``."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": secret_type,
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }
    await kube.create_or_replace(api, kube.SECRETS.path(namespace), body)
