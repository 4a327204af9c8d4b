"""Client certificates forwarded by an ingress, in the two forms ingresses use (pure).

- Envoy / Istio ``X-Forwarded-Client-Cert``: elements separated by ``,`` (one per proxy hop),
  each ``key=value`` pairs separated by ``;``, values optionally double-quoted with ``\\"``
  escapes; ``Cert`` is the URL-encoded PEM of the client certificate, ``Hash`` its hex SHA-256,
  ``Subject`` its subject. Exactly one element is accepted: the edge proxy (which terminated the
  client's TLS) must replace whatever the client sent (Envoy's ``SANITIZE_SET``; with
  ``APPEND_FORWARD`` or ``FORWARD_ONLY`` a client's own element would come first and could name
  another runtime's certificate). A ``Hash`` or ``Subject`` present must agree with its ``Cert``.
- nginx ``$ssl_client_escaped_cert``: the URL-encoded PEM, nothing around it.
"""

import hashlib
import ssl
import urllib.parse

from cryptography import x509


class ForwardedCertError(ValueError):
    """The header does not carry a usable certificate."""


def _split(text: str, separator: str) -> list[str]:
    """Split on ``separator`` outside double quotes (honouring backslash escapes inside them)."""
    parts, current, quoted, escaped = [], [], False, False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\" and quoted:
            current.append(char)
            escaped = True
        elif char == '"':
            current.append(char)
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if quoted:
        raise ForwardedCertError("unbalanced quotes in the forwarded certificate header")
    parts.append("".join(current))
    return parts


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value


def xfcc_elements(header: str) -> list[dict[str, str]]:
    """The elements of an X-Forwarded-Client-Cert header, keys lower-cased."""
    elements = []
    for element in _split(header, ","):
        pairs: dict[str, str] = {}
        for pair in _split(element, ";"):
            if not pair.strip():
                continue
            key, separator, value = pair.partition("=")
            if not separator:
                raise ForwardedCertError(f"{pair.strip()!r} is not key=value")
            pairs.setdefault(key.strip().lower(), _unquote(value))
        elements.append(pairs)
    return elements


def _pem_to_der(pem: str) -> bytes:
    try:
        return ssl.PEM_cert_to_DER_cert(pem.strip() + "\n")
    except ValueError as exc:
        raise ForwardedCertError("the forwarded value is not a PEM certificate") from exc


def certificate_der(header: str) -> bytes:
    """The client certificate (DER) in an Envoy/Istio or nginx header; ForwardedCertError otherwise."""
    decoded = urllib.parse.unquote(header.strip())
    if decoded.startswith("-----BEGIN"):
        return _pem_to_der(decoded)
    elements = xfcc_elements(header)
    if len(elements) != 1:
        raise ForwardedCertError(
            f"{len(elements)} X-Forwarded-Client-Cert elements: the proxy must replace the header with its own "
            "(Envoy/Istio forward_client_cert_details SANITIZE_SET), never append to what the client sent"
        )
    first = elements[0]
    if "cert" not in first:
        raise ForwardedCertError(
            "the proxy's X-Forwarded-Client-Cert element has no Cert (configure it to forward Cert)"
        )
    der = _pem_to_der(urllib.parse.unquote(first["cert"]))
    if "hash" in first and first["hash"].lower() != hashlib.sha256(der).hexdigest():
        raise ForwardedCertError("Hash does not match the forwarded Cert")
    if "subject" in first:
        subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
        if first["subject"] != subject:
            raise ForwardedCertError(f"Subject {first['subject']!r} does not match the forwarded Cert ({subject})")
    return der
