"""A central team's subscriber: its own durable consumer on one module's events, all runtimes.

Every durable consumer gets every message on its subjects, independently of the reconcilers'
consumers: a team adds one without asking anybody, and acking here affects no one else.

    python examples/central_team_subscriber.py --nats nats://127.0.0.1:4222 --module btp-operator
"""

import argparse
import asyncio
import json

import nats
import nats.errors
from nats.js import api as js_api

from contract import events, ids, subjects


async def receive(*, servers: list[str], module: str, durable: str, limit: int | None) -> int:
    """Print events as JSON lines until ``limit`` (or forever); returns how many were handled."""
    connection = await nats.connect(servers=servers, name=f"central-{durable}")
    handled = 0
    try:
        subscription = await connection.jetstream().pull_subscribe(
            subjects.module_wildcard(ids.module_name(module)),
            durable=durable,
            config=js_api.ConsumerConfig(ack_policy=js_api.AckPolicy.EXPLICIT, deliver_policy=js_api.DeliverPolicy.NEW),
        )
        while limit is None or handled < limit:
            try:
                messages = await subscription.fetch(32, timeout=5)
            except nats.errors.TimeoutError:
                continue
            for message in messages:
                event = events.decode(message.data)
                print(
                    json.dumps(
                        {
                            "runtime": event.runtime,
                            "kind": event.target.kind,
                            "name": event.target.name,
                            "change": event.change_type.value,
                            "event_id": event.id,
                        }
                    ),
                    flush=True,
                )
                await message.ack()
                handled += 1
    finally:
        await connection.close()
    return handled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nats", action="append", required=True, help="NATS server URL (repeatable)")
    parser.add_argument("--module", required=True, help="module whose events to follow")
    parser.add_argument("--durable", default="central-team", help="durable consumer name (one per team)")
    parser.add_argument("--limit", type=int, help="stop after this many events")
    args = parser.parse_args()
    asyncio.run(receive(servers=args.nats, module=args.module, durable=args.durable, limit=args.limit))


if __name__ == "__main__":
    main()
