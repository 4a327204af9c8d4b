"""A runtime apiserver's validating webhook that makes a race of the reconciler's writes certain."""

import asyncio
import base64
import contextlib
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from clients import kube
from contract import wire
from pki import pki

from ..waiting import eventually

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def operations_on(gvr: kube.Gvr, *operations: str, subresource: str | None = None) -> dict[str, Any]:
    """A webhook rule: ``operations`` on ``gvr`` (or on its ``subresource``)."""
    resource = f"{gvr.resource}/{subresource}" if subresource else gvr.resource
    return {
        "apiGroups": [gvr.group],
        "apiVersions": [gvr.version],
        "operations": list(operations),
        "resources": [resource],
    }


async def webhook(
    api: kube.ApiClient,
    name: str,
    client: dict[str, str],
    *,
    rules: list[dict[str, Any]],
    selector: dict[str, str],
    timeout: int,
) -> str:
    """A validating webhook (``client``: its clientConfig) the runtime's apiserver calls on what ``rules`` name, for
    objects labelled ``selector``, refusing them when it cannot be reached; its path, to delete it."""
    webhook = {
        "name": f"{name}.kyma-sync.test",
        "clientConfig": client,
        "rules": rules,
        "objectSelector": {"matchLabels": selector},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout,
    }
    await kube.request(api, "POST", WEBHOOKS, body={"metadata": {"name": name}, "webhooks": [webhook]})
    return f"{WEBHOOKS}/{name}"


Race = Callable[[kube.ApiClient, dict[str, Any]], Awaitable[None]]


async def annotated(api: kube.ApiClient, obj: dict[str, Any]) -> None:
    """The race by default: the raced ConfigMap annotated ``raced: yes``."""
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    await annotating(kube.CONFIGMAPS.object_path(namespace, name))(api, obj)


def annotating(path: str, **annotations: str) -> Race:
    """A race that annotates the object at ``path`` (default ``raced: yes``), as a controller writing its own field
    of the object would."""

    async def race(api: kube.ApiClient, obj: dict[str, Any]) -> None:
        await kube.merge_patch(api, path, {"metadata": {"annotations": annotations or {"raced": "yes"}}})

    return race


async def created_first(api: kube.ApiClient, obj: dict[str, Any]) -> None:
    labels = {"race": obj["metadata"]["labels"]["race"]}  # none of ours
    theirs = {"metadata": {"name": obj["metadata"]["name"], "labels": labels}, "data": {"k": "theirs"}}
    await kube.request(api, "POST", kube.CONFIGMAPS.path(obj["metadata"]["namespace"]), body=theirs)


@contextlib.asynccontextmanager
async def racing_admission(
    api: kube.ApiClient,
    *,
    label: str,
    race: Race = annotated,
    rule: dict[str, Any] | None = None,
    selector: dict[str, str] | None = None,
    name: str | None = None,
) -> AsyncIterator[list[str]]:
    """The reconciler's first write that ``rule`` names (default: an update of a ConfigMap) to an object labelled
    ``selector`` (default: ``race: <label>``), and named ``name`` if given, loses a race, certainly: the runtime's
    webhook, before it allows that write, lets ``race`` have another writer change the object (by default: annotate
    it), so the write is refused when it is stored (409). Yields the names of the objects raced, each once its race
    is over."""
    rule = rule or operations_on(kube.CONFIGMAPS, "UPDATE")
    selector = selector or {"race": label}
    ca = pki.create_ca("racing-webhook")
    serving = pki.loopback_server_cert(ca, common_name="racing-webhook")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as directory:
        cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        cert.write_bytes(serving.cert_pem)
        key.write_bytes(serving.key_pem)
        context.load_cert_chain(cert, key)
    raced: list[str] = []
    racing, probed = asyncio.Event(), asyncio.Event()

    async def review(request: web.Request) -> web.Response:
        admission = (await request.json())["request"]
        ours = (admission.get("options") or {}).get("fieldManager") == wire.RECONCILER_FIELD_MANAGER
        written = admission["resource"]["resource"] + (
            f"/{admission['subResource']}" if admission.get("subResource") else ""
        )
        if admission.get("dryRun"):
            probed.set()
        elif (
            ours
            and admission["operation"] in rule["operations"]
            and written in rule["resources"]
            and (name is None or ((admission.get("object") or {}).get("metadata") or {}).get("name") == name)
            and not racing.is_set()
        ):
            racing.set()  # before the race: its own writes may come through here
            await race(api, admission["object"])
            raced.append(admission["object"]["metadata"]["name"])  # once it is over: a test reads what it did
        return web.json_response(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": admission["uid"], "allowed": True},
            }
        )

    app = web.Application()
    app.router.add_post("/", review)
    runner = web.AppRunner(app)
    await runner.setup()
    path = None
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = runner.addresses[0][1]
        path = await webhook(
            api,
            f"race-{label}",
            {"url": f"https://127.0.0.1:{port}/", "caBundle": base64.b64encode(ca.cert_pem).decode()},
            rules=[
                operations_on(kube.CONFIGMAPS, "CREATE"),
                rule,
            ],  # a dry-run create of a ConfigMap tells it is called
            selector=selector,
            timeout=10,
        )

        async def called() -> bool:
            # The apiserver learns of a new webhook through an informer: a dry-run create reaches it once it does.
            probe = {"metadata": {"name": f"probe-{label}", "labels": selector}}
            await kube.request(api, "POST", kube.CONFIGMAPS.path("default"), body=probe, query=[("dryRun", "All")])
            return probed.is_set()

        await eventually(called, what="the racing webhook called by the apiserver")
        yield raced
    finally:
        if path is not None:
            await kube.request(api, "DELETE", path)
        await runner.cleanup()
