"""CloudEvents headers of a change event: the binary content mode, every value a single header line."""

from contract import cloudevents

from ..factories import configmap_event


def test_every_attribute_is_a_header_and_no_value_can_break_its_line() -> None:
    event = configmap_event("kyma-sync", name="cm-a", namespace="team-a")
    headers = cloudevents.headers(event)
    assert headers["ce-id"] == event.id and headers["ce-source"] == "/runtimes/skr-1"
    assert headers["ce-subject"] == "core/v1/configmaps/team-a/cm-a"
    # The model refuses control characters in these fields; a forged value is defused here all the same.
    forged = event.model_copy(update={"runtime": "skr-1\r\nNats-Msg-Id: forged\x7f"})
    assert cloudevents.headers(forged)["ce-source"] == "/runtimes/skr-1__Nats-Msg-Id: forged_"
