"""Takeover of a large backlog: does the taker's loop keep turning (and its lease stay fresh)?

    python bench/takeover_backlog.py --workflows 16000 --steps 60

Engine A, in a child process, runs ``--workflows`` workflows of ``--steps`` activity steps
each; each then parks in one more activity that never returns there. Once every workflow is
parked A is killed (kill -9). Engine B, in this process, opens on the same directory: its
peer probe finds A's lock file free, marks A dead and takes the whole backlog over, replaying
every workflow (``--steps`` ops each) and re-running its last activity, which returns at once
here, so every workflow completes.

A ticker on B's loop (``call_later(0.01)``, re-armed from each turn) measures how late each
turn comes: its worst lateness is the longest the loop was blocked. The same ticker reads B's
engine record and keeps the least lease left (``expires_at - now``): below zero, a heartbeat
came later than the ttl and any later pass finds B expired.

Prints one JSON line on stdout: workflows, steps, build_s, open_ms (how long ``open`` took to
return), all_done_ms (open to the last completion), max_loop_gap_ms, loop_gaps_over_100ms,
reclaim_pass_max_ms (the longest maintenance pass), commits (B's group commits),
min_lease_left_ms, lease_expired, deposed, completed.
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
from weft_actors import Engine, activity, workflow  # noqa: E402

HOLD = False  # set in engine A's process: its last activity never returns there
held = 0


@activity
async def step(x: int) -> int:
    return x + 1


@activity
async def hold() -> None:
    global held
    if HOLD:
        held += 1
        await asyncio.sleep(3600)


@workflow
async def backlog(ctx, steps: int) -> int:
    x = 0
    for _ in range(steps):
        x = await ctx.run(step, x)
    await ctx.run(hold)
    return x


APP = [backlog]


async def build(data_dir: str, workflows: int, steps: int, window: int) -> None:
    """Engine A: run every workflow up to its held activity, report, then wait for the kill."""
    options = {"probe_peers": False, "tune_gc": True, "max_inflight_activities": workflows + 1}
    async with Engine(data_dir, app=APP, **options) as engine:
        for first in range(0, workflows, window):
            ids = range(first, min(workflows, first + window))
            await asyncio.gather(*(engine.start(backlog, steps, id=f"b-{i}") for i in ids))
            while held < ids[-1] + 1:
                await asyncio.sleep(0.01)
        print("ready", engine.engine_id, flush=True)
        await asyncio.sleep(3600)


class Ticker:
    """Measures the loop's lateness every ``interval`` and the lease left of ``engine``."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.max_gap = 0.0
        self.gaps_over_100ms = 0
        self.min_lease_left = float("inf")
        self.engine: Engine | None = None
        self._loop = asyncio.get_running_loop()
        self._due = self._loop.time() + interval
        self._handle = self._loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        late = self._loop.time() - self._due
        self.max_gap = max(self.max_gap, late)
        if late > 0.1:
            self.gaps_over_100ms += 1
        engine = self.engine
        if engine is not None and engine.state == "running":
            record = engine.store.engines().get(engine.engine_id)
            if record is not None:
                self.min_lease_left = min(self.min_lease_left, record["expires_at"] - engine.clock.lease_now())
        self._due = self._loop.time() + self.interval
        self._handle = self._loop.call_later(self.interval, self._tick)

    def stop(self) -> None:
        self._handle.cancel()


async def measure(data_dir: str, workflows: int, steps: int, window: int, heartbeat: float, ttl: float, timeout: float) -> dict:
    built = time.perf_counter()
    args = ("--data", data_dir, "--workflows", str(workflows), "--steps", str(steps), "--window", str(window))
    with role_process(__file__, "build", *args) as (child, _):
        build_s = time.perf_counter() - built
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    engine = Engine(data_dir, app=APP, heartbeat=heartbeat, ttl=ttl, tune_gc=True)
    ticker = Ticker()
    started = time.perf_counter()
    await engine.open()
    opened = time.perf_counter()
    ticker.engine = engine
    deadline = started + timeout
    while engine.state == "running" and engine.metrics.workflows_completed < workflows and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    finished = time.perf_counter()
    ticker.stop()
    completed = engine.metrics.workflows_completed
    state = engine.state
    reclaim_max = engine.metrics.reclaim_seconds_max
    commits = engine.committer.batches if state != "new" else 0
    await engine.close()
    return {
        "workflows": workflows,
        "steps": steps,
        "heartbeat": heartbeat,
        "ttl": ttl,
        "build_s": round(build_s, 1),
        "open_ms": round((opened - started) * 1000, 1),
        "all_done_ms": round((finished - started) * 1000, 1),
        "completed": completed,
        "max_loop_gap_ms": round(ticker.max_gap * 1000, 1),
        "loop_gaps_over_100ms": ticker.gaps_over_100ms,
        "reclaim_pass_max_ms": round(reclaim_max * 1000, 1),
        "commits": commits,
        "min_lease_left_ms": round(ticker.min_lease_left * 1000, 1),
        "lease_expired": ticker.min_lease_left < 0,
        "deposed": state == "deposed",
    }


def main() -> None:
    global HOLD
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=16_000)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--window", type=int, default=2_000, help="workflows engine A starts at a time")
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=300.0, help="give up waiting for completions after this long")
    parser.add_argument("--data", help="data directory (default: a fresh temporary one)")
    parser.add_argument("--role", default="bench", choices=["bench", "build"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "build":
        HOLD = True
        uvloop.run(build(args.data, args.workflows, args.steps, args.window))
        return
    with scratch_dir(args.data, "weft-backlog-") as path:
        result = uvloop.run(measure(path, args.workflows, args.steps, args.window, args.heartbeat, args.ttl, args.timeout))
    report(result)


if __name__ == "__main__":
    main()
