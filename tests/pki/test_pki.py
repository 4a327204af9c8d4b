"""Certificate authority and leaf certificates."""

import datetime
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pki import kubeconfigs, pki


def test_leaf_is_signed_by_its_ca_and_carries_its_identity() -> None:
    """A client certificate verifies against its CA and names the runtime in CN and groups in O."""
    ca = pki.create_ca("runtime-ca")
    leaf = pki.issue(ca, common_name="skr-1", organizations=["kyma-runtimes"], client=True)
    leaf.certificate.verify_directly_issued_by(ca.certificate)
    subject = leaf.certificate.subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "skr-1"
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "kyma-runtimes"
    usages = leaf.certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_leaf_from_another_ca_does_not_verify() -> None:
    """Each cluster has its own CA: a certificate of one is no good for another."""
    leaf = pki.issue(pki.create_ca("a"), common_name="x", client=True)
    with pytest.raises(ValueError):
        leaf.certificate.verify_directly_issued_by(pki.create_ca("b").certificate)


def test_lifetime_is_honoured() -> None:
    """not_after is start + lifetime."""
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    leaf = pki.issue(
        pki.create_ca("ca"),
        common_name="x",
        client=True,
        lifetime=datetime.timedelta(hours=3),
        not_before=start,
    )
    assert leaf.not_after == start + datetime.timedelta(hours=3)


def test_a_certificate_must_have_a_purpose() -> None:
    """Neither server nor client is refused."""
    with pytest.raises(ValueError, match="server or client"):
        pki.issue(pki.create_ca("ca"), common_name="x")


def test_pem_round_trip_loads_into_ssl(tmp_path: Path) -> None:
    """PEM output is what Python's ssl accepts for a server."""
    ca = pki.create_ca("ca")
    server = pki.loopback_server_cert(ca, common_name="listener")
    again = pki.KeyPair.from_pem(cert_pem=server.cert_pem, key_pem=server.key_pem)
    assert again.certificate == server.certificate
    (tmp_path / "s.crt").write_bytes(server.cert_pem)
    (tmp_path / "s.key").write_bytes(server.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "s.crt", tmp_path / "s.key")


@pytest.mark.parametrize(
    "credentials",
    [
        pytest.param({}, id="none"),
        pytest.param({"token": "t", "client_cert_pem": b"c", "client_key_pem": b"k"}, id="both"),
        pytest.param({"client_cert_pem": b"c"}, id="cert-without-key"),
    ],
)
def test_kubeconfig_needs_exactly_one_credential(credentials: dict[str, object]) -> None:
    """A kubeconfig carries a certificate+key or a token, never none or both."""
    with pytest.raises(ValueError):
        kubeconfigs.build(cluster="c", server="https://x", ca_pem=b"ca", user="u", **credentials)  # type: ignore[arg-type]
