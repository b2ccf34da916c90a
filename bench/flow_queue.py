"""Flow control's queue: how fast a backlog of queued starts drains through a type's slots.

    python bench/flow_queue.py
    python bench/flow_queue.py --workflows 4000 --shards 2

Starts a supervisor (``bench_app``, free loopback port, temporary data directory, durable
commits) with ``--shards`` shards, starts ``--workflows`` ``queued_steps`` workflows (three
steps, ``@workflow(concurrency=8)``) as fast as the client can, so nearly all of them wait in
the queue, and waits for every result. Each one that runs frees its slot in its last commit,
which promotes the head of the queue; the promoted one is started by the shard that committed
that, right after it (``store/_flow``).

Prints one JSON line: ``workflows``, ``shards``, ``concurrency``, ``seconds`` (first start to
last result), ``workflows_per_s``, ``peak_queued`` (the most ``weft_flow_queued`` seen in the
supervisor's stats while it drained). No assertions.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, report, sigterm_as_exit, supervisor_bench_args  # noqa: E402
from _progress import Progress  # noqa: E402

CONCURRENCY = 8  # bench_app.queued_steps


async def drive(endpoint: str, workflows: int, progress: Progress) -> tuple[float, int]:
    from weft_actors import AsyncClient

    async with AsyncClient(endpoint, timeout=300) as client:
        started = time.perf_counter()
        handles = await asyncio.gather(*(client.start("queued_steps", i) for i in range(workflows)))
        peak = 0
        done = asyncio.Event()

        async def watch() -> None:
            nonlocal peak
            while not done.is_set():
                for entry in (await client.stats()).get("flow") or ():
                    peak = max(peak, entry["queued"])
                await asyncio.sleep(0.1)

        watcher = asyncio.ensure_future(watch())

        async def result(handle: Any, i: int) -> None:
            value = await handle.result(timeout=600)
            if value != i + 3:
                raise AssertionError(f"workflow {i} returned {value!r}")
            progress.advance()

        try:
            await asyncio.gather(*(result(handle, i) for i, handle in enumerate(handles)))
        finally:
            done.set()
            await watcher
        return time.perf_counter() - started, peak


def main() -> None:
    args = supervisor_bench_args(__doc__, 2000)
    with sigterm_as_exit(), Supervisor(shards=args.shards) as supervisor:
        progress = Progress(args.workflows, "queued workflows")
        seconds, peak = asyncio.run(drive(supervisor.endpoint, args.workflows, progress))
    report(
        {
            "workflows": args.workflows,
            "shards": args.shards,
            "concurrency": CONCURRENCY,
            "seconds": round(seconds, 3),
            "workflows_per_s": round(args.workflows / seconds, 1),
            "peak_queued": peak,
        },
        "flow-control queue drain",
    )


if __name__ == "__main__":
    main()
