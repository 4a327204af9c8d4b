"""Token buckets: a burst, then the rate; keys apart; full buckets forgotten."""

from kit import ratelimit

from ..clock import Clock


def test_a_burst_then_the_rate_and_each_key_apart() -> None:
    clock = Clock()
    limiter = ratelimit.RateLimiter(rate=2, burst=3, clock=clock)
    assert [limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("a") == 0.5
    assert limiter.acquire("b") == 0.0
    clock.now += 0.5
    assert limiter.acquire("a") == 0.0
    assert limiter.acquire("a") == 0.5


def test_buckets_filled_up_again_are_forgotten_and_only_those() -> None:
    clock = Clock()
    limiter = ratelimit.RateLimiter(rate=1, burst=10, clock=clock)
    for n in range(100):
        limiter.acquire(f"key-{n}")
    clock.now += 9
    assert [limiter.acquire("drained") for _ in range(10)] == [0.0] * 10
    assert len(limiter) == 101  # a refill time has not passed since the start: nothing looked at yet
    clock.now += 1
    assert limiter.has_token("key-0")  # the scan: the hundred are full again, "drained" has 1 of 10 tokens
    assert len(limiter) == 2  # "drained" and "key-0" (made again, full)
    assert limiter.acquire("drained") == 0.0
    assert limiter.acquire("drained") == 1.0


def test_has_token_takes_none() -> None:
    limiter = ratelimit.RateLimiter(rate=1, burst=1, clock=Clock())
    assert limiter.has_token("a") and limiter.has_token("a")
    assert limiter.acquire("a") == 0.0
    assert not limiter.has_token("a")
