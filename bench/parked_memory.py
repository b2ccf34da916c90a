"""Memory per parked workflow, and wake throughput, on one in-process Engine (durable commits).

    python bench/parked_memory.py --parked 100000                      # eviction on (10,000 live)
    python bench/parked_memory.py --parked 100000 --no-evict           # every actor stays live
    python bench/parked_memory.py --parked 100000 --max-live 20000

Parks ``--parked`` workflows, each waiting in ``ctx.wait_signal("go")``, started in batches of
``--batch``. RSS (VmRSS from /proc/self/status) is read after a warm-up and again once all are
parked (after a full GC, so garbage not yet collected is not counted; ``peak_rss_mb`` is the
high-water mark, which is):

- ``rss_mb``: RSS with everything parked; ``rss_delta_mb``: what parking added;
- ``bytes_per_parked``: the delta over the parked actors kept *in memory*; with eviction on, it
  also carries the small record each evicted workflow leaves, so see ``bytes_per_workflow``
  (the delta over all parked workflows) too; ``anon_bytes_per_parked`` excludes file pages
  (LMDB's map), which the kernel may drop at will.

Then every workflow is signalled (batches of ``--batch``), and ``wake_per_s`` is the number of
workflows that took their signal and completed, per second from the first signal to the last
completion; evicted workflows are replayed from the store on the way.

Prints one JSON line on stdout (and a readable table plus a progress bar on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvloop  # noqa: E402

from _harness import report, scratch_dir  # noqa: E402
from _progress import Progress  # noqa: E402
from weft_actors import Engine, workflow  # noqa: E402

WARM_UP = 2_000


@workflow
async def parked(ctx) -> Any:
    return await ctx.wait_signal("go")


def memory() -> dict[str, int]:
    """VmRSS, RssAnon and VmHWM of this process, in bytes."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "VmHWM"):
                found[name] = int(value.split()[0]) * 1024
    return found


async def _in_batches(count: int, batch: int, make: Any, progress: Progress) -> None:
    for first in range(0, count, batch):
        last = min(count, first + batch)
        await asyncio.gather(*(make(i) for i in range(first, last)))
        progress.advance(last - first)


async def _completed(engine: Engine, target: int) -> None:
    while engine.stats()["workflows_completed"] < target:
        await asyncio.sleep(0.01)  # stats() walks every live actor: not too often


async def run(count: int, max_live: int, batch: int, data_dir: str) -> dict[str, Any]:
    async with Engine(data_dir, app=[parked], tune_gc=True, max_live_actors=max_live) as engine:
        warm = Progress(2 * WARM_UP, "warm-up")
        await _in_batches(WARM_UP, batch, lambda i: engine.start(parked, id=f"warm-{i}"), warm)
        await _in_batches(WARM_UP, batch, lambda i: engine.signal(f"warm-{i}", "go", i), warm)
        await _completed(engine, WARM_UP)
        gc.collect()
        before = memory()

        progress = Progress(count, "parking")
        started = time.perf_counter()
        await _in_batches(count, batch, lambda i: engine.start(parked, id=f"parked-{i:07d}"), progress)
        park_seconds = time.perf_counter() - started
        for _ in range(3):  # let the eviction pass of the last batch run
            await asyncio.sleep(0)
        gc.collect()
        after = memory()
        stats = engine.stats()
        live = stats["live_actors"]

        progress = Progress(count, "waking")
        started = time.perf_counter()
        await _in_batches(count, batch, lambda i: engine.signal(f"parked-{i:07d}", "go", i), progress)
        await _completed(engine, WARM_UP + count)
        wake_seconds = time.perf_counter() - started
        woken = engine.stats()
    delta = after["VmRSS"] - before["VmRSS"]
    return {
        "parked": count,
        "eviction": max_live < count,
        "max_live_actors": max_live,
        "live_actors": live,
        "evicted": stats["evicted_actors"],
        "rss_mb": round(after["VmRSS"] / 2**20, 1),
        "rss_delta_mb": round(delta / 2**20, 1),
        "bytes_per_parked": round(delta / max(1, live)),
        "bytes_per_workflow": round(delta / count),
        "anon_bytes_per_parked": round((after["RssAnon"] - before["RssAnon"]) / max(1, live)),
        "peak_rss_mb": round(after["VmHWM"] / 2**20, 1),
        "park_per_s": round(count / park_seconds),
        "wake_seconds": round(wake_seconds, 3),
        "wake_per_s": round(count / wake_seconds),
        "revivals": woken["revivals_total"] - stats["revivals_total"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, default=100_000, help="workflows to park (default 100000)")
    parser.add_argument("--max-live", type=int, default=10_000, help="max_live_actors with eviction on (default 10000)")
    parser.add_argument("--no-evict", action="store_true", help="keep every parked actor in memory")
    parser.add_argument("--batch", type=int, default=5_000, help="starts and signals awaited together (default 5000)")
    parser.add_argument("--data", help="data directory (default: a fresh temporary one)")
    args = parser.parse_args()
    max_live = sys.maxsize if args.no_evict else args.max_live
    with scratch_dir(args.data) as path:
        result = uvloop.run(run(args.parked, max_live, args.batch, path))
    report(result)


if __name__ == "__main__":
    main()
