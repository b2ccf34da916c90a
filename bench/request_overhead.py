"""CPU per request on the wire path, without workflow work: where the request overhead goes.

    python bench/request_overhead.py --requests 20000

Against a real supervisor (``bench_app``, ``--shards``, free loopback port, temporary data),
``AsyncClient`` sends ``--requests`` requests of each kind, ``--concurrency`` in flight:

- ``ping``: answered by the front door itself (client -> front door -> client);
- ``result``: of a workflow that has already completed (client -> front door -> shard, one
  store read, -> front door -> client): the same path a workflow's ``result`` takes.

For each kind it reports requests/s and the CPU microseconds per request of the client, the
supervisor (front door and hint threads) and the shards, from ``/proc/PID/stat``. The
throughput bench sends two requests per workflow (``start`` and ``result``), so twice these
numbers is the wire overhead inside its CPU per workflow.

Prints one JSON line on stdout (and a readable table on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, report, sigterm_as_exit, wait_quiet  # noqa: E402


async def burst(endpoint: str, kind: str, requests: int, concurrency: int) -> float:
    from weft_actors import AsyncClient

    async with AsyncClient(endpoint, timeout=60) as client:
        handle = await client.start("three_steps", 1, id="done-already", if_exists="return")
        await handle.result(timeout=30)
        remaining = requests

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                if kind == "ping":
                    await client.ping()
                else:
                    await handle.result(timeout=30)

        await asyncio.gather(*(worker() for _ in range(50)))  # warm-up round
        remaining = requests
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


def main() -> None:
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    result: dict[str, Any] = {"requests": args.requests, "concurrency": args.concurrency, "shards": args.shards}
    with sigterm_as_exit(), Supervisor(shards=args.shards) as supervisor:
        wait_quiet()
        for kind in ("ping", "result"):
            before = supervisor.cpu()
            client0 = time.process_time()
            seconds = uvloop.run(burst(supervisor.endpoint, kind, args.requests, args.concurrency))
            client = time.process_time() - client0
            after = supervisor.cpu()
            pids = list(before)
            sup = after[pids[0]] - before[pids[0]]
            shards = sum(after[p] - before[p] for p in pids[1:])
            per = 1e6 / args.requests
            result[kind] = {
                "requests_per_s": round(args.requests / seconds, 1),
                "client_us": round(client * per, 1),
                "supervisor_us": round(sup * per, 1),
                "shards_us": round(shards * per, 1),
                "total_us": round((client + sup + shards) * per, 1),
            }
    report(result, "request overhead (CPU per request)")


if __name__ == "__main__":
    main()
