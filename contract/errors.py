"""Errors of the event contract.

ContractError
 ├── InvalidNameError     a runtime/module name unusable as a subject token
 ├── InvalidEventError    bytes that are not a valid change event
 └── EventTooLargeError   a serialised event over MAX_EVENT_BYTES
"""


class ContractError(ValueError):
    """Input that breaks the event contract."""


class InvalidNameError(ContractError):
    """A runtime or module name that cannot be used as a subject token."""


class InvalidEventError(ContractError):
    """Bytes that do not decode to a valid change event."""


class EventTooLargeError(ContractError):
    """A serialised event over the size limit; never truncated, always refused."""

    def __init__(self, *, size: int, limit: int, what: str = "event") -> None:
        super().__init__(f"{what} is {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit
