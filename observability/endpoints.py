"""The plain-HTTP management surface every component serves: /healthz, /readyz, /metrics (and /config
where a component has a configuration worth showing: what it runs with, no secrets)."""

from collections.abc import Callable
from typing import Any

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry

Readiness = Callable[[], str | None]
"""None when ready, else why not (answered with 503)."""


def management_app(
    registry: CollectorRegistry, readiness: Readiness, *, configuration: Callable[[], dict[str, Any]] | None = None
) -> web.Application:
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

    async def config(request: web.Request) -> web.Response:
        assert configuration is not None
        return web.json_response(configuration())

    app = web.Application()
    if configuration is not None:
        app.router.add_get("/config", config)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
