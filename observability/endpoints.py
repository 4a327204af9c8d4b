"""The plain-HTTP management surface every component serves: /healthz, /readyz, /metrics."""

from collections.abc import Callable

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry

Readiness = Callable[[], str | None]
"""None when ready, else why not (answered with 503)."""


def management_app(registry: CollectorRegistry, readiness: Readiness) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        reason = readiness()
        return web.Response(status=503, text=reason) if reason else web.Response(text="ready")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=prometheus_client.generate_latest(registry),
            headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST},
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
