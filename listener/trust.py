"""Deciding which runtime a client certificate belongs to, or refusing it.

The TLS handshake already checks the chain in direct mode, but the check is repeated here for
every certificate, because here the CA bundle and CRL can be reloaded — a CA that left the
rotation overlap window, or a revoked certificate, stops working without a restart — and because
a certificate forwarded by an ingress has passed no handshake of ours at all.
"""

import dataclasses
import datetime
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID

from contract import ids
from listener import errors
from pki import identity, pki

_VERDICT_CACHE_SIZE = 20_000


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass(frozen=True)
class TrustStore:
    authorities: tuple[x509.Certificate, ...]
    revoked: frozenset[tuple[bytes, int]]
    """(issuing CA's SHA-256 fingerprint, serial) of every revoked certificate."""

    @classmethod
    def load(cls, *, ca_file: Path, crl_file: Path | None) -> "TrustStore":
        authorities = tuple(x509.load_pem_x509_certificates(ca_file.read_bytes()))
        if not authorities:
            raise ValueError(f"{ca_file} holds no CA certificate")
        revoked: set[tuple[bytes, int]] = set()
        if crl_file is not None:
            for crl in _load_crls(crl_file.read_bytes()):
                issuer = _issuer_of(crl, authorities)
                revoked.update((_fingerprint(issuer), entry.serial_number) for entry in crl)
        return cls(authorities=authorities, revoked=frozenset(revoked))

    def runtime_of(self, certificate: x509.Certificate, *, now: datetime.datetime) -> ids.RuntimeId:
        """The runtime ``certificate`` identifies, or Forbidden with the reason."""
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            raise errors.Forbidden("client certificate is expired or not yet valid")
        # Old and new CA of a rotation usually share a name: the signature decides.
        candidates = [ca for ca in self.authorities if ca.subject == certificate.issuer]
        if not candidates:
            raise errors.Forbidden("client certificate is not issued by a trusted runtime CA")
        issuer = next((ca for ca in candidates if pki.signed_by(certificate, ca)), None)
        if issuer is None:
            raise errors.Forbidden("client certificate signature does not verify")
        if not issuer.not_valid_before_utc <= now <= issuer.not_valid_after_utc:
            raise errors.Forbidden("the CA of the client certificate is expired")
        if (_fingerprint(issuer), certificate.serial_number) in self.revoked:
            raise errors.Forbidden("client certificate is revoked")
        try:
            usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound as exc:
            raise errors.Forbidden("client certificate has no extended key usage") from exc
        if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
            raise errors.Forbidden("certificate is not for client authentication")
        try:
            return identity.runtime_of(certificate)
        except identity.NotARuntimeCertificateError as exc:
            raise errors.Forbidden(str(exc)) from exc


def _fingerprint(ca: x509.Certificate) -> bytes:
    return ca.fingerprint(hashes.SHA256())


def _load_crls(data: bytes) -> list[x509.CertificateRevocationList]:
    marker = b"-----END X509 CRL-----"
    return [x509.load_pem_x509_crl(block + marker) for block in data.split(marker) if block.strip()]


def _issuer_of(crl: x509.CertificateRevocationList, authorities: tuple[x509.Certificate, ...]) -> x509.Certificate:
    for ca in authorities:
        if ca.subject == crl.issuer and crl.is_signature_valid(ca.public_key()):  # type: ignore[arg-type]
            return ca
    raise ValueError(f"CRL of {crl.issuer.rfc4514_string()} is not signed by a trusted CA")


class CachedTrust:
    """A TrustStore with verdicts cached per certificate, dropped when the store is replaced.

    Watchers keep connections alive and send thousands of events with one certificate; the
    signature check is done once per certificate, expiry on every call.
    """

    def __init__(self, store: TrustStore, *, clock: Callable[[], datetime.datetime] = _now) -> None:
        self._store = store
        self._clock = clock
        self._verdicts: dict[bytes, tuple[ids.RuntimeId, datetime.datetime]] = {}

    def replace(self, store: TrustStore) -> None:
        self._store = store
        self._verdicts = {}

    def runtime_of(self, der: bytes) -> ids.RuntimeId:
        """The runtime of a DER-encoded client certificate, or Forbidden."""
        now = self._clock()
        cached = self._verdicts.get(der)
        if cached is not None and now <= cached[1]:
            return cached[0]
        try:
            certificate = x509.load_der_x509_certificate(der)
        except ValueError as exc:
            raise errors.Forbidden("client certificate cannot be parsed") from exc
        runtime = self._store.runtime_of(certificate, now=now)
        if len(self._verdicts) >= _VERDICT_CACHE_SIZE:
            self._verdicts.clear()
        self._verdicts[der] = (runtime, certificate.not_valid_after_utc)
        return runtime
