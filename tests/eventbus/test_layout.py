"""The bus declaration: identities stay apart, so no team can take over a reconciler's consumer."""

from pathlib import Path

import pytest

from eventbus import cli, layout, setup


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    setup.init(
        tmp_path / "bus",
        server=layout.ServerSettings(store_dir=tmp_path / "js"),
        hosts=["nats.example"],
        reconciler_modules=["kyma-sync"],
    )
    return tmp_path / "bus"


@pytest.mark.parametrize("name", ["kyma-reconciler-kyma-sync", "kyma-reconciler-later-module"])
def test_a_team_named_like_a_reconciler_durable_is_refused(directory: Path, name: str) -> None:
    """Its durable would be (or would become) the reconciler's: attaching to it would steal the reconciler's events."""
    with pytest.raises(ValueError, match="named like a reconciler durable"):
        setup.add_team(directory, name=name, module="kyma-sync")
    assert all(i.name != name for i in layout.load(directory).identities)


def test_the_cli_says_why_a_team_name_is_refused(directory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 and the reason, nothing written."""
    code = cli.main(["add-team", str(directory), "--name", "kyma-reconciler-x", "--module", "kyma-sync"])
    assert code == 2 and "named like a reconciler durable" in capsys.readouterr().err
    assert cli.main(["add-team", str(directory), "--name", "team-btp", "--module", "btp-operator"]) == 0
