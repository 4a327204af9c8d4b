"""kyma-certs on a directory store: commands, clear errors, exit codes."""

from pathlib import Path

import pytest
from cryptography import x509

from certs import cli
from pki import identity


def test_init_issue_revoke_rotate_on_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The local workflow works end to end and writes the files the listener and watcher read."""
    store = ["--store", str(tmp_path / "ca")]
    assert cli.main([*store, "init-ca"]) == 0
    assert cli.main([*store, "issue", "skr-1", "--out", str(tmp_path / "skr-1"), "--lifetime", "2d"]) == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "skr-1" / "tls.crt").read_bytes())
    assert identity.runtime_of(cert) == "skr-1"
    assert (tmp_path / "skr-1" / "tls.key").stat().st_mode & 0o077 == 0
    assert cli.main([*store, "revoke", str(tmp_path / "skr-1" / "tls.crt")]) == 0
    assert cli.main([*store, "rotate-ca", "--overlap", "1d"]) == 0
    assert cli.main([*store, "issue-server", "listener.kcp", "127.0.0.1", "--out", str(tmp_path / "srv")]) == 0
    assert cli.main([*store, "show"]) == 0
    shown = capsys.readouterr().out
    assert '"trusted": 2' in shown and '"revoked": 1' in shown
    assert (tmp_path / "ca" / "ca.key").stat().st_mode & 0o077 == 0


def test_init_refuses_to_replace_a_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second init-ca fails with exit 1 and says --force."""
    store = ["--store", str(tmp_path)]
    assert cli.main([*store, "init-ca"]) == 0
    assert cli.main([*store, "init-ca"]) == 1
    assert "--force" in capsys.readouterr().err


def test_commands_without_a_ca_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issuing before init-ca is exit 1 with a hint."""
    assert cli.main(["--store", str(tmp_path), "issue", "skr-1", "--out", str(tmp_path / "o")]) == 1
    assert "init-ca" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["issue", "skr-1", "--out", "x", "--lifetime", "5x"], id="bad-duration"),
        pytest.param(["issue", "skr-1"], id="no-target"),
        pytest.param(["frobnicate"], id="unknown-command"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, argv: list[str]) -> None:
    """Bad arguments are argparse errors (exit 2)."""
    with pytest.raises(SystemExit) as raised:
        cli.main(["--store", str(tmp_path), *argv])
    assert raised.value.code == 2


def test_kcp_commands_need_a_kcp_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rotate without --kcp-kubeconfig is a usage error naming the flag."""
    assert cli.main(["--store", str(tmp_path), "rotate", "--once"]) == 2
    assert "--kcp-kubeconfig" in capsys.readouterr().err
