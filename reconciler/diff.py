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


def carries(live: Any, wanted: Any) -> bool:
    """Whether ``live`` holds everything ``wanted`` says (dicts: each key; lists: item by item, same length).

    Fields the apiserver defaults or others add are not a difference: a pass writes only what drifted.
    """
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(carries(live.get(key), value) for key, value in wanted.items())
    if isinstance(wanted, list):
        return (
            isinstance(live, list)
            and len(live) == len(wanted)
            and all(carries(have, want) for have, want in zip(live, wanted, strict=True))
        )
    return bool(live == wanted)
