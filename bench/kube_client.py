"""What one Kubernetes API request costs the client: ours against kubernetes-asyncio's default session.

kubernetes-asyncio makes its aiohttp session with ``trust_env=True``: aiohttp then looks up the proxy
environment and ~/.netrc in a worker thread on every request. ``clients.kube`` reads the proxy
environment once, when the client is made. This runs a real apiserver and sends the same GETs
(16 at a time) through both kinds of client, in alternating rounds, and prints requests per second
and the CPU seconds per request of this process (its threads included), with the ratios.

    python bench/kube_client.py --requests 3000 --rounds 3
"""

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from clients import kube
from devenv import landscape, testbin

CONCURRENCY = 16


async def measure(api: kube.ApiClient, requests: int) -> tuple[float, float]:
    """Requests per second, and CPU microseconds per request."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one() -> None:
        async with gate:
            await kube.request(api, "GET", "/api/v1/namespaces/default")

    await asyncio.gather(*(one() for _ in range(CONCURRENCY * 4)))  # connections open, caches warm
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(requests)))
    return requests / (time.perf_counter() - wall), (time.process_time() - cpu) / requests * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="GETs per round and client (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = parser.parse_args()
    binaries = testbin.ensure(directory=testbin.default_cache_root() / testbin.K8S_VERSION)
    running = landscape.start(workdir=Path(tempfile.mkdtemp(prefix="kyma-bench-kube-")), binaries=binaries, runtimes=())
    figures: dict[str, list[tuple[float, float]]] = {"ours": [], "trusting_the_environment": []}
    try:
        for _ in range(args.rounds):
            for kind, figure in figures.items():
                async with await kube.api_client(running.kcp.admin_kubeconfig()) as api:
                    if kind == "trusting_the_environment":
                        api.rest_client.pool_manager._trust_env = True  # kubernetes-asyncio's own default
                    figure.append(await measure(api, args.requests))
    finally:
        running.stop()
    medians = {
        kind: (statistics.median(r for r, _ in rounds), statistics.median(c for _, c in rounds))
        for kind, rounds in figures.items()
    }
    ours, trusting = medians["ours"], medians["trusting_the_environment"]
    print(
        json.dumps(
            {
                "requests_per_round": args.requests,
                "rounds": args.rounds,
                "concurrency": CONCURRENCY,
                **{
                    kind: {"requests_per_second": round(rate), "cpu_us_per_request": round(cpu)}
                    for kind, (rate, cpu) in medians.items()
                },
                "throughput_ratio": round(ours[0] / trusting[0], 2),
                "cpu_per_request_ratio": round(ours[1] / trusting[1], 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
