"""Which runtime a client certificate speaks for: its CN is the Kyma name, or the runtime id.

kyma-certs issues runtime certificates with the Kyma name as CN by default; upstream
lifecycle-manager (and ``kyma-certs --identity runtime-id``) uses the ``kyma-project.io/runtime-id``
label instead. Everything downstream — subjects, events, the reconcilers' keys — names a runtime by
its Kyma name, so in runtime-id mode the listener maps the CN to the Kyma carrying that label, from
a cache of KCP's Kyma CRs (read-only; the only KCP access the listener then needs).
"""

from typing import Protocol

from clients import informer
from contract import errors as contract_errors
from contract import ids, wire
from listener import errors


class Identities(Protocol):
    def runtime(self, identity: ids.RuntimeId) -> ids.RuntimeId:
        """The Kyma name the certificate identity stands for; raises a Rejected when there is none."""
        ...

    def unready(self) -> str | None:
        """Why identities cannot be mapped yet (for /readyz), or None."""
        ...


class ByKymaName:
    def runtime(self, identity: ids.RuntimeId) -> ids.RuntimeId:
        return identity

    def unready(self) -> str | None:
        return None


class ByRuntimeId:
    """runtime id -> Kyma name, kept from the Kymas carrying the runtime-id label."""

    def __init__(self, kymas: informer.Informer) -> None:
        self._kymas = kymas
        self._names: dict[str, set[str]] = {}
        kymas.subscribe(self._changed)

    def _changed(self, change: informer.Change) -> None:
        for obj, present in ((change.old, False), (change.new, True)):
            if obj is None:
                continue
            runtime_id = (obj["metadata"].get("labels") or {}).get(wire.RUNTIME_ID_LABEL)
            if runtime_id is None:
                continue
            names = self._names.setdefault(runtime_id, set())
            if present:
                names.add(obj["metadata"]["name"])
            else:
                names.discard(obj["metadata"]["name"])
                if not names:
                    del self._names[runtime_id]

    def unready(self) -> str | None:
        return None if self._kymas.synced.is_set() else f"not synced yet: {self._kymas.describe()}"

    def runtime(self, identity: ids.RuntimeId) -> ids.RuntimeId:
        if not self._kymas.synced.is_set():
            raise errors.Unavailable("the listener has not read KCP's Kyma CRs yet", retry_after=2)
        names = self._names.get(identity, set())
        if not names:
            raise errors.Forbidden(f"no Kyma in KCP carries {wire.RUNTIME_ID_LABEL}={identity}")
        if len(names) > 1:  # the names stay out of the answer: it goes to the runtime
            raise errors.Forbidden(
                f"{len(names)} Kymas carry {wire.RUNTIME_ID_LABEL}={identity} (kubectl get kymas -l "
                f"{wire.RUNTIME_ID_LABEL}={identity}): which one it is, is not the listener's to guess"
            )
        [name] = names
        try:
            return ids.runtime_id(name)
        except contract_errors.InvalidNameError as exc:
            raise errors.Forbidden(f"the Kyma carrying {wire.RUNTIME_ID_LABEL}={identity}: {exc}") from exc
