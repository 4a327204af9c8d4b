"""Refusals in the log: which runtime (or address) was refused, where, and why — without a flood.

The outcome counters say how many; on-call needs who and why (a wrong runtime id, a revoked
certificate, a module not allowed). A client refused in a loop must not fill the log: each
(client, route, outcome) is logged at most once a ``interval``, with how many were left out.
"""

import logging
import time

from listener import errors

log = logging.getLogger(__name__)

_MAX_TRACKED = 10_000
"""Distinct (client, route, outcome) kept; past it the table starts afresh (a burst of new clients only
costs a few extra lines)."""


class RefusalLog:
    def __init__(self, *, interval: float = 60.0) -> None:
        self._interval = interval
        self._last: dict[tuple[str, str, str], tuple[float, int]] = {}

    def report(self, rejected: errors.Rejected, *, route: str, client: str) -> None:
        key = (client, route, rejected.outcome)
        now = time.monotonic()
        logged_at, left_out = self._last.get(key, (float("-inf"), 0))
        if now - logged_at < self._interval:
            self._last[key] = (logged_at, left_out + 1)
            return
        if len(self._last) >= _MAX_TRACKED:
            self._last.clear()
        self._last[key] = (now, 0)
        log.warning(
            "request refused",
            extra={
                "client": client,
                "route": route,
                "status": rejected.status,
                "outcome": rejected.outcome,
                "reason": rejected.reason,
                "refused_since_last_line": left_out,
            },
        )
