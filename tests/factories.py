"""Change events about ConfigMaps, as the tests need them: one place that builds them."""

import uuid
from typing import Any

from contract import events, ids


def configmap_event(
    module: str,
    runtime: str = "skr-1",
    *,
    name: str | None = None,
    namespace: str = "default",
    uid: str | None = None,
    resource_version: str = "1",
    change_type: events.ChangeType = events.ChangeType.MODIFIED,
    body: dict[str, Any] | None = None,
) -> events.ChangeEvent:
    """A valid event about one ConfigMap (a fresh name and uid unless given)."""
    name = name or f"cm-{uuid.uuid4().hex[:6]}"
    return events.ChangeEvent.create(
        runtime=ids.runtime_id(runtime),
        module=ids.module_name(module),
        target=events.WatchedObject(
            group="",
            version="v1",
            resource="configmaps",
            kind="ConfigMap",
            namespace=namespace,
            name=name,
            uid=uid or f"uid-{runtime}-{name}",
        ),
        resource_version=resource_version,
        change_type=change_type,
        body={"data": {}} if body is None else body,
    )
