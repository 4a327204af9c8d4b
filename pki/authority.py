"""The kyma-sync certificate authority as data: issue, revoke, rotate (pure, no I/O).

One CA signs both the runtimes' client certificates and the listener's serving certificate, so
watcher and listener trust the same bundle. A CA rotation makes a new CA current and keeps the
old one trusted until the overlap window ends: certificates of either verify meanwhile, and the
rotation loop re-issues every runtime certificate with the new CA within that window.

Serialised as a handful of named files (a directory, or the data of a Secret):
``ca.crt``/``ca.key`` (current), ``trust-bundle.crt`` (current + previous while overlapping),
``crl.pem`` (revocations of every trusted CA), ``state.json`` (previous CA, overlap end,
revoked serials).
"""

import dataclasses
import datetime
from collections.abc import Iterable, Mapping

from cryptography import x509
from pydantic import BaseModel, ConfigDict

from pki import pki

CA_CERT, CA_KEY, BUNDLE, CRL, STATE = "ca.crt", "ca.key", "trust-bundle.crt", "crl.pem", "state.json"


class AuthorityError(ValueError):
    """The CA cannot do what was asked (missing, already there, or unreadable)."""


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid")

    previous_ca_pem: str | None = None
    previous_ca_key_pem: str | None = None
    overlap_until: datetime.datetime | None = None
    revoked: dict[str, list[int]] = {}
    """Revoked serial numbers by the issuing CA's subject (RFC 4514)."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass
class Authority:
    current: pki.KeyPair
    previous: pki.KeyPair | None = None
    overlap_until: datetime.datetime | None = None
    revoked: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    @classmethod
    def create(cls, common_name: str, *, lifetime: datetime.timedelta = pki.DEFAULT_CA_LIFETIME) -> "Authority":
        return cls(current=pki.create_ca(common_name, lifetime=lifetime))

    @classmethod
    def from_files(cls, files: Mapping[str, bytes]) -> "Authority":
        if CA_CERT not in files or CA_KEY not in files:
            raise AuthorityError("no CA yet: run `kyma-certs init-ca` first")
        try:
            state = _State.model_validate_json(files.get(STATE, b"{}"))
            previous = (
                pki.KeyPair.from_pem(
                    cert_pem=state.previous_ca_pem.encode(), key_pem=state.previous_ca_key_pem.encode()
                )
                if state.previous_ca_pem and state.previous_ca_key_pem
                else None
            )
            return cls(
                current=pki.KeyPair.from_pem(cert_pem=files[CA_CERT], key_pem=files[CA_KEY]),
                previous=previous,
                overlap_until=state.overlap_until,
                revoked=state.revoked,
            )
        except ValueError as exc:
            raise AuthorityError(f"the CA store is unreadable: {exc}") from exc

    def to_files(self, *, now: datetime.datetime | None = None) -> dict[str, bytes]:
        state = _State(
            previous_ca_pem=self.previous.cert_pem.decode() if self.previous else None,
            previous_ca_key_pem=self.previous.key_pem.decode() if self.previous else None,
            overlap_until=self.overlap_until,
            revoked=self.revoked,
        )
        return {
            CA_CERT: self.current.cert_pem,
            CA_KEY: self.current.key_pem,
            BUNDLE: self.trust_bundle(now=now),
            CRL: b"".join(pki.crl_pem(self._crl(ca)) for ca in self.trusted(now=now)),
            STATE: state.model_dump_json(indent=2).encode(),
        }

    def trusted(self, *, now: datetime.datetime | None = None) -> list[pki.KeyPair]:
        """The CAs certificates may chain to: current, and previous until the overlap ends."""
        moment = now or _now()
        overlapping = self.previous is not None and self.overlap_until is not None and moment < self.overlap_until
        return [self.current] + ([self.previous] if overlapping and self.previous else [])

    def trust_bundle(self, *, now: datetime.datetime | None = None) -> bytes:
        """The trusted CAs in PEM: what watchers and listener verify against (no CRL signing needed)."""
        return b"".join(ca.cert_pem for ca in self.trusted(now=now))

    def issue_runtime(self, runtime: str, *, lifetime: datetime.timedelta) -> pki.KeyPair:
        return pki.runtime_client_cert(self.current, runtime, lifetime=lifetime)

    def issue_server(self, hosts: Iterable[str], *, lifetime: datetime.timedelta) -> pki.KeyPair:
        try:
            return pki.server_cert(self.current, hosts, lifetime=lifetime)
        except ValueError as exc:
            raise AuthorityError(str(exc)) from exc

    def rotate(self, *, overlap: datetime.timedelta, lifetime: datetime.timedelta = pki.DEFAULT_CA_LIFETIME) -> None:
        """A new current CA; the old one stays trusted for ``overlap``."""
        common_name = self.current.certificate.subject.rfc4514_string().removeprefix("CN=")
        self.previous = self.current
        self.overlap_until = _now() + overlap
        self.current = pki.create_ca(common_name, lifetime=lifetime)

    def is_current_issuer(self, certificate: x509.Certificate) -> bool:
        return certificate.issuer == self.current.certificate.subject and pki.signed_by(
            certificate, self.current.certificate
        )

    def revoke(self, certificate_or_serial: x509.Certificate | int) -> None:
        if isinstance(certificate_or_serial, x509.Certificate):
            issuer = next((ca for ca in self.trusted() if pki.signed_by(certificate_or_serial, ca.certificate)), None)
            if issuer is None:
                raise AuthorityError("that certificate was not issued by a trusted CA of this store")
            serial = certificate_or_serial.serial_number
        else:
            issuer, serial = self.current, certificate_or_serial
        serials = self.revoked.setdefault(_key(issuer), [])
        if serial not in serials:
            serials.append(serial)

    def is_revoked(self, certificate: x509.Certificate) -> bool:
        """Whether a trusted CA of this store revoked it (its serial is in that CA's CRL)."""
        return any(
            certificate.serial_number in self.revoked.get(_key(ca), [])
            for ca in self.trusted()
            if pki.signed_by(certificate, ca.certificate)
        )

    def _crl(self, ca: pki.KeyPair) -> x509.CertificateRevocationList:
        return pki.build_crl(ca, self.revoked.get(_key(ca), []))


def _key(ca: pki.KeyPair) -> str:
    return ca.certificate.subject.rfc4514_string() + "#" + format(ca.certificate.serial_number, "x")


def is_due(certificate: x509.Certificate, *, fraction: float = 2 / 3, now: datetime.datetime | None = None) -> bool:
    """Whether ``fraction`` of the certificate's lifetime has passed (time to renew)."""
    start, end = certificate.not_valid_before_utc, certificate.not_valid_after_utc
    return (now or _now()) >= start + (end - start) * fraction
