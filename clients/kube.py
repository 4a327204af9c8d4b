"""Kubernetes API access: clients from kubeconfigs, and generic list/watch of any resource.

List and watch go through ``ApiClient.call_api`` with raw JSON rather than the typed watch
helper: the watcher handles arbitrary GVRs (core and custom) as plain dicts, needs bookmarks,
and must read watch lines of up to ~1.5 MB, which a line-limited reader refuses.

    KubeAPIError                  an error answer of the apiserver (status, reason)
     ├── NotFoundError            404
     ├── ConflictError            409
     ├── ResourceVersionExpired   410 Gone: relist
     └── KubeUnavailableError     no answer at all (connection refused, timeout)
"""

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException


class KubeAPIError(RuntimeError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"apiserver answered {status}: {reason}")
        self.status = status
        self.reason = reason


class NotFoundError(KubeAPIError):
    pass


class ConflictError(KubeAPIError):
    pass


class ResourceVersionExpired(KubeAPIError):
    pass


_BY_STATUS: dict[int, type[KubeAPIError]] = {404: NotFoundError, 409: ConflictError, 410: ResourceVersionExpired}


def _error(status: int, reason: str) -> KubeAPIError:
    return _BY_STATUS.get(status, KubeAPIError)(status, reason)


class KubeUnavailableError(KubeAPIError):
    pass


@dataclasses.dataclass(frozen=True)
class Gvr:
    group: str
    version: str
    resource: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        scope = f"/namespaces/{namespace}" if namespace else ""
        return f"{base}{scope}/{self.resource}"


_DEFAULT_CONNECTIONS = 100


async def api_client(kubeconfig: dict[str, Any], *, connections: int = _DEFAULT_CONNECTIONS) -> client.ApiClient:
    """An ApiClient for the kubeconfig's current context; the caller closes it.

    ``connections`` bounds the pool: every open watch holds one connection for its whole
    duration, so a client that watches much must be sized for it, or later watches wait.
    """
    configuration = client.Configuration()
    await config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration=configuration)


async def client_from(kubeconfig: Path | None, *, connections: int = _DEFAULT_CONNECTIONS) -> client.ApiClient:
    """A client from a kubeconfig file, or from the pod's service account when none is given."""
    if kubeconfig is not None:
        return await api_client(read_kubeconfig(kubeconfig), connections=connections)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration=configuration)


async def ensure_namespace(api: client.ApiClient, name: str) -> None:
    """Create the namespace unless it exists."""
    try:
        await request(api, "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ConflictError:
        pass


def read_kubeconfig(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a kubeconfig document")
    return data


def translate(exc: BaseException) -> KubeAPIError:
    """Our error for a kubernetes_asyncio / aiohttp failure."""
    if isinstance(exc, ApiException):
        return _error(int(exc.status or 0), str(exc.body or exc.reason))
    return KubeUnavailableError(0, repr(exc))


_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
API_ERRORS: tuple[type[BaseException], ...] = (ApiException, *_TRANSPORT_ERRORS)
"""What a call through the typed kubernetes_asyncio APIs can raise: catch these, then translate()."""


async def _call(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str = "application/json",
    timeout: float | None = 60,
) -> aiohttp.ClientResponse:
    """The raw response of a 2xx answer; any other answer raised as our error."""
    try:
        response: aiohttp.ClientResponse = await api.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        if 200 <= response.status <= 299:
            return response
        try:
            detail = json.loads(await response.read()).get("message", "")
        except ValueError:
            detail = ""
        finally:
            response.release()
    except (ApiException, *_TRANSPORT_ERRORS) as exc:
        raise translate(exc) from exc
    raise _error(response.status, str(detail or response.reason))


async def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str = "application/json",
) -> dict[str, Any]:
    """A JSON request to any API path; the decoded answer."""
    response = await _call(api, method, path, query=query, body=body, content_type=content_type)
    try:
        data = await response.read()
    except _TRANSPORT_ERRORS as exc:
        raise translate(exc) from exc
    finally:
        response.release()
    document: dict[str, Any] = json.loads(data) if data else {}
    return document


async def list_objects(
    api: client.ApiClient, gvr: Gvr, *, namespace: str | None, label_selector: str | None
) -> tuple[list[dict[str, Any]], str]:
    """All matching objects as dicts, and the list's resourceVersion to watch from."""
    query = [("labelSelector", label_selector)] if label_selector else []
    document = await request(api, "GET", gvr.path(namespace), query=query)
    kind = gvr.resource
    items: list[dict[str, Any]] = document.get("items") or []
    for item in items:
        # List items omit apiVersion/kind; events should carry whole objects.
        item.setdefault("apiVersion", gvr.api_version)
        item.setdefault("kind", document.get("kind", kind).removesuffix("List"))
    return items, str(document["metadata"]["resourceVersion"])


async def watch_objects(
    api: client.ApiClient,
    gvr: Gvr,
    *,
    namespace: str | None,
    label_selector: str | None,
    resource_version: str,
    timeout_seconds: int,
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(type, object) pairs — ADDED, MODIFIED, DELETED, BOOKMARK — until the server ends the watch."""
    query = [
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(timeout_seconds)),
    ]
    if label_selector:
        query.append(("labelSelector", label_selector))
    response = await _call(api, "GET", gvr.path(namespace), query=query, timeout=timeout_seconds + 30)
    buffer = b""
    try:
        async for chunk in response.content.iter_any():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield _watch_event(line)
    except _TRANSPORT_ERRORS as exc:
        raise translate(exc) from exc
    finally:
        response.release()


def _watch_event(line: bytes) -> tuple[str, dict[str, Any]]:
    event = json.loads(line)
    kind, obj = event["type"], event["object"]
    if kind == "ERROR":
        raise _error(int(obj.get("code") or 0), str(obj.get("message")))
    return kind, obj
