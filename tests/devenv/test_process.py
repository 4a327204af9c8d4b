"""A failed start says what failed and why."""

import sys
from pathlib import Path

import pytest

from devenv import errors, process


def test_process_that_exits_reports_code_and_log(tmp_path: Path) -> None:
    """A process dying during start-up raises StartError with its exit code and log tail."""
    proc = process.ManagedProcess(
        name="crasher",
        argv=[sys.executable, "-c", "print('bad flag --foo'); raise SystemExit(3)"],
        log_path=tmp_path / "crasher.log",
    )
    proc.start()
    with pytest.raises(errors.StartError, match="crasher failed to start: exited with code 3") as raised:
        proc.wait_ready(lambda: False, timeout=10)
    assert "bad flag --foo" in str(raised.value)


def test_process_never_ready_times_out(tmp_path: Path) -> None:
    """A process that never passes its probe is stopped and reported as not ready."""
    proc = process.ManagedProcess(name="sleeper", argv=["sleep", "30"], log_path=tmp_path / "sleeper.log")
    proc.start()
    with pytest.raises(errors.StartError, match=r"not ready within 0\.3s"):
        proc.wait_ready(lambda: False, timeout=0.3)
    assert not proc.running


def test_missing_binary_is_named(tmp_path: Path) -> None:
    """A binary that cannot be executed is named in the error."""
    proc = process.ManagedProcess(name="ghost", argv=[str(tmp_path / "no-such-binary")], log_path=tmp_path / "g.log")
    with pytest.raises(errors.StartError, match=r"cannot execute .*no-such-binary"):
        proc.start()
