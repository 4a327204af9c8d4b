"""The watcher's client TLS context follows certificate renewals on disk."""

import datetime
import os
from pathlib import Path

from pki import pki
from watcher import config, delivery


def write(tmp_path: Path, pair: pki.KeyPair, ca: pki.KeyPair, *, mtime: int) -> None:
    for name, data in {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": ca.cert_pem}.items():
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, ns=(mtime, mtime))


def test_renewed_certificate_files_give_a_new_context(tmp_path: Path) -> None:
    """Unchanged files reuse the context; renewed files (as kubelet writes a Secret) rebuild it."""
    ca = pki.create_ca("ca")
    write(tmp_path, pki.runtime_client_cert(ca, "skr-1"), ca, mtime=1_000_000_000)
    tls = delivery.ClientTls(
        config.TlsSettings(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key", ca_file=tmp_path / "ca.crt")
    )
    first, new = tls.context()
    assert new
    assert tls.context() == (first, False)
    write(tmp_path, pki.runtime_client_cert(ca, "skr-1", lifetime=datetime.timedelta(days=1)), ca, mtime=2_000_000_000)
    second, renewed = tls.context()
    assert renewed and second is not first
