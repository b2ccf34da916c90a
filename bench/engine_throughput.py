"""N three-activity workflows started concurrently on one in-process Engine, durable commits.

    python bench/engine_throughput.py --workflows 20000

Prints one JSON line on stdout: workflows, seconds, workflows_per_s, steps_per_s, commits,
writes_per_commit (and a readable table plus a progress bar on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvloop  # noqa: E402

from _progress import Progress  # noqa: E402
from weft_actors import Engine, activity, workflow  # noqa: E402


@activity
async def step(x: int) -> int:
    return x + 1


@workflow
async def three_steps(ctx, x: int) -> int:
    a = await ctx.run(step, x)
    b = await ctx.run(step, a)
    return await ctx.run(step, b)


async def run(workflows: int, data_dir: str, steps: int) -> dict:
    progress = Progress(workflows, "workflows")
    async with Engine(data_dir, app=[three_steps], tune_gc=True) as engine:
        started = time.perf_counter()
        cpu0 = time.process_time()

        async def one(i: int) -> int:
            handle = await engine.start(three_steps, i)
            result = await handle.result()
            progress.advance()
            return result

        results = await asyncio.gather(*(one(i) for i in range(workflows)))
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        assert results == [i + 3 for i in range(workflows)], "wrong results"
        stats = engine.stats()
    return {
        "workflows": workflows,
        "seconds": round(seconds, 3),
        "workflows_per_s": round(workflows / seconds, 1),
        "steps_per_s": round(workflows * steps / seconds, 1),
        "commits": stats["commits_total"],
        "writes_per_commit": round(stats["writes_total"] / max(1, stats["commits_total"]), 1),
        "cpu_s": round(cpu, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=20_000)
    parser.add_argument("--data", help="data directory (default: a fresh temporary one)")
    args = parser.parse_args()
    data_dir = args.data or tempfile.mkdtemp(prefix="weft-bench-")
    try:
        result = uvloop.run(run(args.workflows, data_dir, 3))
    finally:
        if not args.data:
            shutil.rmtree(data_dir, ignore_errors=True)
    for key, value in result.items():
        sys.stderr.write(f"  {key:<18} {value}\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
