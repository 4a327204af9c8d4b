"""Errors of the local landscape.

DevenvError
 ├── TestbinMissingError   kube-apiserver/etcd binaries are not built and building is off
 ├── TestbinBuildError     building them from the Go module proxy failed
 └── StartError            a process exited or did not become ready
"""


class DevenvError(RuntimeError):
    """The local landscape could not be provided."""


class TestbinMissingError(DevenvError):
    pass


class TestbinBuildError(DevenvError):
    pass


class StartError(DevenvError):
    def __init__(self, *, component: str, reason: str, log_tail: str) -> None:
        super().__init__(f"{component} failed to start: {reason}\n--- last log lines ---\n{log_tail}")
        self.component = component
        self.reason = reason
