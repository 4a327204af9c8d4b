"""Token buckets per key: one noisy runtime (or object) cannot starve the others.

A bucket that has filled up again is forgotten (it is the same as a new one), so the buckets follow
the keys in use, not every key ever seen.
"""

import dataclasses
import time
from collections.abc import Callable


@dataclasses.dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._refill_seconds = self._burst / rate
        self._pruned = clock()

    def acquire(self, key: str) -> float:
        """Take one token for ``key``: 0.0 if granted, else the seconds until one is available."""
        bucket = self._refilled(key)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self._rate

    def has_token(self, key: str) -> bool:
        """Whether ``acquire`` would grant one now (none taken: for a caller that needs tokens of two limiters)."""
        return self._refilled(key).tokens >= 1.0

    def _refilled(self, key: str) -> _Bucket:
        now = self._clock()
        self._prune(now)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=self._burst, updated=now)
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.updated) * self._rate)
        bucket.updated = now
        return bucket

    def __len__(self) -> int:
        """Buckets held (not yet full again)."""
        return len(self._buckets)

    def _prune(self, now: float) -> None:
        """Forget full buckets, at most once per refill time (a scan is O(keys))."""
        if now - self._pruned < self._refill_seconds:
            return
        self._pruned = now
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.updated) * self._rate >= self._burst]
        for key in full:
            del self._buckets[key]
