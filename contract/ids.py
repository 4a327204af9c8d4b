"""Identifiers that travel with every change event.

Runtime and module names become NATS subject tokens, so they are held to the Kubernetes
DNS-label rule (lowercase alphanumerics and '-', at most 63 characters): that keeps '.', '*',
'>' and whitespace, which NATS gives meaning to, out of subjects by construction.
"""

import re
from typing import Annotated, NewType

from pydantic import AfterValidator, WithJsonSchema

from contract.errors import InvalidNameError

RuntimeId = NewType("RuntimeId", str)
"""The runtime's Kyma name; the identity in its client certificate."""
ModuleName = NewType("ModuleName", str)
ObjectUid = NewType("ObjectUid", str)
EventId = NewType("EventId", str)
Subject = NewType("Subject", str)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_dns_label(value: str, *, what: str) -> str:
    if not _DNS_LABEL.fullmatch(value):
        raise InvalidNameError(
            f"{what} {value!r} is not a DNS label (lowercase a-z, 0-9 and '-', 1-63 characters, "
            "starting and ending with an alphanumeric)"
        )
    return value


def runtime_id(value: str) -> RuntimeId:
    return RuntimeId(check_dns_label(value, what="runtime id"))


def module_name(value: str) -> ModuleName:
    return ModuleName(check_dns_label(value, what="module name"))


# The JSON Schema states the rule the validator enforces, for consumers in other languages.
_DNS_LABEL_SCHEMA = WithJsonSchema({"type": "string", "pattern": _DNS_LABEL.pattern, "minLength": 1, "maxLength": 63})
RuntimeIdField = Annotated[str, AfterValidator(runtime_id), _DNS_LABEL_SCHEMA]
ModuleNameField = Annotated[str, AfterValidator(module_name), _DNS_LABEL_SCHEMA]
