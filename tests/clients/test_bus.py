"""Our JetStream seam: what nats-py's pull fetch raises is translated into empty work or an outage."""

import nats.errors
import pytest

from clients import bus


class RaisingSubscription:
    """Stands in for nats-py's pull subscription: its fetch raises what nats-py's would."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def fetch(self, batch: int, timeout: float) -> list[object]:
        raise self.error


def _pull(error: Exception) -> bus.PullConsumer:
    return bus.PullConsumer(RaisingSubscription(error))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(nats.errors.TimeoutError(), id="nats-timeout"),
        # nats-py 2.16 raises a bare one (js/client.py, _fetch_n) when the server's answer to the pull (a 408
        # once it expired) arrives after the fetch's own deadline: on a loaded machine, when the loop stalled
        # before the request went out. Taken for an outage it closed the consumer's connection, and the work
        # in flight lost its ack heartbeats (the CI of stop 25 redelivered a 6 s reconcile).
        pytest.param(TimeoutError(), id="bare-timeout"),
    ],
)
async def test_a_fetch_that_timed_out_is_empty_not_an_outage(error: Exception) -> None:
    assert await _pull(error).fetch(2, timeout=0.5) == []


async def test_a_closed_connection_is_an_outage() -> None:
    with pytest.raises(bus.BusUnavailableError):
        await _pull(nats.errors.ConnectionClosedError()).fetch(2, timeout=0.5)
