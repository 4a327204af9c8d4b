"""The raw Kubernetes client against a real apiserver: errors are raised, not misread."""

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from clients import kube
from devenv import landscape as landscape_mod

pytestmark = pytest.mark.integration

CONFIGMAPS = kube.Gvr("", "v1", "configmaps")


async def test_list_of_an_unknown_resource_raises_not_found(skr_api: kube.ApiClient) -> None:
    """A 404 answer to a list is NotFoundError, not an empty list."""
    with pytest.raises(kube.NotFoundError):
        await kube.list_objects(
            skr_api, kube.Gvr("nope.example.com", "v1", "things"), namespace=None, label_selector=None
        )


async def test_watch_refused_by_the_apiserver_raises_instead_of_ending(skr_api: kube.ApiClient) -> None:
    """A watch the apiserver answers with an error status raises KubeError with that status."""
    with pytest.raises(kube.KubeError) as raised:
        async for _ in kube.watch_objects(
            skr_api,
            CONFIGMAPS,
            namespace="default",
            label_selector=None,
            resource_version="not-a-number",
            timeout_seconds=5,
        ):
            pass
    assert raised.value.status in (400, 410, 500)


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A proxy that refuses every tunnel: its URL, and the request lines it was sent."""
    seen: list[str] = []

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append((await reader.readline()).decode().strip())
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}", seen


async def test_the_environments_proxy_is_used_unless_no_proxy_names_the_apiserver(
    landscape: landscape_mod.Landscape, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS_PROXY and NO_PROXY are read once, when the client is made, and still decide the route."""
    url, seen = proxy
    kubeconfig = landscape.runtimes["skr-1"].admin_kubeconfig()
    server = kubeconfig["clusters"][0]["cluster"]["server"].removeprefix("https://")
    for name in ("no_proxy", "NO_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", url)
    async with await kube.api_client(kubeconfig) as api:
        assert not api.rest_client.pool_manager.trust_env  # the environment is not looked up per request
        with pytest.raises(kube.KubeError):
            await kube.request(api, "GET", "/api/v1/namespaces/default")
    assert seen == [f"CONNECT {server} HTTP/1.1"]
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with await kube.api_client(kubeconfig) as api:
        assert (await kube.request(api, "GET", "/api/v1/namespaces/default"))["metadata"]["name"] == "default"
    assert len(seen) == 1


def test_the_environments_proxy_is_found_as_aiohttp_found_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("no_proxy", "NO_PROXY", "https_proxy", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:p%40ss@proxy.example:3128")
    found = kube.environment_proxy("https://10.0.0.1:6443")
    assert found is not None
    assert found[0] == "http://proxy.example:3128"
    assert found[1] == "Basic " + base64.b64encode(b"user:p@ss").decode()
    assert kube.environment_proxy("http://10.0.0.1:8080") is None  # HTTP_PROXY is not set
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    assert kube.environment_proxy("https://10.0.0.1:6443") is None
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example:3128")
    assert kube.environment_proxy("https://10.0.0.1:6443") is None  # aiohttp ignores https:// proxies too


async def test_request_creates_and_conflicts(skr_api: kube.ApiClient) -> None:
    """request() returns the created object; creating it again is ConflictError."""
    name = f"req-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}}
    created = await kube.request(skr_api, "POST", CONFIGMAPS.path("default"), body=body)
    assert created["metadata"]["name"] == name and created["data"] == {"a": "1"}
    with pytest.raises(kube.ConflictError):
        await kube.request(skr_api, "POST", CONFIGMAPS.path("default"), body=body)
    items, _ = await kube.list_objects(skr_api, CONFIGMAPS, namespace="default", label_selector=None)
    assert any(i["metadata"]["name"] == name and i["kind"] == "ConfigMap" for i in items)


async def test_apply_with_a_stale_resource_version_is_a_conflict(skr_api: kube.ApiClient) -> None:
    """A resourceVersion in a server-side apply makes it conditional: a changed object is not overwritten."""
    name = f"cond-{uuid.uuid4().hex[:6]}"
    path = CONFIGMAPS.object_path("default", name)
    created = await kube.request(
        skr_api, "POST", CONFIGMAPS.path("default"), body={"metadata": {"name": name}, "data": {"a": "1"}}
    )
    await kube.merge_patch(skr_api, path, {"data": {"a": "2"}})
    stale = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": {"a": "mine"},
        "metadata": {"name": name, "namespace": "default", "resourceVersion": created["metadata"]["resourceVersion"]},
    }
    with pytest.raises(kube.ConflictError):
        await kube.apply(skr_api, path, stale, field_manager="test")
    assert (await kube.request(skr_api, "GET", path))["data"] == {"a": "2"}


async def test_delete_with_preconditions_spares_a_recreated_object(skr_api: kube.ApiClient) -> None:
    """Preconditions of the object as seen: a same-named recreation is a conflict, not a deletion."""
    name = f"pre-{uuid.uuid4().hex[:6]}"
    path = CONFIGMAPS.object_path("default", name)
    first = await kube.request(skr_api, "POST", CONFIGMAPS.path("default"), body={"metadata": {"name": name}})
    assert await kube.delete(skr_api, path)
    await kube.request(skr_api, "POST", CONFIGMAPS.path("default"), body={"metadata": {"name": name}})
    with pytest.raises(kube.ConflictError):
        await kube.delete(skr_api, path, preconditions=kube.Preconditions(uid=first["metadata"]["uid"]))
    assert await kube.get_or_none(skr_api, path) is not None
    assert not await kube.delete(skr_api, CONFIGMAPS.object_path("default", f"{name}-never"))


@pytest.mark.parametrize("name", ["../secrets/x", "a/b", "..", "%2e%2e"])
def test_object_paths_quote_every_segment(name: str) -> None:
    """A name becomes exactly one path segment (or is refused)."""
    try:
        path = CONFIGMAPS.object_path("default", name)
    except ValueError:
        return
    assert path.count("/") == CONFIGMAPS.path("default").count("/") + 1
    assert not path.endswith(("/..", "/."))


async def test_a_connection_is_reused_for_a_minute_after_its_last_request(
    skr_api: kube.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime changed every ~50 s reuses its connection instead of paying a TLS handshake per change: after 16 s
    of quiet (aiohttp's default keep-alive is 15 s) the next request goes out on the same connection, after 61 s on
    a new one (kube-apiserver closes idle connections at 90 s). aiohttp's clock is moved on rather than slept on."""
    skipped = 0.0
    monkeypatch.setattr("aiohttp.connector.monotonic", lambda: time.monotonic() + skipped)

    async def connection_used() -> object:
        # A watch holds its connection while it streams (a small answer gives it back before it can be looked at).
        response = await skr_api.call_api(
            "/api/v1/namespaces/default/configmaps",
            "GET",
            query_params=[("watch", "1"), ("timeoutSeconds", "1")],
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        assert response.status == 200, await response.text()
        protocol = response.connection.protocol
        await response.read()
        return protocol

    first = await connection_used()
    skipped += 16
    assert await connection_used() is first
    skipped += 61
    assert await connection_used() is not first
