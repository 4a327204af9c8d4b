"""Kubernetes Events about KCP objects, spared as Kubernetes spares its etcd.

Every Event is a write into KCP's etcd, kept for the apiserver's event TTL (an hour by default).
A drift storm repairs thousands of objects a minute: an Event for each would be as many writes,
for a history nobody reads at that pace (in the fleet benchmark, the only KCP write a drift repair
made). As client-go's recorder does (its spam filter: per involved object a burst of 25, then one
every five minutes), and as the apiserver's EventRateLimit admission does for a whole server, an
Event is dropped once its object's or this process' budget is spent. Normal and Warning Events
have budgets of their own: a storm of repairs never silences a refusal or a conflict. Drops are
counted by the caller and logged at most once a minute; what happened stays in the status,
metrics and logs.
"""

import logging
import time
from collections.abc import Callable
from typing import Any

from clients import kube
from kit import ratelimit

log = logging.getLogger(__name__)

PER_OBJECT_BURST = 25
PER_OBJECT_EVERY_SECONDS = 300.0
_DROPS_LOGGED_EVERY_SECONDS = 60.0


class EventRecorder:
    def __init__(
        self,
        api: kube.ApiClient,
        *,
        component: str,
        per_second: float,
        burst: int,
        dropped: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._component = component
        self._per_object = ratelimit.RateLimiter(rate=1 / PER_OBJECT_EVERY_SECONDS, burst=PER_OBJECT_BURST, clock=clock)
        self._overall = ratelimit.RateLimiter(rate=per_second, burst=burst, clock=clock)
        self._dropped = dropped
        self._clock = clock
        self._drops_unlogged = 0
        self._drops_logged_at = clock() - _DROPS_LOGGED_EVERY_SECONDS

    async def record(self, involved: dict[str, Any], *, type_: str, reason: str, message: str) -> bool:
        """An Event about ``involved`` (a full object), unless a budget is spent; False when not written."""
        per_object = f"{involved['metadata']['uid']}/{type_}"
        if not (self._per_object.has_token(per_object) and self._overall.has_token(type_)):
            self._drop(reason)
            return False
        self._per_object.acquire(per_object)
        self._overall.acquire(type_)
        try:
            await kube.record_event(
                self._api, involved=involved, type_=type_, reason=reason, message=message, component=self._component
            )
        except kube.KubeError as exc:
            log.warning("could not record an Event", extra={"error": str(exc), "reason": reason})
            return False
        return True

    def _drop(self, reason: str) -> None:
        self._dropped(reason)
        self._drops_unlogged += 1
        now = self._clock()
        if now - self._drops_logged_at >= _DROPS_LOGGED_EVERY_SECONDS:
            log.warning(
                "Kubernetes Events dropped: their objects' or this process' budget is spent (status, metrics "
                "and logs still say what happened)",
                extra={"dropped": self._drops_unlogged},
            )
            self._drops_unlogged, self._drops_logged_at = 0, now
