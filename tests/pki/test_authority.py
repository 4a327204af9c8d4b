"""The CA as data: rotation overlap, revocation, renewal point, serialisation."""

import datetime

import pytest
from cryptography import x509

from pki import authority

HOUR = datetime.timedelta(hours=1)


def test_files_round_trip_keeps_everything() -> None:
    """to_files/from_files preserve current and previous CA, overlap and revocations."""
    ca = authority.Authority.create("ca")
    ca.revoke(ca.issue_runtime("skr-1", lifetime=HOUR).certificate)
    ca.rotate(overlap=HOUR)
    again = authority.Authority.from_files(ca.to_files())
    assert again.current.certificate == ca.current.certificate
    assert again.previous is not None and ca.previous is not None
    assert again.previous.certificate == ca.previous.certificate
    assert again.overlap_until == ca.overlap_until and again.revoked == ca.revoked


def test_rotation_trusts_old_and_new_until_the_overlap_ends() -> None:
    """During the overlap the bundle holds both CAs; after it, only the new one."""
    ca = authority.Authority.create("ca")
    old = ca.current.certificate
    ca.rotate(overlap=HOUR)
    now = datetime.datetime.now(datetime.UTC)
    during = x509.load_pem_x509_certificates(ca.to_files(now=now)[authority.BUNDLE])
    after = x509.load_pem_x509_certificates(ca.to_files(now=now + 2 * HOUR)[authority.BUNDLE])
    assert during == [ca.current.certificate, old]
    assert after == [ca.current.certificate]


def test_certificates_of_the_old_ca_are_not_current_after_rotation() -> None:
    """The rotation loop can tell which certificates still need re-issuing."""
    ca = authority.Authority.create("ca")
    before = ca.issue_runtime("skr-1", lifetime=HOUR).certificate
    ca.rotate(overlap=HOUR)
    assert not ca.is_current_issuer(before)
    assert ca.is_current_issuer(ca.issue_runtime("skr-1", lifetime=HOUR).certificate)


def test_revocation_lands_in_the_crl_of_the_issuing_ca() -> None:
    """A revoked certificate's serial is in the CRL signed by its own CA, even after a CA rotation."""
    ca = authority.Authority.create("ca")
    doomed = ca.issue_runtime("skr-1", lifetime=HOUR)
    ca.rotate(overlap=HOUR)
    ca.revoke(doomed.certificate)
    crls = ca.to_files()[authority.CRL].split(b"-----END X509 CRL-----")
    listed = {
        entry.serial_number
        for block in crls
        if block.strip()
        for entry in x509.load_pem_x509_crl(block + b"-----END X509 CRL-----")
    }
    assert doomed.certificate.serial_number in listed


def test_revoking_a_foreign_certificate_is_refused() -> None:
    """Only certificates of this store's CAs can be revoked."""
    ca, other = authority.Authority.create("ca"), authority.Authority.create("other")
    with pytest.raises(authority.AuthorityError, match="not issued by a trusted CA"):
        ca.revoke(other.issue_runtime("x", lifetime=HOUR).certificate)


def test_renewal_is_due_at_two_thirds_of_the_lifetime() -> None:
    """is_due turns true once 2/3 of the lifetime has passed."""
    cert = authority.Authority.create("ca").issue_runtime("skr-1", lifetime=datetime.timedelta(hours=3)).certificate
    start = cert.not_valid_before_utc
    assert not authority.is_due(cert, now=start + datetime.timedelta(hours=1))
    assert authority.is_due(cert, now=cert.not_valid_after_utc - datetime.timedelta(minutes=50))


def test_empty_store_says_to_init_first() -> None:
    """Reading a store without a CA explains what to do."""
    with pytest.raises(authority.AuthorityError, match="init-ca"):
        authority.Authority.from_files({})
