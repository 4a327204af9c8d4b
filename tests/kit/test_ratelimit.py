"""Token buckets: a burst, then the rate; keys apart; full buckets forgotten."""

from kit import ratelimit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_rate_and_each_key_apart() -> None:
    clock = Clock()
    limiter = ratelimit.RateLimiter(rate=2, burst=3, clock=clock)
    assert [limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("a") == 0.5
    assert limiter.acquire("b") == 0.0
    clock.now += 0.5
    assert limiter.acquire("a") == 0.0
    assert limiter.acquire("a") == 0.5


def test_buckets_filled_up_again_are_forgotten() -> None:
    clock = Clock()
    limiter = ratelimit.RateLimiter(rate=1, burst=10, clock=clock)
    for n in range(100):
        limiter.acquire(f"key-{n}")
    assert len(limiter) == 100
    clock.now += 5
    limiter.acquire("busy")
    assert len(limiter) == 101  # not yet full again: still held
    clock.now += 5
    limiter.acquire("busy")
    assert len(limiter) == 1  # the hundred refilled; only the one just used is held
    assert [limiter.acquire("key-0") for _ in range(10)] == [0.0] * 10
    assert limiter.acquire("key-0") == 1.0
