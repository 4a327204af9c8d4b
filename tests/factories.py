"""Test data built in one place: change events about ConfigMaps, and the design document's SyncResource."""

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


# The design document's example (seed 001), with its typos fixed: Configmap -> ConfigMap, the missing colon after
# update.properties, the item indentation, and a Deployment spec where it says "....".
DESIGN_EXAMPLE = """
apiVersion: operator.kyma-project.io/v1alpha1
kind: SyncResource
metadata:
  labels:
    "operator.kyma-project.io/kyma-name": skr-1
  name: design-example
spec:
  kyma: skr-1
  items:
  - strategy: CreateAndSync
    name: config-update
    resource: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
          name: config-update
          namespace: kyma-system
      data:
          update.properties: |
              foo=bar
  - strategy: Delete
    name: config-to-deleted
    resource: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
          name: some-config
          namespace: kyma-system
  - strategy: CreateAndSync
    name: module-cr
    subresource: |
      apiVersion: operator.kyma-project.io/v1alpha1
      kind: SomeModule
      metadata:
          name: module-cr-name
          namespace: kyma-system
      status:
        state: Ready
  - strategy: CreateAndIgnore
    name: some-deployment
    resource: |
      apiVersion: apps/v1
      kind: Deployment
      metadata:
          name: app
          namespace: kyma-system
      spec:
          selector:
            matchLabels: {app: app}
          template:
            metadata:
              labels: {app: app}
            spec:
              containers: [{name: app, image: busybox}]
"""
