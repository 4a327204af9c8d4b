"""What each kind of identity may publish and subscribe to on NATS (pure).

JetStream is driven through subjects, so permissions on subjects are permissions on the API:
creating a consumer is a publish to ``$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`` (the
filtered form: the server checks that the consumer's filter equals the one in the subject),
pulling is ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<name>``, acking is ``$JS.ACK.<stream>.<name>.>``.
Allowing only the filtered create form for a team's own consumer name, with its module in the
filter, is what keeps a team to its module; every answer comes back on the identity's own inbox
prefix, so nobody can read another identity's replies. Unlisted means denied.
"""

import dataclasses

from contract import ids, subjects, wire

_API = "$JS.API"


@dataclasses.dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    def as_config(self) -> dict[str, dict[str, list[str]]]:
        return {"publish": {"allow": list(self.publish)}, "subscribe": {"allow": list(self.subscribe)}}


def inbox_prefix(identity: str) -> str:
    """Where the identity's request answers arrive; it may subscribe to nothing else of the kind."""
    return f"_INBOX_{identity}"


def _durable(stream: str, durable: str, filter_subject: str) -> tuple[str, ...]:
    """Create (filtered form only), inspect, pull from and ack one durable consumer."""
    return (
        f"{_API}.CONSUMER.CREATE.{stream}.{durable}.{filter_subject}",
        f"{_API}.CONSUMER.INFO.{stream}.{durable}",
        f"{_API}.CONSUMER.MSG.NEXT.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
    )


def admin(identity: str) -> Permissions:
    return Permissions(publish=(">",), subscribe=(">",))


def listener(identity: str) -> Permissions:
    return Permissions(publish=(subjects.STREAM_SUBJECTS,), subscribe=(f"{inbox_prefix(identity)}.>",))


def reconciler(
    identity: str, *, durable_prefix: str, modules: tuple[str, ...], replicas: tuple[str, ...] = ()
) -> Permissions:
    """Its durables ``<prefix>-<module>`` and, for sharded replicas, ``<prefix>-<module>-<replica>``, each filtered
    to its module; and the dead-letter subjects."""
    consumers = [
        rule
        for module in modules
        for durable in (f"{durable_prefix}-{module}", *(f"{durable_prefix}-{module}-{r}" for r in replicas))
        for rule in _durable(wire.STREAM_NAME, durable, subjects.module_wildcard(ids.ModuleName(module)))
    ]
    return Permissions(
        # Stream info: the fill of the stream for the stream-near-limit alert (config and state, no messages).
        publish=(*consumers, f"{_API}.STREAM.INFO.{wire.STREAM_NAME}", subjects.DEAD_LETTER_SUBJECTS),
        subscribe=(f"{inbox_prefix(identity)}.>",),
    )


def team(identity: str, *, module: str) -> Permissions:
    """One durable named after the team, filtered to its module's subjects (any runtime, or one)."""
    module_subjects = f"{subjects.SUBJECT_PREFIX}.{ids.module_name(module)}.>"
    return Permissions(
        publish=_durable(wire.STREAM_NAME, identity, module_subjects),
        subscribe=(f"{inbox_prefix(identity)}.>",),
    )
