"""Why a request was refused; each maps to one HTTP status.

Rejected                      (status, reason, outcome label for metrics)
 ├── Unauthenticated  401     no client certificate
 ├── Forbidden        403     untrusted, revoked, expired, speaking for another runtime
 ├── PayloadTooLarge  413
 ├── BadRequest       400     malformed or schema-invalid JSON
 ├── UnsupportedMedia 415
 ├── UnknownComponent 404     an upstream runtime-watcher component not in upstream_components
 ├── UnknownModule    422
 ├── ModuleNotAllowed 422     a module this runtime may not report (refused for good: retrying cannot help)
 ├── RateLimited      429     with Retry-After
 └── Unavailable      503     NATS cannot take it now; with Retry-After
      └── StreamFull   503     the event stream is at its limit (backpressure); with Retry-After
"""


class Rejected(Exception):
    status = 500
    outcome = "error"

    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class Unauthenticated(Rejected):
    status, outcome = 401, "unauthenticated"


class Forbidden(Rejected):
    status, outcome = 403, "forbidden"


class PayloadTooLarge(Rejected):
    status, outcome = 413, "too_large"


class BadRequest(Rejected):
    status, outcome = 400, "invalid"


class UnsupportedMedia(Rejected):
    status, outcome = 415, "unsupported_media"


class UnknownModule(Rejected):
    status, outcome = 422, "unknown_module"


class ModuleNotAllowed(Rejected):
    status, outcome = 422, "module_not_allowed"


class RateLimited(Rejected):
    status, outcome = 429, "rate_limited"


class Unavailable(Rejected):
    status, outcome = 503, "unavailable"


class StreamFull(Unavailable):
    outcome = "stream_full"


class UnknownComponent(Rejected):
    """An upstream runtime-watcher component (POST /v2/<component>/event) that upstream_components does not map."""

    status, outcome = 404, "unknown_component"
