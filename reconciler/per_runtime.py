"""Controllers whose key is a runtime: one reconcile brings one runtime in line with KCP.

A KCP-wide change (a ModuleTemplate edited) enqueues every runtime; the worker count bounds how
many runtimes are written to at once, so a change across thousands of runtimes is a steady
stream, not a storm. Keys collapse: ten template edits during one pass cost one more pass.
"""

from collections.abc import Iterable
from typing import Any

from clients import kube, objects
from contract import events, ids
from reconciler import controller, crds, runtime_clients, settings, workqueue
from reconciler.shared import Shared


class RuntimeKeyed(controller.Controller[ids.RuntimeId]):
    """A controller whose key is a runtime: every runtime KCP knows, and the one that changed."""

    def all_keys(self) -> Iterable[ids.RuntimeId]:
        return [ids.RuntimeId(r) for r in self.shared.runtimes()]

    def runtime_of(self, key: ids.RuntimeId) -> str:
        return key

    def keys_for_runtime(self, change: controller.RuntimeChange) -> Iterable[ids.RuntimeId]:
        return [ids.RuntimeId(change.runtime)]


class PerRuntimeController(RuntimeKeyed):
    """Keys, triggers and event routing of a controller writing one kind into runtimes; subclasses give the reconcile
    and their kind."""

    gvr: kube.Gvr
    kind: str

    def __init__(self, shared: Shared, config: settings.PerRuntimeSettings, *, name: str, events_module: str) -> None:
        super().__init__(shared, config, name=name)
        self.modules = frozenset({events_module})
        self._runtime_crds = config.runtime_crds

    def keys_for_event(self, event: events.ChangeEvent) -> Iterable[ids.RuntimeId]:
        same_kind = (event.target.group, event.target.kind) == (self.gvr.group, self.kind)
        return [ids.RuntimeId(event.runtime)] if same_kind else []

    def failed(self, runtime: str, exc: Exception) -> workqueue.Result:
        self.shared.clients.unprepared(runtime)
        why = f"{runtime}: {exc}"
        if isinstance(exc, objects.UnknownKindError) and self._runtime_crds == "never":
            why += (
                f" (the {self.kind} CRD is lifecycle-manager's and missing in the runtime; with runtime_crds: "
                "create-if-absent the reconciler creates it where missing)"
            )
        return workqueue.Result.failed(why)

    async def prepare(
        self, handle: runtime_clients.RuntimeHandle, *, definitions: list[dict[str, Any]], namespace: str
    ) -> None:
        """The namespace, and with ``runtime_crds: create-if-absent`` the CRDs where missing, once per runtime until
        a reconcile of it fails (``RuntimeClients.unprepared``).

        The CRDs are lifecycle-manager's: one that exists is never replaced (its versions and schema are
        not ours to change); by default they are not touched at all.
        """
        missing = [d for d in definitions if f"crd/{d['metadata']['name']}" not in handle.prepared]
        if missing and self._runtime_crds == "create-if-absent":
            await crds.install_if_absent(handle.objects.api, missing)
            handle.prepared.update(f"crd/{d['metadata']['name']}" for d in missing)
        if f"namespace/{namespace}" not in handle.prepared:
            await kube.ensure_namespace(handle.objects.api, namespace)
            handle.prepared.add(f"namespace/{namespace}")
