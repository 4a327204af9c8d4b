"""What a runtime's client certificate says: the runtime it belongs to.

The identity is the subject's Common Name, which is the runtime's Kyma name; the certificate is
also in the ``kyma-runtimes`` organisation so that it can never be mistaken for an operator's.
Issuing (kyma-certs) and checking (listener) both use this one definition.
"""

from cryptography import x509
from cryptography.x509.oid import NameOID

from contract import errors, ids

RUNTIME_ORGANIZATION = "kyma-runtimes"


class NotARuntimeCertificateError(ValueError):
    """A certificate that does not identify a runtime."""


def runtime_of(certificate: x509.Certificate) -> ids.RuntimeId:
    subject = certificate.subject
    organizations = [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if RUNTIME_ORGANIZATION not in organizations:
        raise NotARuntimeCertificateError(
            f"certificate {subject.rfc4514_string()} is not in organisation {RUNTIME_ORGANIZATION}"
        )
    common_names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(common_names) != 1:
        raise NotARuntimeCertificateError("a runtime certificate has exactly one CN")
    value = common_names[0].value
    try:
        return ids.runtime_id(value if isinstance(value, str) else value.decode())
    except errors.InvalidNameError as exc:
        raise NotARuntimeCertificateError(str(exc)) from exc
