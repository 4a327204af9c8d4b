"""NATS subject scheme: ``kyma.events.<module>.<runtime>``.

Module comes before runtime so that a central team subscribes to its module across the whole
landscape with one wildcard (``kyma.events.<module>.*``) and a reconciler can shard by runtime.
One JetStream stream captures ``kyma.events.>``.
"""

from contract import errors, ids

SUBJECT_PREFIX = "kyma.events"
STREAM_SUBJECTS = f"{SUBJECT_PREFIX}.>"


def event_subject(*, module: ids.ModuleName, runtime: ids.RuntimeId) -> ids.Subject:
    return ids.Subject(f"{SUBJECT_PREFIX}.{ids.module_name(module)}.{ids.runtime_id(runtime)}")


def module_wildcard(module: ids.ModuleName) -> ids.Subject:
    """All runtimes' events of one module."""
    return ids.Subject(f"{SUBJECT_PREFIX}.{ids.module_name(module)}.*")


def runtime_wildcard(runtime: ids.RuntimeId) -> ids.Subject:
    """All modules' events of one runtime."""
    return ids.Subject(f"{SUBJECT_PREFIX}.*.{ids.runtime_id(runtime)}")


DEAD_LETTER_PREFIX = "kyma.deadletter"
DEAD_LETTER_SUBJECTS = f"{DEAD_LETTER_PREFIX}.>"


def dead_letter_subject(subject: str) -> ids.Subject:
    """Where an event that could not be handled goes: its module and runtime kept, under the dead-letter prefix."""
    tokens = subject.split(".")
    prefix = SUBJECT_PREFIX.split(".")
    if len(tokens) == len(prefix) + 2 and tokens[: len(prefix)] == prefix:
        try:
            return ids.Subject(f"{DEAD_LETTER_PREFIX}.{ids.module_name(tokens[-2])}.{ids.runtime_id(tokens[-1])}")
        except errors.InvalidNameError:
            pass
    return ids.Subject(f"{DEAD_LETTER_PREFIX}.unknown.unknown")
