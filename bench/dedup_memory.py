"""What JetStream's duplicate window costs in nats-server memory, projected to 5,000 events/s.

Every published Nats-Msg-Id is remembered for the duplicate window, whether or not the message is
still stored (with interest retention and no consumer it is not). This starts a real, secured
nats-server, publishes N distinct ids into a stream whose window outlasts the run, and reads the
server's resident memory (VmRSS) before and after: the growth per id, and what that means at
5,000 events/s over the window kyma-sync uses (contract.wire.DEDUP_WINDOW_SECONDS).

    python bench/dedup_memory.py --ids 300000
"""

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path

from clients import bus
from contract import wire
from devenv import nats

RATE = 5_000


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def publish(server: nats.NatsServer, count: int, *, concurrency: int) -> float:
    connection = await bus.Bus.connect([server.url], name="bench", credentials=server.credentials())
    try:
        await connection.ensure_stream(
            bus.EVENTS.model_copy(update={"duplicate_window_seconds": 3600, "max_age_seconds": 7200})
        )
        queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(count):
            queue.put_nowait(n)

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                await connection.publish(
                    subject=f"kyma.events.{wire.SYNC_MODULE}.skr-1",
                    payload=b"{}",
                    msg_id=uuid.uuid4().hex,
                    headers={},
                    timeout=10,
                )

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started
    finally:
        await connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=300_000, help="distinct message ids to publish")
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    server = nats.NatsServer(workdir=Path(tempfile.mkdtemp(prefix="kyma-bench-dedup-")))
    server.start()
    try:
        server.prepare()
        assert server.pid is not None
        asyncio.run(publish(server, 1_000, concurrency=16))  # warm up: connections, stream, allocator
        time.sleep(1)
        before = rss_bytes(server.pid)
        took = asyncio.run(publish(server, args.ids, concurrency=args.concurrency))
        time.sleep(1)
        after = rss_bytes(server.pid)
    finally:
        server.stop()
    per_id = (after - before) / args.ids
    window_ids = RATE * wire.DEDUP_WINDOW_SECONDS
    print(
        json.dumps(
            {
                "ids": args.ids,
                "publish_seconds": round(took, 1),
                "ids_per_second": round(args.ids / took),
                "rss_before_mib": round(before / 2**20, 1),
                "rss_after_mib": round(after / 2**20, 1),
                "bytes_per_id": round(per_id),
                "window_seconds": wire.DEDUP_WINDOW_SECONDS,
                "ids_in_window_at_5000_per_s": int(window_ids),
                "projected_window_mib_at_5000_per_s": round(per_id * window_ids / 2**20),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
