"""Kubernetes API access: clients from kubeconfigs, raw JSON requests, list/watch of any resource.

Every call goes through ``ApiClient.call_api`` with raw JSON rather than the typed APIs: the
engines handle arbitrary GVRs (core and custom) as plain dicts, need bookmarks, and must read
watch lines of up to ~1.5 MB, which a line-limited reader refuses. This is the one module that
turns kubernetes_asyncio's and aiohttp's failures into ours (httpx's map_httpcore_exceptions):

    KubeError                 a request that did not succeed (``status`` 0 when nothing answered)
     ├── UnreachableError     no answer at all: connection refused or dropped, timeout
     └── ApiError             an error answer of the apiserver (status, reason)
          ├── InvalidError    400, 422: the request or the object is refused as invalid
          ├── ForbiddenError  401, 403
          ├── NotFoundError   404
          ├── ConflictError   409: already exists, or a precondition / resourceVersion failed
          ├── ExpiredError    410: the resourceVersion is too old; relist
          └── ThrottledError  429: asked to come back after ``retry_after`` seconds

Paths are built from parts that are each quoted, so a name can never add path segments.
"""

import asyncio
import base64
import dataclasses
import datetime
import json
import logging
import socket
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

ApiClient = client.ApiClient
"""A connection pool to one apiserver; the engines hold it without importing kubernetes_asyncio."""

log = logging.getLogger(__name__)


class KubeError(RuntimeError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"apiserver answered {status}: {reason}" if status else f"apiserver unreachable: {reason}")
        self.status = status
        self.reason = reason


class UnreachableError(KubeError):
    def __init__(self, reason: str) -> None:
        super().__init__(0, reason)


class ApiError(KubeError):
    pass


class InvalidError(ApiError):
    pass


class ForbiddenError(ApiError):
    pass


class NotFoundError(ApiError):
    pass


class ConflictError(ApiError):
    pass


class ExpiredError(ApiError):
    pass


CONFLICT_ATTEMPTS = 3
"""Reads and conditional writes of one object in one pass, when another writer keeps changing it in between."""


_Result = TypeVar("_Result")


async def on_conflict_again(
    attempt: Callable[[], Awaitable[_Result]], *, retried: Callable[[ConflictError], None] | None = None
) -> _Result:
    """``attempt`` (a read, a decision on what it read, a write conditional on it) run again at once when its write
    was refused because another writer changed the object since the read (409), up to CONFLICT_ATTEMPTS times, the
    last conflict raised: client-go's RetryOnConflict without its pause. A reconcile that loses such a race to a
    user or another controller decides again on what is there instead of failing to its backoff. ``retried``
    hears of each conflict tried again."""
    for tries in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return await attempt()
        except ConflictError as exc:
            if tries == CONFLICT_ATTEMPTS:
                raise
            log.debug("a write lost a race with another writer: read and decided again", extra={"reason": exc.reason})
            if retried is not None:
                retried(exc)
    raise AssertionError("unreachable: the last attempt returns or raises")


class ThrottledError(ApiError):
    def __init__(self, status: int, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(status, reason)
        self.retry_after = retry_after


class KubeconfigError(ValueError):
    """A kubeconfig (or in-cluster configuration) that cannot be used."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidError,
    401: ForbiddenError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: ExpiredError,
    422: InvalidError,
}


def _answer_error(status: int, reason: str, *, retry_after: str | None = None) -> ApiError:
    if status == 429:
        try:
            seconds = float(retry_after) if retry_after else None
        except ValueError:
            seconds = None
        return ThrottledError(status, reason, retry_after=seconds)
    return _BY_STATUS.get(status, ApiError)(status, reason)


_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def _translate(exc: BaseException) -> KubeError:
    if isinstance(exc, ApiException):
        return _answer_error(int(exc.status or 0), str(exc.body or exc.reason))
    return UnreachableError(repr(exc))


def _segment(part: str) -> str:
    if not part or part in (".", ".."):
        raise ValueError(f"{part!r} cannot be a path segment")
    return urllib.parse.quote(part, safe="")


@dataclasses.dataclass(frozen=True)
class Gvr:
    group: str
    version: str
    resource: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version_path(self) -> str:
        """Where the group version's discovery document is."""
        return (
            f"/apis/{_segment(self.group)}/{_segment(self.version)}" if self.group else f"/api/{_segment(self.version)}"
        )

    def path(self, namespace: str | None = None) -> str:
        """The collection's path (all namespaces when ``namespace`` is None)."""
        scope = f"/namespaces/{_segment(namespace)}" if namespace else ""
        return f"{self.group_version_path}{scope}/{_segment(self.resource)}"

    def object_path(self, namespace: str | None, name: str, *, subresource: str | None = None) -> str:
        return f"{self.path(namespace)}/{_segment(name)}" + (f"/{_segment(subresource)}" if subresource else "")


NAMESPACES = Gvr("", "v1", "namespaces")
SECRETS = Gvr("", "v1", "secrets")
CONFIGMAPS = Gvr("", "v1", "configmaps")
EVENTS = Gvr("", "v1", "events")
KYMAS = Gvr("operator.kyma-project.io", "v1beta2", "kymas")
"""lifecycle-manager's Kyma CRs: the runtimes KCP knows (read by the reconcilers and, mapping runtime ids, the listener)."""

_DEFAULT_CONNECTIONS = 100

KEEPALIVE_SECONDS = 60
"""How long after a request its connection may be reused (aiohttp closes it at its next cleanup, up to as long
again later). aiohttp's default, 15 s, is shorter than the time between two changes of one runtime at 10,000
runtimes and 200 changes/s (~50 s), so each change paid a TLS handshake at both ends. Below kube-apiserver's own
idle timeout (90 s), so the apiserver does not close a connection for idleness as a request goes out on it (a
proxy in front of it must not idle out sooner)."""


async def api_client(kubeconfig: dict[str, Any], *, connections: int = _DEFAULT_CONNECTIONS) -> ApiClient:
    """An ApiClient for the kubeconfig's current context; the caller closes it.

    ``connections`` bounds the pool: every open watch holds one connection for its whole
    duration, so a client that watches much must be sized for it, or later watches wait.
    """
    configuration = client.Configuration()
    try:
        await config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration)
    except (config.ConfigException, KeyError, TypeError, ValueError) as exc:
        raise KubeconfigError(f"unusable kubeconfig: {exc}") from exc
    configuration.connection_pool_maxsize = connections
    return _client(configuration)


