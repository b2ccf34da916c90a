"""N three-activity workflows started concurrently on one in-process Engine, durable commits.

    python bench/engine_throughput.py --workflows 20000
    python bench/engine_throughput.py --workflows 20000 --in-flight 3000 --steps 6

Prints one JSON line on stdout: workflows, seconds, workflows_per_s, steps_per_s, commits,
writes_per_commit, cpu_s, cpu_us_per_workflow, call (and a readable table plus a progress bar
on stderr). Each caller runs its workflow with ``engine.execute`` (start and result in one
call, as ``throughput.py`` does end to end); ``--call start-result`` awaits ``start`` and then
``result`` on the handle instead. ``--in-flight K`` keeps K workflows going at a time instead
of starting all N at once; ``--steps`` changes the number of activities per workflow (0 and 6
next to 3 split the CPU per workflow into a fixed part and a part per step).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Awaitable, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvloop  # noqa: E402

from _harness import report  # noqa: E402
from _pgstore import postgres_cpu_seconds, scratch_store  # noqa: E402
from _progress import Progress  # noqa: E402
from bench_app import n_steps, three_steps  # noqa: E402
from weft_actors import Engine  # noqa: E402


async def run(
    workflows: int, data_dir: str, steps: int, in_flight: int | None, call: str = "execute", store: str | None = None,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> dict:
    """``ready`` (if given) is awaited once the engine is open, before the clock starts:
    ``shared_store.py`` starts several engines' timed parts together with it."""
    progress = Progress(workflows, "workflows")
    # The workflow is three_steps itself; other step counts use the loop.
    target, extra = (three_steps, ()) if steps == 3 else (n_steps, (steps,))
    async with Engine(store=data_dir, app=[three_steps, n_steps], tune_gc=True) as engine:
        if ready is not None:
            await ready()
        started = time.perf_counter()
        cpu0 = time.process_time()
        database0 = postgres_cpu_seconds(store)

        async def one(i: int) -> int:
            if call == "execute":
                result = await engine.execute(target, i, *extra)
            else:
                handle = await engine.start(target, i, *extra)
                result = await handle.result()
            progress.advance()
            return result

        if in_flight is None:
            results = await asyncio.gather(*(one(i) for i in range(workflows)))
        else:
            results = [0] * workflows
            next_index = 0

            async def worker() -> None:
                nonlocal next_index
                while next_index < workflows:
                    i = next_index
                    next_index += 1
                    results[i] = await one(i)

            await asyncio.gather(*(worker() for _ in range(min(in_flight, workflows))))
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        database = postgres_cpu_seconds(store) - database0
        assert results == [i + steps for i in range(workflows)], "wrong results"
        stats = engine.stats()
    return {
        "workflows": workflows,
        "seconds": round(seconds, 3),
        "workflows_per_s": round(workflows / seconds, 1),
        "steps_per_s": round(workflows * steps / seconds, 1),
        "commits": stats["commits_total"],
        "writes_per_commit": round(stats["writes_total"] / max(1, stats["commits_total"]), 1),
        "cpu_s": round(cpu, 3),
        "cpu_us_per_workflow": round(cpu / workflows * 1e6, 1),
        "database_cpu_us_per_workflow": round(database / workflows * 1e6, 1) if database else None,
        "steps": steps,
        "in_flight": in_flight or workflows,
        "call": call,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, help="workflows going at a time (default: all of them)")
    parser.add_argument("--steps", type=int, default=3, help="activities per workflow (default 3)")
    parser.add_argument("--call", choices=("execute", "start-result"), default="execute", help="how each caller runs its workflow (default: execute)")
    parser.add_argument("--data", help="data directory (default: a fresh temporary one)")
    parser.add_argument("--store", metavar="URL", help="a PostgreSQL URL: run on a fresh schema there instead of LMDB")
    args = parser.parse_args()
    with scratch_store(args.store, args.data) as path:
        result = uvloop.run(run(args.workflows, path, args.steps, args.in_flight, args.call, args.store))
    report(result)


if __name__ == "__main__":
    main()
