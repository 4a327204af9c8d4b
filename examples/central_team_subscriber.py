"""A central team's subscriber: its own durable consumer on one module's events, all runtimes.

Every durable consumer gets every message on its subjects, independently of the reconcilers'
consumers: a team adds one without asking anybody, and acking here affects no one else. A team
connects with its own NATS identity (``kyma-eventbus add-team --name TEAM --module MODULE``),
which may create and read exactly one durable, named like the team and filtered to its module;
anything else (another module, another consumer, deleting) is refused by the server.

    python examples/central_team_subscriber.py --nats tls://127.0.0.1:4222 --ca ca.crt \\
        --nkey seeds/team-btp.nk --team team-btp --module btp-operator
"""

import argparse
import asyncio
import json
import ssl
from pathlib import Path

import nats
from nats.js import api as js_api

from contract import events, ids, subjects, wire


async def receive(*, servers: list[str], team: str, module: str, nkey: Path, ca: Path, limit: int | None) -> int:
    """Print events as JSON lines until ``limit`` (or forever); returns how many were handled."""
    connection = await nats.connect(
        servers=servers,
        name=f"central-{team}",
        nkeys_seed=str(nkey),
        tls=ssl.create_default_context(cafile=str(ca)),
        inbox_prefix=f"_INBOX_{team}",  # the only inbox the team's identity may subscribe to
    )
    handled = 0
    try:
        subscription = await connection.jetstream().pull_subscribe(
            subjects.module_wildcard(ids.module_name(module)),
            durable=team,
            stream=wire.STREAM_NAME,
            config=js_api.ConsumerConfig(ack_policy=js_api.AckPolicy.EXPLICIT, deliver_policy=js_api.DeliverPolicy.NEW),
        )
        while limit is None or handled < limit:
            try:
                messages = await subscription.fetch(32, timeout=5)
            except TimeoutError:  # nats-py's own, or the bare one when its deadline passed on a busy loop
                continue
            for message in messages:
                event = events.decode(message.data)
                summary = {
                    "runtime": event.runtime,
                    "kind": event.target.kind,
                    "name": event.target.name,
                    "change": event.change_type.value,
                    "event_id": event.id,
                }
                print(json.dumps(summary), flush=True)
                await message.ack()
                handled += 1
    finally:
        await connection.close()
    return handled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nats", action="append", required=True, help="NATS server URL (repeatable), tls://...")
    parser.add_argument("--ca", type=Path, required=True, help="CA that signed the NATS server certificate")
    parser.add_argument("--nkey", type=Path, required=True, help="the team's nkey seed file")
    parser.add_argument("--team", required=True, help="the team's identity name (also its durable consumer)")
    parser.add_argument("--module", required=True, help="the module whose events to follow")
    parser.add_argument("--limit", type=int, help="stop after this many events")
    args = parser.parse_args()
    asyncio.run(
        receive(servers=args.nats, team=args.team, module=args.module, nkey=args.nkey, ca=args.ca, limit=args.limit)
    )


if __name__ == "__main__":
    main()
