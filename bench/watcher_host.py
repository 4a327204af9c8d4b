"""Many watcher agents in one process, one per simulated runtime (for bench/scale.py only).

In a landscape every runtime runs its own watcher; simulating thousands on one machine needs
them to share processes. Each agent is the real `watcher.agent.Agent` with its own
configuration, certificate, Lease and checkpoint; they share one API client per apiserver.
"""

import argparse
import asyncio
import logging
import os
from pathlib import Path

from clients import kube
from kit import aio
from observability import logs
from watcher import agent, config


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--configs", type=Path, required=True, help="directory of watcher-*.yaml")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    args = parser.parse_args()
    logs.configure(level="WARNING")
    stop = aio.stop_on_signals()
    paths = sorted(args.configs.glob("watcher-*.yaml"))
    needed = sum(config.load(path).connections_needed() for path in paths)
    async with await kube.client_from(args.kubeconfig, connections=needed) as api:
        agents = [agent.Agent(config_path=path, api=api, identity=f"host-{os.getpid()}") for path in paths]
        logging.getLogger("watcher-host").warning("running %d agents", len(agents))
        async with asyncio.TaskGroup() as group:
            for each in agents:
                group.create_task(each.run(stop=stop))


if __name__ == "__main__":
    asyncio.run(main())
