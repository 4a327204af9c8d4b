"""Held mirrors (``reconciler.mirror.HeldMirrors``): warned about once in a while, counted while found held."""

from prometheus_client import CollectorRegistry

from reconciler import mirror

from ..clock import Clock

KEY = mirror.ObjectKey("skr-1", "vpcpeerings", "default", "peer")


def test_a_held_mirror_is_warned_about_when_found_then_again_after_a_while() -> None:
    clock, registry = Clock(), CollectorRegistry()
    held = mirror.HeldMirrors(registry, clock=clock)
    assert held.due(KEY, "uid-1")
    held.warned(KEY)
    clock.now += 60
    assert not held.due(KEY, "uid-1")
    clock.now += mirror.HELD_WARNED_AGAIN_SECONDS
    assert held.due(KEY, "uid-1")
    assert registry.get_sample_value("kyma_reconciler_mirrors_held") == 1


def test_a_warning_not_recorded_is_due_again_and_another_held_mirror_is_new() -> None:
    held = mirror.HeldMirrors(CollectorRegistry(), clock=Clock())
    assert held.due(KEY, "uid-1")
    assert held.due(KEY, "uid-1"), "not warned yet (its Event dropped): due again"
    held.warned(KEY)
    assert held.due(KEY, "uid-2"), "an earlier mirror of another uid is another one"


def test_a_held_mirror_counts_while_found_and_not_once_released_or_no_longer_seen() -> None:
    clock, registry = Clock(), CollectorRegistry()
    held = mirror.HeldMirrors(registry, clock=clock)
    other = mirror.ObjectKey("skr-2", "vpcpeerings", "default", "peer")
    held.due(KEY, "uid-1")
    held.due(other, "uid-2")
    assert registry.get_sample_value("kyma_reconciler_mirrors_held") == 2
    held.released(KEY)
    assert registry.get_sample_value("kyma_reconciler_mirrors_held") == 1
    clock.now += mirror.HELD_SEEN_WITHIN_SECONDS + 1  # its key moved to another replica
    assert registry.get_sample_value("kyma_reconciler_mirrors_held") == 0