def client_like(api: ApiClient) -> ApiClient:
    """A client with ``api``'s configuration for the running event loop (an aiohttp session serves only the loop
    it was made on); the caller closes it."""
    return _client(api.configuration)


def _client(configuration: client.Configuration) -> ApiClient:
    """A client that reads the environment once, here, not on every request.

    kubernetes-asyncio's session trusts the environment, so aiohttp looked up the proxy and ~/.netrc in a thread
    for each request: three times the CPU per request (bench/kube_client.py). The proxy environment is read as
    aiohttp read it, for the apiserver's address; a proxy in the kubeconfig wins. ~/.netrc is no longer read,
    for the apiserver nor for the proxy (kubectl reads it for neither): proxy credentials go in the proxy's URL.
    """
    if not configuration.proxy:
        found = environment_proxy(configuration.host or "")
        if found is not None:
            configuration.proxy, authorization = found
            if authorization is not None:
                configuration.proxy_headers = {"Proxy-Authorization": authorization}
    api = client.ApiClient(configuration=configuration)
    api.rest_client.pool_manager._trust_env = False
    # kubernetes-asyncio builds the connector itself and passes no keep-alive; the connector reads this attribute
    # whenever it reuses or cleans up (test_kube checks both bounds).
    connector = api.rest_client.pool_manager.connector
    assert connector is not None, "kubernetes-asyncio gives its session a connector"
    connector._keepalive_timeout = KEEPALIVE_SECONDS
    return api


def environment_proxy(server: str) -> tuple[str, str | None] | None:
    """The proxy HTTPS_PROXY or HTTP_PROXY names for ``server`` unless NO_PROXY spares it, and the Basic
    Proxy-Authorization of the credentials in its URL; as aiohttp's ``trust_env`` finds it (an https:// proxy is
    not supported there either: ignored)."""
    url = urllib.parse.urlsplit(server)
    if not url.hostname or urllib.request.proxy_bypass(url.hostname):
        return None
    proxy = urllib.parse.urlsplit(urllib.request.getproxies().get(url.scheme, ""))
    if proxy.scheme != "http" or not proxy.hostname:
        return None
    authorization = None
    if proxy.username:
        credentials = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
        authorization = "Basic " + base64.b64encode(credentials.encode()).decode()
    netloc = proxy.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(proxy._replace(netloc=netloc)), authorization


async def client_from(kubeconfig: Path | None, *, connections: int = _DEFAULT_CONNECTIONS) -> ApiClient:
    """A client from a kubeconfig file, or from the pod's service account when none is given."""
    if kubeconfig is not None:
        return await api_client(read_kubeconfig(kubeconfig), connections=connections)
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException as exc:
        raise KubeconfigError(f"no --kubeconfig given and not running in a cluster: {exc}") from exc
    configuration.connection_pool_maxsize = connections
    return _client(configuration)


