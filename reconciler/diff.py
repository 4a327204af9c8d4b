"""What would change: the fields in which two versions of an object differ (for dry runs). Pure."""

from typing import Any

_SERVER_OWNED = frozenset({"resourceVersion", "managedFields", "generation", "uid", "creationTimestamp"})


def changed_paths(before: dict[str, Any] | None, after: dict[str, Any], *, limit: int = 10) -> list[str]:
    """JSON pointers of the fields that differ (status and server-owned metadata aside), at most ``limit``."""
    if before is None:
        return ["/"]
    found: list[str] = []

    def walk(old: Any, new: Any, path: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new)):
                if (path == "/metadata" and key in _SERVER_OWNED) or (path == "" and key == "status"):
                    continue
                walk(old.get(key), new.get(key), f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}")
        elif old != new:
            found.append(path or "/")

    walk(before, after, "")
    return found
