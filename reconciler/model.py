"""SyncResource as the reconciler reads it: spec validated, status as written (pure data).

Every item is validated before anything is sent anywhere: apiVersion, kind, name and namespace
must be what the apiserver itself would accept, so no part of an item can become anything but
one path segment of the request (the CRD checks the same, this is the second line).
"""

import copy
import dataclasses
import enum
import json
import re
from typing import Any, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
API_VERSION = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z]([-a-z0-9]*[a-z0-9])?$"
KIND = r"^[A-Za-z][A-Za-z0-9]*$"


class Strategy(enum.StrEnum):
    CREATE_AND_SYNC = "CreateAndSync"
    """Keep identical: drift is reset."""
    CREATE_AND_IGNORE = "CreateAndIgnore"
    """Create, recreate if deleted, leave edits alone."""
    DELETE = "Delete"
    """Ensure absent: Deleting until the object is gone, then Ready."""
    UPDATE_AND_DELETE = "UpdateAndDelete"
    """Keep an existing object identical, never create it; once it is being deleted, leave it; Ready when gone."""


class Adoption(enum.StrEnum):
    NEVER = "Never"
    """An object that exists and carries no owner marker is left alone (Warning "exists, not managed")."""
    IF_UNMANAGED = "IfUnmanaged"
    """Take over (or, for Delete, delete) an existing object that no SyncResource manages."""


class State(enum.StrEnum):
    READY = "Ready"
    PROCESSING = "Processing"
    WARNING = "Warning"
    ERROR = "Error"
    DELETING = "Deleting"
    CONFLICT = "Conflict"
    """Another SyncResource manages the object."""
    FORBIDDEN = "Forbidden"
    """No SyncBinding lets this namespace put this object into this runtime."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Requirement(_Model):
    key: str
    operator: str = Field(pattern="^(In|NotIn|Exists|DoesNotExist)$")
    values: tuple[str, ...] = ()


class LabelSelector(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[Requirement, ...] = Field(default=(), alias="matchExpressions")

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for requirement in self.match_expressions:
            present = requirement.key in labels
            value = labels.get(requirement.key)
            satisfied = {
                "In": present and value in requirement.values,
                "NotIn": not present or value not in requirement.values,
                "Exists": present,
                "DoesNotExist": not present,
            }[requirement.operator]
            if not satisfied:
                return False
        return True


class Target(_Model):
    selector: LabelSelector


def _check(value: Any, pattern: str, *, what: str, max_length: int) -> str:
    if not isinstance(value, str) or len(value) > max_length or not re.fullmatch(pattern, value):
        raise ValueError(f"{what} {value!r} is not valid (pattern {pattern}, at most {max_length} characters)")
    return value


class DeletePolicy(enum.StrEnum):
    DELETE = "Delete"
    """When the item goes (removed, renamed, its runtime left, the SyncResource deleted), its object is deleted."""
    ORPHAN = "Orphan"
    """Then its object stays, released from management: owner marker and synced-by label removed."""


class SecretRef(_Model):
    """A KCP Secret of the SyncResource's namespace whose data (and type) the item's Secret carries."""

    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)


class ItemSpec(_Model):
    """An item as written in the SyncResource; parsed one by one, so a bad item is that item's Error."""

    name: str = Field(min_length=1, max_length=253)
    strategy: Strategy
    resource: dict[str, Any] | str | None = None
    subresource: dict[str, Any] | str | None = None
    adoption: Adoption = Adoption.NEVER
    delete_policy: DeletePolicy = Field(default=DeletePolicy.DELETE, alias="deletePolicy")
    ignore_fields: tuple[str, ...] = Field(default=(), alias="ignoreFields", max_length=64)
    secret_ref: SecretRef | None = Field(default=None, alias="secretRef")


