"""A child process with its log in a file, a readiness probe and a clean stop."""

import dataclasses
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, NoReturn

from devenv import errors

_LOG_TAIL_LINES = 25


@dataclasses.dataclass
class ManagedProcess:
    name: str
    argv: Sequence[str]
    log_path: Path
    _popen: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        try:
            self._popen = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self._close_log()
            raise errors.StartError(
                component=self.name, reason=f"cannot execute {self.argv[0]}: {exc}", log_tail=""
            ) from exc

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def wait_ready(self, probe: Callable[[], bool], *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._popen is None or self._popen.poll() is not None:
                code = self._popen.returncode if self._popen else None
                self._fail(f"exited with code {code}")
            if probe():
                return
            time.sleep(0.1)
        self._fail(f"not ready within {timeout:g}s")

    def _fail(self, reason: str) -> NoReturn:
        """A process that did not come up is of no use: stop it and say why."""
        self.stop()
        raise errors.StartError(component=self.name, reason=reason, log_tail=self.log_tail())

    def stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        self._signal_and_wait(signal.SIGTERM, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL at once: a crash, for fault tests."""
        self._signal_and_wait(signal.SIGKILL, timeout=10.0)

    def _signal_and_wait(self, sig: signal.Signals, *, timeout: float) -> None:
        if self._popen is not None and self._popen.poll() is None:
            self._popen.send_signal(sig)
            try:
                self._popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait()
        self._popen = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(lines[-_LOG_TAIL_LINES:])
