"""NATS subject scheme: ``kyma.events.<module>.<runtime>``.

Module comes before runtime so that a central team subscribes to its module across the whole
landscape with one wildcard (``kyma.events.<module>.*``) and a reconciler can shard by runtime.
One JetStream stream captures ``kyma.events.>``.
"""

from contract import ids

SUBJECT_PREFIX = "kyma.events"
STREAM_SUBJECTS = f"{SUBJECT_PREFIX}.>"


def event_subject(*, module: ids.ModuleName, runtime: ids.RuntimeId) -> ids.Subject:
    return ids.Subject(
        f"{SUBJECT_PREFIX}.{ids.module_name(module)}.{ids.runtime_id(runtime)}"
    )


def module_wildcard(module: ids.ModuleName) -> ids.Subject:
    """All runtimes' events of one module."""
    return ids.Subject(f"{SUBJECT_PREFIX}.{ids.module_name(module)}.*")


def runtime_wildcard(runtime: ids.RuntimeId) -> ids.Subject:
    """All modules' events of one runtime."""
    return ids.Subject(f"{SUBJECT_PREFIX}.*.{ids.runtime_id(runtime)}")
