"""Subject naming: kyma.events.<module>.<runtime>."""

import pytest

from contract import errors, ids, subjects


def test_event_subject_is_module_then_runtime() -> None:
    """The subject names the module first, then the runtime."""
    subject = subjects.event_subject(module=ids.ModuleName("btp-operator"), runtime=ids.RuntimeId("c-4f2a"))
    assert subject == "kyma.events.btp-operator.c-4f2a"


def test_wildcards_cover_one_module_or_one_runtime() -> None:
    """Central teams subscribe per module; shards per runtime."""
    assert subjects.module_wildcard(ids.ModuleName("keda")) == "kyma.events.keda.*"
    assert subjects.runtime_wildcard(ids.RuntimeId("skr-1")) == "kyma.events.*.skr-1"


@pytest.mark.parametrize("bad", ["", "a.b", "a*", ">", "with space", "Upper", "-lead", "x" * 64])
def test_names_that_would_break_subjects_are_refused(bad: str) -> None:
    """Tokens NATS gives meaning to can never reach a subject."""
    with pytest.raises(errors.InvalidNameError):
        subjects.event_subject(module=ids.ModuleName(bad), runtime=ids.RuntimeId("skr-1"))
    with pytest.raises(errors.InvalidNameError):
        subjects.event_subject(module=ids.ModuleName("keda"), runtime=ids.RuntimeId(bad))
