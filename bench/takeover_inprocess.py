"""Takeover after a confirmed death: N in-flight workflows on engine A, A killed (kill -9),
``mark_engine_dead``, engines B and C (in this process) take over and drive them.

    python bench/takeover_inprocess.py --workflows 1000

A runs in a child process; each of its workflows is inside an activity that never returns
there. B and C run in this process on one event loop, with the peer probe off, so the mark
is what triggers the takeover; as the supervisor does after reaping a shard, the bench then
hints B and C (``--no-hint`` leaves them to their next heartbeat). Each workflow's activity
is re-run by its new owner and the workflow records ``ctx.now()`` right after that outcome
commits: the latency of a workflow is that time minus the time of the mark.

Prints one JSON line on stdout: workflows, p50_ms, p99_ms, max_ms, all_done_ms, taken_b,
taken_c, reclaim_pass_ms (and a readable table plus a progress bar on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvloop  # noqa: E402

from _harness import report, role_process, scratch_dir  # noqa: E402
from _progress import Progress  # noqa: E402
from weft_actors import Engine, activity, workflow  # noqa: E402
from weft_actors.codec import decode  # noqa: E402

DOOMED = False  # set in engine A's process: its activities never return


@activity
async def hold() -> None:
    if DOOMED:
        await asyncio.sleep(3600)


@workflow
async def held_then_stamped(ctx) -> float:
    await ctx.run(hold)
    stamp = await ctx.now()  # runs right after the new owner's outcome commit
    return stamp.timestamp()


APP = [held_then_stamped]


async def doomed_engine(data_dir: str, workflows: int, heartbeat: float, ttl: float) -> None:
    """Engine A: start the workflows, report, then wait for the kill."""
    async with Engine(data_dir, app=APP, heartbeat=heartbeat, ttl=ttl, probe_peers=False, tune_gc=True) as engine:
        await asyncio.gather(*(engine.start(held_then_stamped, id=f"w-{i}") for i in range(workflows)))
        print("ready", engine.engine_id, flush=True)
        await asyncio.sleep(3600)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[index]


async def measure(data_dir: str, workflows: int, heartbeat: float, ttl: float, hint: bool) -> dict:
    args = ("--data", data_dir, "--workflows", str(workflows), "--heartbeat", str(heartbeat), "--ttl", str(ttl))
    with role_process(__file__, "doomed", *args) as (child, line):
        doomed_id = line[1]
        options = {"heartbeat": heartbeat, "ttl": ttl, "probe_peers": False, "tune_gc": True}
        async with Engine(data_dir, app=APP, **options) as b, Engine(data_dir, app=APP, **options) as c:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            progress = Progress(workflows, "taken over")
            marked = time.time()
            b.store.mark_engine_dead(doomed_id)
            if hint:
                b.hint()
                c.hint()
            done = 0
            while done < workflows:
                await asyncio.sleep(0.005)
                now_done = len(b.store.list_workflows(status="completed", limit=workflows)["items"])
                if now_done > done:
                    progress.advance(now_done - done)
                    done = now_done
            all_done = time.time() - marked
            latencies = []
            for i in range(workflows):
                record = b.store.get_workflow(f"w-{i}")
                latencies.append((decode(record["result"]) - marked) * 1000)
            stats_b, stats_c = b.stats(), c.stats()
    return {
        "workflows": workflows,
        "hinted": hint,
        "p50_ms": round(percentile(latencies, 0.50), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
        "all_done_ms": round(all_done * 1000, 1),
        "taken_b": stats_b["claim_attempts_total"]["takeover"],
        "taken_c": stats_c["claim_attempts_total"]["takeover"],
        "reclaim_pass_ms": round(max(stats_b["reclaim_pass_seconds"]["max"], stats_c["reclaim_pass_seconds"]["max"]) * 1000, 1),
    }


def main() -> None:
    global DOOMED
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--no-hint", dest="hint", action="store_false", help="rely on the next heartbeat pass")
    parser.add_argument("--data", help="data directory (default: a fresh temporary one)")
    parser.add_argument("--role", default="bench", choices=["bench", "doomed"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "doomed":
        DOOMED = True
        uvloop.run(doomed_engine(args.data, args.workflows, args.heartbeat, args.ttl))
        return
    with scratch_dir(args.data, "weft-takeover-") as path:
        result = uvloop.run(measure(path, args.workflows, args.heartbeat, args.ttl, args.hint))
    report(result)


if __name__ == "__main__":
    main()
