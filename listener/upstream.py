"""The request of Kyma's upstream runtime-watcher, turned into a reference-only change event (pure).

During a migration, runtimes still running the upstream skr-webhook (kyma-project/runtime-watcher)
post to this listener. What that webhook sends (``runtime-watcher/pkg/admissionreview/handler.go``,
``sendRequestToKcp``) is ``POST /v2/<component>/event`` with ``Content-Type: application/json`` and
the body ``json.Marshal(listener/pkg/v2/types.WatchEvent)``::

    {"watched":{"Namespace":"kyma-system","Name":"default"},
     "watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}

``watched`` is a ``types.NamespacedName`` without JSON tags, hence the capitalised keys; upstream's
own test data writes them in lower case, and Go's decoder accepts both, so key case is folded here
too, and unknown keys are ignored as Go ignores them. ``<component>`` is the Watcher CR's manager
(``lifecycle-manager`` for KLM's own Watcher). The runtime is not in the body: upstream's listener
takes it from the client certificate, as this listener does.

The request names an object and nothing else — no uid, no resourceVersion, no operation (it is
sent from a validating admission webhook for CREATE, UPDATE and DELETE alike), no content. So it
becomes a reference-only event, and the fields the contract requires get stand-ins (see
``to_change_event``); consumers re-read the live object, which is what a level-based reconciler
does anyway.
"""

import hashlib
import uuid
from datetime import datetime
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract import events, ids

PATH = "/v2/{component}/event"
"""lifecycle-manager's contract version "v2" (``internal/istio/virtualservice.go``; the skr-webhook's
``KCP_CONTRACT``) and upstream's ``/v%s/%s/event`` pattern (``listener/pkg/v2/event/skr_events_listener.go``)."""

MAX_BODY_BYTES = 16_384
"""Upstream's own limit (``requestSizeLimitInBytes``); the body it sends is about 150 bytes."""

STAND_IN_PREFIX = "upstream-"
"""Starts the uid and resourceVersion stand-ins: never mistaken for (or matching) a real one."""


class UpstreamEventError(ValueError):
    """A body that is not a usable upstream watch event."""


class _GoStruct(BaseModel):
    """Decoded as Go's encoding/json decodes upstream's structs: keys matched case-insensitively
    (the last of equal keys wins), unknown keys ignored (upstream's test data carries an "owner")."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _fold_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {str(key).lower(): value for key, value in data.items()}


class Watched(_GoStruct):
    namespace: str = Field(default="", description='"" for a cluster-scoped object')
    name: str


class WatchedGvk(_GoStruct):
    group: str = Field(default="", description='"" for the core group')
    version: str
    kind: str


class WatchEvent(_GoStruct):
    watched: Watched
    watched_gvk: WatchedGvk = Field(alias="watchedgvk")


def decode(data: bytes) -> WatchEvent:
    """Parse untrusted bytes (already cut off at MAX_BODY_BYTES), or UpstreamEventError naming the fields."""
    try:
        return WatchEvent.model_validate_json(data)
    except pydantic.ValidationError as exc:
        raise UpstreamEventError(f"invalid upstream watch event: {_describe(exc, _UPSTREAM_NAMES)}") from exc


def guess_resource(kind: str) -> str:
    """The plural resource name as apimachinery's ``meta.UnsafeGuessKindToResource`` guesses it.

    Upstream sends the kind only. This is the guess Kubernetes tooling makes without discovery,
    and it is right for Kyma's CRDs (Kyma -> kymas) and almost every built-in kind; an irregular
    plural a CRD declares (spec.names.plural) is not known here. Consumers that need the exact
    resource resolve group and kind through discovery (this repository's reconcilers match events
    by group and kind, never by resource).
    """
    singular = kind.lower()
    if singular.endswith("endpoints"):
        return singular
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def _object_uid(watched: Watched, gvk: WatchedGvk) -> str:
    """A stand-in uid: stable per (group, kind, namespace, name), so one object keeps one key.

    An object deleted and re-created under the same name keeps it too — upstream cannot tell them apart.
    """
    key = "\x00".join((gvk.group, gvk.kind, watched.namespace, watched.name)).encode()
    return STAND_IN_PREFIX + hashlib.sha256(key).hexdigest()[:32]


def to_change_event(
    watch: WatchEvent,
    *,
    runtime: ids.RuntimeId,
    module: ids.ModuleName,
    received_at: datetime,
    trace: events.TraceContext | None,
) -> events.ChangeEvent:
    """The reference-only change event of one upstream request, or UpstreamEventError.

    - ``resource_version`` is unique per request (``upstream-<random>``), so every request gets an
      event id of its own. Two requests for the same object are byte-identical whether they are a
      retry, a second edit, or a create followed by a delete; collapsing them in JetStream's
      duplicate window could drop a real change a consumer had not yet re-read, while a duplicate
      costs one idempotent reconcile. (Upstream retries only connection errors and 5xx, so a retry
      repeats a stored event only when its answer was lost, e.g. a JetStream ack that timed out.)
    - ``change_type`` is RESYNC: the request does not say what happened, only "look again".
    - ``target.resource`` is guessed from the kind (``guess_resource``); ``target.uid`` is a stand-in
      per object (``_object_uid``). The uid and resourceVersion stand-ins start with STAND_IN_PREFIX,
      which no real one does (a uid is a UUID, a resourceVersion in practice etcd's decimal
      revision), so a consumer using them as write preconditions fails rather than matching.
    """
    gvk = watch.watched_gvk
    try:
        target = events.WatchedObject(
            group=gvk.group,
            version=gvk.version,
            resource=guess_resource(gvk.kind),
            kind=gvk.kind,
            namespace=watch.watched.namespace or None,
            name=watch.watched.name,
            uid=_object_uid(watch.watched, gvk),
        )
    except pydantic.ValidationError as exc:
        raise UpstreamEventError(f"invalid upstream watch event: {_describe(exc, _TARGET_NAMES)}") from exc
    return events.ChangeEvent.create(
        runtime=runtime,
        module=module,
        target=target,
        resource_version=STAND_IN_PREFIX + uuid.uuid4().hex,
        change_type=events.ChangeType.RESYNC,
        body=None,
        observed_at=received_at,
        trace=trace,
    )


_UPSTREAM_NAMES = {"watchedgvk": "watchedGvk"}
_TARGET_NAMES = {
    "group": "watchedGvk.group",
    "version": "watchedGvk.version",
    "kind": "watchedGvk.kind",
    "resource": "watchedGvk.kind",
    "namespace": "watched.namespace",
    "name": "watched.name",
}
"""Errors are reported in the request's terms: a target field is named by the upstream field it came from."""


def _describe(exc: pydantic.ValidationError, names: dict[str, str]) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        location = ".".join(names.get(str(part), str(part)) for part in err["loc"]) or "<root>"
        problems.append(f"{location}: {err['msg']}")
    return "; ".join(problems)