def parse_kubeconfig(raw: str | bytes) -> Any:
    """A kubeconfig document as YAML gives it (the caller checks its shape), parsed with libyaml where PyYAML was
    built with it: the reconciler parses one for every runtime client it builds, and the pure-Python parser took
    a seventh of a reconciler's CPU at 10,000 runtimes. Same safe subset; errors are ``yaml.YAMLError``."""
    return yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_kubeconfig(path: Path) -> dict[str, Any]:
    try:
        data = parse_kubeconfig(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise KubeconfigError(f"{path} is not a kubeconfig document")
    return data


async def _call(
    api: ApiClient,
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
        except (ValueError, AttributeError):
            detail = ""
        finally:
            response.release()
    except (ApiException, *_TRANSPORT_ERRORS) as exc:
        raise _translate(exc) from exc
    raise _answer_error(
        response.status, str(detail or response.reason), retry_after=response.headers.get("Retry-After")
    )


async def request(
    api: ApiClient,
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
        raise _translate(exc) from exc
    finally:
        response.release()
    document: dict[str, Any] = json.loads(data) if data else {}
    return document


async def get_or_none(api: ApiClient, path: str) -> dict[str, Any] | None:
    """The object, or None when there is none."""
    try:
        return await request(api, "GET", path)
    except NotFoundError:
        return None


async def create_or_replace(
    api: ApiClient, collection: str, body: dict[str, Any], *, attempts: int = 3
) -> dict[str, Any]:
    """Create ``body`` in the collection, or replace the existing object of its name with it.

    The replacement carries the resourceVersion just read, so a concurrent writer makes it retry
    instead of being overwritten blindly.
    """
    path = f"{collection}/{_segment(body['metadata']['name'])}"
    for attempt in range(attempts):
        try:
            return await request(api, "POST", collection, body=body)
        except ConflictError:
            current = await get_or_none(api, path)
            if current is None:
                continue
        try:
            metadata = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
            return await request(api, "PUT", path, body={**body, "metadata": metadata})
        except (ConflictError, NotFoundError):
            if attempt == attempts - 1:
                raise
    raise ConflictError(409, f"{path} kept changing while it was being replaced")


_APPLY = "application/apply-patch+yaml"
_MERGE = "application/merge-patch+json"


async def apply(
    api: ApiClient, path: str, body: dict[str, Any], *, field_manager: str, force: bool = True, dry_run: bool = False
) -> dict[str, Any]:
    """Server-side apply of ``body`` at ``path`` (an object or its status subresource).

    A ``metadata.resourceVersion`` in the body makes the apply conditional on it (409 otherwise).
    """
    query = (
        [("fieldManager", field_manager)]
        + ([("force", "true")] if force else [])
        + ([("dryRun", "All")] if dry_run else [])
    )
    return await request(api, "PATCH", path, query=query, body=body, content_type=_APPLY)


async def merge_patch(
    api: ApiClient, path: str, patch: dict[str, Any], *, field_manager: str | None = None
) -> dict[str, Any]:
    query = [("fieldManager", field_manager)] if field_manager else []
    return await request(api, "PATCH", path, query=query, body=patch, content_type=_MERGE)


@dataclasses.dataclass(frozen=True)
class Preconditions:
    """Delete only the object as it was seen: same uid (not a recreation), same resourceVersion."""

    uid: str
    resource_version: str | None = None

    def body(self) -> dict[str, str]:
        return {"uid": self.uid, **({"resourceVersion": self.resource_version} if self.resource_version else {})}


async def delete(api: ApiClient, path: str, *, preconditions: Preconditions | None = None) -> bool:
    """Delete (background propagation); False when it was already gone.

    With ``preconditions`` a different object of the same name raises ConflictError instead.
    """
    body: dict[str, Any] = {"propagationPolicy": "Background"}
    if preconditions is not None:
        body["preconditions"] = preconditions.body()
    try:
        await request(api, "DELETE", path, body=body)
    except NotFoundError:
        return False
    return True


async def ensure_namespace(api: ApiClient, name: str) -> None:
    """Create the namespace unless it exists."""
    try:
        await request(
            api, "POST", NAMESPACES.path(), body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    except ConflictError:
        pass


async def list_objects(
    api: ApiClient, gvr: Gvr, *, namespace: str | None, label_selector: str | None
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
    api: ApiClient,
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
        raise _translate(exc) from exc
    finally:
        response.release()


def _watch_event(line: bytes) -> tuple[str, dict[str, Any]]:
    event = json.loads(line)
    kind, obj = event["type"], event["object"]
    if kind == "ERROR":
        raise _answer_error(int(obj.get("code") or 0), str(obj.get("message")))
    return kind, obj


async def record_event(
    api: ApiClient, *, involved: dict[str, Any], type_: str, reason: str, message: str, component: str
) -> None:
    """A core/v1 Event about ``involved`` (a full object: apiVersion, kind, metadata), as kubectl describe shows them."""
    metadata = involved["metadata"]
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    await request(
        api,
        "POST",
        EVENTS.path(metadata["namespace"]),
        body={
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
            "involvedObject": {
                "apiVersion": involved["apiVersion"],
                "kind": involved["kind"],
                "namespace": metadata["namespace"],
                "name": metadata["name"],
                "uid": metadata["uid"],
                "resourceVersion": metadata.get("resourceVersion", ""),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": socket.gethostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        },
    )