class ItemError(ValueError):
    """Why one item cannot be synced as written (its text, its names, its combination of fields)."""


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where installed: ten times faster on large manifests, same safety."""
MAX_TEXT = 1_048_576
MAX_NODES = 100_000


def _document(value: dict[str, Any] | str, *, field: str) -> dict[str, Any]:
    """A manifest given as an object, or as YAML/JSON text holding exactly one object."""
    if isinstance(value, dict):
        return value
    if len(value) > MAX_TEXT:
        raise ItemError(f"{field} is longer than {MAX_TEXT} characters")
    try:
        documents = [d for d in yaml.load_all(value, Loader=_LOADER) if d is not None]
    except yaml.YAMLError as exc:
        raise ItemError(f"{field} is not valid YAML or JSON: {' '.join(str(exc).split())[:300]}") from exc
    except RecursionError as exc:
        raise ItemError(f"{field} is nested too deeply") from exc
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise ItemError(f"{field} must hold exactly one object, found {len(documents)} document(s)")
    if _expanded_size(documents[0]) > MAX_NODES:
        # YAML aliases share one node many times: a few lines can stand for billions of values once written out.
        raise ItemError(f"{field} holds more than {MAX_NODES} values once its YAML aliases are expanded")
    try:
        # Plain JSON from here on: no node shared by aliases (one place edited would change several), no YAML-only
        # values (binary, sets, timestamps) that could not be sent.
        plain = json.loads(json.dumps(documents[0], allow_nan=False))
    except RecursionError as exc:
        raise ItemError(f"{field} is nested too deeply") from exc
    except (TypeError, ValueError) as exc:
        raise ItemError(f"{field} holds what JSON cannot carry (only maps, lists, strings, numbers, booleans)") from exc
    return dict(plain)


def _expanded_size(obj: Any) -> int:
    """How many values ``obj`` holds written out (aliases counted each time), counting stops past MAX_NODES."""
    stack, seen = [obj], 0
    while stack and seen <= MAX_NODES:
        node = stack.pop()
        seen += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return seen


def _names_itself_validly(obj: dict[str, Any], *, field: str) -> None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise ItemError(f"{field} needs metadata with a name")
    try:
        _check(obj.get("apiVersion"), API_VERSION, what="apiVersion", max_length=316)
        _check(obj.get("kind"), KIND, what="kind", max_length=63)
        _check(metadata.get("name"), DNS_SUBDOMAIN, what="metadata.name", max_length=253)
        if metadata.get("namespace") is not None:
            _check(metadata["namespace"], DNS_LABEL, what="metadata.namespace", max_length=63)
    except ValueError as exc:
        raise ItemError(f"{field}: {exc}") from exc


def _identity_of(obj: dict[str, Any]) -> tuple[str, str, str, str | None]:
    metadata = obj["metadata"]
    return obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace") or None


_IDENTITY_FIELDS = (("apiVersion",), ("kind",), ("metadata",), ("metadata", "name"), ("metadata", "namespace"))
_MISSING = object()


def _pointer(text: str) -> tuple[str, ...]:
    """A JSON pointer (RFC 6901) as its reference tokens; not one naming the object's identity."""
    if not text.startswith("/") or text == "/":
        raise ItemError(f"ignoreFields: {text!r} is not a JSON pointer to a field (like /spec/replicas)")
    path = tuple(token.replace("~1", "/").replace("~0", "~") for token in text[1:].split("/"))
    if path in _IDENTITY_FIELDS:
        raise ItemError(f"ignoreFields: {text!r} names the object itself, which is always synced")
    return path


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for token in path:
        if isinstance(obj, dict) and token in obj:
            obj = obj[token]
        elif isinstance(obj, list) and token.isdigit() and int(token) < len(obj):
            obj = obj[int(token)]
        else:
            return _MISSING
    return obj


def _put(obj: Any, path: tuple[str, ...], value: Any) -> None:
    for token in path[:-1]:
        if isinstance(obj, list) and token.isdigit() and int(token) < len(obj):
            obj = obj[int(token)]
        elif isinstance(obj, dict):
            obj = obj.setdefault(token, {})
        else:
            return  # the body has no place for it: nothing of ours to keep there
    if isinstance(obj, dict):
        obj[path[-1]] = value
    elif isinstance(obj, list) and path[-1].isdigit() and int(path[-1]) < len(obj):
        obj[int(path[-1])] = value


