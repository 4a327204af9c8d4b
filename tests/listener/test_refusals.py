"""Refusals are logged with who and why, once a minute per client, route and outcome."""

import logging
import time

import pytest

from listener import errors, refusals


def test_a_refusal_names_the_client_and_why_and_repeats_are_counted_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = refusals.RefusalLog(interval=0.05)
    forbidden = errors.Forbidden("no Kyma in KCP carries kyma-project.io/runtime-id=abc")
    with caplog.at_level(logging.WARNING, logger="listener.refusals"):
        for _ in range(5):
            log.report(forbidden, route="/v1/events", client="certificate abc")
        log.report(errors.BadRequest("invalid"), route="/v1/events", client="certificate abc")
        log.report(forbidden, route="/v1/events", client="certificate other")
        time.sleep(0.06)
        log.report(forbidden, route="/v1/events", client="certificate abc")
    lines = [(r.client, r.outcome, r.refused_since_last_line) for r in caplog.records]  # type: ignore[attr-defined]
    assert lines == [
        ("certificate abc", "forbidden", 0),
        ("certificate abc", "invalid", 0),
        ("certificate other", "forbidden", 0),
        ("certificate abc", "forbidden", 4),
    ]
    assert "runtime-id=abc" in caplog.records[0].reason  # type: ignore[attr-defined]
