"""Certificate authority and certificate issuing, pure and in memory.

Keys are ECDSA P-256: small, fast to generate (a landscape issues thousands) and accepted by
kube-apiserver, OpenSSL and Python's ssl module alike. Writing PEM to files or Secrets is the
caller's business; nothing here touches the disk or the network.
"""

import dataclasses
import datetime
import ipaddress
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pki import identity

DEFAULT_CA_LIFETIME = datetime.timedelta(days=365 * 5)
DEFAULT_CERT_LIFETIME = datetime.timedelta(days=30)
_CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def not_after(self) -> datetime.datetime:
        return self.certificate.not_valid_after_utc

    @classmethod
    def from_pem(cls, *, cert_pem: bytes, key_pem: bytes) -> "KeyPair":
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("only ECDSA private keys are supported")
        return cls(certificate=x509.load_pem_x509_certificate(cert_pem), key=key)


def signed_by(certificate: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Whether ``issuer`` signed ``certificate`` (names alone do not tell: rotated CAs share one)."""
    try:
        certificate.verify_directly_issued_by(issuer)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def create_ca(common_name: str, *, lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME) -> KeyPair:
    key = new_private_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(certificate=cert, key=key)


def issue(
    ca: KeyPair,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    uris: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    lifetime: datetime.timedelta = DEFAULT_CERT_LIFETIME,
    not_before: datetime.datetime | None = None,
) -> KeyPair:
    """Issue a leaf certificate signed by ``ca`` for server and/or client authentication."""
    if not (server or client):
        raise ValueError("a certificate must be for server or client authentication, or both")
    key = new_private_key()
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    issued_at = not_before or _now()
    # Backdated for clock skew, but never by a large part of a short lifetime.
    valid_from = issued_at if not_before else issued_at - min(_CLOCK_SKEW, lifetime / 10)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(issued_at + lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    alt_names += [x509.UniformResourceIdentifier(uri) for uri in uris]
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return KeyPair(certificate=builder.sign(ca.key, hashes.SHA256()), key=key)


def loopback_server_cert(ca: KeyPair, *, common_name: str) -> KeyPair:
    """A server certificate valid for localhost and 127.0.0.1, for the local landscape."""
    return issue(
        ca,
        common_name=common_name,
        dns_names=["localhost"],
        ip_addresses=["127.0.0.1"],
        server=True,
    )


def signing_key_pem() -> tuple[bytes, bytes]:
    """A private/public key pair in PEM, e.g. for service-account token signing."""
    key = new_private_key()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def server_cert(ca: KeyPair, hosts: Iterable[str], *, lifetime: datetime.timedelta, peer: bool = False) -> KeyPair:
    """A serving certificate for ``hosts`` (names and IP addresses; the first is the CN); ``peer``: also a client
    certificate, for servers that connect to each other (NATS cluster routes verify both ends)."""
    names = list(hosts)
    if not names:
        raise ValueError("a server certificate needs at least one host name or IP")
    ips = [n for n in names if _is_ip(n)]
    dns = [n for n in names if not _is_ip(n)]
    return issue(ca, common_name=names[0], dns_names=dns, ip_addresses=ips, server=True, client=peer, lifetime=lifetime)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def runtime_client_cert(
    ca: KeyPair,
    runtime: str,
    *,
    lifetime: datetime.timedelta = DEFAULT_CERT_LIFETIME,
    not_before: datetime.datetime | None = None,
) -> KeyPair:
    """The client certificate a runtime's watcher presents; its identity is the runtime name."""
    return issue(
        ca,
        common_name=runtime,
        organizations=[identity.RUNTIME_ORGANIZATION],
        client=True,
        lifetime=lifetime,
        not_before=not_before,
    )


def build_crl(
    ca: KeyPair,
    revoked_serials: Iterable[int],
    *,
    lifetime: datetime.timedelta = datetime.timedelta(days=7),
) -> x509.CertificateRevocationList:
    """A CRL of ``ca`` listing the given serial numbers as revoked now."""
    now = _now()
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.certificate.subject)
        .last_update(now - _CLOCK_SKEW)
        .next_update(now + lifetime)
    )
    for serial in sorted(set(revoked_serials)):
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build()
        )
    return builder.sign(ca.key, hashes.SHA256())


def crl_pem(crl: x509.CertificateRevocationList) -> bytes:
    return crl.public_bytes(serialization.Encoding.PEM)