def _remove(obj: Any, path: tuple[str, ...]) -> None:
    parent = _get(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


@dataclasses.dataclass(frozen=True)
class Item:
    """An item parsed and checked: the object it names, and what to do with it."""

    name: str
    strategy: Strategy
    resource: dict[str, Any]
    """The object to keep (for a status-only item: just its apiVersion, kind and metadata)."""
    status: dict[str, Any] | None = None
    """What to write to the object's status subresource after it (the item's ``subresource``)."""
    status_only: bool = False
    """The item only sets the status of an object someone else creates: never created, never deleted."""
    adoption: Adoption = Adoption.NEVER
    delete_policy: DeletePolicy = DeletePolicy.DELETE
    ignore_fields: tuple[tuple[str, ...], ...] = ()
    """Parsed JSON pointers whose live values are kept on every update (drift there is not reset)."""
    secret_ref: SecretRef | None = None
    """The item is a Secret whose data comes from this KCP Secret (never from the SyncResource itself)."""

    @classmethod
    def parse(cls, spec: ItemSpec) -> "Item":
        """The item ``spec`` describes; ItemError saying what is wrong otherwise."""
        resource = None if spec.resource is None else _document(spec.resource, field="resource")
        subresource = None if spec.subresource is None else _document(spec.subresource, field="subresource")
        if resource is None and subresource is None:
            raise ItemError("set resource, subresource, or both")
        if resource is not None:
            _names_itself_validly(resource, field="resource")
        status = None
        if subresource is not None:
            if "apiVersion" in subresource or "kind" in subresource or "metadata" in subresource:
                _names_itself_validly(subresource, field="subresource")
                if resource is not None and _identity_of(subresource) != _identity_of(resource):
                    raise ItemError("subresource names another object than resource")
                if resource is None:
                    resource = {k: subresource[k] for k in ("apiVersion", "kind")} | {
                        "metadata": {k: v for k, v in subresource["metadata"].items() if k in ("name", "namespace")}
                    }
                extra = set(subresource) - {"apiVersion", "kind", "metadata", "status"}
            else:
                extra = set(subresource) - {"status"}
                if resource is None:
                    raise ItemError("a subresource without resource must name its object (apiVersion, kind, metadata)")
            if extra:
                raise ItemError(f"only the status subresource may be set, not {sorted(extra)}")
            status = subresource.get("status")
            if not isinstance(status, dict):
                raise ItemError("subresource needs a status object")
        assert resource is not None
        status_only = spec.resource is None
        if status_only and spec.strategy not in (Strategy.CREATE_AND_SYNC, Strategy.UPDATE_AND_DELETE):
            raise ItemError(f"a status-only item (no resource) cannot be {spec.strategy.value}")
        ignored = tuple(_pointer(text) for text in spec.ignore_fields)
        if spec.secret_ref is not None:
            if (resource.get("apiVersion"), resource.get("kind")) != ("v1", "Secret") or status_only:
                raise ItemError("secretRef is for a v1 Secret item (its resource names the Secret to write)")
            if spec.strategy not in (Strategy.CREATE_AND_SYNC, Strategy.CREATE_AND_IGNORE):
                raise ItemError("secretRef creates a Secret: CreateAndSync or CreateAndIgnore only")
            if "data" in resource or "stringData" in resource:
                raise ItemError("a Secret with secretRef takes its data from the referenced Secret only")
        return cls(
            spec.name,
            spec.strategy,
            resource,
            status,
            status_only,
            spec.adoption,
            spec.delete_policy,
            ignored,
            spec.secret_ref,
        )

    def keeping_live(self, body: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
        """``body`` with each ignored field as it is live (or left out where the live object has none)."""
        kept = copy.deepcopy(body)
        for path in self.ignore_fields:
            value = _get(live, path)
            if value is _MISSING:
                _remove(kept, path)
            else:
                _put(kept, path, copy.deepcopy(value))
        return kept

    @property
    def api_version(self) -> str:
        return str(self.resource["apiVersion"])

    @property
    def group(self) -> str:
        group, _, _ = self.api_version.rpartition("/")
        return group

    @property
    def kind(self) -> str:
        return str(self.resource["kind"])

    @property
    def object_name(self) -> str:
        return str(self.resource["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        namespace = self.resource["metadata"].get("namespace")
        return str(namespace) if namespace else None


class Spec(_Model):
    kyma: str | None = Field(default=None, pattern=DNS_SUBDOMAIN)
    target: Target | None = None
    items: tuple[ItemSpec, ...]
    dry_run: bool = Field(default=False, alias="dryRun")

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.kyma is None) == (self.target is None):
            raise ValueError("set exactly one of spec.kyma and spec.target")
        names = [item.name for item in self.items]
        if len(names) != len(set(names)):
            raise ValueError("item names must be unique")
        return self


@dataclasses.dataclass(frozen=True)
class Unparsable:
    """An item that could not be parsed: an Error of its own, while the others are synced."""

    name: str
    error: str


def parse_items(spec: Spec) -> list[Item | Unparsable]:
    """Every item parsed, or why it could not be."""
    parsed: list[Item | Unparsable] = []
    for each in spec.items:
        try:
            parsed.append(Item.parse(each))
        except ItemError as exc:
            parsed.append(Unparsable(each.name, str(exc)))
    return parsed


class AppliedRef(_Model):
    """An object this SyncResource may have put into a runtime; checked and deleted once no item wants it."""

    runtime: str
    item: str
    api_version: str = Field(alias="apiVersion")
    kind: str
    namespace: str | None = None
    name: str
    delete_policy: DeletePolicy | None = Field(default=None, alias="deletePolicy")
    """Orphan: released without deleting (None: deleted, as always before this field existed)."""


class ItemStatus(_Model):
    name: str
    runtime: str
    state: State
    message: str = ""


def applied_refs(status: dict[str, Any] | None) -> list[AppliedRef]:
    return [AppliedRef.model_validate(entry) for entry in (status or {}).get("applied") or []]
